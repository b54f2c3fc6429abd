"""Errors doxa reports to people (kept import-light: the read path needs them)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_REPORTED_PROBLEMS = 20


@dataclass
class Problem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class IngestError(ValueError):
    """The input was refused; nothing was written. ``problems`` lists each line's fault."""

    def __init__(self, problems: list[Problem], total: int | None = None):
        self.problems = problems
        self.total = total if total is not None else len(problems)
        shown = "\n".join(f"  {p}" for p in problems[:MAX_REPORTED_PROBLEMS])
        more = self.total - min(len(problems), MAX_REPORTED_PROBLEMS)
        tail = f"\n  … and {more} more" if more > 0 else ""
        super().__init__(
            f"refused: {self.total} problem(s); nothing was ingested. Fix these lines and ingest the file again:\n"
            f"{shown}{tail}"
        )


class StoreError(RuntimeError):
    """A store-level problem with a message that says how to fix it."""
