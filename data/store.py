"""The doxa store: one DuckDB file (or ``:memory:``) holding every table of docs/design.md §1.

All SQL of doxa lives in this package. :class:`Store` is the only object that
touches the connection; the scorer and the fit receive numpy arrays
(:class:`doxa.data.evidence.Evidence`).

Why one module of ~750 lines: every public method here opens its session (read or write,
docs/concurrency.md) around a few lines of SQL, and splitting the class would spread that
one rule over several files. The bulk work lives apart: evidence loading in
:mod:`.evidence_sql`, ingest in :mod:`.ingest` and :mod:`.writer`, the read log in
:mod:`.read_log`, opening and waiting in :mod:`.connection`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import duckdb
import numpy as np

from . import evidence_sql
from .connection import CONNECT_CONFIG, connect, in_read_session, not_a_store  # noqa: F401 - part of this module's API
from .durable import store_file
from .errors import IngestError, Problem, StoreError
from .evidence import OPTIONS_KEY_SQL, Evidence, QuestionTable, mark_copies_sql
from .sql import bind, sql_literal
from .times import FAR_FUTURE, from_days, to_days  # noqa: F401 - part of this module's API (__all__)

DEFAULT_DB = "doxa.duckdb"
SCHEMA_VERSION = "6"
#: a write session that changed at most this many questions keeps their belief-cache entries
#: as it closes (data/belief_cache.py); a bigger write leaves them to the first reads
KEEP_AT_CLOSE = 100
from .read_log import SMALL_LOG  # noqa: E402 - re-exported: up to this many reads are logged as JSON Lines


def default_db_path() -> str:
    return os.environ.get("DOXA_DB") or DEFAULT_DB


def _schema_sql() -> str:
    return resources.files("doxa.data").joinpath("schema.sql").read_text()


#: schema version → (the next version, SQL that gets there). Version 2 keeps the read log's
#: probabilities as a list in option order (no JSON built per read) and drops its key; version 3
#: records what a settlement settled against (note, p_before, params_version) and who gave an instruction.
_MIGRATIONS: dict[str, tuple[str, str]] = {
    "1": ("2", """
        CREATE TABLE reads_v2 (question VARCHAR NOT NULL, asked_at TIMESTAMP NOT NULL, read_at TIMESTAMP NOT NULL,
                               probs DOUBLE[] NOT NULL, top VARCHAR NOT NULL, p_top DOUBLE NOT NULL,
                               params_version INTEGER);
        INSERT INTO reads_v2
            SELECT r.question, r.asked_at, r.read_at,
                   list_transform(q.options, o -> coalesce((r.answers::JSON ->> o)::DOUBLE, 0.0)),
                   r.top, r.p_top, r.params_version
            FROM reads r JOIN questions q ON q.id = r.question ORDER BY r.id;
        DROP TABLE reads;
        DROP SEQUENCE IF EXISTS reads_seq;
        ALTER TABLE reads_v2 RENAME TO reads;
        CREATE VIEW read_answers AS
            SELECT r.question, r.asked_at, r.read_at,
                   to_json(map_from_entries(list_zip(q.options, r.probs)))::VARCHAR AS answers,
                   r.top, r.p_top, r.params_version
            FROM reads r JOIN questions q ON q.id = r.question;
    """),
    # Version 3: the organizer's versioned instructions (prompts), the pending state of messages
    # taken by `remember` (remembered), the instructions version each question was made under;
    # what a settlement settled against (note, p_before, params_version) and who gave an instruction.
    # The new tables come from schema.sql itself, run after the steps (every CREATE there is IF NOT EXISTS).
    "2": ("3", """
        ALTER TABLE questions ADD COLUMN IF NOT EXISTS instructions_version INTEGER;
        ALTER TABLE settlements ADD COLUMN IF NOT EXISTS note VARCHAR;
        ALTER TABLE settlements ADD COLUMN IF NOT EXISTS p_before DOUBLE;
        ALTER TABLE settlements ADD COLUMN IF NOT EXISTS params_version INTEGER;
        ALTER TABLE instructions ADD COLUMN IF NOT EXISTS given_by VARCHAR DEFAULT 'user';
        ALTER TABLE instructions ALTER COLUMN given_by SET NOT NULL;
    """),
    # Version 4: reads arrive through side files (data/read_log.py), and each question's
    # filter state is kept (inference/states.py); see docs/concurrency.md.
    "3": ("4", """
        CREATE TABLE IF NOT EXISTS read_logs (name VARCHAR PRIMARY KEY, folded_at TIMESTAMP NOT NULL);
        CREATE TABLE IF NOT EXISTS evidence_epochs (question VARCHAR PRIMARY KEY, epoch BIGINT NOT NULL);
        CREATE TABLE IF NOT EXISTS belief_states (question VARCHAR PRIMARY KEY, params_version INTEGER NOT NULL,
                                    epoch BIGINT NOT NULL, last_t DOUBLE, state BLOB NOT NULL,
                                    n_evidence INTEGER NOT NULL, n_settled INTEGER NOT NULL);
        INSERT INTO meta VALUES ('evidence_epoch', '0'), ('structure_epoch', '0') ON CONFLICT DO NOTHING;
    """),
    # Version 5: a parameter version exists only once its transaction commits, so the
    # `complete` flag every version carried (always true) is gone.
    "4": ("5", """
        ALTER TABLE params DROP COLUMN IF EXISTS complete;
    """),
    # Version 6: readings say whether their message is a copy of an earlier one (is_copy), which
    # adds nothing to a source's history. Marking them changes histories, so every kept state
    # computed before is stale (the structure epoch moves past it).
    "5": ("6", f"""
        ALTER TABLE readings ADD COLUMN IF NOT EXISTS is_copy BOOLEAN;
        {mark_copies_sql("SELECT DISTINCT fp FROM readings")};
        UPDATE meta SET value = (value::BIGINT + 1)::VARCHAR WHERE key = 'evidence_epoch';
        UPDATE meta SET value = (SELECT value FROM meta WHERE key = 'evidence_epoch') WHERE key = 'structure_epoch';
    """),
}


def _schema_version(con) -> str | None:
    """The ``schema_version`` row of ``meta``: what marks a DuckDB file as a doxa store (None: no mark)."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except (duckdb.CatalogException, duckdb.BinderException):  # no meta table, or someone else's
        return None
    return row[0] if row else None


def _refuse_foreign(con, path: str) -> None:
    """Raise :class:`StoreError` when a DuckDB file without doxa's mark holds anything: a file doxa
    did not make is never changed (an empty one becomes a store). Nothing is written before."""
    names = [name for (name,) in con.execute(
        """SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary
           UNION SELECT view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary
           ORDER BY 1""").fetchall()]
    if names:
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        raise StoreError(f"{path} is not a doxa store: it holds tables {shown}; doxa never changes a file it "
                         "did not make: use another --db (a new path becomes a store)")


def _new_store_id() -> str:
    return os.urandom(8).hex()


def _doubles_in_place(blobs) -> tuple[np.ndarray, np.ndarray]:
    """(every float64 of an Arrow binary column, read from its data buffer; where each blob starts in it)."""
    array = blobs.combine_chunks()
    if len(array) == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    _, offsets, data = array.buffers()
    offset_type = np.int64 if str(array.type) == "large_binary" else np.int32
    bounds = np.frombuffer(offsets, dtype=offset_type)[array.offset:array.offset + len(array) + 1]
    flat = np.frombuffer(data, dtype=np.uint8)[bounds[0]:bounds[-1]].view(np.float64)
    return flat, (bounds[:-1] - bounds[0]) // 8


def _reads(method):
    """Run a Store method inside a read session (a no-op when one is already open)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self.reading():
            return method(self, *args, **kwargs)

    return wrapper


def _member_of(column: str, ids) -> tuple[str, Any]:
    """(SQL, parameter) that ``column`` is one of ``ids``: ``= ?`` for a single id, which DuckDB
    answers from the primary-key index (half the cold cost of ``doxa belief``'s queries)."""
    ids = list(ids)
    if len(ids) == 1:
        return f"{column} = ?", ids[0]
    return f"{column} IN (SELECT unnest(?))", ids


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


class Store:
    """A doxa store. Use :meth:`open`; close with :meth:`close` or a ``with`` block.

    A store on disk holds its DuckDB file only inside a *session*: :meth:`reading` opens it
    read-only (any number of processes may read at once), :meth:`writing` read-write (one
    process at a time), each waiting with backoff while another process holds it
    (:mod:`doxa.data.connection`), and the outermost session closes it again, so a
    long-lived owner (an application's ``doxa.open``, a server) never locks other processes
    out between operations. Sessions nest; a write inside a read reopens the file
    read-write. The public methods below run in a session of their own when none is open.
    ``con`` outside any session opens the file read-write and keeps it until :meth:`close`
    or :meth:`release` (for code that drives DuckDB directly). See docs/concurrency.md.
    A ``:memory:`` store keeps its one connection for its whole life.
    """

    def __init__(self, path: str, *, read_only: bool = False, lock_timeout: float | None = None):
        self.path = path
        #: the file itself: ``path``, or where a symlink in it leads (side files are kept beside it)
        self.file = store_file(path)
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.in_memory = path == ":memory:"
        self._con: duckdb.DuckDBPyConnection | None = None
        self._mode: str | None = None  # "read" or "write": how the open connection holds the file
        self._depth = 0
        self._one_thread = False
        #: read-log side files this process folded into ``reads`` (a count, for reports)
        self.folded_reads = 0
        #: called with what an ingest changed, inside its write session (the Memory refreshes kept states)
        self.on_evidence_change = None
        #: called with the questions this write session's ingests changed (at most
        #: :data:`KEEP_AT_CLOSE`), just before it closes the file: returns their belief-cache
        #: entries (data/belief_cache.py), computed by the Memory
        self.entries_at_close = None
        self._changed_questions: set[str] = set()
        self._writing_token: str | None = None
        self._opened_at: tuple[int, int | None] | None = None
        #: which path stored the last ingest_lines/ingest_file: "fast" (fast_ingest) or "per-line"
        self.last_ingest_path: str | None = None
        #: what the last ingest warned of without refusing (a new id that looks like a stored one)
        self.last_ingest_warnings: list[str] = []
        #: seconds per phase of the last fast ingest (benchmarks)
        self.last_ingest_seconds: dict[str, float] = {}

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, read_only: bool = False, create: bool = True,
             check: bool = True, lock_timeout: float | None = None) -> "Store":
        """A store at ``path`` (``None``: ``$DOXA_DB`` or ./doxa.duckdb), created unless ``create=False``.

        ``check`` opens the file once to create it or bring its schema up to date, and to
        report a file that is no doxa store now rather than at the first read; the file is
        released again before this returns.
        """
        path = str(path) if path is not None else default_db_path()
        if path != ":memory:":
            # a directory, a file that is not DuckDB's, a symlink loop: said now, before any command
            # runs (a cheap look at the file's first bytes; DuckDB is not opened here)
            reason = not_a_store(path)
            if reason is not None:
                raise StoreError(reason)
        exists = path == ":memory:" or Path(store_file(path)).exists()
        if not exists and not create:
            raise StoreError(f"no doxa store at {path}: create one with `doxa init --db {path}`")
        if not exists and read_only:
            raise StoreError(f"no doxa store at {path}: a read-only store must exist")
        store = cls(path, read_only=read_only, lock_timeout=lock_timeout)
        if store.in_memory:
            store._connect("write")
        elif check or not exists:
            with store.session("write" if not exists else "read"):
                pass
        return store

    @classmethod
    def memory(cls) -> "Store":
        return cls.open(":memory:")

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The open connection; outside a session, one opened now and kept until :meth:`release`."""
        if self._con is None:
            self._connect("read" if self.read_only else "write")
        return self._con

    @property
    def is_open(self) -> bool:
        """Whether this store has its file open now (a session, or :attr:`con` used outside one)."""
        return self._con is not None

    def reading(self):
        """A session that reads: the file held read-only until the outermost session ends."""
        return self.session("read")

    def writing(self):
        """A session that writes: the file held read-write (other processes wait) until it ends."""
        return self.session("write")

    @contextlib.contextmanager
    def session(self, mode: str):
        if self.in_memory:
            yield self
            return
        if mode == "write" and self.read_only:
            raise StoreError(f"{self.path} was opened read-only: open it without read_only to change it")
        opened_here = self._con is None
        if opened_here:
            self._connect(mode)
        elif mode == "write" and self._mode == "read":
            self._disconnect()
            self._connect("write")
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if opened_here:
                self._disconnect()

    def _connect(self, mode: str) -> None:
        from . import belief_cache, read_log

        path = self.path
        read_only = mode == "read" and not self.in_memory
        if read_only and not Path(self.file).exists():
            read_only, mode = False, "write"
        con = connect(self.file, read_only=read_only, timeout=self.lock_timeout)
        try:
            # DuckDB draws a progress bar on stdout for long queries: never mix it into doxa's output
            try:
                con.execute("SET enable_progress_bar = false")
            except duckdb.InvalidInputException:  # inside Jupyter DuckDB refuses the setting (no bar there anyway)
                pass
            version = _schema_version(con)
            if version is None and not self.in_memory:
                _refuse_foreign(con, path)  # before anything is written, beside the file or in it
            if not read_only and not self.in_memory:
                # before anything this connection writes can commit (data/belief_cache.py)
                self._writing_token = belief_cache.open_generation(path)
                self._changed_questions = set()
                self._opened_at = self._epochs_now(con)
        except BaseException:
            con.close()
            raise
        self._con, self._mode, self._one_thread = con, mode, False
        try:
            if mode == "read":
                if version != SCHEMA_VERSION:  # an old or new store: only a writer may change it
                    self._disconnect()
                    self._connect("write")
                return
            self._ensure_schema()
            if not self.in_memory:
                self.folded_reads += read_log.fold(con, path)
        except BaseException:
            self._disconnect()
            raise

    def _disconnect(self) -> None:
        if self._con is not None:
            mode = self._mode
            closing = self._closing_write() if mode == "write" and not self.in_memory else {}
            con, self._con = self._con, None
            self._mode = None
            con.close()
            if mode == "write" and not self.in_memory and self._writing_token is not None:
                from . import belief_cache

                try:
                    belief_cache.close_generation(self.path, self._writing_token, closing["entries"],
                                                  changed=closing["changed"], newest_days=closing["newest_days"])
                except OSError:
                    pass  # the token still says "writing": nothing is kept or used, which is safe
                self._writing_token = None

    @staticmethod
    def _epochs_now(con) -> tuple[int, int | None] | None:
        """(evidence epoch, newest parameter version), to tell at the close what this session
        changed; None where the store has no such bookkeeping yet (new, or before a migration)."""
        try:
            epoch = con.execute("SELECT value::BIGINT FROM meta WHERE key = 'evidence_epoch'").fetchone()
            version = con.execute("SELECT max(version) FROM params").fetchone()
        except duckdb.Error:
            return None
        return (int(epoch[0]), version[0]) if epoch else None

    def _closing_write(self) -> dict[str, Any]:
        """What the belief cache needs from a write session as it closes, while the file is still
        held (best effort: the cache never fails a write): the questions the session changed
        (None: every question — a new parameter version, a merge, split or undo, a migration),
        the newest evidence, and the entries of the changed questions (at most :data:`KEEP_AT_CLOSE`)."""
        ingested, self._changed_questions = self._changed_questions, set()
        opened, self._opened_at = self._opened_at, None
        closing: dict[str, Any] = {"changed": None, "newest_days": None, "entries": {}}
        try:
            now = self._epochs_now(self._con)
            if opened is not None and now is not None and now[1] == opened[1]:
                closing["changed"] = self.questions_changed_since(opened[0])
            newest = self.newest_evidence_time()
            closing["newest_days"] = to_days(newest) if newest is not None else None
            keep = closing["changed"] if closing["changed"] is not None else sorted(ingested)
            if keep and len(keep) <= KEEP_AT_CLOSE and self.entries_at_close is not None:
                closing["entries"] = self.entries_at_close(list(keep))
        except Exception:  # noqa: BLE001 - a cache that cannot be filled is only a slower first read
            closing["entries"] = {}
        return closing

    def release(self) -> None:
        """Close the file now (it reopens at the next use); a no-op for ``:memory:`` and inside a session."""
        if not self.in_memory and self._depth == 0:
            self._disconnect()

    def _schema_version(self) -> str | None:
        return _schema_version(self._con)

    def _ensure_schema(self) -> None:
        version = self._schema_version()
        if version is not None:
            if version != SCHEMA_VERSION:
                self._migrate(version)
            return
        self.con.execute("BEGIN")
        self.con.execute(_schema_sql())
        self.con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('evidence_epoch', '0'), "
                         "('structure_epoch', '0'), ('store_id', ?)", [SCHEMA_VERSION, _new_store_id()]).fetchall()
        self._seed_prompts()
        self.con.execute("COMMIT")

    def store_id(self) -> str:
        """This store's id: random, written when the store was made and kept in ``meta``
        (docs/formats.md); it names the store's files in a folder that several stores share
        (``doxa train --posterior-dir``). A store made before ids existed gets one now."""
        with self.reading():
            row = self.con.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        if row is not None:
            return row[0]
        with self.writing():
            self.con.execute("INSERT INTO meta VALUES ('store_id', ?) ON CONFLICT DO NOTHING",
                             [_new_store_id()]).fetchall()
            return self.con.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]

    def _migrate(self, version: str) -> None:
        """Bring a store written by an older doxa up to :data:`SCHEMA_VERSION`, in one transaction."""
        if version not in _MIGRATIONS:
            raise StoreError(f"{self.path} has schema version {version}, which this doxa does not know "
                             f"(it writes version {SCHEMA_VERSION}): upgrade doxa")
        self.con.execute("BEGIN")
        try:
            while version != SCHEMA_VERSION:
                version, sql = _MIGRATIONS[version]
                self.con.execute(sql)
            self.con.execute(_schema_sql())
            self._seed_prompts()
            self.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [SCHEMA_VERSION]).fetchall()
            self.con.execute("INSERT INTO meta VALUES ('store_id', ?) ON CONFLICT DO NOTHING",
                             [_new_store_id()]).fetchall()
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def _seed_prompts(self) -> None:
        """Store the built-in texts as version 1 of each prompt a store does not have yet."""
        from .prompts import seed_defaults

        seed_defaults(self.con)

    def execute(self, sql: str, params: list[Any] | None = None):
        """Run SQL with parameters inlined as literals (see :func:`sql_literal`)."""
        return self.con.execute(bind(sql, params))

    def close(self) -> None:
        self._disconnect()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ ingest
    def ingest_lines(self, lines: Iterable[str], *, name: str | None = None, fast: bool | None = None,
                     reopen=None, path=None) -> dict[str, int]:
        """Validate and ingest JSON Lines; all or nothing. Returns new rows per table.

        With ``name`` (a file's), input without a single record is refused as empty: a file
        meant to hold records that holds none is a mistake to report, not "nothing new".

        Inputs of :data:`~doxa.data.fast_ingest.FAST_MIN_LINES` lines or more are checked
        column by column and written by joins (:mod:`doxa.data.fast_ingest`), in blocks, so
        memory stays bounded; whatever that cannot prove valid goes through the per-line
        checks, which give the exact problems. ``fast`` forces (True) or skips (False) the
        fast attempt; ``reopen()``, when given, reads the same lines again (a file's path);
        ``path``, when given, is the file the lines come from, which the fast path reads as bytes.
        :attr:`last_ingest_path` says which path stored the last ingest ("fast" or "per-line").
        """
        from . import ingest as ingest_mod  # lazy: pydantic loads only when ingesting, not on `doxa belief`

        if fast is not False:
            added, lines = self._ingest_fast(lines, force=bool(fast), reopen=reopen, path=path)
            if added is not None:
                return added
        self.last_ingest_path = "per-line"
        batch = ingest_mod.parse_lines(lines)
        if name is not None and batch.lines == 0:
            raise StoreError(f"{'standard input' if name == '-' else name} is empty: no records to ingest "
                             "(one JSON object a line; see docs/formats.md)")
        return self.ingest_batch(batch)

    def _ingest_fast(self, lines: Iterable[str], *, force: bool, reopen, path=None):
        """(new rows per table, None) when the fast path stored the input; else (None, the lines
        to read again from the first). The staging runs without holding the store; only the
        joins and inserts run in the write session."""
        import itertools

        from . import fast_ingest

        replay = fast_ingest.Replay(lines, reopen)
        try:
            source = iter(replay.source())
            head = list(itertools.islice(source, fast_ingest.FAST_MIN_LINES))
            if len(head) < fast_ingest.FAST_MIN_LINES and not force:
                return None, head
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
                return None, list(replay.again()) if replay.iterator is not None else replay.again()
            staged = time.perf_counter()
            try:
                with self.writing():
                    self.use_one_thread(False)
                    changes: dict[str, Any] = {}
                    warnings: list[str] = []
                    try:
                        added = fast_ingest.write_stage(self.con, stage.paths, changes, stage.unique,
                                                        warnings=warnings)
                    except fast_ingest.NotProved as why:
                        fast_ingest.debug(why.reason)
                        return None, list(replay.again()) if replay.iterator is not None else replay.again()
                    self._changed_questions.update(changes.get("questions") or ())
                    if changes.get("questions") and self.on_evidence_change is not None:
                        self.on_evidence_change(changes)  # still holding the file: nothing came in between
                    self.last_ingest_path = "fast"
                    self.last_ingest_warnings = warnings
                    self.last_ingest_seconds = {"staging (no lock)": staged - started,
                                                "joins and writes (write session)": time.perf_counter() - staged}
                    return added, None
            finally:
                stage.close()
        finally:
            replay.close()

    def ingest_records(self, records: Iterable[dict], *, also=None) -> dict[str, int]:
        from . import ingest as ingest_mod  # lazy: pydantic loads only when ingesting

        return self.ingest_batch(ingest_mod.parse_records(records), also=also)

    def ingest_file(self, path: str | os.PathLike) -> dict[str, int]:
        if str(path) == "-":
            return self.ingest_lines(sys.stdin, name="-")
        if Path(path).is_dir():
            raise StoreError(f"{path} is a directory: give a JSON Lines file")
        try:
            with open(path, encoding="utf-8") as handle:
                return self.ingest_lines(handle, name=str(path), reopen=lambda: _lines_of(path), path=path)
        except FileNotFoundError:
            raise StoreError(f"no such file: {path}") from None
        except UnicodeDecodeError as err:
            raise StoreError(_first_bytes_not_utf8(path, err)) from None

    def ingest_batch(self, batch, *, also=None) -> dict[str, int]:
        """Write validated records in one transaction (the file is held only for this write).

        ``also(con)``, when given, runs inside the batch's transaction, after its rows are written:
        what it writes commits or rolls back with them."""
        # lazy: pyarrow loads only when writing, not on `doxa belief`'s start-up
        from . import organizer, writer

        with self.writing():
            self.use_one_thread(False)
            changes: dict[str, Any] = {}
            warnings: list[str] = []
            added = writer.write_batch(self.con, batch, organizer.OPERATION_WRITERS, also=also, changes=changes,
                                       warnings=warnings)
            self.last_ingest_warnings = warnings
            self._changed_questions.update(changes.get("questions") or ())
            if changes and self.on_evidence_change is not None:
                self.on_evidence_change(changes)  # still holding the file: nothing came in between
            return added

    def use_one_thread(self, one: bool) -> None:
        """Run DuckDB on one thread (small reads) or on all cores (bulk work).

        A few questions' reads cost less on one thread than the threads' start-up (−40%
        wall measured); switching back and forth costs more again (each ``RESET threads``
        restarts the pool, ~1 ms on the next query), so the setting stays until bulk work
        asks for the cores.
        """
        if one != self._one_thread:
            self.con.execute("SET threads = 1" if one else "RESET threads")
            self._one_thread = one

    # ------------------------------------------------------------------ questions & evidence
    @_reads
    def question_table(self, ids: list[str] | None = None, *, subjects: list[str] | None = None,
                       include_inactive: bool = False) -> QuestionTable:
        """Questions (active ones unless ``include_inactive``) in id order: all of them, or those
        named in ``ids`` together with every question about one of ``subjects``."""
        if ids is None and subjects is None:
            cols, options, keys, group_of = self._all_questions(include_inactive)
        else:
            cols, options, keys, group_of = self._some_questions(list(ids or []), list(subjects or []),
                                                                 include_inactive)
        return QuestionTable(
            ids=np.asarray(cols["id"], dtype=object),
            subjects=np.asarray(cols["subject"], dtype=object),
            kinds=np.asarray(cols["kind"], dtype=object),
            texts=np.asarray(cols["text"], dtype=object),
            shapes=np.asarray(cols["shape"], dtype=object),
            options=options,
            n_options=np.asarray([len(o) for o in options], dtype=np.int64),
            options_key=keys,
            option_group=group_of.astype(np.int64),
            id_hash=np.asarray(cols["h"], dtype=np.uint64),
        )

    _OPTIONS_KEY = OPTIONS_KEY_SQL

    def _all_questions(self, include_inactive: bool):
        import pyarrow.compute as pc  # lazy: the bulk path only (`doxa belief` never loads pyarrow)

        where = "" if include_inactive else "WHERE status = 'active'"
        # sorted and converted by Arrow: a third of what DuckDB's ORDER BY and fetchnumpy cost here
        # (55 against 95 ms for 100,000); both order strings by their UTF-8 bytes, as the evidence does
        table = self.execute(
            f"SELECT id, hash(id) AS h, subject, kind, text, shape, hash(kind, options) AS g FROM questions {where}"
        ).to_arrow_table()
        table = table.take(pc.sort_indices(table["id"]))
        cols = {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}
        # questions of one kind mostly share their options: fetch each distinct list once
        # (100,000 per-question lists cost ~0.3 s to bring into Python)
        group_hash, group_of = np.unique(np.asarray(cols["g"], dtype=np.uint64), return_inverse=True)
        groups = self.execute(
            f"""SELECT DISTINCT ON (hash(kind, options)) hash(kind, options) AS g, options,
                       {self._OPTIONS_KEY} AS options_key
                FROM questions {where} ORDER BY g""").fetchnumpy()
        assert np.array_equal(np.asarray(groups["g"], dtype=np.uint64), group_hash)
        group_options = [list(o) for o in groups["options"]]
        group_of = group_of.reshape(-1)
        options = [group_options[g] for g in group_of.tolist()]  # shared lists: read, never change
        return cols, options, np.asarray(groups["options_key"], dtype=object)[group_of], group_of

    def _some_questions(self, ids: list[str], subjects: list[str], include_inactive: bool):
        """A few questions: one query, each with its own options list."""
        chosen = [_member_of(column, values) for column, values in (("id", ids), ("subject", subjects)) if values]
        cols = self.execute(
            f"SELECT id, hash(id) AS h, subject, kind, text, shape, options, {self._OPTIONS_KEY} AS options_key, status "
            f"FROM questions WHERE {' OR '.join(sql for sql, _ in chosen) or 'false'} ORDER BY id",
            [value for _, value in chosen]).fetchnumpy()
        if not include_inactive:  # in numpy: the status test costs more in SQL than the rest of the query
            active = np.flatnonzero(np.asarray(cols["status"], dtype=object) == "active")
            cols = {name: np.asarray(values, dtype=object)[active] for name, values in cols.items()}
        keys = np.asarray(cols["options_key"], dtype=object)
        group_of = (np.unique(keys.astype(str), return_inverse=True)[1].reshape(-1) if len(keys)
                    else np.zeros(0, dtype=np.int64))
        return cols, [list(o) for o in cols["options"]], keys, group_of

    @_reads
    def load_evidence(
        self,
        at: datetime | None = None,
        question_ids: list[str] | None = None,
        *,
        with_messages: bool = False,
        subjects: list[str] | None = None,
    ) -> Evidence:
        """Counted evidence up to ``at`` (all of it when None), as arrays. See data/evidence.py.

        Of every active question, or of those in ``question_ids`` and those about ``subjects``.
        """
        return evidence_sql.load(self, at, question_ids, with_messages=with_messages, subjects=subjects)

    # ------------------------------------------------------------------ params
    @_reads
    def latest_params(self) -> tuple[int | None, dict[str, Any] | None]:
        row = self.con.execute(
            "SELECT version, body FROM params ORDER BY version DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None, None
        return int(row[0]), json.loads(row[1])

    @_reads
    def params_versions(self) -> list[dict[str, Any]]:
        rows = self.con.execute(
            "SELECT version, created_at FROM params ORDER BY version"
        ).fetchall()
        return [{"version": v, "created_at": c.isoformat()} for v, c in rows]

    @_reads
    def params_body(self, version: int) -> dict[str, Any]:
        row = self.execute("SELECT body FROM params WHERE version = ?", [version]).fetchone()
        if row is None:
            raise StoreError(f"no parameter version {version}: `doxa train` publishes versions")
        return json.loads(row[0])

    def publish_params(self, body: dict[str, Any], *, before_commit=None) -> int:
        """Write a new parameter version atomically; returns its number.

        The document is checked first (:class:`ParamsDocument`): a malformed one is refused
        with a :class:`ParamsDocumentError` naming the field, and nothing is written.
        ``before_commit(version, con)`` runs inside the transaction, after the version's
        number is known and before it becomes visible: what it writes, or puts in place on
        disk, is part of the version (an exception there publishes nothing).
        """
        from .params_document import ParamsDocument, ParamsDocumentError  # here only: a read needs neither

        try:
            checked = ParamsDocument.from_dict(body)
        except ParamsDocumentError as err:
            raise err.within("parameter document refused, nothing published") from None
        with self.writing():
            con = self.con
            con.execute("BEGIN")
            try:
                version = int(con.execute("SELECT coalesce(max(version), 0) + 1 FROM params").fetchone()[0])
                document = dict(body, format=checked.format, version=version)
                con.execute(
                    "INSERT INTO params (version, created_at, body) VALUES (?, now()::TIMESTAMP, ?)",
                    [version, json.dumps(document)],
                ).fetchall()
                if before_commit is not None:
                    before_commit(version, con)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return version

    # ------------------------------------------------------------------ reads log
    def log_reads(self, rows: list[tuple[str, datetime, list[float], str, float, int | None]]) -> None:
        """rows: (question, asked_at, probabilities in option order, top, p_top, params_version).

        On disk the rows go to a side file (:mod:`doxa.data.read_log`): a read never waits
        for the write lock, and the next writer folds the file into ``reads``. A literal
        INSERT in memory: any Arrow or pandas hand-over imports pandas (~0.5 s), too dear
        for the few reads of a `doxa belief`; many reads go through :meth:`log_belief_matrix`.
        """
        if not rows:
            return
        if not self.in_memory:
            from . import read_log

            read_log.append_rows(self.path, rows)
            return
        read_at = datetime.now(timezone.utc).replace(tzinfo=None)
        values = ",\n".join(
            f"({sql_literal(q)}, {sql_literal(at)}, {sql_literal(read_at)}, "
            f"[{', '.join(repr(float(x)) for x in probs)}]::DOUBLE[], {sql_literal(top)}, "
            f"{sql_literal(float(p))}, {sql_literal(v)})" for q, at, probs, top, p, v in rows)
        self.con.execute(
            "INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version) VALUES " + values
        ).fetchall()

    def log_belief_matrix(self, question_ids: np.ndarray, asked_at: datetime, probs: np.ndarray,
                          n_options: np.ndarray, params_version: int | None) -> None:
        """Log many reads at once from the scorer's arrays (``probs`` (Q, K_max), rounded to 1e-6).

        On disk: one Parquet side file (see :meth:`log_reads`). In memory the Arrow table is
        inserted directly. Each question's top answer is named in SQL from its options.
        """
        from . import read_log

        if not self.in_memory:
            read_log.append_matrix(self.path, question_ids, asked_at, probs, n_options, params_version)
            return
        self.con.register("_doxa_reads", read_log.matrix_table(question_ids, asked_at, probs, n_options,
                                                              params_version))
        try:
            self.con.execute(
                """INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version)
                   SELECT s.question, s.asked_at, s.read_at, s.probs,
                          CASE WHEN s.p_top > 0 THEN q.options[s.top + 1] ELSE '' END, s.p_top, s.params_version
                   FROM _doxa_reads s JOIN questions q ON q.id = s.question""").fetchall()
        finally:
            self.con.unregister("_doxa_reads")

    def fold_reads(self) -> int:
        """Fold the read log's side files into ``reads`` now (every write does it anyway)."""
        before = self.folded_reads
        with self.writing():
            if self._depth > 1 and not self.in_memory:  # the file was already open for writing
                from . import read_log

                self.folded_reads += read_log.fold(self.con, self.path)
        return self.folded_reads - before

    # ------------------------------------------------------------------ kept filter states
    @_reads
    def evidence_epoch(self) -> int:
        """How many writes have changed evidence so far (see :func:`doxa.data.writer.mark_evidence_changed`)."""
        return int(self.con.execute("SELECT value FROM meta WHERE key = 'evidence_epoch'").fetchone()[0])

    @_reads
    def questions_changed_since(self, epoch: int) -> list[str] | None:
        """Active questions whose evidence changed after evidence epoch ``epoch``, in id order;
        None when a merge, split or undo came after it (then every question changed)."""
        structure = int(self.con.execute("SELECT value FROM meta WHERE key = 'structure_epoch'").fetchone()[0])
        if structure > epoch:
            return None
        return [q for (q,) in self.con.execute(
            """SELECT e.question FROM evidence_epochs e JOIN questions q ON q.id = e.question
               WHERE e.epoch > ? AND q.status = 'active' ORDER BY e.question""", [int(epoch)]).fetchall()]

    # ``{scope}`` filters both tables before the join: filtered after it, a join over every
    # question's epoch costs ~20 ms of a one-question read (2 ms this way)
    _VALID_STATES = """
        SELECT hash(b.question) AS h, b.state, octet_length(b.state) // 8 AS width,
               coalesce(b.last_t, 'NaN'::DOUBLE) AS last_t, b.n_evidence, b.n_settled
        FROM (SELECT * FROM belief_states {scope}) b
        LEFT JOIN (SELECT * FROM evidence_epochs {scope}) e ON e.question = b.question
        WHERE b.params_version = {version} AND b.epoch >= coalesce(e.epoch, 0)
          AND b.epoch >= (SELECT value::BIGINT FROM meta WHERE key = 'structure_epoch')"""

    @_reads
    def kept_states(self, questions: QuestionTable, version: int) -> dict[str, np.ndarray]:
        """The usable kept states of ``questions`` under parameter version ``version``, in their order.

        ``found`` (Q,) says which have one; ``state`` (Q, K_max) is float64, bit for bit as written.
        """
        from .evidence_sql import _index_of

        n_q, k_max = len(questions.ids), questions.k_max
        few = 0 < n_q <= 2000
        scope, ids = "", None
        if few:
            member, ids = _member_of("question", questions.ids.tolist())
            scope = f"WHERE {member}"
        sql = self._VALID_STATES.format(version=int(version), scope=scope)
        found = np.zeros(n_q, dtype=bool)
        out = {"found": found, "state": np.zeros((n_q, k_max)), "last_t": np.full(n_q, np.nan),
               "n_evidence": np.zeros(n_q, dtype=np.int64), "n_settled": np.zeros(n_q, dtype=np.int64)}
        if not n_q:
            return out
        if few:  # no pyarrow on `doxa belief`'s path
            cols = self.execute(sql, [ids] * 2).fetchnumpy()
            flat = np.frombuffer(b"".join(np.asarray(cols["state"], dtype=object).tolist()), dtype=np.float64)
            first = np.r_[0, np.cumsum(np.asarray(cols["width"], dtype=np.int64))[:-1]]
        else:  # every blob's bytes in one Arrow buffer, read in place: no Python object per state
            table = self.execute(sql).to_arrow_table()
            cols = {name: table[name].to_numpy() for name in table.column_names if name != "state"}
            flat, first = _doubles_in_place(table["state"])
        if not len(cols["h"]):
            return out
        row = _index_of(np.asarray(cols["h"], dtype=np.uint64), questions.id_hash)
        have = np.flatnonzero(row >= 0)
        rows = row[have]
        widths = np.asarray(cols["width"], dtype=np.int64)[rows]
        starts = first[rows].astype(np.int64)
        right = widths == questions.n_options[have]  # a state of another shape is not this question's
        have, rows, starts = have[right], rows[right], starts[right]
        k = questions.n_options[have]
        inside = np.arange(k_max)[None, :] < k[:, None]
        cell = np.where(inside, starts[:, None] + np.arange(k_max)[None, :], 0)
        out["state"][have] = np.where(inside, flat[cell], 0.0) if len(flat) else 0.0
        found[have] = True
        out["last_t"][have] = np.asarray(cols["last_t"], dtype=np.float64)[rows]
        out["n_evidence"][have] = np.asarray(cols["n_evidence"], dtype=np.int64)[rows]
        out["n_settled"][have] = np.asarray(cols["n_settled"], dtype=np.int64)[rows]
        return out

    @_reads
    def rejections_up_to(self, questions: QuestionTable, at: datetime | None) -> dict[str, np.ndarray]:
        """Rejections of ``questions`` at or before ``at``: question index, time (days), option index."""
        from .evidence_sql import _index_of

        few = len(questions.ids) <= 2000
        scope, ids = "", None
        if few:
            member, ids = _member_of("r.question", questions.ids.tolist() or [""])
            scope = f"AND {member}"
        cols = self.execute(
            f"""SELECT hash(r.question) AS h, epoch(r.rejected_at) / 86400.0 AS t,
                       list_position(q.options, r.answer) - 1 AS a
                FROM rejections r JOIN questions q ON q.id = r.question
                WHERE r.rejected_at <= ? {scope}""",
            [at or FAR_FUTURE] + ([ids] if few else [])).fetchnumpy()
        qi = _index_of(questions.id_hash, np.asarray(cols["h"], dtype=np.uint64))
        keep = qi >= 0
        return {"q": qi[keep].astype(np.int64), "t": np.asarray(cols["t"], dtype=np.float64)[keep],
                "answer": np.asarray(cols["a"], dtype=np.int64)[keep]}

    def write_states(self, ids: np.ndarray, n_options: np.ndarray, state: np.ndarray, last_t: np.ndarray,
                     n_evidence: np.ndarray, n_settled: np.ndarray, version: int, epoch: int, *,
                     replace_all: bool = False) -> None:
        """Keep filter states (one row per question; ``replace_all`` drops every other row)."""
        import pyarrow as pa

        k = np.asarray(n_options, dtype=np.int64)
        rows = np.ascontiguousarray(state, dtype=np.float64)
        blobs = [row[:n].tobytes() for row, n in zip(rows, k.tolist())]
        last_t = np.asarray(last_t, dtype=np.float64)
        table = pa.table({
            "question": pa.array(np.asarray(ids, dtype=object).tolist(), pa.string()),
            "params_version": pa.array(np.full(len(k), int(version), dtype=np.int32)),
            "epoch": pa.array(np.full(len(k), int(epoch), dtype=np.int64)),
            "last_t": pa.array(last_t, pa.float64(), mask=np.isnan(last_t)),
            "state": pa.array(blobs, pa.binary()),
            "n_evidence": pa.array(np.asarray(n_evidence, dtype=np.int32)),
            "n_settled": pa.array(np.asarray(n_settled, dtype=np.int32)),
        })
        with self.writing():
            con = self.con
            con.register("_doxa_states", table)
            try:
                if replace_all:
                    con.execute("DELETE FROM belief_states").fetchall()
                    con.execute("INSERT INTO belief_states SELECT * FROM _doxa_states").fetchall()
                else:
                    con.execute("""INSERT INTO belief_states SELECT * FROM _doxa_states
                                   ON CONFLICT (question) DO UPDATE SET params_version = excluded.params_version,
                                       epoch = excluded.epoch, last_t = excluded.last_t, state = excluded.state,
                                       n_evidence = excluded.n_evidence, n_settled = excluded.n_settled""").fetchall()
            finally:
                con.unregister("_doxa_states")

    @_reads
    def question(self, question_id: str) -> dict[str, Any]:
        row = self.execute(
            "SELECT id, subject, kind, text, shape, options, status FROM questions WHERE id = ?", [question_id]
        ).fetchone()
        if row is None:
            hint = self._closest("questions", question_id)
            raise StoreError(f"no question {question_id!r}{hint}: `doxa beliefs` lists them")
        keys = ("id", "subject", "kind", "text", "shape", "options", "status")
        return dict(zip(keys, row))

    def _closest(self, table: str, name: str) -> str:
        row = self.execute(
            f"SELECT id FROM {table} ORDER BY jaro_winkler_similarity(id, ?) DESC LIMIT 1", [name]
        ).fetchone()
        return f" (did you mean {row[0]!r}?)" if row else ""

    @_reads
    def subjects(self) -> list[dict[str, Any]]:
        rows = self.con.execute("SELECT id, name, aliases FROM subjects ORDER BY id").fetchall()
        return [{"id": i, "name": n, "aliases": list(a)} for i, n, a in rows]

    @_reads
    def relations(self) -> list[dict[str, str]]:
        rows = self.con.execute("SELECT from_id, to_id, kind FROM relations ORDER BY 1, 2, 3").fetchall()
        return [{"from": f, "to": t, "kind": k} for f, t, k in rows]

    @_reads
    def instructions(self, subjects: list[str] | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, subject, text, given_at, rests_on_question, rests_on_answer, given_by FROM instructions"
        params: list[Any] = []
        if subjects is not None:
            sql += " WHERE list_contains(?, subject)"
            params.append(list(subjects))
        rows = self.execute(sql + " ORDER BY given_at, id", params).fetchall()
        keys = ("id", "subject", "text", "given_at", "rests_on_question", "rests_on_answer", "by")
        return [dict(zip(keys, r)) for r in rows]

    def question_ids_for_subject(self, subject: str) -> list[str]:
        return self.question_ids_for_subjects([subject])

    @_reads
    def question_ids_for_subjects(self, subjects: list[str]) -> list[str]:
        """The active questions about any of ``subjects``, in id order."""
        if not subjects:
            return []
        rows = self.execute(
            "SELECT id FROM questions WHERE subject IN (SELECT unnest(?)) AND status = 'active' ORDER BY id",
            [list(subjects)]).fetchall()
        return [r[0] for r in rows]

    @_reads
    def newest_evidence_time(self) -> datetime | None:
        """When the newest message was sent or the newest settlement made (None: neither yet).

        Also the moment from which kept states may be read: they count every source's whole
        history, and a read before this may find a source with less history then. Both maxima
        come from DuckDB's column statistics (~1.5 ms on the 1M store)."""
        row = self.con.execute(
            "SELECT greatest((SELECT max(sent_at) FROM messages), (SELECT max(settled_at) FROM settlements))"
        ).fetchone()
        return row[0] if row else None

    @_reads
    def counts(self) -> dict[str, int]:
        tables = ("subjects", "relations", "sources", "messages", "questions", "readings",
                  "settlements", "rejections", "instructions", "params", "reads")
        sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
        counts = {name: int(n) for name, n in self.con.execute(sql).fetchall()}
        if not self.in_memory:  # reads logged in side files count as logged
            from . import read_log

            counts["reads"] += read_log.pending_rows(self.path, self.con)
        return counts

    @_reads
    def evidence_for_explain(self, question_id: str, at: datetime | None) -> list[dict[str, Any]]:
        """Every reading of a question with why it does or does not count (for `doxa explain`)."""
        return evidence_sql.explain_rows(self, question_id, at)

    @_reads
    def settlements(self, question_ids: list[str] | None = None) -> list[dict[str, Any]]:
        sql = "SELECT question, answer, settled_at, how, settled_by, note, p_before, params_version FROM settlements"
        params: list[Any] = []
        if question_ids is not None:
            sql += " WHERE list_contains(?, question)"
            params.append(list(question_ids))
        rows = self.execute(sql + " ORDER BY settled_at, question", params).fetchall()
        keys = ("question", "answer", "settled_at", "how", "by", "note", "p_before", "params_version")
        return [dict(zip(keys, r)) for r in rows]

    @_reads
    def rejections(self, question_id: str) -> list[dict[str, Any]]:
        rows = self.execute(
            "SELECT answer, rejected_at, rejected_by FROM rejections WHERE question = ? ORDER BY rejected_at",
            [question_id],
        ).fetchall()
        return [{"answer": a, "at": t, "by": b} for a, t, b in rows]


__all__ = ["Store", "StoreError", "IngestError", "Problem", "to_days", "from_days", "default_db_path"]
