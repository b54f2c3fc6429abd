"""What a reader returns: a :class:`Reading` checked against docs/formats.md's rules, and the :class:`Reader` interface."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Mapping

from doxa.data.models import SUM_TOLERANCE, reading_mass_problem  # noqa: F401  (SUM_TOLERANCE: readers' API)

UNCLEAR = "unclear"
UNRELATED = "unrelated"


class ReaderError(RuntimeError):
    """A reader could not produce a reading; the message says what went wrong and how to fix it."""


class ReadingFormatError(ValueError):
    """A reading record is malformed; the message names the line, the field and the fix."""


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Reading:
    """One reader's output for one (message, question).

    ``probs`` maps every option of the question to the probability that the message
    states it; ``probs + unclear + unrelated`` sums to 1. ``one_off`` in [0, 1] is the
    probability that the message describes a one-off rather than a lasting state.
    """

    probs: dict[str, float]
    unclear: float
    unrelated: float
    one_off: float = 0.0
    reader: str = "unknown"
    reader_version: str = ""

    def __post_init__(self) -> None:
        problem = _reading_problem(self.probs, self.unclear, self.unrelated, self.one_off)
        if problem:
            raise ValueError(f"invalid reading from reader {self.reader!r}: {problem}")

    @property
    def top(self) -> str:
        """The option the message most likely states (ignoring unclear / unrelated)."""
        return max(self.probs, key=self.probs.__getitem__)

    def to_record(self, message_id: str, question_id: str) -> dict[str, Any]:
        """The docs/formats.md ``reading`` record for this reading, ready for ``doxa ingest``.

        ``reader_version`` is written when set (it fills the store's ``reader_version``
        column).
        """
        record: dict[str, Any] = {
            "type": "reading",
            "message": message_id,
            "question": question_id,
            "reader": self.reader,
            "probs": dict(self.probs),
            "unclear": self.unclear,
            "unrelated": self.unrelated,
            "one_off": self.one_off,
        }
        if self.reader_version:
            record["reader_version"] = self.reader_version
        return record


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _reading_problem(
    probs: Any, unclear: Any, unrelated: Any, one_off: Any
) -> str | None:
    """Why these fields are not a valid reading, or None when they are: their types here
    (a reader's output is not parsed by pydantic), their values by the store's own check."""
    if not isinstance(probs, Mapping) or not probs:
        return "probs: expected a non-empty object {option: probability}"
    for option, p in probs.items():
        if not isinstance(option, str):
            return f"probs: option {option!r} is not a string"
        if not _is_number(p):
            return f"probs[{option!r}] must be a number in [0, 1], got {p!r}"
    for name, value in (("unclear", unclear), ("unrelated", unrelated), ("one_off", one_off)):
        if not _is_number(value):
            return f"{name} must be a number in [0, 1], got {value!r}"
    return reading_mass_problem(probs, unclear, unrelated, one_off)


# --------------------------------------------------------------------------- reader


class Reader(abc.ABC):
    """Reads a message against a question.

    Subclasses set ``name`` and ``version`` (written into every reading: the nightly
    fit learns one temperature per reader name) and implement :meth:`read`.
    """

    name: str = "reader"
    version: str = ""

    @abc.abstractmethod
    def read(
        self,
        message_text: str,
        question_text: str,
        options: list[str],
        *,
        subject: str | None = None,
    ) -> Reading:
        """The reading of ``message_text`` for the question; ``options`` in question order."""
