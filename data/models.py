"""Pydantic models of every record type of docs/formats.md, mirroring data/schema.sql.

Each model validates one JSON Lines record on its own (types, ranges, times);
checks that need other records (does the question exist, do the probabilities
cover its options) are done by :mod:`doxa.data.ingest`, which knows the store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Callable, Literal, Mapping, Union

from .ingest_rules import (ID, LONE_SURROGATE, MASS, MAX_TEXT_CHARS, NAME, RULED_FIELDS, SUM, TIME, Rule,
                           is_assistant_layer, reading_masses, rules_for)
from .ingest_rules import SUM_TOLERANCE  # noqa: F401  (the sum rule's; readers hold their output to it)
from .evidence import UNLISTED  # no option of an open question, and no settlement's answer, may be it
from .times import parse_time
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, TypeAdapter,
                      ValidatorFunctionWrapHandler, field_validator, model_validator)

SHAPES = ("choice", "yes_no", "scale")
SETTLEMENT_HOWS = ("correction", "approval", "outcome")
#: A JSON integer longer than this many digits is refused (Python's own limit on reading one).
MAX_INT_DIGITS = 4300


class FieldProblem(ValueError):
    """A field's value is refused: ``reason`` says why, ``fix`` what to write instead."""

    def __init__(self, reason: str, fix: str):
        super().__init__(f"{reason}: {fix}")
        self.reason = reason
        self.fix = fix


def _held_to(rule: Rule) -> Callable[[str], str]:
    """The validator of a value held to ``rule`` (:attr:`Rule.runs` ``"name"``): its message and fix."""
    def check(value: str) -> str:
        if not rule.check(value):
            raise FieldProblem(rule.message(value), rule.fix_for(value))
        return value
    return check


#: An id, name, alias, option, kind or layer (the ``name`` rule of :mod:`doxa.data.ingest_rules`).
_name = _held_to(NAME)
#: A record's own id: a name without white space anywhere (the ``id`` rule).
_id = _held_to(ID)


def _text(value: str) -> str:
    """A free text (a message, question or instruction text, a note): kept as written (control
    characters too), but no lone surrogate (no UTF-8 file can hold one). Its length is capped for
    every string at once (the ``text`` rule of :mod:`doxa.data.ingest_rules`, ``_Record``'s ``str_max_length``);
    a question's or instruction's must not be blank (the ``blank`` rule, ``_Record``'s ``_rules``)."""
    found = LONE_SURROGATE.search(value)
    if found is not None:
        raise FieldProblem(f"contains U+{ord(found.group()):04X} at position {found.start()}",
                           "remove it: a lone surrogate is not text")
    return value


_LOOK_ALIKES = {
    # Cyrillic and Greek letters drawn like Latin ones, lower case (ids are lower-cased first)
    "а": "a", "в": "b", "е": "e", "ё": "e", "һ": "h", "і": "i", "ї": "i", "ј": "j", "к": "k", "м": "m", "н": "h",
    "о": "o", "п": "n", "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w",
    "ӏ": "l", "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v", "ο": "o", "ρ": "p",
    "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
    # full-width Latin letters and digits
    **{chr(0xFF41 + i): chr(ord("a") + i) for i in range(26)}, **{chr(0xFF10 + i): str(i) for i in range(10)},
}
#: ``translate`` arguments of :data:`_LOOK_ALIKES`: an id's skeleton (what it looks like) is
#: ``translate(lower(id), LOOK_ALIKES_FROM, LOOK_ALIKES_TO)``, see :func:`doxa.data.writer.look_alike_warnings`.
LOOK_ALIKES_FROM = "".join(_LOOK_ALIKES)
LOOK_ALIKES_TO = "".join(_LOOK_ALIKES.values())


Time = Annotated[datetime, Field(description="ISO 8601 date or date-time")]
#: Ids and names: see :data:`_name`.
NonEmpty = Annotated[str, AfterValidator(_name)]
#: A record's own id (a subject's, source's, question's, message's, instruction's, operation's).
Id = Annotated[str, AfterValidator(_id)]
Text = Annotated[str, AfterValidator(_text)]
#: Every number is a JSON number: "0.9" (a string) or true is refused, not converted; an
#: integer field takes a JSON integer only (7, not 7.0). Ranges are rules (:mod:`doxa.data.ingest_rules`).
Number = StrictFloat
Int = StrictInt
#: A JSON ``true`` or ``false`` (``"true"``, 1 are refused, not converted).
Flag = StrictBool


class _Record(BaseModel):
    # every string held to the text rule's cap (MAX_TEXT_CHARS) before its field's own checks; pydantic's
    # refusal, ``string_too_long``, is worded with the rule's message and fix (doxa.data.ingest)
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, str_max_length=MAX_TEXT_CHARS)

    @field_validator(*sorted({name for _, name in TIME.fields}), mode="before", check_fields=False)
    @classmethod
    def _times(cls, value):
        """The ``time`` rule of :mod:`doxa.data.ingest_rules`: parse_time reads a time (its check), or
        says why not (its message)."""
        return None if value is None else parse_time(value)

    @field_validator(*RULED_FIELDS, mode="wrap", check_fields=False)
    @classmethod
    def _rules(cls, given, handler: ValidatorFunctionWrapHandler, info):
        """The rules of :mod:`doxa.data.ingest_rules` that hold this field (:attr:`Rule.runs` ``"field"``
        and ``"record"``), on a value of its type; the message quotes the value as written (``2``, not
        ``2.0``)."""
        value = handler(given)
        if value is None:
            return value
        for rule in rules_for(cls.model_fields["type"].annotation.__args__[0], info.field_name):
            if rule.runs == "field" and not rule.check(value):
                raise FieldProblem(rule.message(given), rule.fix_for(given))
            if rule.runs == "record" and not rule.check(value):
                raise ValueError(f"{rule.message(value)}: {rule.fix_for(value)}")
        return value


class SubjectRecord(_Record):
    type: Literal["subject"]
    id: Id
    name: NonEmpty
    aliases: list[NonEmpty] = []


class RelationRecord(_Record):
    type: Literal["relation"]
    from_: NonEmpty = Field(alias="from")
    to: NonEmpty
    kind: NonEmpty


class SourceRecord(_Record):
    type: Literal["source"]
    id: Id
    layers: list[NonEmpty] = Field(min_length=1)
    trust: Number | None = Field(default=None, allow_inf_nan=False)
    # no '/' in the id or a layer: the "source_id" and "layers" rules of doxa.data.ingest_rules (_rules)

    @property
    def is_assistant(self) -> bool:
        return is_assistant_layer(self.layers[0])


class QuestionRecord(_Record):
    type: Literal["question"]
    id: Id
    subject: NonEmpty | None = None
    kind: NonEmpty
    text: Text
    shape: Literal["choice", "yes_no", "scale"] = "choice"
    options: list[NonEmpty] | None = None
    #: who wrote the question (an organizer model's name, a person); stored as ``created_by``
    created_by: NonEmpty | None = None
    #: the version of the organizer's instructions a model wrote it under (``doxa organizer-instructions``)
    instructions_version: Int | None = None
    #: an open (value) question: its options are the values the evidence has named so far, append
    #: only (``option_added``), any number of them; its beliefs keep a remainder on :data:`UNLISTED`
    open: Flag = False

    @model_validator(mode="after")
    def _options(self) -> "QuestionRecord":
        options = self.options
        if self.open:
            if self.shape != "choice":
                raise ValueError(f"an open question has shape 'choice' (its options are values), not {self.shape!r}: "
                                 "drop 'open' for a fixed list of answers, or write shape 'choice'")
            if options is None:
                object.__setattr__(self, "options", [])
            elif UNLISTED in options:
                raise ValueError(f"options: {UNLISTED!r} is reserved on an open question (it stands for every value "
                                 "not listed yet): name the value itself, or leave it out")
        elif self.shape == "yes_no":
            if options is None:
                object.__setattr__(self, "options", ["yes", "no"])
            elif sorted(options) != ["no", "yes"]:
                raise ValueError("a yes_no question has options exactly ['yes', 'no'] (or omit 'options')")
        elif options is None:
            raise ValueError(f"a {self.shape} question needs 'options': the list of possible answers "
                             "(or \"open\": true for a question whose answers are values named as they come)")
        options = self.options
        if not self.open and len(options) < 2:
            raise ValueError("a question needs at least 2 options (an open question, \"open\": true, may have fewer)")
        if len(set(options)) != len(options):
            raise ValueError("options must be distinct")
        return self


class MessageRecord(_Record):
    type: Literal["message"]
    id: Id
    source: NonEmpty
    sent_at: Time
    received_at: Time | None = None
    text: Text


def reading_mass_problem(probs: Mapping[str, float], unclear: float, unrelated: float,
                         one_off: float, unlisted: float = 0.0) -> str | None:
    """Why these are not a reading's masses, or None: each a number in [0, 1] (the ``mass`` rule of
    :mod:`doxa.data.ingest_rules`) and ``probs + unlisted + unclear + unrelated`` equal to 1 within
    ``SUM_TOLERANCE`` (the ``sum`` rule, docs/formats.md). The one check of a reading, for a record on
    ingest and for a reader's output alike. ``unlisted`` (a reading of an open question: the message
    states a value that is not listed) is 0 on every other reading."""
    named = [(f"probs[{option!r}]", p) for option, p in probs.items()]
    for name, value in named + [("unclear", unclear), ("unrelated", unrelated), ("one_off", one_off),
                                ("unlisted", unlisted)]:
        if not MASS.check(value):
            return f"{name} {MASS.message(value)}"
    masses = reading_masses(probs.values(), unlisted, unclear, unrelated)
    if not SUM.check(masses):
        return f"{SUM.message(masses)}: {SUM.fix}"
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
    #: a reading of an open question: the mass on "the message states a value that is not listed"
    #: (then ``probs`` may name only some of the options); 0 on a closed question
    unlisted: Number = 0.0
    #: how surely the message reports that the answer changed ("now", "moved", "no longer"): a
    #: probability apart from the masses above; 0 (the default) reports no change, not "unchanged"
    changed: Number = 0.0

    @model_validator(mode="after")
    def _masses(self) -> "ReadingRecord":
        problem = reading_mass_problem(self.probs, self.unclear, self.unrelated, self.one_off, self.unlisted)
        if problem is None and not MASS.check(self.changed):
            problem = f"changed {MASS.message(self.changed)}"
        if problem:
            raise ValueError(problem)
        return self


def _not_unlisted(value: str) -> str:
    """A settlement's answer: a value, never the reserved word for "a value not listed"."""
    if value == UNLISTED:
        raise FieldProblem(f"is the reserved word {UNLISTED!r} (every value not listed yet), not an answer",
                           "name the value itself (a new value of an open question is added with it)")
    return value


class SettlementRecord(_Record):
    type: Literal["settlement"]
    question: NonEmpty
    answer: Annotated[NonEmpty, AfterValidator(_not_unlisted)]
    at: Time
    how: Literal["correction", "approval", "outcome"]
    by: NonEmpty = "user"
    #: How the world showed it, in words (an outcome's "the parcel arrived").
    note: Text | None = None
    #: What doxa said of this answer just before it was settled, and under which parameter version:
    #: a record of what was approved or corrected (never read back as a belief).
    p_before: Number | None = Field(default=None, allow_inf_nan=False)
    params_version: Int | None = None


class RejectionRecord(_Record):
    type: Literal["rejection"]
    question: NonEmpty
    answer: NonEmpty
    at: Time
    by: NonEmpty = "user"


class InstructionRecord(_Record):
    type: Literal["instruction"]
    id: Id
    subject: NonEmpty | None = None
    text: Text
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


class ParamsRecord(_Record):
    """A published parameter version (table ``params``), as ``doxa export`` writes it: the version's
    number, when it was published and its document (:mod:`doxa.data.params_document`). Ingest writes
    it as it stands, so an exported store reads with the versions it was trained to; a version already
    stored with the same document is nothing new, with another one it is refused (versions are never
    edited)."""

    type: Literal["params"]
    version: Int
    created_at: Time | None = None
    body: dict

    @field_validator("created_at", mode="before")
    @classmethod
    def _created_at(cls, value):
        return None if value is None else parse_time(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: int) -> int:
        if not 1 <= value <= 2147483647:
            raise FieldProblem(f"is {value}", "a parameter version is a whole number from 1 to 2147483647")
        return value

    @model_validator(mode="after")
    def _document(self) -> "ParamsRecord":
        from .params_document import ParamsDocument, ParamsDocumentError

        try:
            checked = ParamsDocument.from_dict(self.body)
        except ParamsDocumentError as err:
            raise ValueError(f"body: {err}") from None
        if checked.version is not None and checked.version != self.version:
            raise ValueError(f"body: its version is {checked.version}, the record's {self.version}: give the "
                             "same number in both (or leave the body's out)")
        return self

    def stored_body(self) -> dict:
        """The document as the store keeps it: its ``format`` and ``version`` filled in, as
        :meth:`doxa.data.store.Store.publish_params` writes them."""
        from .params_document import ParamsDocument

        return dict(self.body, format=ParamsDocument.from_dict(self.body).format, version=self.version)


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
        ParamsRecord,
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
    "params": ParamsRecord,
}

record_adapter: TypeAdapter = TypeAdapter(Record)

