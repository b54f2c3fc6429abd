"""What one question's belief is computed from, kept beside the store for reads that need not open it.

`doxa belief` is a fresh process per question, and opening DuckDB alone costs ~15 ms (even for
``:memory:``) of a ~145 ms interpreter start. So a belief read leaves, in ``<store>.beliefs/``,
the inputs of its question's belief (the kept filter state, prior, change rate, rejections,
calibration: :mod:`doxa.inference.read.states` says what) tagged with the store's
*generation*; a later read of that question finds them there and computes its belief without
opening the store, with the same numpy operations as every other read.

The generation is a random token in ``<store>.beliefs/generation``. Opening the store for
writing replaces it with a *writing* token (durably: fsync of the file and the folder, before
any write can commit), and closing it again with a fresh one; while the token says writing,
nothing is kept or used (a writer in another process holds the file anyway; one in this
process may share its database with a reader). So an entry is used only if no writer has
opened the store since the entry's reader read the token. A reader reads the token *before*
it opens the store: a write that comes in between moves the token on, and the entry, tagged
with the old one, is never used. A writer that dies leaves the writing token: nothing is
used until the next writer closes. An entry also holds the store file's (and its write-ahead
log's) inode, size and modification time as they were before its read: a store changed by
anything else (a DuckDB shell, a backup copied over it) or gone misses too. Entries are plain
files replaced atomically; a missing, torn or foreign one is a miss. The folder holds at most
one file per question ever read this way.

A writer keeps the entries of the questions it changed (:func:`close_generation`), so that the
first read after a new message opens nothing either. It computes them just before it closes
the store, when nothing else can change it, takes the file stamp after the close, and tags them
with the fresh token only if the token still says *its own* writing: a writer that opened the
store after the close has marked it writing before any write of its own could commit, so either
this writer sees that mark and keeps nothing, or that write, coming later, changes the stamp.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .durable import rename_into_place

GENERATION = "generation"


def cache_dir(db_path: str) -> Path:
    return Path(str(db_path) + ".beliefs")


def _replace(folder: Path, name: str, text: str, *, durable: bool) -> None:
    temporary = folder / f".tmp-{os.getpid()}-{os.urandom(4).hex()}-{name}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    rename_into_place(temporary, folder / name, durable=durable)


WRITING = "writing-"


def open_generation(db_path: str) -> str:
    """A writer has opened the store (call before any write can commit): every entry kept so far
    stops counting, and nothing is kept or used until it closes. Returns its writing token."""
    folder = cache_dir(db_path)
    folder.mkdir(exist_ok=True)
    token = WRITING + os.urandom(12).hex()
    _replace(folder, GENERATION, token, durable=True)
    return token


def _token(db_path: str) -> str | None:
    try:
        return (cache_dir(db_path) / GENERATION).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def close_generation(db_path: str, writing_token: str, entries: dict[str, dict[str, Any]] | None = None) -> bool:
    """The writer that opened the store with ``writing_token`` has closed it: start a fresh
    generation and keep ``entries`` (question id → entry, computed before the close) in it.
    Nothing is done where another writer has opened the store since (its close starts the next
    generation). Returns whether the fresh generation was started."""
    stamp = file_stamp(db_path)  # after the close: closing may checkpoint into the file
    if _token(db_path) != writing_token:
        return False
    token = os.urandom(12).hex()
    _replace(cache_dir(db_path), GENERATION, token, durable=False)
    if stamp is not None:
        for question, entry in (entries or {}).items():
            save(db_path, question, token, stamp, entry)
    return True


def generation(db_path: str) -> str | None:
    """The store's generation; None while a writer has it open, or before any writer marked one:
    then nothing may be kept or used."""
    token = _token(db_path)
    return None if token is None or token.startswith(WRITING) else token


def file_stamp(db_path: str) -> list | None:
    """The store file's and its write-ahead log's (inode, size, modification time); None without a store."""
    stamp = []
    for path in (str(db_path), str(db_path) + ".wal"):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if path == str(db_path):
                return None
            stamp.append(None)
            continue
        except OSError:
            return None
        stamp.append([info.st_ino, info.st_size, info.st_mtime_ns])
    return stamp


def _entry_name(question: str) -> str:
    return hashlib.sha1(question.encode("utf-8")).hexdigest()[:24] + ".json"


def load(db_path: str, question: str, generation_token: str, stamp: list) -> dict[str, Any] | None:
    """The entry of ``question`` kept under ``generation_token`` and the store's ``stamp`` (:func:`file_stamp`), or None."""
    try:
        entry = json.loads((cache_dir(db_path) / _entry_name(question)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (not isinstance(entry, dict) or entry.get("generation") != generation_token or entry.get("question") != question
            or entry.get("file_stamp") != stamp):
        return None
    return entry


def save(db_path: str, question: str, generation_token: str, stamp: list, entry: dict[str, Any]) -> None:
    """Keep ``entry`` for ``question`` under ``generation_token`` and ``stamp``, both read before the
    store was opened for it (best effort: a cache never fails a read)."""
    folder = cache_dir(db_path)
    try:
        if not folder.is_dir():
            return  # no writer has marked a generation: nothing to tag the entry with
        text = json.dumps({**entry, "question": question, "generation": generation_token, "file_stamp": stamp},
                          allow_nan=True)
        _replace(folder, _entry_name(question), text, durable=False)
    except OSError:
        pass


__all__ = ["cache_dir", "open_generation", "close_generation", "generation", "file_stamp", "load", "save", "WRITING"]
