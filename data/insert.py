"""Bulk insert of trusted Arrow tables (replay, benchmarks, the organizer's carried rows): no validation.

Anything from outside doxa goes through ingest (:mod:`doxa.data.ingest`, :mod:`doxa.data.writer`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from .bookkeeping import complete_readings, insert_terms, mark_evidence_changed, settle_copies
from .session import transaction

if TYPE_CHECKING:
    from .session import Session


def insert_arrow_con(con, table: str, arrow: pa.Table) -> int:
    """``INSERT INTO table`` the columns of an Arrow table (trusted rows: no validation)."""
    name = f"_bulk_{table}"
    con.register(name, arrow)
    try:
        cols = ", ".join(arrow.column_names)
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}").fetchall()
    finally:
        con.unregister(name)
    return arrow.num_rows


def insert_arrow(store: "Session", tables: dict[str, pa.Table], *, index_terms: bool = True) -> dict[str, int]:
    """Bulk-load trusted tables (replay, benchmarks) in one transaction, in the order given.

    Rows are not validated: use ``doxa ingest`` for anything from outside doxa. With
    ``index_terms``, messages that have no full-text terms yet are indexed afterwards.
    """
    with store.writing():
        return _insert_arrow(store.con, tables, index_terms)


def _insert_arrow(con, tables: dict[str, pa.Table], index_terms: bool) -> dict[str, int]:
    counts = {}
    with transaction(con):
        for table, arrow in tables.items():
            counts[table] = insert_arrow_con(con, table, arrow)
        if index_terms and "messages" in tables and "message_terms" not in tables:
            index_missing_terms(con)
        complete_readings(con)
        settle_copies(con)
        mark_evidence_changed(con, [], structure=True)
    return counts


def index_missing_terms(con) -> None:
    """Full-text terms for messages that have none (same tokeniser as ingest)."""
    insert_terms(con, "SELECT id, text FROM messages WHERE id NOT IN (SELECT DISTINCT message FROM message_terms)")
