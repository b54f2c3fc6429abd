"""The organizer's versioned instructions (table ``prompts``).

How memory is organised is decided by a text, the organizer's instructions. It lives in the
store, one row per version: setting a new text adds a version, rolling back adds a version
whose text is an older one's, nothing is ever edited, so every change is a diff a person can
read (``doxa organizer-instructions diff 1 2``) and every question the organizer created names
the version it was made under (``questions.instructions_version``).

A new store gets the built-in text (``organizer_instructions.txt`` next to this module) as
version 1. A later doxa with a better built-in text does not change a store's instructions by
itself: ``doxa organizer-instructions set --default`` adopts it, as a new version.

The state of the messages ``remember`` took (pending or done) is in :mod:`doxa.data.remembered`.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from .connection import in_read_session
from .errors import StoreError
from .session import transaction
from .sql import bind
from .times import utc_now

if TYPE_CHECKING:
    from .session import Session

ORGANIZER = "organizer"
#: Prompt name → the resource file holding its built-in text.
BUILT_IN = {ORGANIZER: "organizer_instructions.txt"}


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
                             [name, built_in_text(name), utc_now()])).fetchall()


@in_read_session
def current(store: "Session", name: str = ORGANIZER) -> PromptVersion:
    """The prompt's latest version."""
    found = _versions(store.con, name)
    if not found:
        built_in_text(name)  # an unknown name says which exist
        raise StoreError(f"the store has no {name!r} prompt: open it read-write once so doxa stores the built-in one")
    return found[-1]


@in_read_session
def get(store: "Session", version: int, name: str = ORGANIZER) -> PromptVersion:
    found = _versions(store.con, name, version)
    if not found:
        known = [v.version for v in _versions(store.con, name)]
        raise StoreError(f"no version {version} of the {name} instructions: versions are {known}")
    return found[0]


@in_read_session
def history(store: "Session", name: str = ORGANIZER) -> list[PromptVersion]:
    return _versions(store.con, name)


def set_text(store: "Session", text: str, *, name: str = ORGANIZER, by: str = "user", note: str = "") -> tuple[PromptVersion, bool]:
    """Make ``text`` the prompt's new version. Returns (the current version, whether one was added):
    a text equal to the current one adds nothing."""
    if not text.strip():
        raise StoreError(f"the {name} instructions cannot be empty: give the full text")
    with store.writing():
        latest = current(store, name)
        if text == latest.text:
            return latest, False
        with transaction(store.con) as con:
            version = con.execute(bind("SELECT max(version) + 1 FROM prompts WHERE name = ?", [name])).fetchone()[0]
            con.execute(bind(f"INSERT INTO prompts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                             [name, int(version), text, utc_now(), by, note])).fetchall()
    return current(store, name), True


def roll_back(store: "Session", version: int, *, name: str = ORGANIZER, by: str = "user") -> tuple[PromptVersion, bool]:
    """A new version whose text is ``version``'s (history is kept: a roll-back is itself a version)."""
    old = get(store, version, name)
    return set_text(store, old.text, name=name, by=by, note=f"roll back to version {version}")


@in_read_session
def diff(store: "Session", old: int, new: int, name: str = ORGANIZER) -> str:
    a, b = get(store, old, name), get(store, new, name)
    return "".join(difflib.unified_diff(a.text.splitlines(keepends=True), b.text.splitlines(keepends=True),
                                        fromfile=f"{name} v{old}", tofile=f"{name} v{new}"))


@in_read_session
def questions_by_version(store: "Session") -> dict[int, int]:
    """How many questions each instructions version created."""
    rows = store.con.execute("SELECT instructions_version, count(*) FROM questions "
                             "WHERE instructions_version IS NOT NULL GROUP BY 1").fetchall()
    return {int(v): int(n) for v, n in rows}


__all__ = ["ORGANIZER", "PromptVersion", "built_in_text", "current", "get", "history", "set_text", "roll_back",
           "diff", "questions_by_version", "seed_defaults"]
