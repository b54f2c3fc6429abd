"""What a reader returns: a :class:`Reading` checked against docs/formats.md's rules, and the :class:`Reader` interface."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Mapping

from doxa.data.models import UNLISTED, reading_mass_problem
from doxa.data.models import SUM_TOLERANCE  # noqa: F401  (readers' API)

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

    A reading of an open question (docs/design.md §2) has ``unlisted``, a number: the mass on
    "the message states a value that is not listed"; ``probs`` may then name only some of the
    options (none, when none is listed yet) and ``probs + unlisted + unclear + unrelated`` sums
    to 1. ``unlisted`` is None on a reading of a closed question. ``changed`` in [0, 1] is the
    probability that the message reports that the answer changed (docs/design.md §2, reported
    changes); 0 reports none.
    """

    probs: dict[str, float]
    unclear: float
    unrelated: float
    one_off: float = 0.0
    reader: str = "unknown"
    reader_version: str = ""
    unlisted: float | None = None
    changed: float = 0.0

    def __post_init__(self) -> None:
        problem = _reading_problem(self.probs, self.unclear, self.unrelated, self.one_off, self.unlisted)
        if problem is None and not 0.0 <= self.changed <= 1.0:
            problem = f"changed must be a number in [0, 1], got {self.changed!r}"
        if problem:
            raise ValueError(f"invalid reading from reader {self.reader!r}: {problem}")

    @property
    def top(self) -> str:
        """The option the message most likely states (ignoring unclear / unrelated); on an open
        question ``"unlisted"`` when a value not listed outweighs every listed one."""
        stated = dict(self.probs)
        if self.unlisted is not None:
            stated[UNLISTED] = self.unlisted
        return max(stated, key=stated.__getitem__)

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
        if self.unlisted is not None:
            record["unlisted"] = self.unlisted
        if self.changed > 0:
            record["changed"] = self.changed
        return record


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _reading_problem(
    probs: Any, unclear: Any, unrelated: Any, one_off: Any, unlisted: Any = None
) -> str | None:
    """Why these fields are not a valid reading, or None when they are: their types here
    (a reader's output is not parsed by pydantic), their values by the store's own check.
    ``unlisted`` None: a closed question's reading, whose probs name every option."""
    if not isinstance(probs, Mapping) or (not probs and unlisted is None):
        return "probs: expected a non-empty object {option: probability}"
    if unlisted is not None and not _is_number(unlisted):
        return f"unlisted must be a number in [0, 1], got {unlisted!r}"
    for option, p in probs.items():
        if not isinstance(option, str):
            return f"probs: option {option!r} is not a string"
        if not _is_number(p):
            return f"probs[{option!r}] must be a number in [0, 1], got {p!r}"
    for name, value in (("unclear", unclear), ("unrelated", unrelated), ("one_off", one_off)):
        if not _is_number(value):
            return f"{name} must be a number in [0, 1], got {value!r}"
    return reading_mass_problem(probs, unclear, unrelated, one_off, unlisted or 0.0)


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
        open: bool = False,
    ) -> Reading:
        """The reading of ``message_text`` for the question; ``options`` in question order. ``open``: the
        question is open (a value question), and the reading carries ``unlisted`` (docs/readers.md)."""
