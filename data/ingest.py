"""Ingest of FORMATS.md JSON Lines: validate every line, then write the file whole or not at all.

Validation happens in two passes. Each line is parsed and checked on its own
(:mod:`doxa.data.models`); then references are resolved against the records of
the same file and the store (a reading's message and question, a message's
source, …). Every problem is reported with its line number and what to change.
Writes are bulk inserts from Arrow tables inside one transaction; records that
are already stored unchanged are skipped, so ingesting a file twice changes
nothing, while a record that would *edit* stored evidence is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from pydantic import ValidationError

from . import models, records
from .errors import MAX_REPORTED_PROBLEMS, IngestError, Problem  # noqa: F401 - re-exported

_FORWARD_PREFIX = re.compile(r"^\s*((fwd?|re|aw|wg)\s*:\s*)+", re.IGNORECASE)
_QUOTE_MARKS = re.compile(r"(?m)^\s*(>\s*)+")
_SPACE = re.compile(r"\s+")
#: Texts shorter than this ("ok", "yes") are too generic to be copies of each other:
#: their fingerprint includes the source.
MIN_SHARED_FINGERPRINT_CHARS = 12


def normalise_text(text: str) -> str:
    """Text with forwarding prefixes, quote marks, case and spacing removed."""
    text = _FORWARD_PREFIX.sub("", text)
    text = _QUOTE_MARKS.sub("", text)
    return _SPACE.sub(" ", text).strip().lower()


def fingerprint(text: str, source: str) -> str:
    """Content fingerprint: copies of one message (forwarded, quoted) share it."""
    normal = normalise_text(text)
    if len(normal) < MIN_SHARED_FINGERPRINT_CHARS:
        normal = f"{source}\x1f{normal}"
    return hashlib.sha1(normal.encode("utf-8")).hexdigest()[:20]


def _describe_validation_error(err: ValidationError) -> str:
    parts = []
    for item in err.errors()[:3]:
        loc = ".".join(str(x) for x in item["loc"] if not (isinstance(x, str) and x in records.RECORD_TYPES))
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            parts.append(f"missing field '{loc}': add it (see docs/formats.md)")
        elif item["type"] == "extra_forbidden":
            parts.append(f"unknown field '{loc}': remove it or check its spelling")
        elif item["type"] == "union_tag_invalid":
            known = ", ".join(records.RECORD_TYPES)
            parts.append(f"unknown type {item['input'].get('type')!r}: use one of {known}")
        elif item["type"] == "union_tag_not_found":
            parts.append("missing field 'type': every line needs a \"type\" (subject, source, question, message, reading, …)")
        else:
            parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


@dataclass
class ParsedBatch:
    """Valid records by type, each with its line number."""

    by_type: dict[str, list[tuple[int, models._Record]]] = field(default_factory=lambda: defaultdict(list))
    count: int = 0


def parse_lines(lines: Iterable[str]) -> ParsedBatch:
    """Parse and validate each line on its own; raise IngestError listing every bad line."""
    return _parse(((number, line) for number, line in enumerate(lines, start=1)), from_json=True)


def parse_records(records: Iterable[dict]) -> ParsedBatch:
    """Validate already-decoded records (the Python API); 'line' numbers count records from 1."""
    return _parse(((number, record) for number, record in enumerate(records, start=1)), from_json=False)


def _parse(items, *, from_json: bool) -> ParsedBatch:
    batch = ParsedBatch()
    problems: list[Problem] = []
    adapter = records.record_adapter
    for number, item in items:
        if from_json:
            if not item.strip():
                continue
            try:
                record = adapter.validate_json(item)
            except ValidationError as err:
                problems.append(Problem(number, _json_problem(item, err)))
                continue
        else:
            if not isinstance(item, dict):
                problems.append(Problem(number, "each record must be a dict with a \"type\" field"))
                continue
            try:
                record = adapter.validate_python(item)
            except ValidationError as err:
                problems.append(Problem(number, _describe_validation_error(err)))
                continue
        batch.by_type[record.type].append((number, record))
        batch.count += 1
    if problems:
        raise IngestError(problems)
    return batch


def _json_problem(line: str, err: ValidationError) -> str:
    """Say whether the line is not JSON, not an object, or a record with bad fields."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        try:
            json.loads(line)
        except json.JSONDecodeError as bad:
            return f"not valid JSON ({bad.msg} at column {bad.colno}): one JSON object a line"
        return "not valid JSON: one JSON object a line"
    if first["type"] in ("model_attributes_type", "dict_type", "model_type") and not line.lstrip().startswith("{"):
        return "each line must be a JSON object with a \"type\" field"
    return _describe_validation_error(err)
