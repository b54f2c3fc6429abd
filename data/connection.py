"""Opening the store's DuckDB file, waiting (bounded, with backoff) while another process holds it.

DuckDB lets one process open a file read-write, or any number open it read-only, never
both. doxa therefore holds the file only for the milliseconds an operation needs (see
docs/concurrency.md); a process that finds it held waits — short sleeps growing
geometrically, each drawn at random around its nominal length so that processes that
collided once do not collide again in step — and gives up after ``timeout`` seconds
with an error naming the process that holds the file.
"""

from __future__ import annotations

import errno
import functools
import os
import random
import re
import shutil
import time
from pathlib import Path

import duckdb

from .errors import StoreError, lock_held_message, store_open_message

#: How long an open waits for a busy store by default (seconds); ``$DOXA_LOCK_TIMEOUT`` overrides.
DEFAULT_LOCK_TIMEOUT = 30.0
FIRST_WAIT = 0.004
LONGEST_WAIT = 0.25

def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (one of another user's counts as running).

    Staged files carry their writer's pid in their name: only a dead writer's are removed.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_writers_files(folder, prefix: str) -> list:
    """Delete the files (and folders) ``<prefix><pid>-…`` in ``folder`` whose writer ``pid`` is dead (not this
    process).

    A file staged under a temporary name was never acknowledged: a writer killed before its
    rename leaves it behind, and nothing else will ever read it.
    """
    removed = []
    for path in Path(folder).glob(f"{prefix}*"):
        pid = path.name[len(prefix):].split("-")[0].split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            if path.is_dir():  # a staging folder (data/fast_ingest.py)
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


_HOLDER = re.compile(r"Conflicting lock is held in (?P<program>.*?) \(PID (?P<pid>\d+)\)")


class StoreBusy(StoreError):
    """The store stayed held by another process for the whole wait. ``holder_pid`` names it."""

    def __init__(self, message: str, holder_pid: int | None):
        super().__init__(message)
        self.holder_pid = holder_pid


def lock_timeout() -> float:
    value = os.environ.get("DOXA_LOCK_TIMEOUT")
    if not value:
        return DEFAULT_LOCK_TIMEOUT
    try:
        return max(0.0, float(value))
    except ValueError:
        raise StoreError(f"DOXA_LOCK_TIMEOUT must be a number of seconds, not {value!r}") from None


def lock_holder(error: Exception) -> tuple[int, str] | None:
    """(PID, program) of the process holding the file, when ``error`` is DuckDB's lock conflict."""
    found = _HOLDER.search(str(error))
    return (int(found["pid"]), found["program"]) if found else None


#: Nothing doxa does needs a DuckDB extension; left on, opening a SQLite file as a store
#: makes DuckDB download one from the network.
CONNECT_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB file


def not_a_store(path: str) -> str | None:
    """Why ``path`` cannot be a doxa store, judged before DuckDB touches it (None: it may be one)."""
    target = Path(path)
    if target.is_dir():
        return f"{path} is a directory, not a doxa store: give the path of a store file, e.g. --db {path}/doxa.duckdb"
    try:
        with open(target, "rb") as handle:
            head = handle.read(16)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except PermissionError:
        return f"cannot read {path}: permission denied. Check the file's permissions"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return (f"{path}: symlink loop (the link leads back to itself, never to a file): give the path "
                    f"of a store file, or point the link at one")
        return f"cannot read {path}: {err.strerror or err}"
    if not head or head[8:12] == _DUCKDB_MAGIC:
        return None
    what = "a SQLite database" if head.startswith(b"SQLite format 3") else "not a DuckDB file"
    return f"{path} is not a doxa store ({what}): give the path of a doxa store, or `doxa init --db NEW_PATH`"


def connect(path: str, *, read_only: bool = False, timeout: float | None = None) -> duckdb.DuckDBPyConnection:
    """Every connection doxa makes: extensions never load or install themselves, and a file another
    process holds is waited for up to ``timeout`` seconds (default :func:`lock_timeout`).

    Raises :class:`StoreBusy` naming the holder after the wait, and :class:`StoreError` naming
    the real cause of any other failure (a directory, not a DuckDB file; see
    :func:`doxa.data.errors.store_open_message`).
    """
    if path != ":memory:":
        reason = not_a_store(path)
        if reason is not None:
            raise StoreError(reason)
    timeout = lock_timeout() if timeout is None else timeout
    started = time.monotonic()
    nominal = FIRST_WAIT
    while True:
        try:
            return duckdb.connect(path, read_only=read_only, config=CONNECT_CONFIG)
        except duckdb.ConnectionException as err:
            # this process already has the file open with the other mode: share that instance
            if "different configuration" in str(err) and read_only:
                return duckdb.connect(path, read_only=False, config=CONNECT_CONFIG)
            raise StoreError(store_open_message(path, str(err))) from err
        except (duckdb.IOException, duckdb.InvalidInputException, duckdb.SerializationException) as err:
            detail = str(err).removeprefix("IO Error: ")
            holder = lock_holder(err)
            if holder is None:
                raise StoreError(store_open_message(path, detail)) from err
            waited = time.monotonic() - started
            if waited >= timeout:
                raise StoreBusy(lock_held_message(path, detail, waited), holder_pid=holder[0]) from err
            pause = min(nominal * random.uniform(0.5, 1.5), max(timeout - waited, 0.0))
            time.sleep(pause)
            nominal = min(nominal * 2.0, LONGEST_WAIT)


def in_read_session(function):
    """Run ``function(store, …)`` inside a read session of ``store`` (a no-op when one is already open): the one
    decorator for data-layer queries and the store's own query methods."""

    @functools.wraps(function)
    def wrapper(store, *args, **kwargs):
        with store.reading():
            return function(store, *args, **kwargs)

    return wrapper


__all__ = ["connect", "in_read_session", "not_a_store", "lock_holder", "lock_timeout", "StoreBusy",
           "CONNECT_CONFIG", "DEFAULT_LOCK_TIMEOUT"]
