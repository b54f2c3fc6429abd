"""Ingest orchestration: which path stores an input (fast or per-line), and when the store is held.

Parsing and checking a line is :mod:`.ingest`; writing checked records is :mod:`.writer`;
proving a big input valid column by column and writing it by joins is :mod:`.fast_ingest`.
This module decides between them and opens the write session, so that the file is held
only for the writes: parsing, and the fast path's staging, run before the session opens
(docs/concurrency.md).

Each entry point is a context manager that yields an :class:`Ingested` *inside* the write
session that stored the input: whoever ingests does its own follow-up work there, before
any other process can write (the Memory refreshes the kept states of the questions the
input touched and hands the store their belief-cache entries). The store never calls back
up into ``inference/``. :class:`~doxa.data.store.Store`'s ``ingest_*`` methods are these
with no follow-up.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol

from .errors import StoreError

if TYPE_CHECKING:
    from .ingest import ParsedBatch
    from .session import Session

    class IngestTarget(Session, Protocol):
        """An open store that keeps what its ingests did (``Store.note_ingest``)."""

        def note_ingest(self, *, changes: dict[str, Any] | None = None, warnings: list[str] | None = None,
                        path: str | None = None, seconds: dict[str, float] | None = None) -> None: ...


@dataclass
class Ingested:
    """What one ingest stored: new rows per table, and what changed (``questions``: the
    questions whose evidence changed; ``structure``: whether questions were merged, split or
    undone); ``changes`` is empty when nothing was written."""

    added: dict[str, int]
    changes: dict[str, Any] = field(default_factory=dict)


@contextlib.contextmanager
def batch(store: "IngestTarget", parsed: "ParsedBatch", *, also=None) -> Iterator[Ingested]:
    """Write validated records in one transaction (the file is held only for this write).

    ``also(con)``, when given, runs inside the batch's transaction, after its rows are written:
    what it writes commits or rolls back with them."""
    # lazy: pyarrow loads only when writing, not on `doxa belief`'s start-up
    from . import question_ops, writer

    with store.writing():
        store.use_one_thread(False)
        changes: dict[str, Any] = {}
        warnings: list[str] = []
        added = writer.write_batch(store.con, parsed, question_ops.OPERATION_WRITERS, also=also, changes=changes,
                                   warnings=warnings)
        store.note_ingest(changes=changes, warnings=warnings)
        yield Ingested(added, changes)


@contextlib.contextmanager
def records(store: "IngestTarget", items: Iterable[dict], *, also=None) -> Iterator[Ingested]:
    """Validate records (Python dicts, as JSON Lines would hold them), then write them as :func:`batch`."""
    from . import ingest  # lazy: pydantic loads only when ingesting

    parsed = ingest.parse_records(items)
    with batch(store, parsed, also=also) as done:
        yield done


@contextlib.contextmanager
def lines(store: "IngestTarget", text_lines: Iterable[str], *, name: str | None = None, fast: bool | None = None,
          reopen=None, path=None) -> Iterator[Ingested]:
    """Validate and ingest JSON Lines; all or nothing.

    With ``name`` (a file's), input without a single record is refused as empty: a file
    meant to hold records that holds none is a mistake to report, not "nothing new".

    Inputs of :data:`~doxa.data.fast_ingest.FAST_MIN_LINES` lines or more are checked
    column by column and written by joins (:mod:`doxa.data.fast_ingest`), in blocks, so
    memory stays bounded; whatever that cannot prove valid goes through the per-line
    checks, which give the exact problems. ``fast`` forces (True) or skips (False) the
    fast attempt; ``reopen()``, when given, reads the same lines again (a file's path);
    ``path``, when given, is the file the lines come from, which the fast path reads as bytes.
    The store's ``last_ingest_path`` says which path stored it ("fast" or "per-line").
    """
    from . import ingest  # lazy: pydantic loads only when ingesting, not on `doxa belief`

    if fast is not False:
        with _fast(store, text_lines, force=bool(fast), reopen=reopen, path=path) as outcome:
            if isinstance(outcome, Ingested):
                yield outcome
                return
            text_lines = outcome
    store.note_ingest(path="per-line")
    parsed = ingest.parse_lines(text_lines)
    if name is not None and parsed.lines == 0:
        raise StoreError(f"{'standard input' if name == '-' else name} is empty: no records to ingest "
                         "(one JSON object a line; see docs/formats.md)")
    with batch(store, parsed) as done:
        yield done


@contextlib.contextmanager
def file(store: "IngestTarget", path: str | os.PathLike) -> Iterator[Ingested]:
    """Ingest a JSON Lines file (``-``: standard input) as :func:`lines` does."""
    if str(path) == "-":
        with lines(store, sys.stdin, name="-") as done:
            yield done
        return
    if Path(path).is_dir():
        raise StoreError(f"{path} is a directory: give a JSON Lines file")
    try:
        with open(path, encoding="utf-8") as handle:
            with lines(store, handle, name=str(path), reopen=lambda: _lines_of(path), path=path) as done:
                yield done
    except FileNotFoundError:
        raise StoreError(f"no such file: {path}") from None
    except UnicodeDecodeError as err:
        raise StoreError(_first_bytes_not_utf8(path, err)) from None


@contextlib.contextmanager
def _fast(store: "IngestTarget", text_lines: Iterable[str], *, force: bool, reopen, path=None):
    """Yields an :class:`Ingested`, inside the write session, when the fast path stored the
    input; else the lines to read again from the first (the store no longer held). The
    staging runs without holding the store; only the joins and inserts run in the write session."""
    from . import fast_ingest

    replay = fast_ingest.LineReplay(text_lines, reopen)
    try:
        source = iter(replay.source())
        head = list(itertools.islice(source, fast_ingest.FAST_MIN_LINES))
        if len(head) < fast_ingest.FAST_MIN_LINES and not force:
            yield head
            return
        started = time.perf_counter()
        try:
            stage = None
            if path is not None:
                try:
                    stage = fast_ingest.stage_blocks(fast_ingest.file_blocks(path))
                except fast_ingest.NotPlainBytes as why:
                    fast_ingest.debug(str(why), "read as text lines")
            if stage is None:
                stage = fast_ingest.stage_lines(itertools.chain(head, source), spool=replay.spool())
        except fast_ingest.NotProved as why:
            fast_ingest.debug(why.reason)
            yield _again(replay)
            return
        staged = time.perf_counter()
        try:
            with store.writing():
                store.use_one_thread(False)
                changes: dict[str, Any] = {}
                warnings: list[str] = []
                try:
                    added = fast_ingest.write_stage(store.con, stage.paths, changes, stage.unique,
                                                    warnings=warnings)
                except fast_ingest.NotProved as why:
                    fast_ingest.debug(why.reason)
                    again = _again(replay)
                else:
                    store.note_ingest(changes=changes, warnings=warnings, path="fast",
                                      seconds={"staging (no lock)": staged - started,
                                               "joins and writes (write session)": time.perf_counter() - staged})
                    yield Ingested(added, changes)
                    return
            yield again
        finally:
            stage.close()
    finally:
        replay.close()


def _again(replay) -> Iterable[str]:
    """The input's lines from the first again, for the per-line path after a fast attempt."""
    return list(replay.again()) if replay.iterator is not None else replay.again()


def _lines_of(path) -> Iterable[str]:
    """The lines of a UTF-8 file, read again (the per-line path after the fast one)."""
    with open(path, encoding="utf-8") as handle:
        yield from handle


def _first_bytes_not_utf8(path, err: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, by line and column (the decoder's own offset counts from its last
    read buffer, not from the start of the file)."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                return (f"{path} is not UTF-8 text: line {number}, byte 0x{line[bad.start:bad.start + 1].hex()} at "
                        f"column {bad.start + 1} ({bad.reason}): convert it, e.g. iconv -f latin1 -t utf-8")
    return f"{path} is not UTF-8 text ({err.reason}): convert it, e.g. iconv -f latin1 -t utf-8"


__all__ = ["Ingested", "batch", "records", "lines", "file"]
