"""The organizer's operations as ingest record types: ``question_merge``, ``question_split``, ``undo``.

What each one does is in :mod:`doxa.data.question_ops` and docs/organizer.md; here are
their fields and the checks a record passes on its own. :mod:`doxa.data.records`
registers them with the core record types.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .models import Id, NonEmpty, QuestionRecord, ReadingRecord, Time, _Record

OP_TYPES = ("question_merge", "question_split", "undo")


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


OPERATION_RECORD_TYPES: dict[str, type[_Record]] = {
    "question_merge": QuestionMergeRecord,
    "question_split": QuestionSplitRecord,
    "undo": UndoRecord,
}
