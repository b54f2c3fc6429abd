"""The state of the messages ``remember`` took (table ``remembered``): pending or done.

``doxa remember`` keeps a message first and organizes it second; a message whose organizer or
reader is missing or failed stays *pending*, with what it waits for and why, and ``doxa
organize`` finishes it later. :func:`mark_remembered` writes that state inside the
transaction that stores the message's records, so a message is never stored without it.
The organizer's instructions themselves are in :mod:`doxa.data.organizer_instructions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .connection import in_read_session
from .sql import bind
from .times import utc_now

if TYPE_CHECKING:
    from .session import Session

PENDING = "pending"
DONE = "done"


def mark_remembered(con, rows: Sequence[dict[str, Any]]) -> None:
    """Upsert the state of remembered messages (inside the caller's transaction).

    Each row: ``message``, ``status`` (pending | done), and optionally ``waiting_for``,
    ``reason``, ``organizer``, ``instructions_version``, ``reader``, ``questions``,
    ``organizer_calls``, ``reader_calls`` (calls add up over a message's attempts)."""
    now = utc_now()
    for row in rows:
        values = [row["message"], row["status"], row.get("waiting_for"), row.get("reason"), row.get("organizer"),
                  row.get("instructions_version"), row.get("reader"), list(row.get("questions") or []),
                  int(row.get("organizer_calls", 0)), int(row.get("reader_calls", 0)), now]
        con.execute(bind(
            """INSERT INTO remembered (message, status, waiting_for, reason, organizer, instructions_version, reader,
                                      questions, organizer_calls, reader_calls, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?::VARCHAR[], ?, ?, ?)
               ON CONFLICT (message) DO UPDATE SET
                   status = excluded.status, waiting_for = excluded.waiting_for, reason = excluded.reason,
                   organizer = coalesce(excluded.organizer, remembered.organizer),
                   instructions_version = coalesce(excluded.instructions_version, remembered.instructions_version),
                   reader = coalesce(excluded.reader, remembered.reader),
                   questions = CASE WHEN len(excluded.questions) > 0 THEN excluded.questions
                                    ELSE remembered.questions END,
                   organizer_calls = remembered.organizer_calls + excluded.organizer_calls,
                   reader_calls = remembered.reader_calls + excluded.reader_calls,
                   updated_at = excluded.updated_at""", values)).fetchall()


@in_read_session
def remembered_state(store: "Session", message_id: str) -> dict[str, Any] | None:
    rows = pending_messages(store, message_ids=[message_id], status=None)
    return rows[0] if rows else None


@in_read_session
def pending_messages(store: "Session", *, limit: int | None = None, message_ids: list[str] | None = None,
                     status: str | None = PENDING) -> list[dict[str, Any]]:
    """Remembered messages (pending ones by default) with their text and source, oldest first."""
    where, params = [], []
    if status is not None:
        where.append("r.status = ?")
        params.append(status)
    if message_ids is not None:
        where.append("r.message IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(message_ids))
    sql = f"""SELECT r.message, r.status, r.waiting_for, r.reason, r.organizer, r.instructions_version, r.reader,
                     r.questions, r.organizer_calls, r.reader_calls, r.updated_at, m.text, m.source, m.sent_at
              FROM remembered r JOIN messages m ON m.id = r.message
              {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY m.sent_at, r.message"""
    if limit:
        sql += f" LIMIT {int(limit)}"
    keys = ("message", "status", "waiting_for", "reason", "organizer", "instructions_version", "reader", "questions",
            "organizer_calls", "reader_calls", "updated_at", "text", "source", "sent_at")
    out = []
    for row in store.con.execute(bind(sql, params)).fetchall():
        item = dict(zip(keys, row))
        item["questions"] = list(item["questions"])
        out.append(item)
    return out


@in_read_session
def count_pending(store: "Session") -> int:
    return int(store.con.execute("SELECT count(*) FROM remembered WHERE status = 'pending'").fetchone()[0])


__all__ = ["PENDING", "DONE", "mark_remembered", "pending_messages", "remembered_state", "count_pending"]
