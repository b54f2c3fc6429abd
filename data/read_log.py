"""The read log's side files: a read is logged without the store's write lock, and a logged read is never lost.

A read holds the store read-only, which any number of processes may do at once; it cannot
insert into ``reads``. So each read (one `doxa belief`, or 100,000 beliefs at once) writes
its rows to a file of its own in ``<store>.reads/``: first under a hidden temporary
name, then fsync, then an atomic rename to its final name and an fsync of the folder.
A file under a final name is therefore complete and durable; one under a temporary
name belongs to a read that had not returned yet (its process died, or is still writing).

The next process that opens the store for writing folds every complete file into
``reads`` in one transaction that also records the files' names in ``read_logs``; the
files are deleted after the commit. A crash between the commit and the deletion leaves
files whose names ``read_logs`` holds: the next fold deletes them without inserting them
twice. Few rows (`doxa belief`) go as JSON Lines (no pyarrow import on the fast path);
many as Parquet.

The folder sits beside the store's real file (a ``--db`` through a symlink logs where the
writers, given the real path, fold). Logging is best effort: where the folder cannot be
written (a store the user may read but not write) reads go on unlogged, and the process
says so once on standard error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from .connection import remove_dead_writers_files
from .durable import beside_store, rename_into_place
from .session import transaction
from .times import utc_now

#: Above this many reads a side file is Parquet (written from the scorer's arrays).
SMALL_LOG = 5000


def log_dir(db_path: str) -> Path:
    return beside_store(db_path, ".reads")


#: whether this process has said that it cannot log reads (it says so once)
_warned_unlogged = False


def _publish(folder: Path, suffix: str, write) -> Path | None:
    """Write a side file under a temporary name, make it durable, and give it its final name.

    Best effort: where the folder cannot be written (a store the user may read but not write,
    a full disk) the read is not logged, and the process says so once on standard error;
    the read itself goes on. Returns the file, or None when nothing was logged.
    """
    temporary = None
    try:
        folder.mkdir(exist_ok=True)
        stem = f"{os.getpid()}-{time.time_ns()}-{os.urandom(4).hex()}"
        temporary = folder / f".tmp-{stem}{suffix}"
        write(temporary)
        final = folder / f"{stem}{suffix}"
        rename_into_place(temporary, final)
        return final
    except OSError as err:
        if temporary is not None:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
        _warn_unlogged(folder, err)
        return None


def _warn_unlogged(folder: Path, err: OSError) -> None:
    global _warned_unlogged
    if _warned_unlogged:
        return
    _warned_unlogged = True
    reason = err.strerror or str(err)
    print(f"doxa: warning: reads are not logged: cannot write the read log {folder} ({reason}). Beliefs are "
          "unaffected; to log reads, let this user write the store's folder (or use a copy of the store)",
          file=sys.stderr, flush=True)


def append_rows(db_path: str, rows) -> Path | None:
    """rows: (question, asked_at, probabilities in option order, top, p_top, params_version)."""
    read_at = utc_now().isoformat()
    text = "".join(json.dumps({"question": q, "asked_at": at.isoformat(), "read_at": read_at,
                               "probs": [float(x) for x in probs], "top": top, "p_top": float(p),
                               "params_version": v}) + "\n"
                   for q, at, probs, top, p, v in rows)

    def write(path: Path) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)

    return _publish(log_dir(db_path), ".jsonl", write)


def append_matrix(db_path: str, question_ids: np.ndarray, asked_at: datetime, probs: np.ndarray,
                  n_options: np.ndarray, params_version: int | None) -> Path | None:
    """Many reads from the scorer's arrays (``probs`` (Q, K_max), rounded to 1e-6) as one Parquet file."""
    table = matrix_table(question_ids, asked_at, probs, n_options, params_version)
    import pyarrow.parquet as pq

    return _publish(log_dir(db_path), ".parquet", lambda path: pq.write_table(
        table, path, compression="none", use_dictionary=False, write_statistics=False))  # a third of the default cost


def matrix_table(question_ids: np.ndarray, asked_at: datetime, probs: np.ndarray, n_options: np.ndarray,
                 params_version: int | None):
    """The reads as an Arrow table built from buffers (no per-row Python work but converting the ids)."""
    import pyarrow as pa

    def buffer_array(values: np.ndarray, kind) -> "pa.Array":
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])

    n = len(question_ids)
    k = np.asarray(n_options, dtype=np.int64)
    mask = np.arange(probs.shape[1])[None, :] < k[:, None]
    rounded = np.round(probs, 6)
    offsets = np.zeros(n + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(k)
    stamp = lambda moment: buffer_array(  # noqa: E731
        np.full(n, np.datetime64(moment, "us").astype(np.int64)), pa.timestamp("us"))
    return pa.Table.from_arrays(
        # from a list, Arrow converts the ids in C, several times faster than encoding them here
        [pa.array(np.asarray(question_ids, dtype=object).tolist(), pa.string()),
         stamp(asked_at), stamp(utc_now()),
         pa.ListArray.from_arrays(buffer_array(offsets, pa.int32()), buffer_array(rounded[mask], pa.float64())),
         buffer_array(np.argmax(rounded, axis=1).astype(np.int64) if n else np.zeros(0, np.int64), pa.int64()),
         buffer_array(rounded.max(axis=1) if n else np.zeros(0), pa.float64()),
         pa.array([params_version] * n, pa.int32())],
        names=["question", "asked_at", "read_at", "probs", "top", "p_top", "params_version"],
    )


def complete_files(db_path: str) -> list[Path]:
    folder = log_dir(db_path)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.suffix in (".jsonl", ".parquet"))


def pending_rows(db_path: str, con) -> int:
    """Reads logged in side files not yet folded into ``reads``."""
    files = complete_files(db_path)
    if not files:
        return 0
    folded = _folded_names(con, files)
    total = 0
    for path in files:
        if path.name in folded:
            continue
        if path.suffix == ".jsonl":
            with open(path, "rb") as handle:
                total += handle.read().count(b"\n")
        else:
            total += con.execute(f"SELECT count(*) FROM read_parquet({_literal(path)})").fetchone()[0]
    return total


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _folded_names(con, files: list[Path]) -> set[str]:
    names = ", ".join(_literal(Path(p.name)) for p in files)
    return {r[0] for r in con.execute(f"SELECT name FROM read_logs WHERE name IN ({names})").fetchall()}


_JSON_COLUMNS = ("{'question': 'VARCHAR', 'asked_at': 'TIMESTAMP', 'read_at': 'TIMESTAMP', 'probs': 'DOUBLE[]', "
                 "'top': 'VARCHAR', 'p_top': 'DOUBLE', 'params_version': 'INTEGER'}")


def fold(con, db_path: str) -> int:
    """Move every complete side file into ``reads`` (one transaction), then delete the files.

    Runs in a process that holds the store read-write. Returns how many reads were folded.
    """
    folder = log_dir(db_path)
    if not folder.is_dir():
        return 0
    remove_dead_writers_files(folder, ".tmp-")  # a read that died before its rename was never acknowledged
    files = complete_files(db_path)
    if not files:
        if con.execute("SELECT count(*) FROM read_logs").fetchone()[0]:
            con.execute("DELETE FROM read_logs").fetchall()  # their files are gone: forget the names
        return 0
    folded_before = _folded_names(con, files)
    new = [p for p in files if p.name not in folded_before]
    jsonl = [p for p in new if p.suffix == ".jsonl"]
    parquet = [p for p in new if p.suffix == ".parquet"]
    added = 0
    with transaction(con):
        before = con.execute("SELECT count(*) FROM reads").fetchone()[0]
        if jsonl:
            listed = ", ".join(_literal(p) for p in jsonl)
            con.execute(f"""INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version)
                            SELECT question, asked_at, read_at, probs, top, p_top, params_version
                            FROM read_json([{listed}], columns = {_JSON_COLUMNS}, format = 'newline_delimited')
                         """).fetchall()
        if parquet:
            listed = ", ".join(_literal(p) for p in parquet)
            con.execute(f"""INSERT INTO reads (question, asked_at, read_at, probs, top, p_top, params_version)
                            SELECT s.question, s.asked_at, s.read_at, s.probs,
                                   CASE WHEN s.p_top > 0 THEN q.options[s.top + 1] ELSE '' END, s.p_top,
                                   s.params_version
                            FROM read_parquet([{listed}]) s JOIN questions q ON q.id = s.question""").fetchall()
        added = con.execute("SELECT count(*) FROM reads").fetchone()[0] - before
        # names of files already gone are no longer needed: the table holds only the files on disk
        present = ", ".join(_literal(Path(p.name)) for p in files)
        con.execute(f"DELETE FROM read_logs WHERE name NOT IN ({present})").fetchall()
        if new:
            values = ", ".join(f"({_literal(Path(p.name))}, now()::TIMESTAMP)" for p in new)
            con.execute(f"INSERT INTO read_logs (name, folded_at) VALUES {values}").fetchall()
    for path in files:
        path.unlink(missing_ok=True)
    return int(added)


__all__ = ["append_rows", "append_matrix", "fold", "pending_rows", "complete_files", "log_dir", "SMALL_LOG"]
