"""Versioned prompt texts and the pending state of remembered messages (tables ``prompts`` and ``remembered``).

How memory is organised is decided by a text, the organizer's instructions. It lives in the
store, one row per version: setting a new text adds a version, rolling back adds a version
whose text is an older one's, nothing is ever edited, so every change is a diff a person can
read (``doxa organizer-instructions diff 1 2``) and every question the organizer created names
the version it was made under (``questions.instructions_version``).

A new store gets the built-in text (``organizer_instructions.txt`` next to this module) as
version 1. A later doxa with a better built-in text does not change a store's instructions by
itself: ``doxa organizer-instructions set --default`` adopts it, as a new version.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any, Sequence

from .connection import in_read_session
from .errors import StoreError
from .sql import bind

if TYPE_CHECKING:
    from .store import Store

ORGANIZER = "organizer"
#: Prompt name → the resource file holding its built-in text.
BUILT_IN = {ORGANIZER: "organizer_instructions.txt"}


def _utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def built_in_text(name: str) -> str:
    if name not in BUILT_IN:
        raise StoreError(f"no prompt named {name!r}: known prompts are {', '.join(BUILT_IN)}")
    return resources.files("doxa.data").joinpath(BUILT_IN[name]).read_text(encoding="utf-8")


@dataclass(frozen=True)
class PromptVersion:
    name: str
    version: int
    text: str
    set_at: datetime
    set_by: str
    note: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["set_at"] = self.set_at.isoformat()
        return out


_COLUMNS = "name, version, text, set_at, set_by, note"


def _versions(con, name: str, version: int | None = None) -> list[PromptVersion]:
    sql = f"SELECT {_COLUMNS} FROM prompts WHERE name = ?"
    params: list[Any] = [name]
    if version is not None:
        sql += " AND version = ?"
        params.append(int(version))
    rows = con.execute(bind(sql + " ORDER BY version", params)).fetchall()
    return [PromptVersion(*row) for row in rows]


def seed_defaults(con) -> None:
    """Version 1 of every built-in prompt a store lacks (inside the caller's transaction)."""
    for name in BUILT_IN:
        if not _versions(con, name):
            con.execute(bind(f"INSERT INTO prompts ({_COLUMNS}) VALUES (?, 1, ?, ?, 'doxa', 'built-in text')",
                             [name, built_in_text(name), _utc_now()])).fetchall()


@in_read_session
def current(store: "Store", name: str = ORGANIZER) -> PromptVersion:
    """The prompt's latest version."""
    found = _versions(store.con, name)
    if not found:
        built_in_text(name)  # an unknown name says which exist
        raise StoreError(f"the store has no {name!r} prompt: open it read-write once so doxa stores the built-in one")
    return found[-1]


@in_read_session
def get(store: "Store", version: int, name: str = ORGANIZER) -> PromptVersion:
    found = _versions(store.con, name, version)
    if not found:
        known = [v.version for v in _versions(store.con, name)]
        raise StoreError(f"no version {version} of the {name} instructions: versions are {known}")
    return found[0]


@in_read_session
def history(store: "Store", name: str = ORGANIZER) -> list[PromptVersion]:
    return _versions(store.con, name)


def set_text(store: "Store", text: str, *, name: str = ORGANIZER, by: str = "user", note: str = "") -> tuple[PromptVersion, bool]:
    """Make ``text`` the prompt's new version. Returns (the current version, whether one was added):
    a text equal to the current one adds nothing."""
    if not text.strip():
        raise StoreError(f"the {name} instructions cannot be empty: give the full text")
    with store.writing():
        latest = current(store, name)
        if text == latest.text:
            return latest, False
        con = store.con
        con.execute("BEGIN")
        try:
            version = con.execute(bind("SELECT max(version) + 1 FROM prompts WHERE name = ?", [name])).fetchone()[0]
            con.execute(bind(f"INSERT INTO prompts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                             [name, int(version), text, _utc_now(), by, note])).fetchall()
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return current(store, name), True


def roll_back(store: "Store", version: int, *, name: str = ORGANIZER, by: str = "user") -> tuple[PromptVersion, bool]:
    """A new version whose text is ``version``'s (history is kept: a roll-back is itself a version)."""
    old = get(store, version, name)
    return set_text(store, old.text, name=name, by=by, note=f"roll back to version {version}")


@in_read_session
def diff(store: "Store", old: int, new: int, name: str = ORGANIZER) -> str:
    a, b = get(store, old, name), get(store, new, name)
    return "".join(difflib.unified_diff(a.text.splitlines(keepends=True), b.text.splitlines(keepends=True),
                                        fromfile=f"{name} v{old}", tofile=f"{name} v{new}"))


@in_read_session
def questions_by_version(store: "Store") -> dict[int, int]:
    """How many questions each instructions version created."""
    rows = store.con.execute("SELECT instructions_version, count(*) FROM questions "
                             "WHERE instructions_version IS NOT NULL GROUP BY 1").fetchall()
    return {int(v): int(n) for v, n in rows}


# ---------------------------------------------------------------------------- remembered messages
PENDING = "pending"
DONE = "done"


def mark_remembered(con, rows: Sequence[dict[str, Any]]) -> None:
    """Upsert the state of remembered messages (inside the caller's transaction).

    Each row: ``message``, ``status`` (pending | done), and optionally ``waiting_for``,
    ``reason``, ``organizer``, ``instructions_version``, ``reader``, ``questions``,
    ``organizer_calls``, ``reader_calls`` (calls add up over a message's attempts)."""
    now = _utc_now()
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
def remembered_state(store: "Store", message_id: str) -> dict[str, Any] | None:
    rows = pending_messages(store, message_ids=[message_id], status=None)
    return rows[0] if rows else None


@in_read_session
def pending_messages(store: "Store", *, limit: int | None = None, message_ids: list[str] | None = None,
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
def count_pending(store: "Store") -> int:
    return int(store.con.execute("SELECT count(*) FROM remembered WHERE status = 'pending'").fetchone()[0])


__all__ = ["ORGANIZER", "PromptVersion", "built_in_text", "current", "get", "history", "set_text", "roll_back",
           "diff", "questions_by_version", "seed_defaults", "mark_remembered", "pending_messages",
           "remembered_state", "count_pending", "PENDING", "DONE"]
