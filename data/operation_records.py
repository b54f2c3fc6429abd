"""The organizer's operations as ingest record types: ``question_merge``, ``question_split``, ``undo``,
``option_added`` and ``question_opened``.

What each one does is in :mod:`doxa.data.question_ops` and docs/organizer.md; here are
their fields and the checks a record passes on its own. :mod:`doxa.data.records`
registers them with the core record types.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .models import UNLISTED, FieldProblem, Id, NonEmpty, QuestionRecord, ReadingRecord, Time, _Record

OP_TYPES = ("question_merge", "question_split", "undo", "option_added", "question_opened")


class QuestionMergeRecord(_Record):
    type: Literal["question_merge"]
    id: Id
    into: NonEmpty
    from_: NonEmpty = Field(alias="from")
    option_map: dict[NonEmpty, NonEmpty] | None = None
    by: NonEmpty = "organizer"
    at: Time | None = None

    @model_validator(mode="after")
    def _distinct(self) -> "QuestionMergeRecord":
        if self.into == self.from_:
            raise ValueError("'from' and 'into' name the same question: a merge joins two questions")
        return self


def _typed(items: Any, type_name: str) -> Any:
    """Let nested question / reading records omit their "type"."""
    if isinstance(items, list):
        return [dict(x, type=x.get("type", type_name)) if isinstance(x, dict) else x for x in items]
    return items


class QuestionSplitRecord(_Record):
    type: Literal["question_split"]
    id: Id
    question: NonEmpty
    into: list[QuestionRecord] = Field(min_length=1)
    assign: dict[str, NonEmpty | list[NonEmpty]] = {}
    option_map: dict[NonEmpty, dict[NonEmpty, NonEmpty]] = {}
    readings: list[ReadingRecord] = []
    by: NonEmpty = "organizer"
    at: Time | None = None

    @field_validator("into", mode="before")
    @classmethod
    def _into_typed(cls, value):
        return _typed(value, "question")

    @field_validator("readings", mode="before")
    @classmethod
    def _readings_typed(cls, value):
        return _typed(value, "reading")

    @model_validator(mode="after")
    def _consistent(self) -> "QuestionSplitRecord":
        new_ids = [q.id for q in self.into]
        if len(set(new_ids)) != len(new_ids):
            raise ValueError("into: two new questions share an id")
        if self.question in new_ids:
            raise ValueError(f"into: a new question cannot reuse the split question's id {self.question!r}")
        unknown = sorted(set(self.option_map) - set(new_ids))
        if unknown:
            raise ValueError(f"option_map names {unknown}, which are not questions in 'into'")
        for message, targets in self.assign.items():
            for target in [targets] if isinstance(targets, str) else targets:
                if target not in new_ids:
                    raise ValueError(f"assign: message {message!r} is assigned to {target!r}, not a question in 'into'")
        for r in self.readings:
            if r.question not in new_ids:
                raise ValueError(f"readings: {r.question!r} is not a question in 'into'")
        return self

    def targets(self, message: str) -> list[str]:
        value = self.assign.get(message, [])
        return [value] if isinstance(value, str) else list(value)


class UndoRecord(_Record):
    type: Literal["undo"]
    op: NonEmpty
    id: Id | None = None
    by: NonEmpty = "organizer"
    at: Time | None = None

    @property
    def op_id(self) -> str:
        return self.id or f"undo:{self.op}"


class OptionAddedRecord(_Record):
    """A value joins an open question's options (appended: options are never reordered)."""

    type: Literal["option_added"]
    question: NonEmpty
    option: NonEmpty
    #: a name, not an :data:`Id`: the default, ``option:<question>:<value>``, holds the value's spaces
    id: NonEmpty | None = None
    by: NonEmpty = "organizer"
    at: Time | None = None

    @field_validator("option")
    @classmethod
    def _not_unlisted(cls, value: str) -> str:
        if value == UNLISTED:
            raise FieldProblem(f"is the reserved word {UNLISTED!r} (every value not listed yet)",
                               "name the value itself")
        return value

    @property
    def op_id(self) -> str:
        return self.id or f"option:{self.question}:{self.option}"


class SettlementOption(OptionAddedRecord):
    """The option_added a settlement naming a new value of an open question implies (written by the
    settlement's ``by`` at its time, in the same transaction); never read from a file. Its operation id
    is the first free one of ``option:<question>:<value>``, ``…-2``, …"""


class QuestionOpenedRecord(_Record):
    """A closed question becomes open: from now on values may be added to its options."""

    type: Literal["question_opened"]
    question: NonEmpty
    id: Id | None = None
    by: NonEmpty = "organizer"
    at: Time | None = None

    @property
    def op_id(self) -> str:
        return self.id or f"open:{self.question}"


OPERATION_RECORD_TYPES: dict[str, type[_Record]] = {
    "question_merge": QuestionMergeRecord,
    "question_split": QuestionSplitRecord,
    "undo": UndoRecord,
    "option_added": OptionAddedRecord,
    "question_opened": QuestionOpenedRecord,
}
