"""The store's schema: its version, how a new store is made, and how an older one is migrated.

A DuckDB file is a doxa store when its ``meta`` table has a ``schema_version`` row
(:func:`schema_version`); a file without that mark that holds anything is someone else's and
is never changed (:func:`refuse_foreign`). :func:`ensure` runs in a write session as the
file is opened: it makes a new store (schema.sql, the epochs, a store id, the built-in
organizer instructions) or brings an older one up to :data:`SCHEMA_VERSION`, each in one
transaction, so a store is either untouched or whole at the new version.
"""

from __future__ import annotations

import os
from importlib import resources

import duckdb

from .errors import StoreError
from .evidence import mark_copies_sql
from .session import transaction

SCHEMA_VERSION = "9"


def schema_sql() -> str:
    """The whole schema (data/schema.sql): every CREATE there is IF NOT EXISTS."""
    return resources.files("doxa.data").joinpath("schema.sql").read_text()


#: schema version → (the next version, SQL that gets there). Version 2 keeps the read log's
#: probabilities as a list in option order (no JSON built per read) and drops its key; version 3
#: records what a settlement settled against (note, p_before, params_version) and who gave an instruction.
MIGRATIONS: dict[str, tuple[str, str]] = {
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
    # Version 7: value questions (docs/design.md §2, "Open questions"): a question may be open (its
    # options grow as evidence names values), and a reading carries the mass on "a value not listed".
    "6": ("7", """
        ALTER TABLE questions ADD COLUMN IF NOT EXISTS is_open BOOLEAN DEFAULT false;
        UPDATE questions SET is_open = false WHERE is_open IS NULL;
        ALTER TABLE questions ALTER COLUMN is_open SET NOT NULL;
        ALTER TABLE readings ADD COLUMN IF NOT EXISTS unlisted DOUBLE DEFAULT 0;
        UPDATE readings SET unlisted = 0 WHERE unlisted IS NULL;
        ALTER TABLE readings ALTER COLUMN unlisted SET NOT NULL;
    """),
    # Version 8: erasures (`doxa forget`, docs/formats.md), the organizer's kept decisions
    # (organizer_decisions) and maintenance's proposals (proposed_ops). The tables come from schema.sql.
    "7": ("8", ""),
    # Version 9: a reading says how surely its message reports that the answer changed
    # (docs/design.md §2, "Reported changes"); readings written before report none. An open
    # question's base rates now grow as its evidence names values, so every kept state computed
    # before is stale (the structure epoch moves past it).
    "8": ("9", """
        ALTER TABLE readings ADD COLUMN IF NOT EXISTS changed DOUBLE DEFAULT 0;
        UPDATE readings SET changed = 0 WHERE changed IS NULL;
        ALTER TABLE readings ALTER COLUMN changed SET NOT NULL;
        UPDATE meta SET value = (value::BIGINT + 1)::VARCHAR WHERE key = 'evidence_epoch';
        UPDATE meta SET value = (SELECT value FROM meta WHERE key = 'evidence_epoch') WHERE key = 'structure_epoch';
    """),
}


def schema_version(con) -> str | None:
    """The ``schema_version`` row of ``meta``: what marks a DuckDB file as a doxa store (None: no mark)."""
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except (duckdb.CatalogException, duckdb.BinderException):  # no meta table, or someone else's
        return None
    return row[0] if row else None


def refuse_foreign(con, path: str) -> None:
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


def new_store_id() -> str:
    """A fresh random store id (16 hex digits; docs/formats.md)."""
    return os.urandom(8).hex()


def _seed_instructions(con) -> None:
    """Store the built-in texts as version 1 of each prompt a store does not have yet."""
    from .organizer_instructions import seed_defaults

    seed_defaults(con)


def ensure(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Make a store in ``con``'s empty file, or migrate an older one to :data:`SCHEMA_VERSION`
    (a no-op on a current one). Runs inside a write session."""
    version = schema_version(con)
    if version is None:
        with transaction(con):
            con.execute(schema_sql())
            con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('evidence_epoch', '0'), "
                        "('structure_epoch', '0'), ('store_id', ?)", [SCHEMA_VERSION, new_store_id()]).fetchall()
            _seed_instructions(con)
    elif version != SCHEMA_VERSION:
        migrate(con, path, version)


def migrate(con: duckdb.DuckDBPyConnection, path: str, version: str) -> None:
    """Bring a store written by an older doxa up to :data:`SCHEMA_VERSION`, in one transaction."""
    if version not in MIGRATIONS:
        raise StoreError(f"{path} has schema version {version}, which this doxa does not know "
                         f"(it writes version {SCHEMA_VERSION}): upgrade doxa")
    with transaction(con):
        while version != SCHEMA_VERSION:
            version, sql = MIGRATIONS[version]
            if sql.strip():  # a step that only adds tables has none: schema.sql below makes them
                con.execute(sql)
        con.execute(schema_sql())
        _seed_instructions(con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [SCHEMA_VERSION]).fetchall()
        con.execute("INSERT INTO meta VALUES ('store_id', ?) ON CONFLICT DO NOTHING", [new_store_id()]).fetchall()


__all__ = ["SCHEMA_VERSION", "MIGRATIONS", "schema_sql", "schema_version", "refuse_foreign", "new_store_id",
           "ensure", "migrate"]
