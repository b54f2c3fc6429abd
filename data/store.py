"""The doxa store: one DuckDB file (or ``:memory:``) holding every table of docs/design.md §1.

All SQL of doxa lives in this package. :class:`Store` is the only object that
touches the connection; the scorer and the fit receive numpy arrays
(:class:`doxa.data.evidence.Evidence`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

import duckdb
import numpy as np

from . import evidence_sql
from .errors import IngestError, Problem, StoreError, store_open_message
from .evidence import OPTIONS_KEY_SQL, Evidence, QuestionTable
from .params_document import ParamsDocument, ParamsDocumentError
from .sql import bind, sql_literal
from .times import from_days, to_days  # noqa: F401 - part of this module's API (__all__)

DEFAULT_DB = "doxa.duckdb"
SCHEMA_VERSION = "3"
#: Up to this many reads are logged with a literal INSERT (no Arrow, so no pandas import).
SMALL_LOG = 5000


def default_db_path() -> str:
    return os.environ.get("DOXA_DB") or DEFAULT_DB


def _schema_sql() -> str:
    return resources.files("doxa.data").joinpath("schema.sql").read_text()


#: Nothing doxa does needs a DuckDB extension; left on, opening a SQLite file as a store
#: makes DuckDB download one from the network.
CONNECT_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB file


def _not_a_store(path: str) -> str | None:
    """Why ``path`` cannot be a doxa store, judged before DuckDB touches it (None: it may be one)."""
    target = Path(path)
    if target.is_dir():
        return f"{path} is a directory, not a doxa store: give the path of a store file, e.g. --db {path}/doxa.duckdb"
    try:
        with open(target, "rb") as handle:
            head = handle.read(16)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except PermissionError:
        return f"cannot read {path}: permission denied. Check the file's permissions"
    if not head or head[8:12] == _DUCKDB_MAGIC:
        return None
    what = "a SQLite database" if head.startswith(b"SQLite format 3") else "not a DuckDB file"
    return f"{path} is not a doxa store ({what}): give the path of a doxa store, or `doxa init --db NEW_PATH`"


def connect(path: str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Every connection doxa makes: extensions never load or install themselves.

    Raises :class:`StoreError` naming the real cause (a directory, not a DuckDB file,
    a lock another process holds; see :func:`doxa.data.errors.store_open_message`).
    """
    if path != ":memory:":
        reason = _not_a_store(path)
        if reason is not None:
            raise StoreError(reason)
    try:
        return duckdb.connect(path, read_only=read_only, config=CONNECT_CONFIG)
    except (duckdb.IOException, duckdb.InvalidInputException, duckdb.SerializationException) as err:
        raise StoreError(store_open_message(path, str(err).removeprefix("IO Error: "))) from err


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
}


class Store:
    """An open doxa store. Use :meth:`open`; close with :meth:`close` or a ``with`` block."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str):
        self.con = con
        self.path = path
        self._one_thread = False

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *, read_only: bool = False, create: bool = True) -> "Store":
        path = str(path) if path is not None else default_db_path()
        if path != ":memory:" and not create and not Path(path).exists():
            raise StoreError(f"no doxa store at {path}: create one with `doxa init --db {path}`")
        con = connect(path, read_only=read_only)
        # DuckDB draws a progress bar on stdout for long queries: never mix it into doxa's output
        try:
            con.execute("SET enable_progress_bar = false")
        except duckdb.InvalidInputException:
            pass  # inside Jupyter DuckDB refuses the setting (and draws no text bar there anyway)
        store = cls(con, path)
        if not read_only:
            store._ensure_schema()
        return store

    @classmethod
    def memory(cls) -> "Store":
        return cls.open(":memory:")

    def _ensure_schema(self) -> None:
        try:
            row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except duckdb.CatalogException:
            row = None
        if row is not None:
            if row[0] != SCHEMA_VERSION:
                self._migrate(row[0])
            return
        self.con.execute("BEGIN")
        self.con.execute(_schema_sql())
        self.con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION]).fetchall()
        self._seed_prompts()
        self.con.execute("COMMIT")

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
        self.con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ ingest
    def ingest_lines(self, lines: Iterable[str], *, name: str | None = None) -> dict[str, int]:
        """Validate and ingest JSON Lines; all or nothing. Returns new rows per table.

        With ``name`` (a file's), input without a single record is refused as empty: a file
        meant to hold records that holds none is a mistake to report, not "nothing new".
        """
        from . import ingest as ingest_mod  # lazy: pydantic loads only when ingesting, not on `doxa belief`

        batch = ingest_mod.parse_lines(lines)
        if name is not None and batch.lines == 0:
            raise StoreError(f"{'standard input' if name == '-' else name} is empty: no records to ingest "
                             "(one JSON object a line; see docs/formats.md)")
        return self.ingest_batch(batch)

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
                return self.ingest_lines(handle, name=str(path))
        except FileNotFoundError:
            raise StoreError(f"no such file: {path}") from None
        except UnicodeDecodeError as err:
            raise StoreError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None

    def ingest_batch(self, batch, *, also=None) -> dict[str, int]:
        """``also(con)``, when given, runs inside the batch's transaction, after its rows are written:
        what it writes commits or rolls back with them."""
        # lazy: pyarrow loads only when writing, not on `doxa belief`'s start-up
        from . import organizer, writer

        self.use_one_thread(False)
        return writer.write_batch(self.con, batch, organizer.OPERATION_WRITERS, also=also)

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
        )

    _OPTIONS_KEY = OPTIONS_KEY_SQL

    def _all_questions(self, include_inactive: bool):
        where = "" if include_inactive else "WHERE status = 'active'"
        cols = self.execute(
            f"SELECT id, subject, kind, text, shape, hash(kind, options) AS g FROM questions {where} ORDER BY id"
        ).fetchnumpy()
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
        chosen = (["id IN (SELECT unnest(?))"] if ids else []) + (["subject IN (SELECT unnest(?))"] if subjects
                                                                   else [])
        cols = self.execute(
            f"SELECT id, subject, kind, text, shape, options, {self._OPTIONS_KEY} AS options_key, status "
            f"FROM questions WHERE {' OR '.join(chosen) or 'false'} ORDER BY id",
            [x for x in (ids, subjects) if x]).fetchnumpy()
        if not include_inactive:  # in numpy: the status test costs more in SQL than the rest of the query
            active = np.flatnonzero(np.asarray(cols["status"], dtype=object) == "active")
            cols = {name: np.asarray(values, dtype=object)[active] for name, values in cols.items()}
        keys = np.asarray(cols["options_key"], dtype=object)
        group_of = (np.unique(keys.astype(str), return_inverse=True)[1].reshape(-1) if len(keys)
                    else np.zeros(0, dtype=np.int64))
        return cols, [list(o) for o in cols["options"]], keys, group_of

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
    def latest_params(self) -> tuple[int | None, dict[str, Any] | None]:
        row = self.con.execute(
            "SELECT version, body FROM params WHERE complete ORDER BY version DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None, None
        return int(row[0]), json.loads(row[1])

    def params_versions(self) -> list[dict[str, Any]]:
        rows = self.con.execute(
            "SELECT version, created_at, complete FROM params ORDER BY version"
        ).fetchall()
        return [{"version": v, "created_at": c.isoformat(), "complete": bool(ok)} for v, c, ok in rows]

    def params_body(self, version: int) -> dict[str, Any]:
        row = self.execute("SELECT body FROM params WHERE version = ?", [version]).fetchone()
        if row is None:
            raise StoreError(f"no parameter version {version}: `doxa train` publishes versions")
        return json.loads(row[0])

    def publish_params(self, body: dict[str, Any]) -> int:
        """Write a new complete parameter version atomically; returns its number.

        The document is checked first (:class:`ParamsDocument`): a malformed one is refused
        with a :class:`ParamsDocumentError` naming the field, and nothing is written."""
        try:
            checked = ParamsDocument.from_dict(body)
        except ParamsDocumentError as err:
            raise err.within("parameter document refused, nothing published") from None
        self.con.execute("BEGIN")
        try:
            version = self.con.execute("SELECT coalesce(max(version), 0) + 1 FROM params").fetchone()[0]
            document = dict(body, format=checked.format, version=int(version))
            self.con.execute(
                "INSERT INTO params (version, created_at, complete, body) VALUES (?, now()::TIMESTAMP, true, ?)",
                [version, json.dumps(document)],
            ).fetchall()
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return int(version)

    # ------------------------------------------------------------------ reads log
    def log_reads(self, rows: list[tuple[str, datetime, list[float], str, float, int | None]]) -> None:
        """rows: (question, asked_at, probabilities in option order, top, p_top, params_version).

        A literal INSERT: any Arrow or pandas hand-over imports pandas (~0.5 s), too dear
        for the few reads of a `doxa belief`; many reads go through :meth:`log_belief_matrix`.
        """
        if not rows:
            return
        values = ",\n".join(
            f"({sql_literal(q)}, {sql_literal(at)}, now()::TIMESTAMP, "
            f"[{', '.join(repr(float(x)) for x in probs)}]::DOUBLE[], {sql_literal(top)}, "
            f"{sql_literal(float(p))}, {sql_literal(v)})" for q, at, probs, top, p, v in rows)
        self.con.execute(
            "INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version) VALUES " + values
        ).fetchall()

    def log_belief_matrix(self, question_ids: np.ndarray, asked_at: datetime, probs: np.ndarray,
                          n_options: np.ndarray, params_version: int | None) -> None:
        """Log many reads at once from the scorer's arrays (``probs`` (Q, K_max), rounded to 1e-6).

        The rows go through a temporary Parquet file that DuckDB reads natively: handing
        DuckDB any Python-side table imports pandas (~0.5 s). Each question's top answer
        is named in SQL from its options.
        """
        # lazy: pyarrow (and tempfile) stay off the start-up of `doxa belief`: only large read logs need them
        import tempfile

        import pyarrow as pa
        import pyarrow.parquet as pq

        def buffer_array(values: np.ndarray, kind) -> "pa.Array":
            return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])

        k = np.asarray(n_options, dtype=np.int64)
        mask = np.arange(probs.shape[1])[None, :] < k[:, None]
        rounded = np.round(probs, 6)
        offsets = np.zeros(len(k) + 1, dtype=np.int32)
        offsets[1:] = np.cumsum(k)
        encoded = [str(q).encode("utf-8") for q in question_ids.tolist()]
        text_offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
        text_offsets[1:] = np.cumsum([len(e) for e in encoded])
        table = pa.Table.from_arrays(
            [pa.StringArray.from_buffers(len(encoded), pa.py_buffer(text_offsets), pa.py_buffer(b"".join(encoded))),
             pa.ListArray.from_arrays(buffer_array(offsets, pa.int32()), buffer_array(rounded[mask], pa.float64())),
             buffer_array(np.argmax(rounded, axis=1).astype(np.int64), pa.int64()),
             buffer_array(rounded.max(axis=1), pa.float64())],
            names=["question", "probs", "top", "p_top"],
        )
        handle, path = tempfile.mkstemp(suffix=".parquet", prefix="doxa-reads-")
        os.close(handle)
        try:
            pq.write_table(table, path, compression="none")
            self.execute(
                f"""INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version)
                    SELECT s.question, ?, now()::TIMESTAMP, s.probs,
                           CASE WHEN s.p_top > 0 THEN q.options[s.top + 1] ELSE '' END, s.p_top, ?
                    FROM read_parquet({sql_literal(path)}) s JOIN questions q ON q.id = s.question""",
                [asked_at, params_version],
            ).fetchall()
        finally:
            os.unlink(path)

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

    def subjects(self) -> list[dict[str, Any]]:
        rows = self.con.execute("SELECT id, name, aliases FROM subjects ORDER BY id").fetchall()
        return [{"id": i, "name": n, "aliases": list(a)} for i, n, a in rows]

    def relations(self) -> list[dict[str, str]]:
        rows = self.con.execute("SELECT from_id, to_id, kind FROM relations ORDER BY 1, 2, 3").fetchall()
        return [{"from": f, "to": t, "kind": k} for f, t, k in rows]

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

    def question_ids_for_subjects(self, subjects: list[str]) -> list[str]:
        """The active questions about any of ``subjects``, in id order."""
        if not subjects:
            return []
        rows = self.execute(
            "SELECT id FROM questions WHERE subject IN (SELECT unnest(?)) AND status = 'active' ORDER BY id",
            [list(subjects)]).fetchall()
        return [r[0] for r in rows]

    def newest_evidence_time(self) -> datetime | None:
        """When the newest message was sent or the newest settlement made (None: neither yet)."""
        row = self.con.execute(
            "SELECT greatest((SELECT max(sent_at) FROM messages), (SELECT max(settled_at) FROM settlements))"
        ).fetchone()
        return row[0] if row else None

    def counts(self) -> dict[str, int]:
        tables = ("subjects", "relations", "sources", "messages", "questions", "readings",
                  "settlements", "rejections", "instructions", "params", "reads")
        sql = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
        return {name: int(n) for name, n in self.con.execute(sql).fetchall()}

    def evidence_for_explain(self, question_id: str, at: datetime | None) -> list[dict[str, Any]]:
        """Every reading of a question with why it does or does not count (for `doxa explain`)."""
        return evidence_sql.explain_rows(self, question_id, at)

    def settlements(self, question_ids: list[str] | None = None) -> list[dict[str, Any]]:
        sql = "SELECT question, answer, settled_at, how, settled_by, note, p_before, params_version FROM settlements"
        params: list[Any] = []
        if question_ids is not None:
            sql += " WHERE list_contains(?, question)"
            params.append(list(question_ids))
        rows = self.execute(sql + " ORDER BY settled_at, question", params).fetchall()
        keys = ("question", "answer", "settled_at", "how", "by", "note", "p_before", "params_version")
        return [dict(zip(keys, r)) for r in rows]

    def rejections(self, question_id: str) -> list[dict[str, Any]]:
        rows = self.execute(
            "SELECT answer, rejected_at, rejected_by FROM rejections WHERE question = ? ORDER BY rejected_at",
            [question_id],
        ).fetchall()
        return [{"answer": a, "at": t, "by": b} for a, t, b in rows]


__all__ = ["Store", "StoreError", "IngestError", "Problem", "to_days", "from_days", "default_db_path"]
