"""Ingest of docs/formats.md JSON Lines: validate every line, then write the file whole or not at all.

Validation happens in two passes. Each line is parsed and checked on its own
(:mod:`doxa.data.models`); then references are resolved against the records of
the same file and the store (a reading's message and question, a message's
source, …). Every problem is reported with its line number and what to change.
Writes are bulk inserts from Arrow tables inside one transaction; records that
are already stored unchanged are skipped, so ingesting a file twice changes
nothing, while a record that would *edit* stored evidence is refused.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from pydantic import ValidationError

from . import models, records
from .errors import MAX_REPORTED_PROBLEMS, IngestError, Problem, Problems  # noqa: F401 - re-exported
from .ingest_rules import FORMATS_POINTER, TEXT


def _field_path(loc: tuple) -> str:
    """``("message", "source")`` → ``source``: the first item of a union's location is the record type."""
    parts = list(loc)
    if parts and isinstance(parts[0], str) and parts[0] in records.RECORD_TYPES:
        parts = parts[1:]
    return ".".join(str(x) for x in parts)


def _as_written(value: object) -> str:
    """A value as the JSON line wrote it (``"7"``, ``true``), for an error that quotes it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _known_fields(record_type: object) -> list[str]:
    model = records.RECORD_TYPES.get(record_type) if isinstance(record_type, str) else None
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def describe_validation_error(err: ValidationError, line: int, record_type: object = None) -> list[Problem]:
    """Every fault pydantic found in one record, each with its field, reason and fix."""
    problems = []
    for item in err.errors():
        field_name = _field_path(item["loc"])
        kind = item["type"]
        given = item.get("input")
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, models.FieldProblem):
            problems.append(Problem(line, f"{field_name or 'value'} {cause.reason}", cause.fix, field_name))
        elif kind == "missing":
            problems.append(Problem(line, f"missing field '{field_name}'", f"add it ({FORMATS_POINTER})", field_name))
        elif kind == "extra_forbidden":
            import difflib

            close = difflib.get_close_matches(field_name.rsplit(".", 1)[-1], _known_fields(record_type), n=1)
            fix = f"did you mean '{close[0]}'? Remove it or check its spelling" if close else \
                "remove it or check its spelling"
            problems.append(Problem(line, f"unknown field '{field_name}'", fix, field_name))
        elif kind == "union_tag_invalid":
            known = ", ".join(records.RECORD_TYPES)
            problems.append(Problem(line, f"unknown type {given.get('type')!r}", f"use one of {known}", "type"))
        elif kind == "union_tag_not_found":
            problems.append(Problem(line, "missing field 'type'",
                                    'every line needs a "type" (subject, source, question, message, reading, …)',
                                    "type"))
        elif kind in ("float_type", "float_parsing") and isinstance(given, (str, bool)):
            problems.append(Problem(line, f"{field_name} must be a JSON number, got {_as_written(given)}"[:300],
                                    "write the number without quotes, e.g. 0.9 (true and false are no numbers)",
                                    field_name))
        elif kind in ("int_type", "int_parsing", "int_from_float"):
            problems.append(Problem(line, f"{field_name} must be a JSON integer, got {_as_written(given)}"[:300],
                                    "write a whole number without quotes or decimal point, e.g. 3", field_name))
        elif kind in ("bool_type", "bool_parsing"):
            problems.append(Problem(line, f"{field_name} must be true or false, got {_as_written(given)}"[:300],
                                    "write true or false without quotes", field_name))
        elif kind == "string_too_long":  # the text rule, which pydantic checks on every string
            problems.append(Problem(line, f"{field_name or 'value'} {TEXT.message(given)}", TEXT.fix, field_name))
        elif kind in ("string_type", "list_type", "dict_type"):
            wanted = {"string_type": "a string", "list_type": "a list", "dict_type": "an object"}[kind]
            problems.append(Problem(line, f"{field_name} must be {wanted}, got {given!r}"[:300],
                                    f"see {field_name} in docs/formats.md", field_name))
        else:
            msg = item["msg"].removeprefix("Value error, ")
            reason = f"{field_name}: {msg}" if field_name and field_name not in msg else msg
            problems.append(Problem(line, reason, "", field_name))
    return problems


@dataclass
class ParsedBatch:
    """Valid records by type, each with its line number, and the problems of the lines that are not.

    ``broken_ids`` holds the ids that refused lines declare (``{type: {id}}``) where they can
    be read: references to them are not reported again (the line's own fault is the one to fix).
    """

    by_type: dict[str, list[tuple[int, models._Record]]] = field(default_factory=lambda: defaultdict(list))
    count: int = 0
    problems: Problems = field(default_factory=Problems)
    broken_ids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    lines: int = 0  # non-blank lines (or records) seen


def parse_lines(lines: Iterable[str]) -> ParsedBatch:
    """Parse and validate each line on its own; the problems found are kept in the batch."""
    return _parse(((number, line) for number, line in enumerate(lines, start=1)), from_json=True)


def parse_records(records: Iterable[dict]) -> ParsedBatch:
    """Validate already-decoded records (the Python API); 'line' numbers count records from 1."""
    return _parse(((number, record) for number, record in enumerate(records, start=1)), from_json=False)


def _parse(items, *, from_json: bool) -> ParsedBatch:
    batch = ParsedBatch()
    adapter = records.record_adapter
    for number, item in items:
        if from_json:
            if not item.strip():
                continue
            batch.lines += 1
            try:
                record = adapter.validate_json(item)
            except ValidationError as err:
                raw = _loose_json(item)
                batch.problems.extend(_json_problems(item, raw, err, number))
                _note_broken(batch, raw)
                continue
        else:
            batch.lines += 1
            if not isinstance(item, dict):
                batch.problems.append(Problem(number, "each record must be a dict", 'give it a "type" field'))
                continue
            try:
                record = adapter.validate_python(item)
            except ValidationError as err:
                batch.problems.extend(describe_validation_error(err, number, item.get("type")))
                _note_broken(batch, item)
                continue
        batch.by_type[record.type].append((number, record))
        batch.count += 1
    return batch


def _loose_json(line: str):
    """The line decoded without validation, or None (invalid, nested past Python's recursion limit, or
    holding an integer past Python's limit of digits)."""
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


_LONG_INTEGER = re.compile(r'(?:"((?:[^"\\]|\\.)*)"\s*:\s*)?-?[0-9]{%d,}' % (models.MAX_INT_DIGITS + 1))


def _number_too_long(line: str, number: int) -> Problem:
    """The problem of a line that holds an integer of more than MAX_INT_DIGITS digits, naming its field."""
    found = _LONG_INTEGER.search(line)
    key = found.group(1) if found is not None and found.group(1) is not None else ""
    digits = len(found.group().rsplit(":", 1)[-1].strip().lstrip("-")) if found is not None else None
    size = f" ({digits} digits)" if digits else ""
    return Problem(number, f"{key or 'a value'}: number too long{size}",
                   f"write numbers of at most {models.MAX_INT_DIGITS} digits ({FORMATS_POINTER})", key)


def _note_broken(batch: ParsedBatch, raw) -> None:
    if isinstance(raw, dict) and isinstance(raw.get("type"), str) and isinstance(raw.get("id"), str):
        batch.broken_ids[raw["type"]].add(raw["id"])


def _json_problems(line: str, raw, err: ValidationError, number: int) -> list[Problem]:
    """Say whether the line is not JSON, not an object, or a record with bad fields."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        if "recursion limit" in first["msg"]:
            return [Problem(number, "JSON nested too deeply", "a record is one flat JSON object "
                                                              f"({FORMATS_POINTER})")]
        try:
            json.loads(line)
        except json.JSONDecodeError as bad:
            return [Problem(number, f"not valid JSON ({bad.msg} at column {bad.colno})", "one JSON object a line")]
        except RecursionError:
            return [Problem(number, "JSON nested too deeply", "a record is one flat JSON object")]
        except ValueError:  # an integer past Python's limit of digits (pydantic says "number out of range")
            return [_number_too_long(line, number)]
        return [Problem(number, f"not valid JSON ({first['msg']})", "one JSON object a line")]
    if first["type"] in ("model_attributes_type", "dict_type", "model_type") and not line.lstrip().startswith("{"):
        return [Problem(number, "each line must be a JSON object", 'with a "type" field')]
    return describe_validation_error(err, number, raw.get("type") if isinstance(raw, dict) else None)
