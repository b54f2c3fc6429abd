"""Bookkeeping every write path does after inserting rows, inside its own transaction.

The per-line writer (:mod:`.writer`), the fast path (:mod:`.fast_ingest`), the bulk loader
(:mod:`.insert`) and the replay (:mod:`.replay`) insert rows differently, and then all do the
same four things, here once:

* :func:`complete_readings` copies each new reading's message facts onto it (when it was sent,
  by whom, its fingerprint, whether it counts), so evidence loads without joins;
* :func:`settle_copies` marks which readings repeat an earlier message (a copy adds nothing to
  its source's history) and returns the questions whose evidence that moved;
* :func:`insert_terms` (with :func:`terms_sql`) indexes new messages for full-text search;
* :func:`mark_evidence_changed` advances the evidence epochs, so that kept filter states
  (:mod:`.kept_states`) and belief-cache entries computed before stop counting.
"""

from __future__ import annotations

import pyarrow as pa

from .evidence import FRESH_READINGS, HISTORY_SQL, mark_copies_sql
from .text import TOKEN_SPLIT
from .times import FAR_FUTURE


def mark_evidence_changed(con, question_ids, *, structure: bool = False) -> int | None:
    """Advance the store's evidence epoch for a write that changed these questions' evidence.

    Kept filter states (``belief_states``) computed before count no more for them; with
    ``structure`` (a merge, split or undo: questions come and go, evidence moves between
    them) for every question. Call inside the writing transaction. Returns the new epoch.
    """
    question_ids = sorted(question_ids)
    if not question_ids and not structure:
        return None
    epoch = int(con.execute(
        "UPDATE meta SET value = (value::BIGINT + 1)::VARCHAR WHERE key = 'evidence_epoch' RETURNING value"
    ).fetchone()[0])
    if question_ids:
        con.register("_touched", pa.table({"question": question_ids}))
        try:
            con.execute(f"""INSERT INTO evidence_epochs SELECT question, {epoch} FROM _touched
                            ON CONFLICT (question) DO UPDATE SET epoch = excluded.epoch""").fetchall()
        finally:
            con.unregister("_touched")
    if structure:
        con.execute(f"UPDATE meta SET value = '{epoch}' WHERE key = 'structure_epoch'").fetchall()
    return epoch


def complete_readings(con) -> None:
    """Copy each new reading's message facts onto it (see the readings table in schema.sql)."""
    con.execute(
        """UPDATE readings SET sent_at = m.sent_at, source = m.source, fp = hash(m.fingerprint),
                              counts = NOT s.is_assistant
           FROM messages m, sources s
           WHERE readings.sent_at IS NULL AND m.id = readings.message AND s.id = m.source"""
    ).fetchall()


def settle_copies(con) -> set[str]:
    """Mark which new readings (``is_copy`` still NULL) and readings sharing their fingerprints are copies.

    A message that arrives late but was sent first makes its stored twin a copy, so every
    reading of the new fingerprints is marked again (:func:`~doxa.data.evidence.mark_copies_sql`).
    Returns the questions whose evidence changed beyond the new readings' own: a source whose
    history this write moved across :data:`~doxa.data.evidence.FRESH_READINGS` changes how
    every one of its readings counts, so those questions' kept states are stale too.
    """
    con.execute("CREATE OR REPLACE TEMP TABLE _new_fps AS SELECT DISTINCT fp FROM readings WHERE is_copy IS NULL")
    try:
        if not con.execute("SELECT count(*) FROM _new_fps").fetchone()[0]:
            return set()
        con.execute("""CREATE OR REPLACE TEMP TABLE _their_sources AS
                       SELECT DISTINCT source FROM readings WHERE counts AND fp IN (SELECT fp FROM _new_fps)""")
        history = HISTORY_SQL.format(sources="SELECT source FROM _their_sources")
        before = dict(con.execute(history, [FAR_FUTURE]).fetchall())  # new rows (NULL) do not count yet
        con.execute(mark_copies_sql("SELECT fp FROM _new_fps")).fetchall()
        after = dict(con.execute(history, [FAR_FUTURE]).fetchall())
        crossed = sorted(s for s in before.keys() | after.keys()
                         if (before.get(s, 0) <= FRESH_READINGS) != (after.get(s, 0) <= FRESH_READINGS))
        if not crossed:
            return set()
        return {q for (q,) in con.execute("SELECT DISTINCT question FROM readings WHERE source IN (SELECT unnest(?))",
                                          [crossed]).fetchall()}
    finally:
        con.execute("DROP TABLE IF EXISTS temp._new_fps")
        con.execute("DROP TABLE IF EXISTS temp._their_sources")


def terms_sql(messages_sql: str, key: str = "id") -> str:
    """(``key``, term, tf) of each message ``messages_sql`` selects (columns ``key`` and ``text``),
    cut by the tokeniser of :mod:`.text`; BM25 statistics are computed at query time."""
    # each message's terms counted within its own list (a histogram): a third cheaper than grouping
    # the unnested terms of every message
    return f"""SELECT {key}, unnest(map_keys(h)) AS term, unnest(map_values(h))::INTEGER AS tf FROM (
                   SELECT {key}, list_aggregate(list_filter(regexp_split_to_array(lower(text), '{TOKEN_SPLIT}'),
                                                            lambda x: length(x) > 0), 'histogram') AS h
                   FROM ({messages_sql}))"""


def insert_terms(con, messages_sql: str) -> None:
    """Full-text terms of the messages ``messages_sql`` selects (columns ``id``, ``text``)."""
    con.execute(f"INSERT INTO message_terms {terms_sql(messages_sql)}").fetchall()


__all__ = ["mark_evidence_changed", "complete_readings", "settle_copies", "terms_sql", "insert_terms"]
