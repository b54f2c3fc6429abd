"""The ingest rules both ingest paths run, each stated once: which fields it holds, its Python check, its
SQL predicate, its message and its fix.

The per-line path (:mod:`doxa.data.models`, through pydantic) runs a rule's Python check and, where
it fails, reports the rule's message and fix. The columnar path (:mod:`doxa.data.fast_ingest`) runs
the rule's SQL predicate over a whole column; a line it cannot prove valid sends the file to the
per-line path, so the message exists only here. tests/test_fast_ingest.py breaks generated files
with each rule's :attr:`Rule.refused` values and holds the two paths to the same refusals.

Derived columns (a source's ``path``, a message's ``received_at``, a question's ``created_by``)
are one SQL expression each, which both paths' inserts use (:data:`DERIVED`).
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable

#: Where a fix points for the record format.
FORMATS_POINTER = "see docs/formats.md"
#: The range of a schema INTEGER column (params_version, instructions_version).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Longest free text of any field (characters): a message, question or instruction text, a
#: settlement's note. A long email fits. Every string of a record is held to it (the ``text`` rule);
#: names have the tighter :data:`doxa.data.models.MAX_NAME_CHARS`.
MAX_TEXT_CHARS = 1_000_000


@dataclass(frozen=True)
class Rule:
    """One rule of a field's value, for both paths.

    ``fields``: the ``(record type, field)`` pairs it holds (the field as the JSON line names it).
    ``check(value)``: whether a value that has its field's type (a number, an integer) keeps the rule.
    ``sql(column)``: the same check as a SQL predicate over a column of such values.
    ``message(given)``: why a value is refused (after the field's name), quoting it as written.
    ``refused``: values the rule refuses and nothing before it does (the tests break files with them).
    ``runs``: where the per-line path runs the check. ``"field"``: on the field's value, once it has its
    type (:class:`doxa.data.models._Record`'s wrap validator). ``"string"``: on every string of a record,
    before the field's own checks (pydantic's ``str_max_length``, which ``_Record`` sets from the rule's
    cap, and whose refusal :mod:`doxa.data.ingest` words with the rule's message and fix); ``fields``
    are then those whose columnar proof runs its SQL predicate (names have a tighter cap).
    ``"reading"``: on a reading's every mass, its probabilities too, once the record has its types
    (:func:`doxa.data.models.reading_mass_problem`, which names the mass before the message).
    """

    name: str
    fields: tuple[tuple[str, str], ...]
    check: Callable[[Any], bool]
    sql: Callable[[str], str]
    message: Callable[[Any], str]
    fix: str
    refused: tuple = ()
    runs: str = "field"


def _within(name: str, low, high, fields: tuple[tuple[str, str], ...], refused: tuple) -> Rule:
    """A number from ``low`` to ``high``, both included; out of range it is refused with the bound it passes."""
    return Rule(name, fields,
                check=lambda value: low <= value <= high,
                sql=lambda column: f"({column} BETWEEN {low!r} AND {high!r})",
                message=lambda given: (f"must be at least {low}, got {given!r}" if given < low
                                       else f"must be at most {high}, got {given!r}"),
                fix=f"write a number within its range ({FORMATS_POINTER})",
                refused=refused)


def _at_most_chars(name: str, cap: int, fields: tuple[tuple[str, str], ...], fix: str) -> Rule:
    """A string of at most ``cap`` characters, every string of a record (:attr:`Rule.runs`)."""
    return Rule(name, fields,
                check=lambda value: len(value) <= cap,
                sql=lambda column: f"(length({column}) <= {cap})",
                message=lambda given: f"is {len(given)} characters long (at most {cap})",
                fix=fix, refused=("x" * (cap + 1), " " * (cap + 1)), runs="string")


#: Every rule of a single field's value, by name.
RULES: dict[str, Rule] = {rule.name: rule for rule in (
    _within("probability", 0.0, 1.0, (("source", "trust"), ("settlement", "p_before")),
            refused=(1.5, -0.25, 2, -1, 1e308)),
    _within("integer", INT32_MIN, INT32_MAX, (("settlement", "params_version"),),
            refused=(INT32_MAX + 1, INT32_MIN - 1, 2**63)),
    _within("version", 1, INT32_MAX, (("question", "instructions_version"),),
            refused=(0, -3, INT32_MAX + 1, INT32_MIN - 1)),
    _at_most_chars("text", MAX_TEXT_CHARS, (("message", "text"), ("question", "text"), ("instruction", "text"),
                                            ("settlement", "note")),
                   fix="shorten it, or split a long message into several"),
    # a reading's probabilities, unclear, unrelated and one_off; the message quotes the number read
    # (``2.0`` for ``2``), no fix follows it
    Rule("mass", (("reading", "unclear"), ("reading", "unrelated"), ("reading", "one_off")),
         check=lambda value: value is not None and math.isfinite(value) and 0.0 <= value <= 1.0,
         sql=lambda column: f"({column} BETWEEN 0.0 AND 1.0)",
         message=lambda value: f"must be a number in [0, 1], got {value!r}",
         fix="", refused=(1.5, -0.25, 2.5, -1.0, 1e308), runs="reading"),
)}
#: The cap of every string of a record (:attr:`Rule.runs` ``"string"``).
TEXT = RULES["text"]
#: The bounds of each of a reading's masses (:attr:`Rule.runs` ``"reading"``).
MASS = RULES["mass"]

_BY_FIELD: dict[tuple[str, str], Rule] = {field: rule for rule in RULES.values() for field in rule.fields}
#: Every field some rule holds on its value (:attr:`Rule.runs` ``"field"``); a field's name means one
#: thing in every record type that has it.
RULED_FIELDS: tuple[str, ...] = tuple(sorted({name for (_, name), rule in _BY_FIELD.items()
                                              if rule.runs == "field"}))


def rule_for(record_type: str, field: str) -> Rule | None:
    """The rule that holds ``field`` of ``record_type``, or None."""
    return _BY_FIELD.get((record_type, field))


#: The columns an ingest derives from a record's fields, ``{(table, column): SQL expression}``: the
#: expression reads the columns the record gives (a message's ``received_at`` may be NULL), and both
#: paths' inserts select it (:func:`doxa.data.writer.write_batch`, :func:`doxa.data.fast_ingest.write_stage`).
DERIVED: dict[tuple[str, str], str] = {
    # a source's path: its layers and its id, joined by '/' (neither holds a '/')
    ("sources", "path"): "array_to_string(list_append(layers, id), '/')",
    # a message received when it was sent, unless it says otherwise
    ("messages", "received_at"): "coalesce(received_at, sent_at)",
    # a question written by the organizer, unless it names its author
    ("questions", "created_by"): "coalesce(created_by, 'organizer')",
}


def is_assistant_layer(layer: str) -> bool:
    """Whether a source's first layer is the assistant's own (its notes never count as evidence):
    ``assistant`` in any case (``Assistant``, ``ASSISTANT``), compared NFC-normalised. A source's
    ``is_assistant`` column; the per-line path computes it here, the columnar path by
    :data:`IS_ASSISTANT_SQL` where :data:`IS_ASSISTANT_SQL_AGREES`."""
    return unicodedata.normalize("NFC", layer).casefold() == "assistant"


#: :func:`is_assistant_layer` of a source's first layer, in SQL. ``lower()`` agrees with ``casefold()``
#: on ASCII only, so the columnar path proves a source only where :data:`IS_ASSISTANT_SQL_AGREES`
#: (tests/test_fast_ingest.py holds the two to the same verdicts).
IS_ASSISTANT_SQL = "lower(layers[1]) = 'assistant'"
IS_ASSISTANT_SQL_AGREES = r"regexp_matches(layers[1], '^[\x01-\x7f]*$')"


def derived(table: str, columns) -> list[str]:
    """The SELECT items of ``table``'s ``columns`` (input columns, each of its own name), then of its
    derived columns: each derived column computed by its :data:`DERIVED` expression."""
    made = {column: sql for (name, column), sql in DERIVED.items() if name == table}
    return [f"{made.pop(column, column)} AS {column}" for column in columns] + \
        [f"{sql} AS {column}" for column, sql in made.items()]


def derived_columns(table: str, columns) -> list[str]:
    """The column names :func:`derived` selects, in its order."""
    return [*columns, *(column for name, column in DERIVED if name == table and column not in columns)]
