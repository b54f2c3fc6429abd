"""Errors doxa reports to people (kept import-light: the read path needs them).

Every refusal names what is wrong and what to do about it. An ingest problem carries
its line, the field at fault, the reason and the fix apart, so the command line can
print them for a person or hand them over as JSON (``{line, field, reason, fix}``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: A person reads the first this many problems of a refused file (as text or as JSON); the rest are counted.
MAX_REPORTED_PROBLEMS = 20
#: Ingest keeps at most this many problems of a file and only counts the rest: a file of bad lines
#: costs the memory of this many problems, however long it is.
MAX_KEPT_PROBLEMS = 1000


@dataclass
class Problem:
    """One fault of one input line: ``reason`` says what is wrong, ``fix`` what to change."""

    line: int
    reason: str
    fix: str = ""
    field: str = ""

    @property
    def message(self) -> str:
        return f"{self.reason}: {self.fix}" if self.fix else self.reason

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "field": self.field or None, "reason": self.reason, "fix": self.fix or None}


class Problems(list):
    """Problems kept up to MAX_KEPT_PROBLEMS (the first found); ``dropped`` counts the rest."""

    def __init__(self, problems=()):
        super().__init__()
        self.dropped = 0
        self.extend(problems)

    def append(self, problem: Problem) -> None:
        if len(self) < MAX_KEPT_PROBLEMS:
            super().append(problem)
        else:
            self.dropped += 1

    def extend(self, problems) -> None:
        for problem in problems:
            self.append(problem)
        self.dropped += getattr(problems, "dropped", 0)

    def __iadd__(self, problems):
        self.extend(problems)
        return self

    def add(self, line: int, reason: str, fix: str = "", field: str = "") -> None:
        self.append(Problem(line, reason, fix, field))

    @property
    def total(self) -> int:
        return len(self) + self.dropped


class IngestError(ValueError):
    """The input was refused; nothing was written. ``problems`` lists each line's fault."""

    def __init__(self, problems: list[Problem], total: int | None = None):
        self.problems = sorted(problems, key=lambda p: p.line)
        self.total = total if total is not None else len(problems)
        shown = "\n".join(f"  {p}" for p in self.problems[:MAX_REPORTED_PROBLEMS])
        more = self.total - min(len(self.problems), MAX_REPORTED_PROBLEMS)
        tail = f"\n  … and {more} more" if more > 0 else ""
        self.summary = f"refused: {self.total} problem(s); nothing was ingested"
        super().__init__(f"{self.summary}. Fix these lines and ingest the file again:\n{shown}{tail}")

    def to_dict(self) -> dict[str, Any]:
        """``{error, total, problems, more}``: the first MAX_REPORTED_PROBLEMS problems, as the text
        shows them, and how many more there are."""
        shown = self.problems[:MAX_REPORTED_PROBLEMS]
        return {"error": self.summary, "total": self.total, "problems": [p.to_dict() for p in shown],
                "more": self.total - len(shown)}


class StoreError(RuntimeError):
    """A store-level problem with a message that says how to fix it."""

    def to_dict(self) -> dict[str, Any]:
        return {"error": str(self), "problems": []}


_LOCK_PID = re.compile(r"\(PID (\d+)\)")
_LOCK_PROGRAM = re.compile(r"lock is held in (.+?) \(PID")


def lock_held_message(path: str, detail: str, waited: float | None = None) -> str:
    """What to tell a person whose store another process holds (``detail``: DuckDB's own message;
    ``waited``: how long doxa waited for it, see doxa.data.connection)."""
    pid = _LOCK_PID.search(detail)
    program = _LOCK_PROGRAM.search(detail)
    holder = f"process {pid.group(1)}" if pid else "another process"
    if program:
        holder += f" ({program.group(1)})"
    if waited is None:
        return (f"{path} is in use: {holder} holds its lock. Wait for it to finish (a `doxa train` or a long "
                f"ingest), or stop it, then run the command again")
    return (f"{path} is in use: {holder} holds its lock and kept it for the whole {waited:.1f} s wait. doxa "
            f"commands hold a store only for moments, so that process is probably another program with the file "
            f"open (a DuckDB shell, a notebook): close it, or wait longer with DOXA_LOCK_TIMEOUT=<seconds>")


def store_open_message(path: str, detail: str) -> str:
    """The real cause of a failed open, from DuckDB's message (a lock, a directory, not a store)."""
    if "Conflicting lock" in detail or "Could not set lock" in detail:
        return lock_held_message(path, detail)
    if "Is a directory" in detail:
        return f"{path} is a directory, not a doxa store: give the path of a store file, e.g. --db {path}/doxa.duckdb"
    if "not a valid DuckDB database" in detail:
        return f"{path} is not a doxa store (not a DuckDB file): give another path, or `doxa init --db NEW_PATH`"
    if "Permission denied" in detail:
        return f"cannot open {path}: permission denied. Check the file's and its folder's permissions"
    return f"cannot open {path}: {detail}"
