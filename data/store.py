"""The doxa store: one DuckDB file (or ``:memory:``) holding every table of docs/design.md §1.

All SQL of doxa lives in this package. :class:`Store` is the only object that owns the
connection; the scorer and the fit receive numpy arrays (:class:`doxa.data.evidence.Evidence`).
It sits at the top of ``data/``: the modules that query or write an open store take it as a
:class:`doxa.data.session.Session` and never import this module.

Why one module of ~700 lines: every public method here opens its session (read or write,
docs/concurrency.md) around a few lines of SQL, and splitting the class would spread that
one rule over several files. The bulk work lives apart: the schema and its migrations in
:mod:`.schema`, evidence loading in :mod:`.evidence_sql`, ingest orchestration in
:mod:`.ingest_files` (parsing in :mod:`.ingest`, writing in :mod:`.writer`), the read log in
:mod:`.read_log`, opening and waiting in :mod:`.connection`, the one transaction in :mod:`.session`.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import duckdb
import numpy as np

from . import evidence_sql, kept_states, schema
from .connection import connect, in_read_session, not_a_store
from .durable import store_file
from .errors import StoreError
from .evidence import OPTIONS_KEY_SQL, Evidence, QuestionTable, open_question_states
from .session import transaction
from .sql import bind, member_of, sql_literal
from .times import FAR_FUTURE, to_days, utc_now

DEFAULT_DB = "doxa.duckdb"
#: a write session that changed at most this many questions keeps their belief-cache entries
#: as it closes (data/belief_cache.py); a bigger write leaves them to the first reads
KEEP_AT_CLOSE = 100


def default_db_path() -> str:
    return os.environ.get("DOXA_DB") or DEFAULT_DB


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
        #: the questions this write session's ingests changed (:meth:`note_ingest`)
        self._changed_questions: set[str] = set()
        #: (epochs when handed in, belief-cache entries) that the session opener handed in with
        #: :meth:`keep_at_close`, kept beside the store as the session closes (data/belief_cache.py)
        self._kept_at_close: tuple[Any, dict[str, dict[str, Any]]] | None = None
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
            version = schema.schema_version(con)
            if version is None and not self.in_memory:
                schema.refuse_foreign(con, path)  # before anything is written, beside the file or in it
            if not read_only and not self.in_memory:
                # before anything this connection writes can commit (data/belief_cache.py)
                self._writing_token = belief_cache.open_generation(path)
                self._changed_questions = set()
                self._kept_at_close = None
                self._opened_at = self._epochs_now(con)
        except BaseException:
            con.close()
            raise
        self._con, self._mode, self._one_thread = con, mode, False
        try:
            if mode == "read":
                if version != schema.SCHEMA_VERSION:  # an old or new store: only a writer may change it
                    self._disconnect()
                    self._connect("write")
                return
            schema.ensure(con, path)
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

    def _changed_this_session(self) -> list[str] | None:
        """The questions this write session changed, in id order (None: every question — a new
        parameter version, a merge, split or undo, a migration)."""
        opened, now = self._opened_at, self._epochs_now(self._con)
        if opened is not None and now is not None and now[1] == opened[1]:
            return self.questions_changed_since(opened[0])
        return None

    def questions_to_keep(self) -> list[str]:
        """The questions whose belief-cache entries the write session open now should keep as it
        closes: those it changed (those its ingests touched when it changed every question), at
        most :data:`KEEP_AT_CLOSE` of them; none outside the outermost write session on a file.
        Whoever opened the session computes their entries and hands them in with :meth:`keep_at_close`."""
        if self.in_memory or self._writing_token is None or self._depth != 1:
            return []
        changed = self._changed_this_session()
        keep = changed if changed is not None else sorted(self._changed_questions)
        return list(keep) if len(keep) <= KEEP_AT_CLOSE else []

    def keep_at_close(self, entries: dict[str, dict[str, Any]]) -> None:
        """Belief-cache entries (data/belief_cache.py) of :meth:`questions_to_keep`, kept beside the
        store as this write session closes, so that their first reads open nothing. They count
        only if nothing changed evidence or parameters between now and the close."""
        self._kept_at_close = (self._epochs_now(self.con), dict(entries))

    def _closing_write(self) -> dict[str, Any]:
        """What the belief cache needs from a write session as it closes, while the file is still
        held (best effort: the cache never fails a write): the questions the session changed
        (None: every question), the newest evidence, and the entries handed in with
        :meth:`keep_at_close` when nothing changed since."""
        handed, self._kept_at_close = self._kept_at_close, None
        closing: dict[str, Any] = {"changed": None, "newest_days": None, "entries": {}}
        try:
            closing["changed"] = self._changed_this_session()
            newest = self.newest_evidence_time()
            closing["newest_days"] = to_days(newest) if newest is not None else None
            if handed is not None and handed[0] == self._epochs_now(self._con):
                closing["entries"] = handed[1]
        except Exception:  # noqa: BLE001 - a cache that cannot be filled is only a slower first read
            closing["entries"] = {}
        finally:
            self._changed_questions, self._opened_at = set(), None
        return closing

    def release(self) -> None:
        """Close the file now (it reopens at the next use); a no-op for ``:memory:`` and inside a session."""
        if not self.in_memory and self._depth == 0:
            self._disconnect()

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
                             [schema.new_store_id()]).fetchall()
            return self.con.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]

    def transaction(self):
        """One transaction on the open connection (:func:`doxa.data.session.transaction`):
        committed at the end of the ``with`` block, rolled back if it raises."""
        return transaction(self.con)

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
    # The orchestration is :mod:`.ingest_files`; these run it with no follow-up of the caller's
    # (the Memory runs it itself, with its follow-up inside the write session).
    def ingest_lines(self, lines: Iterable[str], *, name: str | None = None, fast: bool | None = None,
                     reopen=None, path=None) -> dict[str, int]:
        """Validate and ingest JSON Lines, all or nothing (:func:`doxa.data.ingest_files.lines`). Returns new rows per table."""
        from . import ingest_files

        with ingest_files.lines(self, lines, name=name, fast=fast, reopen=reopen, path=path) as done:
            return done.added

    def ingest_records(self, records: Iterable[dict], *, also=None) -> dict[str, int]:
        """Validate and ingest records (:func:`doxa.data.ingest_files.records`). Returns new rows per table."""
        from . import ingest_files

        with ingest_files.records(self, records, also=also) as done:
            return done.added

    def ingest_file(self, path: str | os.PathLike) -> dict[str, int]:
        """Validate and ingest a JSON Lines file (:func:`doxa.data.ingest_files.file`). Returns new rows per table."""
        from . import ingest_files

        with ingest_files.file(self, path) as done:
            return done.added

    def ingest_batch(self, batch, *, also=None) -> dict[str, int]:
        """Write validated records in one transaction (:func:`doxa.data.ingest_files.batch`)."""
        from . import ingest_files

        with ingest_files.batch(self, batch, also=also) as done:
            return done.added

    def note_ingest(self, *, changes: dict[str, Any] | None = None, warnings: list[str] | None = None,
                    path: str | None = None, seconds: dict[str, float] | None = None) -> None:
        """Keep what an ingest did (:mod:`.ingest_files` calls it): the questions it changed (for
        the belief cache at the close), its warnings, which path stored it, its phases' seconds."""
        if changes is not None:
            self._changed_questions.update(changes.get("questions") or ())
        if warnings is not None:
            self.last_ingest_warnings = warnings
        if path is not None:
            self.last_ingest_path = path
        if seconds is not None:
            self.last_ingest_seconds = seconds

    def use_one_thread(self, one: bool) -> None:
        """Run DuckDB on one thread (small reads) or on all cores (bulk work).

        A few questions' reads cost less on one thread than the threads' start-up; switching
        back and forth costs more again (each ``RESET threads`` restarts the pool on the next
        query; figures: docs/measurements/2026-12-code-choices.md), so the setting stays until bulk work
        asks for the cores.
        """
        if one != self._one_thread:
            self.con.execute("SET threads = 1" if one else "RESET threads")
            self._one_thread = one

    # ------------------------------------------------------------------ questions & evidence
    @in_read_session
    def question_table(self, ids: list[str] | None = None, *, subjects: list[str] | None = None,
                       include_inactive: bool = False) -> QuestionTable:
        """Questions (active ones unless ``include_inactive``) in id order: all of them, or those
        named in ``ids`` together with every question about one of ``subjects``."""
        if ids is None and subjects is None:
            cols, options, keys, group_of = self._all_questions(include_inactive)
        else:
            cols, options, keys, group_of = self._some_questions(list(ids or []), list(subjects or []),
                                                                 include_inactive)
        is_open = np.asarray(cols["is_open"], dtype=bool).reshape(-1)
        if is_open.any():
            options, keys, group_of = open_question_states(options, keys, group_of, is_open)
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
            is_open=is_open,
        )

    _OPTIONS_KEY = OPTIONS_KEY_SQL

    def _all_questions(self, include_inactive: bool):
        import pyarrow.compute as pc  # lazy: the bulk path only (`doxa belief` never loads pyarrow)

        where = "" if include_inactive else "WHERE status = 'active'"
        # sorted and converted by Arrow: cheaper than DuckDB's ORDER BY and fetchnumpy here
        # (docs/measurements/2026-12-code-choices.md); both order strings by their UTF-8 bytes, as the evidence does
        table = self.execute(
            f"SELECT id, hash(id) AS h, subject, kind, text, shape, is_open, hash(kind, options, is_open) AS g "
            f"FROM questions {where}"
        ).to_arrow_table()
        table = table.take(pc.sort_indices(table["id"]))
        cols = {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}
        # questions of one kind mostly share their options: fetch each distinct list once
        # (one list per question costs far more to bring into Python)
        group_hash, group_of = np.unique(np.asarray(cols["g"], dtype=np.uint64), return_inverse=True)
        groups = self.execute(
            f"""SELECT DISTINCT ON (hash(kind, options, is_open)) hash(kind, options, is_open) AS g, options,
                       {self._OPTIONS_KEY} AS options_key
                FROM questions {where} ORDER BY g""").fetchnumpy()
        assert np.array_equal(np.asarray(groups["g"], dtype=np.uint64), group_hash)
        group_options = [list(o) for o in groups["options"]]
        group_of = group_of.reshape(-1)
        options = [group_options[g] for g in group_of.tolist()]  # shared lists: read, never change
        return cols, options, np.asarray(groups["options_key"], dtype=object)[group_of], group_of

    def _some_questions(self, ids: list[str], subjects: list[str], include_inactive: bool):
        """A few questions: one query, each with its own options list."""
        chosen = [member_of(column, values) for column, values in (("id", ids), ("subject", subjects)) if values]
        cols = self.execute(
            f"SELECT id, hash(id) AS h, subject, kind, text, shape, options, {self._OPTIONS_KEY} AS options_key, status, "
            "is_open "
            f"FROM questions WHERE {' OR '.join(sql for sql, _ in chosen) or 'false'} ORDER BY id",
            [value for _, value in chosen]).fetchnumpy()
        if not include_inactive:  # in numpy: the status test costs more in SQL than the rest of the query
            active = np.flatnonzero(np.asarray(cols["status"], dtype=object) == "active")
            cols = {name: np.asarray(values, dtype=object)[active] for name, values in cols.items()}
        keys = np.asarray(cols["options_key"], dtype=object)
        group_of = (np.unique(keys.astype(str), return_inverse=True)[1].reshape(-1) if len(keys)
                    else np.zeros(0, dtype=np.int64))
        return cols, [list(o) for o in cols["options"]], keys, group_of

    @in_read_session
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
    @in_read_session
    def latest_params(self) -> tuple[int | None, dict[str, Any] | None]:
        row = self.con.execute(
            "SELECT version, body FROM params ORDER BY version DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None, None
        return int(row[0]), json.loads(row[1])

    @in_read_session
    def params_versions(self) -> list[dict[str, Any]]:
        rows = self.con.execute(
            "SELECT version, created_at FROM params ORDER BY version"
        ).fetchall()
        return [{"version": v, "created_at": c.isoformat()} for v, c in rows]

    @in_read_session
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
        with self.writing(), self.transaction() as con:
            version = int(con.execute("SELECT coalesce(max(version), 0) + 1 FROM params").fetchone()[0])
            document = dict(body, format=checked.format, version=version)
            con.execute(
                "INSERT INTO params (version, created_at, body) VALUES (?, now()::TIMESTAMP, ?)",
                [version, json.dumps(document)],
            ).fetchall()
            if before_commit is not None:
                before_commit(version, con)
        return version

    # ------------------------------------------------------------------ reads log
    def log_reads(self, rows: list[tuple[str, datetime, list[float], str, float, int | None]]) -> None:
        """rows: (question, asked_at, probabilities in option order, top, p_top, params_version).

        On disk the rows go to a side file (:mod:`doxa.data.read_log`): a read never waits
        for the write lock, and the next writer folds the file into ``reads``. A literal
        INSERT in memory: any Arrow or pandas hand-over imports pandas, too dear
        for the few reads of a `doxa belief`; many reads go through :meth:`log_belief_matrix`.
        """
        if not rows:
            return
        if not self.in_memory:
            from . import read_log

            read_log.append_rows(self.path, rows)
            return
        read_at = utc_now()
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
    # The SQL is :mod:`.kept_states`; inference/read/states.py and the tests read them through the store.
    def evidence_epoch(self) -> int:
        """How many writes have changed evidence so far (:func:`doxa.data.kept_states.evidence_epoch`)."""
        return kept_states.evidence_epoch(self)

    def questions_changed_since(self, epoch: int) -> list[str] | None:
        """Active questions whose evidence changed after ``epoch`` (:func:`doxa.data.kept_states.questions_changed_since`)."""
        return kept_states.questions_changed_since(self, epoch)

    def kept_states(self, questions: QuestionTable, version: int) -> dict[str, np.ndarray]:
        """The usable kept states of ``questions`` under ``version`` (:func:`doxa.data.kept_states.read`)."""
        return kept_states.read(self, questions, version)

    @in_read_session
    def rejections_up_to(self, questions: QuestionTable, at: datetime | None) -> dict[str, np.ndarray]:
        """Rejections of ``questions`` at or before ``at``: question index, time (days), option index."""
        from .evidence_sql import _index_of

        few = len(questions.ids) <= 2000
        scope, ids = "", None
        if few:
            member, ids = member_of("r.question", questions.ids.tolist() or [""])
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
                     replace_all: bool = False, base: np.ndarray | None = None) -> None:
        """Keep filter states (:func:`doxa.data.kept_states.write`)."""
        kept_states.write(self, ids, n_options, state, last_t, n_evidence, n_settled, version, epoch,
                          replace_all=replace_all, base=base)

    @in_read_session
    def question(self, question_id: str) -> dict[str, Any]:
        row = self.execute(
            "SELECT id, subject, kind, text, shape, options, status, is_open FROM questions WHERE id = ?",
            [question_id]).fetchone()
        if row is None:
            hint = self._closest("questions", question_id)
            raise StoreError(f"no question {question_id!r}{hint}: `doxa beliefs` lists them")
        keys = ("id", "subject", "kind", "text", "shape", "options", "status", "open")
        return dict(zip(keys, row))

    def _closest(self, table: str, name: str) -> str:
        row = self.execute(
            f"SELECT id FROM {table} ORDER BY jaro_winkler_similarity(id, ?) DESC LIMIT 1", [name]
        ).fetchone()
        return f" (did you mean {row[0]!r}?)" if row else ""

    @in_read_session
    def subjects(self) -> list[dict[str, Any]]:
        rows = self.con.execute("SELECT id, name, aliases FROM subjects ORDER BY id").fetchall()
        return [{"id": i, "name": n, "aliases": list(a)} for i, n, a in rows]

    @in_read_session
    def relations(self) -> list[dict[str, str]]:
        rows = self.con.execute("SELECT from_id, to_id, kind FROM relations ORDER BY 1, 2, 3").fetchall()
        return [{"from": f, "to": t, "kind": k} for f, t, k in rows]

    @in_read_session
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

    @in_read_session
    def question_ids_for_subjects(self, subjects: list[str]) -> list[str]:
        """The active questions about any of ``subjects``, in id order."""
        if not subjects:
            return []
        rows = self.execute(
            "SELECT id FROM questions WHERE subject IN (SELECT unnest(?)) AND status = 'active' ORDER BY id",
            [list(subjects)]).fetchall()
        return [r[0] for r in rows]

    @in_read_session
    def newest_evidence_time(self) -> datetime | None:
        """When the newest message was sent or the newest settlement made (None: neither yet).

        Also the moment from which kept states may be read: they count every source's whole
        history, and a read before this may find a source with less history then. Both maxima
        come from DuckDB's column statistics, without a scan."""
        row = self.con.execute(
            "SELECT greatest((SELECT max(sent_at) FROM messages), (SELECT max(settled_at) FROM settlements))"
        ).fetchone()
        return row[0] if row else None

    @in_read_session
    def counts(self) -> dict[str, int]:
        tables = ("subjects", "relations", "sources", "messages", "questions", "readings",
                  "settlements", "rejections", "instructions", "params", "reads")
        sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
        counts = {name: int(n) for name, n in self.con.execute(sql).fetchall()}
        if not self.in_memory:  # reads logged in side files count as logged
            from . import read_log

            counts["reads"] += read_log.pending_rows(self.path, self.con)
        return counts

    @in_read_session
    def evidence_for_explain(self, question_id: str, at: datetime | None) -> list[dict[str, Any]]:
        """Every reading of a question with why it does or does not count (for `doxa explain`)."""
        return evidence_sql.explain_rows(self, question_id, at)

    @in_read_session
    def settlements(self, question_ids: list[str] | None = None) -> list[dict[str, Any]]:
        sql = "SELECT question, answer, settled_at, how, settled_by, note, p_before, params_version FROM settlements"
        params: list[Any] = []
        if question_ids is not None:
            sql += " WHERE list_contains(?, question)"
            params.append(list(question_ids))
        rows = self.execute(sql + " ORDER BY settled_at, question", params).fetchall()
        keys = ("question", "answer", "settled_at", "how", "by", "note", "p_before", "params_version")
        return [dict(zip(keys, r)) for r in rows]

    @in_read_session
    def rejections(self, question_id: str) -> list[dict[str, Any]]:
        rows = self.execute(
            "SELECT answer, rejected_at, rejected_by FROM rejections WHERE question = ? ORDER BY rejected_at",
            [question_id],
        ).fetchall()
        return [{"answer": a, "at": t, "by": b} for a, t, b in rows]


__all__ = ["Store", "DEFAULT_DB", "KEEP_AT_CLOSE", "default_db_path"]
