"""Pydantic models of every record type of docs/formats.md, mirroring data/schema.sql.

Each model validates one JSON Lines record on its own (types, ranges, times);
checks that need other records (does the question exist, do the probabilities
cover its options) are done by :mod:`doxa.data.ingest`, which knows the store.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Literal, Mapping, Union

from .times import parse_time
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, TypeAdapter, field_validator, model_validator

#: docs/formats.md: a reading's ``probs + unclear + unrelated`` sums to 1 within this.
SUM_TOLERANCE = 1e-6
SHAPES = ("choice", "yes_no", "scale")
SETTLEMENT_HOWS = ("correction", "approval", "outcome")
#: Longest id, name, alias, option, kind, layer or reader name (characters). Names are
#: looked up and printed in tables; a paragraph in an id is a mistake.
MAX_NAME_CHARS = 200
#: Longest message, question or instruction text (characters): a long email fits.
MAX_TEXT_CHARS = 1_000_000


class FieldProblem(ValueError):
    """A field's value is refused: ``reason`` says why, ``fix`` what to write instead."""

    def __init__(self, reason: str, fix: str):
        super().__init__(f"{reason}: {fix}")
        self.reason = reason
        self.fix = fix


#: Cc (C0 and C1 controls: NUL, ESC, DEL…) and Cs (lone surrogates, which no UTF-8 file can hold)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NOT_TEXT = re.compile("[\ud800-\udfff]")


def _name(value: str) -> str:
    """An id, name, alias, option, kind or layer: printable, trimmed, at most MAX_NAME_CHARS."""
    if not value:
        raise FieldProblem("is empty", "give a non-empty value")
    found = _CONTROL.search(value)
    if found is not None:
        position, char = found.start(), found.group()
        raise FieldProblem(f"contains the control character U+{ord(char):04X} at position {position} of {value!r}",
                           "remove it: names, ids and options are printable text")
    if value != value.strip():
        raise FieldProblem(f"{value!r} starts or ends with white space", f"write {value.strip()!r}")
    if len(value) > MAX_NAME_CHARS:
        raise FieldProblem(f"is {len(value)} characters long (at most {MAX_NAME_CHARS})",
                           "use a short name; long text belongs in a message's or question's text")
    return value


def _text(value: str) -> str:
    """A message, question or instruction text: kept as written (control characters too), but no lone
    surrogate (no UTF-8 file can hold one), at most MAX_TEXT_CHARS."""
    found = _NOT_TEXT.search(value)
    if found is not None:
        raise FieldProblem(f"contains U+{ord(found.group()):04X} at position {found.start()}",
                           "remove it: a lone surrogate is not text")
    if len(value) > MAX_TEXT_CHARS:
        raise FieldProblem(f"is {len(value)} characters long (at most {MAX_TEXT_CHARS})",
                           "split it into several messages")
    return value


Time = Annotated[datetime, Field(description="ISO 8601 date or date-time")]
#: Ids and names: see :func:`_name`.
NonEmpty = Annotated[str, AfterValidator(_name)]
Text = Annotated[str, AfterValidator(_text)]
NonEmptyText = Annotated[str, Field(min_length=1), AfterValidator(_text)]
#: Probabilities and trusts are JSON numbers: "0.9" (a string) is refused, not converted.
Number = StrictFloat


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("sent_at", "received_at", "at", mode="before", check_fields=False)
    @classmethod
    def _times(cls, value):
        return None if value is None else parse_time(value)


class SubjectRecord(_Record):
    type: Literal["subject"]
    id: NonEmpty
    name: NonEmpty
    aliases: list[NonEmpty] = []


class RelationRecord(_Record):
    type: Literal["relation"]
    from_: NonEmpty = Field(alias="from")
    to: NonEmpty
    kind: NonEmpty


class SourceRecord(_Record):
    type: Literal["source"]
    id: NonEmpty
    layers: list[NonEmpty] = Field(min_length=1)
    trust: StrictFloat | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)

    @field_validator("layers")
    @classmethod
    def _no_slash(cls, layers: list[str]) -> list[str]:
        for layer in layers:
            if "/" in layer:
                raise ValueError(f"layer {layer!r} contains '/': give each layer as its own list item")
        return layers

    @field_validator("id")
    @classmethod
    def _id_no_slash(cls, value: str) -> str:
        if "/" in value:
            raise ValueError(f"source id {value!r} contains '/': ids name a leaf, layers go in 'layers'")
        return value

    @property
    def path(self) -> str:
        return "/".join([*self.layers, self.id])

    @property
    def is_assistant(self) -> bool:
        return self.layers[0] == "assistant"


class QuestionRecord(_Record):
    type: Literal["question"]
    id: NonEmpty
    subject: NonEmpty | None = None
    kind: NonEmpty
    text: NonEmptyText
    shape: Literal["choice", "yes_no", "scale"] = "choice"
    options: list[NonEmpty] | None = None
    #: who wrote the question (an organizer model's name, a person); stored as ``created_by``
    created_by: NonEmpty | None = None
    #: the version of the organizer's instructions a model wrote it under (``doxa organizer-instructions``)
    instructions_version: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _options(self) -> "QuestionRecord":
        options = self.options
        if self.shape == "yes_no":
            if options is None:
                object.__setattr__(self, "options", ["yes", "no"])
            elif sorted(options) != ["no", "yes"]:
                raise ValueError("a yes_no question has options exactly ['yes', 'no'] (or omit 'options')")
        elif options is None:
            raise ValueError(f"a {self.shape} question needs 'options': the list of possible answers")
        options = self.options
        if len(options) < 2:
            raise ValueError("a question needs at least 2 options")
        if len(set(options)) != len(options):
            raise ValueError("options must be distinct")
        return self


class MessageRecord(_Record):
    type: Literal["message"]
    id: NonEmpty
    source: NonEmpty
    sent_at: Time
    received_at: Time | None = None
    text: Text


def reading_mass_problem(probs: Mapping[str, float], unclear: float, unrelated: float,
                         one_off: float) -> str | None:
    """Why these are not a reading's masses, or None: each a number in [0, 1] and
    ``probs + unclear + unrelated`` equal to 1 within ``SUM_TOLERANCE`` (docs/formats.md).
    The one check of a reading, for a record on ingest and for a reader's output alike."""
    named = [(f"probs[{option!r}]", p) for option, p in probs.items()]
    for name, value in named + [("unclear", unclear), ("unrelated", unrelated), ("one_off", one_off)]:
        if value is None or not math.isfinite(value) or value < 0.0 or value > 1.0:
            return f"{name} must be a number in [0, 1], got {value!r}"
    in_probs = math.fsum(probs.values())
    total = in_probs + unclear + unrelated
    if abs(total - 1.0) > SUM_TOLERANCE:
        tolerance = f"{SUM_TOLERANCE:.0e}".replace("e-0", "e-")
        return (f"probs + unclear + unrelated sums to {total:.9g} but must sum to 1 (within {tolerance}; "
                f"got {in_probs:.9g} in probs): renormalise them together")
    return None


class ReadingRecord(_Record):
    type: Literal["reading"]
    message: NonEmpty
    question: NonEmpty
    reader: NonEmpty
    reader_version: Annotated[str, AfterValidator(lambda v: _name(v) if v else v)] = ""
    probs: dict[NonEmpty, Number]
    unclear: Number = 0.0
    unrelated: Number = 0.0
    one_off: Number = 0.0

    @model_validator(mode="after")
    def _masses(self) -> "ReadingRecord":
        problem = reading_mass_problem(self.probs, self.unclear, self.unrelated, self.one_off)
        if problem:
            raise ValueError(problem)
        return self


class SettlementRecord(_Record):
    type: Literal["settlement"]
    question: NonEmpty
    answer: NonEmpty
    at: Time
    how: Literal["correction", "approval", "outcome"]
    by: NonEmpty = "user"
    #: How the world showed it, in words (an outcome's "the parcel arrived").
    note: str | None = None
    #: What doxa said of this answer just before it was settled, and under which parameter version:
    #: a record of what was approved or corrected (never read back as a belief).
    p_before: float | None = Field(default=None, ge=0.0, le=1.0)
    params_version: int | None = None


class RejectionRecord(_Record):
    type: Literal["rejection"]
    question: NonEmpty
    answer: NonEmpty
    at: Time
    by: NonEmpty = "user"


class InstructionRecord(_Record):
    type: Literal["instruction"]
    id: NonEmpty
    subject: NonEmpty | None = None
    text: NonEmptyText
    at: Time
    by: NonEmpty = "user"
    rests_on: dict[str, NonEmpty] | None = Field(
        default=None, description='the belief the instruction presumes: {"question": ..., "answer": ...}'
    )

    @field_validator("rests_on")
    @classmethod
    def _rests_on(cls, value):
        if value is not None and set(value) != {"question", "answer"}:
            raise ValueError('rests_on must be {"question": QUESTION_ID, "answer": OPTION}')
        return value


Record = Annotated[
    Union[
        SubjectRecord,
        RelationRecord,
        SourceRecord,
        QuestionRecord,
        MessageRecord,
        ReadingRecord,
        SettlementRecord,
        RejectionRecord,
        InstructionRecord,
    ],
    Field(discriminator="type"),
]

RECORD_TYPES: dict[str, type[_Record]] = {
    "subject": SubjectRecord,
    "relation": RelationRecord,
    "source": SourceRecord,
    "question": QuestionRecord,
    "message": MessageRecord,
    "reading": ReadingRecord,
    "settlement": SettlementRecord,
    "rejection": RejectionRecord,
    "instruction": InstructionRecord,
}

record_adapter: TypeAdapter = TypeAdapter(Record)

