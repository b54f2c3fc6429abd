"""What one question's belief is computed from, kept beside the store for reads that need not open it.

`doxa belief` is a fresh process per question, and opening DuckDB alone is a tenth of the
interpreter's start, even for ``:memory:`` (figures: docs/measurements/2026-12-code-choices.md). So a belief read leaves, in ``<store>.beliefs/``,
the inputs of its question's belief (the kept filter state, prior, change rate, rejections,
calibration: :mod:`doxa.inference.read.states` says what) tagged with the store's
*generation*; a later read of that question finds them there and computes its belief without
opening the store, with the same numpy operations as every other read.

The generation lives in ``<store>.beliefs/generation``: a random token, the store file's (and
its write-ahead log's) inode, size and modification time when it began, the store's newest
evidence then, and the *links*: for each earlier generation still traced, the questions the
write that ended it changed. Opening the store for writing replaces it with a *writing* mark
(durably: fsync of the file and the folder, before any write can commit), and closing it with
a fresh generation; while the mark says writing, nothing is kept or used (a writer in another
process holds the file anyway; one in this process may share its database with a reader).

An entry counts if it was kept in the current generation, or in an earlier one that the links
trace, and no write since changed its question (what a write changed comes from the store's
own evidence epochs, the same bookkeeping that says when a kept filter state counts; a new
parameter version, a merge, split or undo, or a migration changes every question and ends the
trace). A reader reads the generation *before* it opens the store: a write that comes in
between either changes the file (the stamp no longer matches, nothing is used) or lists what
it changed in its link, so an entry read across it counts only for questions it left alone.
A store changed by anything else (a DuckDB shell, a backup copied over it) no longer matches
the stamp: nothing is used until a writer starts a fresh generation. A writer opens the trace
only where it found the previous generation closed and the file as that generation stamped
it; else (a writer that died, a file changed behind doxa's back) the trace starts afresh.

A writer also keeps the entries of the questions it changed (:func:`close_generation`), so
that the first read after a new message opens nothing either. It computes them just before it
closes the store, when nothing else can change it, takes the stamp after the close, and
starts the fresh generation only if the mark still says *its own* writing: a writer that
opened the store after the close marked it before any write of its own could commit, so either
this writer sees that mark and keeps nothing, or that write, coming later, changes the stamp.
Entries are plain files replaced atomically; a missing, torn or foreign one is a miss. The
folder holds at most one file per question ever read or written this way.

Names carry no hash (a fresh `doxa belief` would pay for importing hashlib): links list the
question ids themselves, and an entry is named by its id's bytes in hex (a long id by its
SHA-256). The generation file is ``generation-2``: the layout before it named entries and
keyed links by SHA-1 and kept ``generation``. A process of either layout never trusts the
other's files, and a write by either changes the store file, so the other's stamp no longer
matches: across an upgrade with both running, nothing stale is used.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .durable import beside_store, rename_into_place, store_file

GENERATION = "generation-2"


def cache_dir(db_path: str) -> Path:
    return beside_store(db_path, ".beliefs")


def _replace(folder: Path, name: str, text: str, *, durable: bool) -> None:
    temporary = folder / f".tmp-{os.getpid()}-{os.urandom(4).hex()}-{name}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    rename_into_place(temporary, folder / name, durable=durable)


WRITING = "writing-"
#: the links trace at most this many changed questions and this many writes; beyond, the oldest go
MAX_TRACED_QUESTIONS = 2000
MAX_TRACED_WRITES = 200


@dataclass
class Generation:
    """The store's generation (see the module docstring)."""

    token: str
    stamp: list | None  # file_stamp() when it began
    newest_days: float | None  # the store's newest evidence then (days); a read before it is filtered
    links: list  # [[earlier token, [ids of the questions the write that ended it changed]], ...], oldest first


def _marked(db_path: str) -> dict[str, Any] | None:
    try:
        state = json.loads((cache_dir(db_path) / GENERATION).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def open_generation(db_path: str) -> str:
    """A writer has opened the store (call before any write can commit): nothing is kept or used
    until it closes. Returns its writing mark for :func:`close_generation`."""
    folder = cache_dir(db_path)
    folder.mkdir(exist_ok=True)
    current = _marked(db_path)
    traced = (current is not None and isinstance(current.get("token"), str)
              and current.get("stamp") == file_stamp(db_path) and isinstance(current.get("links"), list))
    mark = WRITING + os.urandom(12).hex()
    _replace(folder, GENERATION, json.dumps({"writing": mark, "from": current["token"] if traced else None,
                                             "links": current["links"] if traced else []}), durable=True)
    return mark


def close_generation(db_path: str, writing_mark: str, entries: dict[str, dict[str, Any]] | None = None, *,
                     changed: "list[str] | None" = None, newest_days: float | None = None) -> bool:
    """The writer that opened the store with ``writing_mark`` has closed it: start a fresh
    generation, linked to the one it opened on through ``changed`` (the questions it changed;
    None: every question, or not known), and keep ``entries`` (question id → entry, computed
    before the close) in it. ``newest_days``: the store's newest evidence. Nothing is done where
    another writer has opened the store since (its close starts the next generation). Returns
    whether the fresh generation was started."""
    stamp = file_stamp(db_path)  # after the close: closing may checkpoint into the file
    current = _marked(db_path)
    if current is None or current.get("writing") != writing_mark:
        return False
    links: list = []
    if changed is not None and current.get("from") is not None:
        links = list(current.get("links") or []) + [[current["from"], sorted(set(changed))]]
        while links and (len(links) > MAX_TRACED_WRITES or sum(len(keys) for _, keys in links) > MAX_TRACED_QUESTIONS):
            links.pop(0)
    token = os.urandom(12).hex()
    _replace(cache_dir(db_path), GENERATION, json.dumps({"token": token, "stamp": stamp, "newest_days": newest_days,
                                                         "links": links}), durable=False)
    if stamp is not None:
        for question, entry in (entries or {}).items():
            save(db_path, question, token, entry)
    return True


def generation(db_path: str) -> Generation | None:
    """The store's generation; None while a writer has it open, or before any writer marked one:
    then nothing may be kept or used. The caller compares its ``stamp`` with :func:`file_stamp`."""
    state = _marked(db_path)
    if state is None or not isinstance(state.get("token"), str):
        return None
    return Generation(token=state["token"], stamp=state.get("stamp"), newest_days=state.get("newest_days"),
                      links=state.get("links") or [])


def file_stamp(db_path: str) -> list | None:
    """The store file's and its write-ahead log's (inode, size, modification time); None without a store."""
    stamp = []
    file = store_file(db_path)
    for path in (file, file + ".wal"):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if path == file:
                return None
            stamp.append(None)
            continue
        except OSError:
            return None
        stamp.append([info.st_ino, info.st_size, info.st_mtime_ns])
    return stamp


#: ids longer than this (in UTF-8 bytes) name their entry by a hash: a file name stays under 255 bytes
LONGEST_NAMED_ID = 100


def _entry_name(question: str) -> str:
    raw = question.encode("utf-8")
    if len(raw) <= LONGEST_NAMED_ID:
        return "q-" + raw.hex() + ".json"
    import hashlib  # only here: the common path stays free of it

    return "h-" + hashlib.sha256(raw).hexdigest() + ".json"


def clear_entries(db_path: str) -> int:
    """Delete every kept entry (not the generation file): after an erasure, entries computed before it
    hold what reads of the forgotten evidence computed. Returns how many were removed."""
    folder = cache_dir(db_path)
    removed = 0
    if folder.is_dir():
        for entry in [*folder.glob("q-*.json"), *folder.glob("h-*.json")]:  # the names of _entry_name
            entry.unlink(missing_ok=True)
            removed += 1
    return removed


def load(db_path: str, question: str, current: Generation) -> dict[str, Any] | None:
    """The entry of ``question`` that counts in generation ``current``, or None."""
    try:
        entry = json.loads((cache_dir(db_path) / _entry_name(question)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("question") != question:
        return None
    kept_in = entry.get("generation")
    if kept_in == current.token:
        return entry
    for i, (earlier, _) in enumerate(current.links):
        if earlier == kept_in:
            return None if any(question in changed for _, changed in current.links[i:]) else entry
    return None


def save(db_path: str, question: str, token: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` for ``question`` in generation ``token``, read before the store was opened
    for it (best effort: a cache never fails a read)."""
    folder = cache_dir(db_path)
    try:
        if not folder.is_dir():
            return  # no writer has marked a generation: nothing to tag the entry with
        text = json.dumps({**entry, "question": question, "generation": token}, allow_nan=True)
        _replace(folder, _entry_name(question), text, durable=False)
    except OSError:
        pass


__all__ = ["Generation", "cache_dir", "open_generation", "close_generation", "generation", "file_stamp", "clear_entries",
           "load", "save", "WRITING"]
