"""Opening the store's DuckDB file, waiting (bounded, with backoff) while another process holds it.

DuckDB lets one process open a file read-write, or any number open it read-only, never
both. doxa therefore holds the file only for the milliseconds an operation needs (see
docs/concurrency.md); a process that finds it held waits — short sleeps growing
geometrically, each drawn at random around its nominal length so that processes that
collided once do not collide again in step — and gives up after ``timeout`` seconds
with an error naming the process that holds the file.
"""

from __future__ import annotations

import os
import random
import re
import time

import duckdb

from .errors import StoreError

#: How long an open waits for a busy store by default (seconds); ``$DOXA_LOCK_TIMEOUT`` overrides.
DEFAULT_LOCK_TIMEOUT = 30.0
FIRST_WAIT = 0.004
LONGEST_WAIT = 0.25

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


def open_error(path: str, error: Exception) -> StoreError:
    """The store-open failure as a person can act on it (everything but a lock conflict)."""
    if os.path.isdir(path):
        return StoreError(f"cannot open {path}: it is a directory; give the path of a store file with --db")
    return StoreError(f"cannot open {path}: {error}")


def busy_error(path: str, holder: tuple[int, str], waited: float, read_only: bool) -> StoreBusy:
    pid, program = holder
    wanted = "read" if read_only else "write"
    return StoreBusy(
        f"cannot {wanted} {path}: process {pid} ({program}) held the store for the whole {waited:.1f} s wait. "
        f"doxa commands hold a store only for moments, so that process is probably another program with the "
        f"file open (a DuckDB shell, a notebook): close it, or wait longer with DOXA_LOCK_TIMEOUT=<seconds>",
        holder_pid=pid)


def connect(path: str, *, read_only: bool, timeout: float | None = None) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect(path)``, waiting up to ``timeout`` seconds while another process holds the file."""
    timeout = lock_timeout() if timeout is None else timeout
    started = time.monotonic()
    nominal = FIRST_WAIT
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.ConnectionException as err:
            # this process already has the file open with the other mode: share that instance
            if "different configuration" in str(err) and read_only:
                return duckdb.connect(path, read_only=False)
            raise open_error(path, err) from err
        except duckdb.IOException as err:
            holder = lock_holder(err)
            if holder is None:
                raise open_error(path, err) from err
            waited = time.monotonic() - started
            if waited >= timeout:
                raise busy_error(path, holder, waited, read_only) from err
            pause = min(nominal * random.uniform(0.5, 1.5), max(timeout - waited, 0.0))
            time.sleep(pause)
            nominal = min(nominal * 2.0, LONGEST_WAIT)


__all__ = ["connect", "lock_holder", "lock_timeout", "StoreBusy", "DEFAULT_LOCK_TIMEOUT"]
