"""The organizer's decisions kept (table ``organizer_decisions``), and the queries that find its mistakes.

Every organizer call that was applied leaves one row: the SHA-256 of its exact inputs (the key,
computed in :mod:`doxa.inference.agent.organizer_memory`), the message ids it decided, the
instructions version, model and decoding settings, the request (its prompt as sent, and as JSON to
rebuild it), the raw reply, the checked output (JSON), the questions applying it created and bore
on, and what it cost (calls, tokens, seconds). Three uses: identical inputs are answered from the
row with no model call (a replay that changed nothing costs nothing); a kept request is run again
under other instructions or another model (instruction search); and a case — a merge, a split, an
undo, a checker's finding — names the decision it is about.

:func:`record` runs inside the transaction that applies the output (``Memory.ingest(…, also=…)``),
so a row never exists for an output whose records were refused: they roll back together.

The message ids are a list column so that erasure finds the rows holding a forgotten message's
text with one query (:func:`decisions_naming`). The queries for the cases (what people, the world
and the checkers said after the organizer) are here too; the rules are in the inference module.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Sequence

import duckdb

from .connection import in_read_session
from .sql import bind
from .times import utc_now

if TYPE_CHECKING:
    from .session import Session

MESSAGE, WINDOW = "message", "window"
_COLUMNS = ("key", "kind", "messages", "instructions_version", "organizer", "model", "settings", "prompt", "request",
            "shown", "reply", "output", "created", "linked", "calls", "prompt_tokens", "completion_tokens", "seconds",
            "created_at")
_JSON = ("settings", "request", "shown", "output")
_LISTS = ("messages", "created", "linked")


def record(con, row: dict[str, Any]) -> None:
    """Write one decision (inside the caller's transaction). ``row`` has every column of the table but
    ``created_at`` (JSON columns as Python values). A row with the same key exists when identical inputs
    were decided before (another message with the same text, source and day, or a cached answer): it
    gains the message ids and questions it did not name yet, and keeps the rest (a replay's row, kept by
    instruction search with no version, gains the version of the first call that applies it)."""
    values = {**row, "created_at": utc_now()}
    for name in _JSON:
        values[name] = json.dumps(values[name], sort_keys=True, ensure_ascii=False)
    for name in _LISTS:
        values[name] = list(values.get(name) or [])
    placeholders = ", ".join("?::VARCHAR[]" if c in _LISTS else "?" for c in _COLUMNS)
    # the lists gain what they lack, in order (a lambda, not list_distinct, which reorders)
    grow = ", ".join(f"{c} = list_concat(organizer_decisions.{c}, list_filter(excluded.{c}, "
                     f"x -> NOT list_contains(organizer_decisions.{c}, x)))" for c in _LISTS)
    con.execute(bind(
        f"""INSERT INTO organizer_decisions ({', '.join(_COLUMNS)}) VALUES ({placeholders})
            ON CONFLICT (key) DO UPDATE SET {grow}, instructions_version =
                coalesce(organizer_decisions.instructions_version, excluded.instructions_version)""",
        [values[c] for c in _COLUMNS])).fetchall()


def _rows(con, where: str, params: list[Any]) -> list[dict[str, Any]]:
    try:
        rows = con.execute(bind(f"SELECT {', '.join(_COLUMNS)} FROM organizer_decisions {where} "
                                "ORDER BY created_at, key", params)).fetchall()
    except duckdb.CatalogException:  # a store made by this schema version before the table was added to it
        return []
    out = []
    for values in rows:
        item = dict(zip(_COLUMNS, values))
        for name in _JSON:
            item[name] = json.loads(item[name])
        for name in _LISTS:
            item[name] = list(item[name])
        out.append(item)
    return out


@in_read_session
def find(store: "Session", key: str) -> dict[str, Any] | None:
    """The decision kept under ``key``, or None."""
    found = _rows(store.con, "WHERE key = ?", [key])
    return found[0] if found else None


@in_read_session
def decisions(store: "Session", *, keys: Sequence[str] | None = None,
              messages: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Kept decisions, oldest first: all, those of ``keys``, or those naming one of ``messages``."""
    where, params = [], []
    if keys is not None:
        where.append("list_contains(?::VARCHAR[], key)")
        params.append(list(keys))
    if messages is not None:
        where.append("list_has_any(messages, ?::VARCHAR[])")
        params.append(list(messages))
    return _rows(store.con, ("WHERE " + " AND ".join(where)) if where else "", params)


def decisions_naming(con, message_ids: list[str], question_ids: list[str] = (),
                     subject_ids: list[str] = ()) -> list[str]:
    """Keys of the decisions whose messages include one of ``message_ids``, or that showed, created or
    linked one of ``question_ids``, or showed one of ``subject_ids``: their prompt, request and reply
    hold those messages' text and those questions' and subjects' words, so erasure (``doxa forget``)
    deletes them with what it forgets."""
    if not (message_ids or question_ids or subject_ids):
        return []
    try:
        rows = con.execute(bind("""SELECT key FROM organizer_decisions
                                   WHERE list_has_any(messages, ?::VARCHAR[])
                                      OR list_has_any(created || linked
                                                      || json_extract_string(shown, '$.questions[*]'), ?::VARCHAR[])
                                      OR list_has_any(json_extract_string(shown, '$.subjects[*]'), ?::VARCHAR[])
                                   ORDER BY key""", [list(message_ids), list(question_ids), list(subject_ids)])
                           ).fetchall()
    except duckdb.CatalogException:
        return []
    return [k for (k,) in rows]


# ---------------------------------------------------------------------------- what the cases are made of
@in_read_session
def organizer_questions(store: "Session") -> list[dict[str, Any]]:
    """Every question a model created (``instructions_version`` set), any status, oldest first, with the
    decision that created it (``decision``: its key, or None when it was not kept) and the messages that
    bear on it by the organizer (``messages``: the decision's messages whose remembered questions name it;
    all the decision's messages where none does)."""
    try:
        rows = store.con.execute("""
            WITH made AS (SELECT unnest(created) AS question, key, messages, created_at FROM organizer_decisions),
                 first AS (SELECT question, arg_min(key, created_at) AS key, arg_min(messages, created_at) AS messages
                           FROM made GROUP BY question)
            SELECT q.id, q.subject, q.kind, q.text, q.shape, q.options, q.is_open, q.status, q.created_at,
                   f.key, coalesce(f.messages, []::VARCHAR[]),
                   coalesce((SELECT list(r.message ORDER BY r.message) FROM remembered r
                             WHERE list_contains(r.questions, q.id) AND list_contains(f.messages, r.message)),
                            []::VARCHAR[])
            FROM questions q LEFT JOIN first f ON f.question = q.id
            WHERE q.instructions_version IS NOT NULL
            ORDER BY q.created_at, q.id""").fetchall()
    except duckdb.CatalogException:
        return []
    keys = ("id", "subject", "kind", "text", "shape", "options", "open", "status", "created_at", "decision")
    out = []
    for *values, messages, bearing in rows:
        item = dict(zip(keys, values))
        item["options"] = list(item["options"])
        item["open"] = bool(item["open"])
        item["messages"] = list(bearing) or list(messages)
        out.append(item)
    return out


@in_read_session
def linking_decisions(store: "Session", question_ids: list[str]) -> list[dict[str, Any]]:
    """For each of ``question_ids``, the kept decisions that created or linked it: ``{question, key,
    messages}`` (messages: the decision's messages whose remembered questions name it)."""
    if not question_ids:
        return []
    try:
        rows = store.con.execute(bind("""
            WITH q AS (SELECT unnest(?::VARCHAR[]) AS question)
            SELECT q.question, d.key,
                   coalesce((SELECT list(r.message ORDER BY r.message) FROM remembered r
                             WHERE list_contains(r.questions, q.question) AND list_contains(d.messages, r.message)),
                            []::VARCHAR[])
            FROM q JOIN organizer_decisions d
              ON list_contains(d.created, q.question) OR list_contains(d.linked, q.question)
            ORDER BY q.question, d.created_at, d.key""", [list(question_ids)])).fetchall()
    except duckdb.CatalogException:
        return []
    return [{"question": q, "key": k, "messages": list(m)} for q, k, m in rows]


@in_read_session
def messages_of(store: "Session", message_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{id: {"text", "source", "source_path"}}`` for the stored ones of ``message_ids``."""
    if not message_ids:
        return {}
    rows = store.con.execute(bind(
        "SELECT m.id, m.text, m.source, s.path FROM messages m JOIN sources s ON s.id = m.source "
        "WHERE list_contains(?::VARCHAR[], m.id)", [list(message_ids)])).fetchall()
    return {i: {"text": t, "source": s, "source_path": p} for i, t, s, p in rows}


@in_read_session
def unrelated_readings(store: "Session", at_least: float) -> list[dict[str, Any]]:
    """Readings of a message against a question the organizer named for it (the message's remembered
    questions) that put at least ``at_least`` on "unrelated": ``{message, question, reader, unrelated}``."""
    rows = store.con.execute(bind("""
        SELECT r.message, r.question, r.reader, r.unrelated FROM readings r
        JOIN remembered m ON m.message = r.message AND list_contains(m.questions, r.question)
        WHERE m.organizer IS NOT NULL AND r.unrelated >= ?
        ORDER BY r.message, r.question, r.reader""", [float(at_least)])).fetchall()
    return [{"message": m, "question": q, "reader": rd, "unrelated": float(u)} for m, q, rd, u in rows]


@in_read_session
def same_subject_pairs(store: "Session") -> list[dict[str, Any]]:
    """Pairs ``(new, old)`` of active questions about one subject where ``new`` was created by a model
    after ``old`` (any kind): what the duplicate checker compares. Each: ``subject``, ``subject_names``
    (name and aliases), ``new`` and ``old`` as ``{id, kind, text}``."""
    rows = store.con.execute("""
        SELECT n.subject, coalesce(s.name, ''), coalesce(s.aliases, []::VARCHAR[]),
               n.id, n.kind, n.text, o.id, o.kind, o.text
        FROM questions n JOIN questions o
          ON n.subject IS NOT DISTINCT FROM o.subject AND n.id <> o.id
         AND (o.created_at < n.created_at OR (o.created_at = n.created_at AND o.id < n.id))
        LEFT JOIN subjects s ON s.id = n.subject
        WHERE n.instructions_version IS NOT NULL AND n.status = 'active' AND o.status = 'active'
        ORDER BY n.created_at, n.id, o.created_at, o.id""").fetchall()
    return [{"subject": subject, "subject_names": [name, *aliases],
             "new": {"id": a, "kind": ak, "text": at}, "old": {"id": b, "kind": bk, "text": bt}}
            for subject, name, aliases, a, ak, at, b, bk, bt in rows]


__all__ = ["MESSAGE", "WINDOW", "record", "find", "decisions", "decisions_naming", "organizer_questions",
           "linking_decisions", "messages_of", "unrelated_readings", "same_subject_pairs"]
