"""The fast ingest path: whole columns checked at once in DuckDB, references resolved by joins.

:mod:`doxa.data.ingest` and :mod:`doxa.data.writer` stay the contract: the pydantic
models define what a valid record is and every error message comes from them (a rule both
paths run, :mod:`doxa.data.ingest_rules`, gives its SQL predicate here and its message there). This
module only *proves* a file valid, column by column, and writes it when it can; a
file it cannot prove valid is handed back untouched (:class:`NotProved`) and the
per-line path ingests it, or explains exactly as before what is wrong. The checks
here are therefore conservative: a doubtful value (a time in a rare ISO form, a
probability sum at the edge of the tolerance, an alias added to a stored subject)
is "not proved", never "accepted".

Two phases, so that the store is held only while it must be (docs/concurrency.md):

1. **Staging, no lock.** Lines are read in blocks of :data:`BLOCK_LINES` (memory stays
   bounded; a file is cut into lines from its bytes, :func:`file_blocks`), parsed by DuckDB's
   JSON functions and checked per column, two blocks at a time (one per core, each worker in
   a DuckDB of its own); each block's messages get their fingerprints and search terms, and
   proven rows go to the workers' private DuckDB files on disk. Checks within the file (an
   id given twice differently) run over all of them at the end.
2. **Writing, in the store's write session.** The staging files are attached read-only; joins
   against the store resolve references (a reading's message and question, a message's
   source, …) and find records already stored (skipped: re-ingest is a no-op) or stored
   differently (an edit: not proved, so the per-line path refuses it with today's message).
   New rows are inserted with ``INSERT … SELECT`` in ONE transaction: a file lands whole or
   not at all.

Why one module of ~950 lines: every check here is the column-wise twin of one rule of
:mod:`doxa.data.models` or :mod:`doxa.data.writer`, and the staging tables' names and columns
are shared by both phases; split, each half would have to restate the staging layout. Which
path an input takes is decided above, in :mod:`doxa.data.ingest_files`.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import duckdb
import pyarrow as pa

from . import ingest_rules, models
from .bookkeeping import mark_evidence_changed, settle_copies, terms_sql
from .connection import CONNECT_CONFIG, remove_dead_writers_files
from .session import transaction
from .sql import sql_literal
from .text import PLAIN_TEXT, fingerprint, fingerprint_sql, normalise_sql
from .writer import look_alike_warnings

#: Staged files and folders of an ingest in the system's temporary folder: ``<prefix><pid>-…``, deleted when
#: the ingest ends; those of an ingest killed before (its pid dead) are removed by `doxa forget`.
STAGING_PREFIX = "doxa-ingest-"

#: Lines read, parsed and checked at a time: bounds the memory of an ingest of any size.
BLOCK_LINES = 100_000
#: Blocks proved at once, each by its own thread and DuckDB database (at most one per core).
STAGE_WORKERS = 2
#: A worker writes what it proved to its file once it holds this many lines (bounds its memory).
FLUSH_LINES = 250_000
#: Below this many lines the per-line path is about as fast and needs no staging file.
FAST_MIN_LINES = 5_000


class NotProved(Exception):
    """The fast checks could not prove the file valid; ``reason`` says which check (for tests and logs)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


#: A line that is only these white-space characters holds no record (as the per-line path reads it).
BLANK_LINE = r"^[ \t\n\r\x0b\x0c]*$"
#: A comma before a closing bracket: DuckDB's parser accepts it, the per-line one does not.
TRAILING_COMMA = r",[ \t\r\n]*[}\]]"

_NUMBER_TYPES = "('DOUBLE', 'UBIGINT', 'BIGINT')"
_INT_TYPES = "('UBIGINT', 'BIGINT')"


def _names_ok(types: str, strings: str, name_ok: Callable[[str], str]) -> str:
    return (f"coalesce(list_bool_and(list_transform({types}, lambda x: x = 'VARCHAR')), true) "
            f"AND coalesce(list_bool_and(list_transform({strings}, lambda x: {name_ok('x')})), true)")


# ------------------------------------------------------------------------ field kinds
@dataclass(frozen=True)
class Field:
    """One field of a record type: its JSON key, the stage column(s) it gives and how it is proved."""

    key: str
    kind: str
    column: str = ""
    default: object = None
    values: tuple = ()

    @property
    def name(self) -> str:
        return self.column or self.key


#: The rules of :mod:`doxa.data.ingest_rules` a field kind's proof runs wherever the kind is, stated
#: once: :func:`_field_sql` runs their SQL predicates (a name kind's on every name it holds, a list's
#: and ``rests_on``'s too; a time kind's on the moment it reads) and :func:`_check_specs` holds every
#: rule's fields to them. A field's proof runs every other rule that holds it
#: (:func:`doxa.data.ingest_rules.rules_for`: a number's range, a mass, a blank text, a source's '/')
#: on its value as well; the sum of a reading's masses is proved with the reading (:meth:`Stage._store`).
_NAME, _ID, _TEXT, _TIME = ingest_rules.NAME, ingest_rules.ID, ingest_rules.TEXT, ingest_rules.TIME
KIND_RULES: dict[str, tuple[ingest_rules.Rule, ...]] = {
    "id": (_ID,), "name": (_NAME,), "name_opt": (_NAME,), "name_default": (_NAME,), "reader_version": (_NAME,),
    "names": (_NAME,), "names_default": (_NAME,), "names_opt": (_NAME,), "rests_on": (_NAME,),
    "text": (_TEXT,), "text_opt": (_TEXT,), "time": (_TIME,), "time_opt": (_TIME,),
}


def _field_sql(f: Field, v: str, t: str, s: str, c: str | None = None,
               held: tuple[ingest_rules.Rule, ...] = ()) -> tuple[str, str]:
    """(value SQL, proof SQL) of field ``f``: ``v`` its JSON value (NULL when absent), ``t`` its JSON
    type, ``s`` its string; ``c``, where the proof may use it, the value already computed (a column:
    a time's value costs a third of its proof, and DuckDB would compute it again). The proof runs the
    rules of its kind (:data:`KIND_RULES`) and ``held``, the other rules that hold the field, on its
    value wherever it has one."""
    value, proof = _kind_sql(f, v, t, s, c)
    if held:
        x = c or value
        proof = f"({proof} AND ({x} IS NULL OR ({' AND '.join(rule.sql(x) for rule in held)})))"
    return value, proof


def _kind_sql(f: Field, v: str, t: str, s: str, c: str | None) -> tuple[str, str]:
    """(value SQL, proof SQL) of field ``f`` by its kind (:func:`_field_sql`)."""
    absent = f"{v} IS NULL"
    null = f"({absent} OR {t} = 'NULL')"
    kind = f.kind
    rules = KIND_RULES.get(kind, ())

    def ok(x: str) -> str:  # the kind's rules on a value x
        return " AND ".join(rule.sql(x) for rule in rules)

    if kind in ("name", "id", "text"):
        return s, f"({t} = 'VARCHAR' AND {ok(s)})"
    if kind == "ref":  # must equal a stored or proven id or option (checked by joins): that proves it a name
        return s, f"({t} = 'VARCHAR')"
    if kind == "ref_opt":
        return f"CASE WHEN {t} = 'VARCHAR' THEN {s} END", f"({null} OR {t} = 'VARCHAR')"
    if kind in ("name_opt", "text_opt"):
        return f"CASE WHEN {t} = 'VARCHAR' THEN {s} END", f"({null} OR ({t} = 'VARCHAR' AND {ok(s)}))"
    if kind == "name_default":
        return (f"coalesce({s}, {sql_literal(f.default)})",
                f"({absent} OR ({t} = 'VARCHAR' AND {ok(s)}))")
    if kind == "reader_version":
        return f"coalesce({s}, '')", f"({absent} OR ({t} = 'VARCHAR' AND ({s} = '' OR {ok(s)})))"
    if kind in ("time", "time_opt"):  # the time rule reads the moment, then holds it
        (rule,) = rules
        value = rule.read(s)
        if kind == "time_opt":
            value = f"CASE WHEN {t} = 'VARCHAR' THEN {value} END"  # equal to the time wherever it is a string
        proof = f"({t} = 'VARCHAR' AND {ok(c or value)})"
        return value, (f"({null} OR {proof})" if kind == "time_opt" else proof)
    if kind == "mass":  # a reading's unclear, unrelated, one_off, unlisted, changed: a JSON number, 0 when absent
        value = f"coalesce(CASE WHEN {t} IN {_NUMBER_TYPES} THEN TRY_CAST({v} AS DOUBLE) END, 0.0)"
        return value, f"({absent} OR {t} IN {_NUMBER_TYPES})"
    if kind in ("number_opt", "int_opt"):  # trust, p_before; params_version, instructions_version: a JSON
        # number (an integer, in a schema INTEGER) or null
        types, cast = (_NUMBER_TYPES, "DOUBLE") if kind == "number_opt" else (_INT_TYPES, "INTEGER")
        value = f"CASE WHEN {t} IN {types} THEN TRY_CAST({v} AS {cast}) END"
        return value, f"({null} OR ({t} IN {types} AND {c or value} IS NOT NULL))"
    if kind == "closed":  # a question's "open": only a closed question (absent or false) is proved here; an
        # open one (its options grow, its readings name some of them) goes the per-line way
        return f"coalesce({t} = 'BOOLEAN' AND {s} = 'true', false)", f"({absent} OR ({t} = 'BOOLEAN' AND {s} = 'false'))"
    if kind == "literal":
        allowed = ", ".join(sql_literal(x) for x in f.values)
        if f.default is not None:
            return (f"coalesce({s}, {sql_literal(f.default)})",
                    f"({absent} OR ({t} = 'VARCHAR' AND {s} IN ({allowed})))")
        return s, f"({t} = 'VARCHAR' AND {s} IN ({allowed}))"
    if kind in ("names", "names_default", "names_opt"):
        types, strings = f"json_type({v}, '$[*]')", f"json_extract_string({v}, '$[*]')"
        listed = f"({t} = 'ARRAY' AND {_names_ok(types, strings, ok)})"
        value = f"CASE WHEN {t} = 'ARRAY' THEN {strings} END"
        if kind == "names":
            return value, listed
        if kind == "names_default":
            return f"coalesce({value}, []::VARCHAR[])", f"({absent} OR {listed})"
        return value, f"({null} OR {listed})"
    if kind == "probs":  # kept as JSON: converted to a map, and its values checked, once the block is proved
        keys, types = f"json_keys({v})", f"json_type({v}, '$.*')"
        proof = (f"({t} = 'OBJECT' AND len(list_distinct({keys})) = len({keys}) "
                 # the keys must equal the question's options (a join), which proves them names
                 f"AND coalesce(list_bool_and(list_transform({types}, lambda x: x IN {_NUMBER_TYPES})), true))")
        return f"{v}", proof
    if kind == "rests_on":
        keys = f"json_keys({v})"
        q, a = f"json_extract_string({v}, '$.question')", f"json_extract_string({v}, '$.answer')"
        proof = (f"({null} OR ({t} = 'OBJECT' AND len({keys}) = 2 AND list_sort({keys}) = ['answer', 'question'] "
                 f"AND json_type({v}, '$.question') = 'VARCHAR' AND json_type({v}, '$.answer') = 'VARCHAR' "
                 f"AND {ok(q)} AND {ok(a)}))")
        return f"CASE WHEN {t} = 'OBJECT' THEN {q} END", proof  # second column added below
    raise ValueError(f"unknown field kind {kind!r}")


#: Every core record type's fields (docs/formats.md, :mod:`doxa.data.models`), as the fast path
#: proves them. :func:`_check_specs` holds this to the models: a field added there and not here
#: makes every file with that record type go the per-line way, never pass unchecked.
SPECS: dict[str, tuple[Field, ...]] = {
    "subject": (Field("id", "id"), Field("name", "name"), Field("aliases", "names_default")),
    "relation": (Field("from", "ref", "from_id"), Field("to", "ref", "to_id"), Field("kind", "name")),
    "source": (Field("id", "id"), Field("layers", "names"), Field("trust", "number_opt")),
    "question": (Field("id", "id"), Field("subject", "ref_opt"), Field("kind", "name"),
                 Field("text", "text"), Field("shape", "literal", default="choice", values=models.SHAPES),
                 Field("options", "names_opt"), Field("created_by", "name_opt"),
                 Field("instructions_version", "int_opt"), Field("open", "closed")),
    "message": (Field("id", "id"), Field("source", "ref"), Field("sent_at", "time"),
                Field("received_at", "time_opt"), Field("text", "text")),
    "reading": (Field("message", "ref"), Field("question", "ref"), Field("reader", "name"),
                Field("reader_version", "reader_version"), Field("probs", "probs", "probs_json"),
                Field("unclear", "mass"), Field("unrelated", "mass"), Field("one_off", "mass"),
                Field("unlisted", "mass"), Field("changed", "mass")),
    "settlement": (Field("question", "ref"), Field("answer", "ref"), Field("at", "time", "settled_at"),
                   Field("how", "literal", values=models.SETTLEMENT_HOWS),
                   Field("by", "name_default", "settled_by", default="user"), Field("note", "text_opt"),
                   Field("p_before", "number_opt"), Field("params_version", "int_opt")),
    "rejection": (Field("question", "ref"), Field("answer", "ref"), Field("at", "time", "rejected_at"),
                  Field("by", "name_default", "rejected_by", default="user")),
    "instruction": (Field("id", "id"), Field("subject", "ref_opt"), Field("text", "text"),
                    Field("at", "time", "given_at"), Field("by", "name_default", "given_by", default="user"),
                    Field("rests_on", "rests_on", "rests_on_question")),
}


def _check_specs() -> None:
    for type_name, fields in SPECS.items():
        model = models.RECORD_TYPES[type_name]
        declared = {f.alias or n for n, f in model.model_fields.items()} - {"type"}
        assert declared == {f.key for f in fields}, (type_name, declared ^ {f.key for f in fields})
    # every rule is proved here by its own SQL predicate: a rule of some kinds (KIND_RULES) on fields of
    # those kinds; any other on the fields it holds (_field_sql), the sum with the reading (_store)
    kinds = {rule.name: {kind for kind, rules in KIND_RULES.items() if rule in rules}
             for rule in ingest_rules.RULES.values()}
    for rule in ingest_rules.RULES.values():
        for type_name, key in rule.fields:
            (field,) = [f for f in SPECS[type_name] if f.key == key]
            assert not kinds[rule.name] or field.kind in kinds[rule.name], (rule.name, type_name, key)
    # and a kind's rule names every field of that kind it holds (the tests break each), but the name
    # rules, which hold every name wherever it is
    for type_name, fields in SPECS.items():
        for f in fields:
            for rule in KIND_RULES.get(f.kind, ()):
                assert rule.runs == "name" or (type_name, f.key) in rule.fields, (rule.name, type_name, f.key)


_check_specs()


def json_type_sql(v: str) -> str:
    """The JSON type of ``v``, a value as ``json_extract`` writes it (minified), read from its first
    character: a twentieth of what ``json_type``, which parses it again, costs. Numbers are
    ``'DOUBLE'`` when written with a fraction or exponent, else ``'BIGINT'`` (``json_type`` says
    DOUBLE for integers past 64 bits too: a cast to INTEGER or a bound on a DOUBLE refuses those
    either way; tests/test_fast_ingest.py holds the two to the same verdicts)."""
    return (f"CASE WHEN {v} IS NULL THEN NULL ELSE CASE left({v}, 1) WHEN '\"' THEN 'VARCHAR' WHEN '{{' THEN 'OBJECT' "
            f"WHEN '[' THEN 'ARRAY' WHEN 'n' THEN 'NULL' WHEN 't' THEN 'BOOLEAN' WHEN 'f' THEN 'BOOLEAN' "
            f"ELSE CASE WHEN contains({v}, '.') OR contains({v}, 'e') OR contains({v}, 'E') THEN 'DOUBLE' "
            f"ELSE 'BIGINT' END END END")


def _type_select(type_name: str) -> str:
    """SELECT of one record type's stage columns and its proof ``ok``, from ``_parsed`` (line, j, type)."""
    fields = SPECS[type_name]
    paths = "[" + ", ".join(sql_literal(f"$.{f.key}") for f in fields) + "]"
    inner = [f"v[{i}] AS v{i}" for i in range(1, len(fields) + 1)]
    # every key known and none twice: the keys counted equal "type" and the known fields found (each
    # found field is one key, so more keys means an unknown or a repeated one), at a fifth of the cost
    # of comparing lists
    found = " + ".join(f"(v{i} IS NOT NULL)::INTEGER" for i in range(1, len(fields) + 1))
    columns, names, proofs = [], [], [f"len(k) = 1 + {found}"]
    for i, f in enumerate(fields, start=1):
        own = KIND_RULES.get(f.kind, ())
        held = tuple(rule for rule in ingest_rules.rules_for(type_name, f.key) if rule not in own)
        value, proof = _field_sql(f, f"v{i}", f"t{i}", f"s{i}", f.name, held)
        columns.append(f"{value} AS {f.name}")
        names.append(f.name)
        if f.kind == "rests_on":
            columns.append(f"CASE WHEN t{i} = 'OBJECT' THEN json_extract_string(v{i}, '$.answer') END "
                           "AS rests_on_answer")
            names.append("rests_on_answer")
        proofs.append(proof)
    middle_cols = ", ".join(f"v{i}, {json_type_sql(f'v{i}')} AS t{i}, json_extract_string(v{i}, '$') AS s{i}"
                            for i in range(1, len(fields) + 1))
    raw_cols = ", ".join(f"v{i}, t{i}, s{i}" for i in range(1, len(fields) + 1))
    # innermost: one extraction of every field; then each field's JSON type, string and value; outermost
    # the proof, which reads the values computed (a field's name) instead of computing them again
    return (f"SELECT line, {', '.join(names)}, coalesce({' AND '.join(f'({p})' for p in proofs)}, false) AS ok "
            f"FROM (SELECT line, k, {raw_cols}, {', '.join(columns)} "
            f"FROM (SELECT line, k, {middle_cols} FROM (SELECT line, json_keys(j) AS k, {', '.join(inner)} "
            f"FROM (SELECT line, j, json_extract(j, {paths}) AS v FROM _parsed WHERE type = {sql_literal(type_name)}))))")


# ------------------------------------------------------------------------ staging
class _Shard:
    """One worker's share of a stage: rows proved in a private in-memory DuckDB on one thread,
    written out in bulk to its own file every :data:`FLUSH_LINES` lines (so memory stays bounded).

    Separate databases, not cursors of one: on two cores, two blocks proved on two cursors of
    one file take half as long again as on two in-memory databases of one thread each, which
    take about what one block alone takes (docs/measurements/2026-12-code-choices.md). Shared files serialise their appends; a second thread per query only
    competes with the other worker."""

    def __init__(self, path: str):
        self.path = path
        self.pending = 0
        self.con = duckdb.connect(config=CONNECT_CONFIG)
        for setting in ("threads = 1", "enable_progress_bar = false", "preserve_insertion_order = false",
                        # a stage lives for one ingest: compressing what is read back once costs more than it saves
                        "force_compression = 'uncompressed'"):
            self.con.execute(f"SET {setting}")
        self.con.execute(f"ATTACH {sql_literal(path)} AS out")
        for name, columns in STAGE_TABLES.items():
            self.con.execute(f"CREATE TABLE out.st_{name} ({columns})")
        self._fresh_tables()

    def _fresh_tables(self) -> None:
        for name, columns in STAGE_TABLES.items():
            self.con.execute(f"DROP TABLE IF EXISTS memory.st_{name}")
            self.con.execute(f"CREATE TABLE memory.st_{name} ({columns})")

    def flush(self) -> None:
        """Move the rows held in memory to the file, in bulk (written straight to it, past the log)."""
        for name in STAGE_TABLES:
            self.con.execute(f"INSERT INTO out.st_{name} SELECT * FROM memory.st_{name}")
        self._fresh_tables()  # dropped, not emptied: an in-memory table gives its memory back when dropped
        self.pending = 0

    def close(self, keep: bool) -> None:
        if self.con is None:
            return
        try:
            if keep:
                self.flush()
                self.con.execute("CHECKPOINT out")
                self.con.execute("DETACH out")
        finally:
            self.con.close()
            self.con = None


class Stage:
    """The proven rows of one file, in private DuckDB files (removed by :meth:`close`).

    Blocks are proved by up to :data:`STAGE_WORKERS` threads at once, each with a
    :class:`_Shard` of its own; one block is one DuckDB row group, which one query works
    through on one core, so proving two blocks at a time is what puts a second core to work.
    The shards' files are read together through views (:func:`attach_stage`).
    """

    def __init__(self, shards: int = 1):
        # the pid in the name: what a killed ingest left behind (message text) is found and removed
        # here, by the next ingest that stages, and by `doxa forget` (data/erasure.py)
        remove_dead_writers_files(tempfile.gettempdir(), STAGING_PREFIX)
        self.folder = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-")
        self.shards: list[_Shard] = []
        try:
            for i in range(shards):
                self.shards.append(_Shard(os.path.join(self.folder, f"stage-{i}.duckdb")))
        except BaseException:
            self.close()
            raise
        self.paths = [shard.path for shard in self.shards]
        self.lines = 0  # non-blank lines
        self.counts: dict[str, int] = {}
        #: record types whose every key the file gives once (found by :meth:`finish`): written without
        #: the ``DISTINCT ON`` that picks one of several equal rows
        self.unique: set[str] = set()
        self._tally = threading.Lock()

    def close(self) -> None:
        for shard in self.shards:
            shard.close(keep=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def add_block(self, first_line: int, raw: pa.Array, shard: "_Shard | None" = None) -> None:
        """Parse and prove one block of lines into ``shard`` (the first by default); raises
        :class:`NotProved` at the first doubt."""
        shard = shard if shard is not None else self.shards[0]
        con = shard.con
        con.register("_block", pa.table({"line": pa.array(range(first_line, first_line + len(raw)), pa.int64()),
                                         "raw": raw}))
        known = ", ".join(sql_literal(t) for t in SPECS)
        try:
            # one pass over the block: `->>` of a key is NULL unless the line is an object, and only a
            # JSON string can give a known type's name. The JSON functions below parse the text itself
            # (a cast to JSON would only copy it); a regular expression finds blank lines at a tenth of
            # what trim() costs
            # (no json_valid: `->>` parses the line with the same parser and fails where it would say no)
            con.execute(f"""CREATE OR REPLACE TEMP TABLE _parsed AS
                SELECT line, raw AS j, CASE WHEN plain THEN raw->>'$.type' END AS type, plain FROM (
                    SELECT line, raw, NOT regexp_matches(raw, {sql_literal(TRAILING_COMMA)}) AS plain
                    FROM _block WHERE NOT regexp_matches(raw, {sql_literal(BLANK_LINE)}))""")
        except duckdb.Error as err:
            raise NotProved(f"a line of the block from line {first_line} is not JSON: {err}") from None
        finally:
            con.unregister("_block")
        row = con.execute("SELECT count(*), min(line) FILTER (NOT plain) FROM _parsed").fetchone()
        if row[1] is not None:
            raise NotProved(f"line {row[1]} is not plain JSON")
        with self._tally:
            self.lines += row[0]
        other = con.execute(f"SELECT min(line) FROM _parsed WHERE type IS NULL OR type NOT IN ({known})").fetchone()[0]
        if other is not None:
            raise NotProved(f"line {other} is no core record")
        present = [t for (t,) in con.execute("SELECT DISTINCT type FROM _parsed").fetchall()]
        for type_name in present:
            con.execute(f"CREATE OR REPLACE TEMP TABLE _typed AS {_type_select(type_name)}")
            bad = con.execute("SELECT min(line) FROM _typed WHERE NOT ok").fetchone()[0]
            if bad is not None:
                raise NotProved(f"line {bad} ({type_name}) is not proved valid")
            self._store(con, type_name)
        con.execute("DROP TABLE _parsed")
        shard.pending += len(raw)
        if shard.pending >= FLUSH_LINES:
            shard.flush()

    def _store(self, con, type_name: str) -> None:
        select = "* EXCLUDE (ok)"
        if type_name == "reading":
            select = (f"* EXCLUDE (ok, probs_json), json_transform(probs_json, '\"MAP(VARCHAR, DOUBLE)\"') AS probs")
            con.execute(f"CREATE OR REPLACE TEMP TABLE _typed AS SELECT {select} FROM _typed")
            # each probability held to the mass rule, and the masses together to the sum rule, checked on
            # the very numbers stored (none: no options); ingest_rules.reading_masses' order
            each = f"list_bool_and(list_transform(map_values(probs), lambda x: {ingest_rules.MASS.sql('x')}))"
            masses = "list_concat(map_values(probs), [unlisted, unclear, unrelated])"
            bad = con.execute(f"SELECT min(line) FROM _typed WHERE NOT {ingest_rules.SUM.sql(masses)} "
                              f"OR NOT {each}").fetchone()[0]
            if bad is not None:
                raise NotProved(f"line {bad}: reading masses not proved to sum to 1")
            # a reading with mass on a value not listed reads an open question: the per-line path's
            bad = con.execute("SELECT min(line) FROM _typed WHERE unlisted <> 0").fetchone()[0]
            if bad is not None:
                raise NotProved(f"line {bad}: a reading with unlisted mass")
            select = "*"
        elif type_name in ("question", "source"):
            self._type_rules(con, type_name)
        con.execute(f"INSERT INTO st_{type_name} BY NAME SELECT {select} FROM _typed")
        if type_name == "message":  # cut into search terms here, in parallel and without the store's lock
            con.execute(f"INSERT INTO st_message_terms "
                        f"{terms_sql('SELECT line, id, text FROM _typed', 'line, id')}")
            self._fingerprints(con)
        added = con.execute("SELECT count(*) FROM _typed").fetchone()[0]
        with self._tally:
            self.counts[type_name] = self.counts.get(type_name, 0) + added

    # -------------------------------------------------------------- checks within the file
    def finish(self) -> None:
        """Checks that need the whole file; the shards' files are complete and closed afterwards."""
        with ThreadPoolExecutor(max_workers=len(self.shards)) as pool:  # each writes its own file
            for done in [pool.submit(shard.close, True) for shard in self.shards]:
                done.result()
        con = duckdb.connect(config=CONNECT_CONFIG)
        try:
            attach_stage(con, self.paths)
            for type_name, key in _KEYS.items():
                # a key given twice must be given identically (the per-line path names both lines); most
                # files give each key once, which a plain count shows at a fraction of the full comparison
                repeated = con.execute(f"SELECT count(*) FROM (SELECT {key} FROM st_{type_name} GROUP BY {key} "
                                       "HAVING count(*) > 1)").fetchone()[0]
                if not repeated:
                    self.unique.add(type_name)
                    continue
                columns = [c for c, _ in _EMPTY_COLUMNS[type_name] if c != "line"]
                row = con.execute(f"""SELECT count(*) FROM (SELECT {key} FROM st_{type_name} GROUP BY {key}
                                      HAVING count(DISTINCT row({', '.join(columns)})) > 1)""").fetchone()
                if row[0]:
                    raise NotProved(f"a {type_name} is given twice differently")
            if con.execute("SELECT count(*) - count(DISTINCT id) FROM st_subject").fetchone()[0]:
                raise NotProved("a subject is given twice")  # the subject rule's merging is the per-line path's
        finally:
            con.close()

    @staticmethod
    def _type_rules(con, type_name: str) -> None:
        """The models' validators that span fields (question options, a source's layers), on one block's
        rows (``_typed``)."""
        if type_name == "question":
            bad = con.execute("""SELECT min(line) FROM _typed WHERE
                CASE WHEN shape = 'yes_no' THEN options IS NOT NULL AND list_sort(options) <> ['no', 'yes']
                     ELSE options IS NULL OR len(options) < 2 OR len(list_distinct(options)) <> len(options) END
            """).fetchone()[0]
            if bad is not None:
                raise NotProved(f"line {bad}: question options")
            con.execute("UPDATE _typed SET options = ['yes', 'no'] WHERE options IS NULL")
            return
        # at least one layer (no '/' in it or the id: the source rules, proved with the fields); the first
        # decides is_assistant, which SQL computes only where it agrees with Python
        # (ingest_rules.IS_ASSISTANT_SQL_AGREES); a first layer of other characters goes the per-line way
        bad = con.execute(f"""SELECT min(line) FROM _typed WHERE len(layers) = 0
                              OR NOT {ingest_rules.IS_ASSISTANT_SQL_AGREES}""").fetchone()[0]
        if bad is not None:
            raise NotProved(f"line {bad}: source id or layers")

    @staticmethod
    def _fingerprints(con) -> None:
        """The fingerprints (:func:`doxa.data.text.fingerprint`) of one block's messages (``_typed``): in
        SQL for plain texts, in Python for the others. A message given twice gets two equal rows, which
        the write's ``DISTINCT ON (id)`` makes one."""
        # the normal form computed once, in the inner select
        con.execute(f"""INSERT INTO st_message_fp
            SELECT id, {fingerprint_sql('n', 'source')} AS fingerprint
            FROM (SELECT id, source, {normalise_sql('text')} AS n FROM _typed
                  WHERE regexp_matches(text, {sql_literal(PLAIN_TEXT)}))""")
        others = con.execute(f"""SELECT id, source, text FROM _typed
                                 WHERE NOT regexp_matches(text, {sql_literal(PLAIN_TEXT)})""").to_arrow_table()
        if others.num_rows:
            # few in practice (non-ASCII texts): Python's regexes decide what \\s and lower() mean
            prints = [fingerprint(t, s) for t, s in zip(others["text"].to_pylist(), others["source"].to_pylist())]
            con.register("_prints", pa.table({"id": others["id"], "fingerprint": pa.array(prints, pa.string())}))
            con.execute("INSERT INTO st_message_fp SELECT id, fingerprint FROM _prints")
            con.unregister("_prints")


def attach_stage(con, paths: list[str]) -> None:
    """Attach a stage's files to ``con`` read-only, and name each table's rows over all of them
    ``st_<table>`` (temporary views)."""
    for i, path in enumerate(paths):
        con.execute(f"ATTACH {sql_literal(path)} AS doxa_stage_{i} (READ_ONLY)")
    for name in STAGE_TABLES:
        union = " UNION ALL ".join(f"SELECT * FROM doxa_stage_{i}.st_{name}" for i in range(len(paths)))
        con.execute(f"CREATE OR REPLACE TEMP VIEW st_{name} AS {union}")


def detach_stage(con, paths: list[str]) -> None:
    for name in STAGE_TABLES:
        con.execute(f"DROP VIEW IF EXISTS temp.st_{name}")
    for i in range(len(paths)):
        con.execute(f"DETACH DATABASE IF EXISTS doxa_stage_{i}")


#: Stage columns per type, in order (line first), with their SQL types: empty tables of types a file lacks.
_EMPTY_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "subject": [("line", "BIGINT"), ("id", "VARCHAR"), ("name", "VARCHAR"), ("aliases", "VARCHAR[]")],
    "relation": [("line", "BIGINT"), ("from_id", "VARCHAR"), ("to_id", "VARCHAR"), ("kind", "VARCHAR")],
    "source": [("line", "BIGINT"), ("id", "VARCHAR"), ("layers", "VARCHAR[]"), ("trust", "DOUBLE")],
    "question": [("line", "BIGINT"), ("id", "VARCHAR"), ("subject", "VARCHAR"), ("kind", "VARCHAR"),
                 ("text", "VARCHAR"), ("shape", "VARCHAR"), ("options", "VARCHAR[]"), ("created_by", "VARCHAR"),
                 ("instructions_version", "INTEGER"), ("open", "BOOLEAN")],
    "message": [("line", "BIGINT"), ("id", "VARCHAR"), ("source", "VARCHAR"), ("sent_at", "TIMESTAMP"),
                ("received_at", "TIMESTAMP"), ("text", "VARCHAR")],
    "reading": [("line", "BIGINT"), ("message", "VARCHAR"), ("question", "VARCHAR"), ("reader", "VARCHAR"),
                ("reader_version", "VARCHAR"), ("unclear", "DOUBLE"), ("unrelated", "DOUBLE"),
                ("one_off", "DOUBLE"), ("unlisted", "DOUBLE"), ("changed", "DOUBLE"), ("probs", "MAP(VARCHAR, DOUBLE)")],
    "settlement": [("line", "BIGINT"), ("question", "VARCHAR"), ("answer", "VARCHAR"), ("settled_at", "TIMESTAMP"),
                   ("how", "VARCHAR"), ("settled_by", "VARCHAR"), ("note", "VARCHAR"), ("p_before", "DOUBLE"),
                   ("params_version", "INTEGER")],
    "rejection": [("line", "BIGINT"), ("question", "VARCHAR"), ("answer", "VARCHAR"), ("rejected_at", "TIMESTAMP"),
                  ("rejected_by", "VARCHAR")],
    "instruction": [("line", "BIGINT"), ("id", "VARCHAR"), ("subject", "VARCHAR"), ("text", "VARCHAR"),
                    ("given_at", "TIMESTAMP"), ("given_by", "VARCHAR"), ("rests_on_question", "VARCHAR"),
                    ("rests_on_answer", "VARCHAR")],
}

#: The key each type is deduplicated by within a file (as :func:`doxa.data.writer.write_batch` does).
_KEYS = {"source": "id", "question": "id", "message": "id", "reading": "message, question, reader",
         "instruction": "id", "settlement": "question, settled_at, answer",
         "rejection": "question, answer, rejected_at"}

#: Every table of a stage, with its columns: one per record type, the messages' search terms (by
#: line) and their fingerprints.
STAGE_TABLES = {**{t: ", ".join(f"{c} {sql_type}" for c, sql_type in _EMPTY_COLUMNS[t]) for t in SPECS},
                "message_terms": "line BIGINT, id VARCHAR, term VARCHAR, tf INTEGER",
                "message_fp": "id VARCHAR, fingerprint VARCHAR"}


# ------------------------------------------------------------------------ reading the input
class NotPlainBytes(Exception):
    """A file's bytes are not what :func:`file_blocks` reads exactly as text mode does (a lone carriage
    return, which text mode takes for a line break, or bytes that are not UTF-8): read its lines."""


#: A file is read this many bytes at a time by :func:`file_blocks`.
CHUNK_BYTES = 16 << 20


def file_blocks(path) -> Iterator[pa.Array]:
    """The lines of a UTF-8 file, as Arrow blocks of at most :data:`BLOCK_LINES`, cut from its bytes
    at line feeds (half the cost of Python's line iteration, and no Python string per line).

    The same lines as ``open(path, encoding="utf-8")`` gives, each with its line feed: a carriage
    return before a line feed is dropped, as text mode drops it; any other carriage return, or
    bytes that are not UTF-8, raise :class:`NotPlainBytes`."""
    import numpy as np

    def cut(body: bytes) -> Iterator[pa.Array]:
        if b"\r" in body:
            body = body.replace(b"\r\n", b"\n")
            if b"\r" in body:
                raise NotPlainBytes("a carriage return that is not part of a line break")
        ends = np.flatnonzero(np.frombuffer(body, np.uint8) == 10) + 1
        if not len(ends) or ends[-1] != len(body):
            ends = np.append(ends, len(body))  # the last line, without a line feed
        offsets = np.concatenate(([0], ends)).astype(np.int32)
        whole = pa.Array.from_buffers(pa.binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(body)])
        try:
            whole = whole.cast(pa.string())  # checks the bytes are UTF-8
        except pa.ArrowInvalid as err:
            raise NotPlainBytes(str(err)) from None
        for start in range(0, len(whole), BLOCK_LINES):
            yield whole.slice(start, BLOCK_LINES)

    with open(path, "rb") as handle:
        carry = b""
        while chunk := handle.read(CHUNK_BYTES):
            data = carry + chunk if carry else chunk
            end = data.rfind(b"\n") + 1
            carry = data[end:]
            if end:
                yield from cut(data[:end])
        if carry:
            yield from cut(carry)


def _blocks_of(lines: Iterable[str], spool=None) -> Iterator[pa.Array]:
    iterator = iter(lines)
    while True:
        block = list(itertools.islice(iterator, BLOCK_LINES))
        if not block:
            return
        raw = pa.array(block, pa.string())
        del block
        if spool is not None:
            spool(raw)
        yield raw


def stage_lines(lines: Iterable[str], spool=None) -> Stage:
    """Stage ``lines`` block by block (raises :class:`NotProved`; the stage is closed then)."""
    return stage_blocks(_blocks_of(lines, spool))


def stage_blocks(blocks: Iterable[pa.Array]) -> Stage:
    """Stage Arrow blocks of lines (raises :class:`NotProved`, or what reading ``blocks`` raises; the
    stage is closed then).

    This thread reads the next block while the workers prove the ones before (DuckDB lets go
    of Python while it works); at most one block waits per worker, so memory stays bounded.
    The first doubt of any block ends the staging."""
    workers = max(1, min(STAGE_WORKERS, os.cpu_count() or 1))
    stage = Stage(workers)
    free: queue.SimpleQueue = queue.SimpleQueue()
    for shard in stage.shards:
        free.put(shard)

    def prove(first_line: int, raw: pa.Array) -> None:
        shard = free.get()
        try:
            stage.add_block(first_line, raw, shard)
        finally:
            free.put(shard)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doxa-stage")
    try:
        pending: list[Future] = []
        number = 1
        for raw in blocks:
            pending.append(pool.submit(prove, number, raw))
            number += len(raw)
            while len(pending) > workers or (pending and pending[0].done()):
                pending.pop(0).result()  # raises the block's NotProved here
        for future in pending:
            future.result()
        pool.shutdown(wait=True)
        if stage.lines == 0:
            raise NotProved("no records")
        stage.finish()
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        stage.close()
        raise
    return stage


# ------------------------------------------------------------------------ writing
def _first(con, sql: str, reason: str) -> None:
    row = con.execute(sql).fetchone()
    if row is not None and row[0] is not None:
        raise NotProved(f"line {row[0]}: {reason}")


def _once(unique: set[str]):
    """``once(type, key)``: the ``DISTINCT ON (key)`` that keeps one of a key's equal rows, or nothing
    where the file gives every key of that type once (``unique``)."""
    return lambda type_name, key: "" if type_name in unique else f"DISTINCT ON ({key})"


def _check_against_store(con, unique: set[str]) -> None:
    """Every reference and edit rule of :func:`doxa.data.writer.write_batch`, as joins (raises NotProved)."""
    # subjects: one stored already must be given with its name and exactly its aliases (adding is the
    # per-line path's subject rule)
    _first(con, """SELECT min(f.line) FROM st_subject f JOIN subjects s USING (id)
                   WHERE f.name <> s.name OR list_sort(list_distinct(f.aliases)) <> list_sort(list_distinct(s.aliases))""",
           "subject differs from the stored one")
    con.execute("""CREATE OR REPLACE TEMP TABLE _fi_subjects AS
                   SELECT id FROM st_subject UNION SELECT id FROM subjects
                   WHERE id IN (SELECT subject FROM st_question UNION SELECT from_id FROM st_relation
                                UNION SELECT to_id FROM st_relation UNION SELECT subject FROM st_instruction)""")
    for table, column in (("st_question", "subject"), ("st_relation", "from_id"), ("st_relation", "to_id"),
                          ("st_instruction", "subject")):
        _first(con, f"""SELECT min(line) FROM {table} WHERE {column} IS NOT NULL
                        AND {column} NOT IN (SELECT id FROM _fi_subjects)""", f"unknown subject in {table}")
    _first(con, """SELECT min(f.line) FROM st_source f JOIN sources s USING (id)
                   WHERE f.layers <> s.layers OR f.trust IS DISTINCT FROM s.trust""", "source edited")
    _first(con, """SELECT min(line) FROM st_message WHERE source NOT IN
                       (SELECT id FROM st_source UNION ALL SELECT id FROM sources)""", "unknown source")
    _first(con, """SELECT min(f.line) FROM st_question f JOIN questions q USING (id)
                   WHERE f.options <> q.options OR f.kind <> q.kind OR f.shape <> q.shape
                      OR f.subject IS DISTINCT FROM q.subject OR f.text <> q.text""", "question edited")
    _first(con, """SELECT min(f.line) FROM st_message f JOIN messages m USING (id)
                   WHERE f.source <> m.source OR f.sent_at <> m.sent_at OR f.text <> m.text""", "message edited")
    _first(con, """SELECT min(f.line) FROM st_instruction f JOIN instructions i USING (id)
                   WHERE f.subject IS DISTINCT FROM i.subject OR f.text <> i.text OR f.given_at <> i.given_at
                      OR f.rests_on_question IS DISTINCT FROM i.rests_on_question
                      OR f.rests_on_answer IS DISTINCT FROM i.rests_on_answer""", "instruction edited")
    # the options of every question the file names: its own questions first, then the store's
    con.execute("""CREATE OR REPLACE TEMP TABLE _fi_options AS
        SELECT DISTINCT id, options FROM st_question
        UNION ALL
        SELECT id, options FROM questions WHERE id NOT IN (SELECT id FROM st_question) AND id IN (
            SELECT question FROM st_reading UNION SELECT question FROM st_settlement
            UNION SELECT question FROM st_rejection UNION SELECT rests_on_question FROM st_instruction)""")
    _first(con, """SELECT min(i.line) FROM st_instruction i LEFT JOIN _fi_options o ON o.id = i.rests_on_question
                   WHERE i.rests_on_question IS NOT NULL AND (o.id IS NULL OR NOT list_contains(o.options, i.rests_on_answer))""",
           "rests_on")
    for table in ("st_settlement", "st_rejection"):
        _first(con, f"""SELECT min(f.line) FROM {table} f LEFT JOIN _fi_options o ON o.id = f.question
                        WHERE o.id IS NULL OR NOT list_contains(o.options, f.answer)""", f"{table} question or answer")
    _first(con, """SELECT min(line) FROM st_reading WHERE message NOT IN
                       (SELECT id FROM st_message UNION ALL SELECT id FROM messages)""", "unknown message")
    # readings: probs over exactly the question's options, put in their order; stored ones must agree
    once = _once(unique)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _fi_readings AS
        SELECT {once("reading", "r.message, r.question, r.reader")} r.line, r.message, r.question, r.reader,
               r.reader_version, r.unclear, r.unrelated, r.one_off, r.changed,
               CASE WHEN o.id IS NOT NULL AND len(map_keys(r.probs)) = len(o.options)
                         AND list_sort(map_keys(r.probs)) = list_sort(o.options)
                    THEN list_transform(o.options, lambda x: r.probs[x]) END AS probs
        FROM st_reading r LEFT JOIN _fi_options o ON o.id = r.question""")
    _first(con, "SELECT min(line) FROM _fi_readings WHERE probs IS NULL", "reading's question or options")
    _first(con, """SELECT min(f.line) FROM _fi_readings f JOIN readings r USING (message, question, reader)
                   WHERE f.probs <> r.probs OR f.unclear <> r.unclear OR f.unrelated <> r.unrelated
                      OR f.one_off <> r.one_off OR f.changed <> r.changed""", "reading edited")
    # settlements: stored ones must agree; one answer per question and instant, file and store together
    _first(con, """SELECT min(f.line) FROM st_settlement f JOIN settlements s USING (question, settled_at, answer)
                   WHERE f.how <> s.how OR f.settled_by <> s.settled_by OR f.note IS DISTINCT FROM s.note""",
           "settlement edited")
    _first(con, """SELECT min(line) FROM (
                       SELECT question, settled_at, min(line) AS line, count(DISTINCT answer) AS answers FROM (
                           SELECT question, settled_at, answer, line FROM st_settlement
                           UNION ALL SELECT question, settled_at, answer, NULL FROM settlements
                           WHERE question IN (SELECT question FROM st_settlement))
                       GROUP BY question, settled_at) WHERE answers > 1""", "two answers at one instant")
    # rejections: every question keeps at least one possible answer
    _first(con, """SELECT min(f.line) FROM (
                       SELECT question, count(DISTINCT answer) AS n FROM (
                           SELECT question, answer FROM st_rejection
                           UNION ALL SELECT question, answer FROM rejections
                           WHERE question IN (SELECT question FROM st_rejection))
                       GROUP BY question) r
                   JOIN _fi_options o ON o.id = r.question JOIN st_rejection f ON f.question = r.question
                   WHERE r.n >= len(o.options)""", "rejections leave no answer")


def _count(con, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _insert(con, table: str, columns: str, select: str, *, new_only: bool = False) -> int:
    """Insert what ``select`` gives; ``new_only``: it gives only keys the table lacks, each once (the
    store is held, so nothing comes in between), and a plain insert skips the conflict check."""
    before = _count(con, table)
    con.execute(f"INSERT INTO {table} ({columns}) {select}{'' if new_only else ' ON CONFLICT DO NOTHING'}").fetchall()
    return _count(con, table) - before


def _write(con, unique: set[str]) -> tuple[dict[str, int], set[str]]:
    once = _once(unique)
    # the columns each insert gives, then the derived ones (ingest_rules.DERIVED), selected by their expressions
    source_cols = ["id", "layers", "trust"]
    question_cols = ["id", "subject", "kind", "text", "shape", "options", "created_by", "instructions_version"]
    message_cols = ["id", "source", "sent_at", "received_at", "text", "fingerprint"]
    columns = lambda table, cols: ", ".join(ingest_rules.derived_columns(table, cols))  # noqa: E731
    select = lambda table, cols: ", ".join(ingest_rules.derived(table, cols))  # noqa: E731
    counts = {
        "subjects": _insert(con, "subjects", "id, name, aliases",
                            "SELECT id, name, aliases FROM st_subject WHERE id NOT IN (SELECT id FROM subjects)"),
        "relations": _insert(con, "relations", "from_id, to_id, kind",
                             "SELECT DISTINCT from_id, to_id, kind FROM st_relation"),
        "sources": _insert(con, "sources", f"{columns('sources', source_cols)}, is_assistant",
                           f"""SELECT DISTINCT ON (id) {select('sources', source_cols)},
                                      {ingest_rules.IS_ASSISTANT_SQL} FROM st_source
                               WHERE id NOT IN (SELECT id FROM sources)"""),
        "questions": _insert(con, "questions", columns("questions", question_cols),
                             f"""SELECT DISTINCT ON (id) {select('questions', question_cols)} FROM st_question
                                 WHERE id NOT IN (SELECT id FROM questions)"""),
    }
    new_messages = f"""SELECT {once("message", "id")} {select('messages', message_cols)}
                      FROM st_message m JOIN st_message_fp p USING (id)
                      WHERE id NOT IN (SELECT id FROM messages)"""
    # terms first: "new" is "not stored yet", which the insert below changes; a message given twice
    # (identically: checked in staging) gets the terms of its first line
    if "message" in unique:
        con.execute("""INSERT INTO message_terms SELECT id, term, tf FROM st_message_terms
                       WHERE id NOT IN (SELECT id FROM messages)""")
    else:
        con.execute("""INSERT INTO message_terms
                       SELECT m.id, t.term, t.tf FROM st_message_terms t
                       JOIN (SELECT id, min(line) AS line FROM st_message WHERE id NOT IN (SELECT id FROM messages)
                             GROUP BY id) m USING (line)""")
    counts["messages"] = _insert(con, "messages", columns("messages", message_cols), new_messages, new_only=True)
    con.execute("""CREATE OR REPLACE TEMP TABLE _fi_new_readings AS
                   SELECT f.* FROM _fi_readings f ANTI JOIN readings r USING (message, question, reader)""")
    # written complete (the message's facts copied on, as complete_readings would): an UPDATE of a
    # million fresh rows costs more than the insert itself
    counts["readings"] = _insert(con, "readings", "message, question, reader, reader_version, probs, unclear, "
                                                  "unrelated, one_off, changed, sent_at, source, fp, counts",
                                 """SELECT r.message, r.question, r.reader, r.reader_version, r.probs, r.unclear,
                                           r.unrelated, r.one_off, r.changed, m.sent_at, m.source, hash(m.fingerprint),
                                           NOT s.is_assistant
                                    FROM _fi_new_readings r JOIN messages m ON m.id = r.message
                                    JOIN sources s ON s.id = m.source""", new_only=True)
    counts["settlements"] = _insert(con, "settlements", "question, answer, settled_at, how, settled_by, note, "
                                                        "p_before, params_version",
                                    """SELECT DISTINCT ON (question, settled_at, answer) question, answer, settled_at,
                                              how, settled_by, note, p_before, params_version FROM st_settlement""")
    counts["rejections"] = _insert(con, "rejections", "question, answer, rejected_at, rejected_by",
                                   """SELECT DISTINCT ON (question, answer, rejected_at) question, answer,
                                             rejected_at, rejected_by FROM st_rejection""")
    counts["instructions"] = _insert(con, "instructions", "id, subject, text, given_at, rests_on_question, "
                                                          "rests_on_answer, given_by",
                                     """SELECT DISTINCT ON (id) id, subject, text, given_at, rests_on_question,
                                               rests_on_answer, given_by FROM st_instruction""")
    touched = {q for (q,) in con.execute(
        """SELECT DISTINCT question FROM _fi_new_readings UNION SELECT question FROM st_settlement
           UNION SELECT question FROM st_rejection""").fetchall()}
    return counts, touched


def write_stage(con, stage_paths: list[str], changes: dict | None = None,
                unique: set[str] | frozenset = frozenset(), warnings: list[str] | None = None) -> dict[str, int]:
    """Resolve the staged file against the store and write it in one transaction (inside a write session).
    ``unique``: the record types whose keys the file gives once each (:attr:`Stage.unique`);
    ``warnings``, when given, receives the warnings of :func:`doxa.data.writer.write_batch`.

    Raises :class:`NotProved` (nothing written) when a reference or edit rule is not met: the
    per-line path then gives the exact problems."""
    try:
        attach_stage(con, stage_paths)
        try:
            with transaction(con):
                _check_against_store(con, unique)
                if warnings is not None:
                    warnings += look_alike_warnings(con, "subjects", "SELECT id FROM st_subject "
                                                                     "WHERE id NOT IN (SELECT id FROM subjects)")
                    warnings += look_alike_warnings(con, "questions", "SELECT id FROM st_question "
                                                                      "WHERE id NOT IN (SELECT id FROM questions)")
                counts, touched = _write(con, unique)
                mark_evidence_changed(con, touched | settle_copies(con))
        finally:
            for name in ("_fi_subjects", "_fi_options", "_fi_readings", "_fi_new_readings"):
                con.execute(f"DROP TABLE IF EXISTS temp.{name}")
    finally:
        detach_stage(con, stage_paths)
    if changes is not None:
        changes.update(questions=touched, structure=False)
    return {k: v for k, v in counts.items() if v}


# ------------------------------------------------------------------------ the input, re-readable
class LineReplay:
    """The lines of an input the fast path read, so the per-line path can read them again.

    Lists and files reopened by path are read again as they are; anything else (standard
    input, a generator) is spooled, block by block, into an Arrow stream on disk as it is read.
    """

    def __init__(self, lines: Iterable[str], reopen: Callable[[], Iterable[str]] | None = None):
        self.lines = lines
        self.reopen = reopen
        self.iterator: Iterator[str] | None = None
        self.spool_path: str | None = None
        self._writer = None
        self._sink = None
        if reopen is None and not isinstance(lines, (list, tuple)):
            self.iterator = iter(lines)

    def source(self) -> Iterable[str]:
        return self.iterator if self.iterator is not None else self.lines

    def spool(self):
        if self.iterator is None:
            return None

        def write(raw: pa.Array) -> None:
            if self._writer is None:
                handle, self.spool_path = tempfile.mkstemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", suffix=".arrows")
                os.close(handle)
                self._sink = pa.OSFile(self.spool_path, "wb")
                self._writer = pa.ipc.new_stream(self._sink, pa.schema([("raw", pa.string())]))
            self._writer.write_batch(pa.record_batch([raw], names=["raw"]))

        return write

    def again(self) -> Iterable[str]:
        """Every line from the first, for the per-line path."""
        if self.reopen is not None:
            return self.reopen()
        if self.iterator is None:
            return self.lines
        return itertools.chain(self._spooled(), self.iterator)

    def _spooled(self) -> Iterator[str]:
        if self._writer is None:
            return
        self._writer.close()
        self._sink.close()
        self._writer = None
        with pa.memory_map(self.spool_path) as source:
            for batch in pa.ipc.open_stream(source):
                yield from batch.column(0).to_pylist()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
        if self.spool_path:
            try:
                os.unlink(self.spool_path)
            except OSError:
                pass


def debug(message: str, what: str = "per-line path") -> None:
    """Why a file went the per-line way (or was read as text lines), on stderr when
    ``$DOXA_DEBUG_INGEST`` is set."""
    if os.environ.get("DOXA_DEBUG_INGEST"):
        print(f"doxa ingest: {what} ({message})", file=sys.stderr)


__all__ = ["BLOCK_LINES", "FAST_MIN_LINES", "NotProved", "NotPlainBytes", "Stage", "stage_lines", "stage_blocks",
           "file_blocks", "write_stage", "LineReplay"]
