"""A loader of ``reading`` records from a JSON Lines file, checked as a reader's output would be (tests only).

The product ingests such files with ``doxa ingest``; tests use this to check reader
output files line by line without a store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TextIO

from doxa.inference.agent.reading import Reading, ReadingFormatError, _reading_problem


@dataclass(frozen=True)
class FileReading:
    """A ``reading`` record from a file: which message and question, and the reading."""

    message: str
    question: str
    reading: Reading
    line: int


def load_readings(
    source: str | Path | TextIO | Iterable[str],
    *,
    options_by_question: Mapping[str, Sequence[str]] | None = None,
) -> list[FileReading]:
    """Validate the ``reading`` records of a JSON Lines file and return them.

    Readings made outside doxa go into the store with ``doxa ingest FILE`` (which also
    takes every other record type); this helper only checks them and returns
    :class:`Reading` objects, e.g. to test a reader's output file before ingesting it.
    Lines of other ``type`` and blank lines are skipped. With ``options_by_question``
    (question id → options) the ``probs`` keys must be exactly the question's options.

    Raises :class:`ReadingFormatError` listing every bad line (number, field, fix); a
    file is accepted whole or not at all, as ingest does.
    """
    if isinstance(source, (str, Path)):
        with open(source, encoding="utf-8") as handle:
            return load_readings(handle, options_by_question=options_by_question)

    loaded: list[FileReading] = []
    problems: list[str] = []
    for number, line in enumerate(source, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"line {number}: not JSON ({err.msg} at column {err.colno})")
            continue
        if not isinstance(record, dict):
            problems.append(f"line {number}: expected a JSON object, got {type(record).__name__}")
            continue
        if record.get("type") != "reading":
            continue
        problem = _record_problem(record, options_by_question)
        if problem:
            problems.append(f"line {number}: {problem}")
            continue
        reading = Reading(
            probs={k: float(v) for k, v in record["probs"].items()},
            unclear=float(record["unclear"]),
            unrelated=float(record["unrelated"]),
            one_off=float(record.get("one_off", 0.0)),
            reader=record["reader"],
            reader_version=record.get("reader_version", ""),
        )
        loaded.append(FileReading(record["message"], record["question"], reading, number))
    if problems:
        shown = problems[:20]
        more = f"\n… and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ReadingFormatError(
            "reading records refused (nothing loaded):\n" + "\n".join(shown) + more
        )
    return loaded


def _record_problem(
    record: dict[str, Any], options_by_question: Mapping[str, Sequence[str]] | None
) -> str | None:
    for name in ("message", "question", "reader"):
        if not isinstance(record.get(name), str) or not record[name]:
            return f'{name}: missing or not a string; a reading needs "{name}": "<id>"'
    if "reader_version" in record and not isinstance(record["reader_version"], str):
        return "reader_version: must be a string"
    for name in ("probs", "unclear", "unrelated"):
        if name not in record:
            return f"{name}: missing (docs/formats.md: probs + unclear + unrelated sum to 1)"
    problem = _reading_problem(
        record["probs"], record["unclear"], record["unrelated"], record.get("one_off", 0.0)
    )
    if problem:
        return problem
    if options_by_question is not None:
        options = options_by_question.get(record["question"])
        if options is None:
            return f"question: {record['question']!r} is not a known question"
        if set(record["probs"]) != set(options):
            missing = sorted(set(options) - set(record["probs"]))
            extra = sorted(set(record["probs"]) - set(options))
            return (
                f"probs: keys must be the question's options {list(options)!r} "
                f"(missing {missing!r}, unknown {extra!r})"
            )
    return None
