"""Instruction search's state (tables ``instruction_searches`` and ``instruction_candidates``).

The loop is :mod:`doxa.inference.agent.instruction_search`; this module holds its SQL: one row per
search (its id, the active version it started from, the rounds done, its status and the model calls
spent over every run, so an interrupted search resumes where it stopped) and one row per candidate
text (its parent, scores, the cases it answered, its diff, and its fate: pending, kept, rejected with
a reason, activated). A candidate is written as ``pending`` as soon as the proposer has written it,
so a run stopped by its budget never asks the proposer for it again.

:func:`messages_with_runs` is the injection guard's cheap look-up: the stored messages that hold
every word of a run of words (the term index, ``message_terms``), with their text to check the run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

from .connection import in_read_session
from .session import transaction
from .sql import bind
from .times import utc_now

if TYPE_CHECKING:
    from .session import Session

PENDING, KEPT, REJECTED, ACTIVATED = "pending", "kept", "rejected", "activated"
RUNNING, STOPPED, DONE = "running", "stopped", "done"
_SEARCH = ("id", "base_version", "rounds_done", "status", "stop_reason", "calls", "started_at", "updated_at")
_CANDIDATE = ("id", "search_id", "round", "position", "parent_version", "parent", "text", "scores", "answered",
              "diff", "status", "reason", "created_at")
_JSON = ("scores", "answered")


@in_read_session
def search(store: "Session", search_id: str) -> dict[str, Any] | None:
    """The search ``search_id``'s state, or None when it never ran."""
    try:
        row = store.con.execute(bind(f"SELECT {', '.join(_SEARCH)} FROM instruction_searches WHERE id = ?",
                                     [search_id])).fetchone()
    except duckdb.CatalogException:  # a store made by this schema version before the table was added
        return None
    return dict(zip(_SEARCH, row)) if row else None


def save_search(store: "Session", state: dict[str, Any]) -> None:
    """Write a search's state (insert or replace); ``started_at`` is kept from its first write."""
    now = utc_now()
    values = {**state, "updated_at": now, "started_at": state.get("started_at") or now}
    with store.writing():
        with transaction(store.con) as con:
            con.execute(bind(
                f"""INSERT INTO instruction_searches ({', '.join(_SEARCH)}) VALUES ({', '.join('?' for _ in _SEARCH)})
                    ON CONFLICT (id) DO UPDATE SET rounds_done = excluded.rounds_done, status = excluded.status,
                    stop_reason = excluded.stop_reason, calls = excluded.calls, updated_at = excluded.updated_at""",
                [values[c] for c in _SEARCH])).fetchall()


@in_read_session
def candidates(store: "Session", search_id: str | None = None) -> list[dict[str, Any]]:
    """The candidates of one search (or of all), in the order they were proposed."""
    where, params = ("WHERE search_id = ?", [search_id]) if search_id is not None else ("", [])
    try:
        rows = store.con.execute(bind(f"SELECT {', '.join(_CANDIDATE)} FROM instruction_candidates {where} "
                                      "ORDER BY created_at, round, position", params)).fetchall()
    except duckdb.CatalogException:
        return []
    out = []
    for values in rows:
        item = dict(zip(_CANDIDATE, values))
        for name in _JSON:
            item[name] = json.loads(item[name])
        out.append(item)
    return out


def save_candidate(store: "Session", row: dict[str, Any]) -> None:
    """Write a candidate (insert, or update its scores, answered, status and reason): ``row`` has every
    column but ``created_at`` (JSON columns as Python values)."""
    values = {**row, "created_at": utc_now()}
    for name in _JSON:
        values[name] = json.dumps(values[name], sort_keys=True, ensure_ascii=False)
    with store.writing():
        with transaction(store.con) as con:
            con.execute(bind(
                f"""INSERT INTO instruction_candidates ({', '.join(_CANDIDATE)})
                    VALUES ({', '.join('?' for _ in _CANDIDATE)})
                    ON CONFLICT (id) DO UPDATE SET scores = excluded.scores, answered = excluded.answered,
                    status = excluded.status, reason = excluded.reason""",
                [values[c] for c in _CANDIDATE])).fetchall()


def set_status(store: "Session", candidate_id: str, status: str, reason: str | None = None) -> None:
    with store.writing():
        with transaction(store.con) as con:
            con.execute(bind("UPDATE instruction_candidates SET status = ?, reason = coalesce(?, reason) WHERE id = ?",
                             [status, reason, candidate_id])).fetchall()


@in_read_session
def messages_with_runs(store: "Session", runs: list[list[str]]) -> dict[str, str]:
    """``{message id: text}`` of the stored messages whose terms include every word of one of ``runs``
    (each a list of words as :func:`doxa.data.text.words` cuts them, which is how ``message_terms`` was
    filled): the only messages that can hold one of the runs, whose text the caller then checks."""
    if not runs:
        return {}
    pairs = [[i, w] for i, run in enumerate(runs) for w in sorted(set(run))]
    needed = [[i, len(set(run))] for i, run in enumerate(runs)]
    rows = store.con.execute(bind("""
        WITH want AS (SELECT p[1]::INTEGER AS run, p[2] AS term FROM (SELECT unnest(?::VARCHAR[][]) AS p)),
             need AS (SELECT n[1]::INTEGER AS run, n[2]::INTEGER AS n FROM (SELECT unnest(?::VARCHAR[][]) AS n)),
             hits AS (SELECT w.run, t.message FROM want w JOIN message_terms t ON t.term = w.term
                      GROUP BY w.run, t.message HAVING count(DISTINCT t.term) =
                          (SELECT n FROM need WHERE need.run = w.run))
        SELECT DISTINCT m.id, m.text FROM hits h JOIN messages m ON m.id = h.message ORDER BY m.id""",
        [[[str(i), w] for i, w in pairs], [[str(i), str(n)] for i, n in needed]])).fetchall()
    return dict(rows)


__all__ = ["PENDING", "KEPT", "REJECTED", "ACTIVATED", "RUNNING", "STOPPED", "DONE", "search", "save_search",
           "candidates", "save_candidate", "set_status", "messages_with_runs"]
