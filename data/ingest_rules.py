"""The ingest rules both ingest paths run, each stated once: which fields it holds, its Python check, its
SQL predicate, its message and its fix.

The per-line path (:mod:`doxa.data.models`, through pydantic) runs a rule's Python check and, where
it fails, reports the rule's message and fix. The columnar path (:mod:`doxa.data.fast_ingest`) runs
the rule's SQL predicate over a whole column; a line it cannot prove valid sends the file to the
per-line path, so the message exists only here. tests/test_fast_ingest.py breaks generated files
with each rule's :attr:`Rule.refused` values and holds the two paths to the same refusals.

:data:`RULES` holds the ranges of numbers, the cap of every string, a reading's masses and their sum
(:data:`SUM_TOLERANCE`), ids and names, a source's id and layers (no '/'), a question's or
instruction's text (not blank) and times (what :func:`doxa.data.times.parse_time` reads; the SQL
proves :data:`TIME_FORM`). Free text keeps every character but a lone surrogate (:data:`LONE_SURROGATE`,
the class names refuse too). A message's fingerprint, which both paths compute, is
:mod:`doxa.data.text`'s, with its SQL twin beside it.

Rules that span records are not here, and need not be: "never edited" (a record stored already
must be given again as stored) and the references (a reading's message and question, a message's
source, …) are worded by :func:`doxa.data.writer.write_batch` alone (``NEVER_EDITED`` and its
neighbours); the columnar path proves them by joins against the store and hands a file it cannot
prove to the per-line path, so each of those messages too exists once.

Derived columns (a source's ``path``, a message's ``received_at``, a question's ``created_by``)
are one SQL expression each, which both paths' inserts use (:data:`DERIVED`).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .sql import sql_literal
from .times import parse_time

#: Where a fix points for the record format.
FORMATS_POINTER = "see docs/formats.md"
#: The range of a schema INTEGER column (params_version, instructions_version).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Longest free text of any field (characters): a message, question or instruction text, a
#: settlement's note. A long email fits. Every string of a record is held to it (the ``text`` rule);
#: names have the tighter :data:`MAX_NAME_CHARS`.
MAX_TEXT_CHARS = 1_000_000
#: Longest id, name, alias, option, kind, layer or reader name (characters). Names are
#: looked up and printed in tables; a paragraph in an id is a mistake.
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Rule:
    """One rule of a field's value, for both paths.

    ``fields``: the ``(record type, field)`` pairs it holds (the field as the JSON line names it).
    ``check(value)``: whether a value that has its field's type (a number, an integer) keeps the rule.
    ``sql(column)``: the same check as a SQL predicate over a column of such values.
    ``message(given)``: why a value is refused (after the field's name), quoting it as written.
    ``fix``: what to write instead (:meth:`fix_for`): one text, or ``fix(given)`` where it depends on the value.
    ``refused``: values the rule refuses and nothing before it does (the tests break files with them).
    ``runs``: where the per-line path runs the check. ``"field"``: on the field's value, once it has its
    type (:class:`doxa.data.models._Record`'s wrap validator). ``"string"``: on every string of a record,
    before the field's own checks (pydantic's ``str_max_length``, which ``_Record`` sets from the rule's
    cap, and whose refusal :mod:`doxa.data.ingest` words with the rule's message and fix); ``fields``
    are then those whose columnar proof runs its SQL predicate (names have a tighter cap).
    ``"reading"``: on a reading's every mass, its probabilities too, once the record has its types
    (:func:`doxa.data.models.reading_mass_problem`, which names the mass before the message).
    ``"name"``: on an id or name, wherever a record holds one (:data:`doxa.data.models.NonEmpty`,
    :data:`doxa.data.models.Id`); ``fields`` are some that hold one alone. Its SQL predicate proves a
    value (where it holds, so does the check); a value it does not prove goes to the per-line path,
    which decides (a character that may leave a name not NFC).
    ``"record"``: on the field's value, once it has its type, as a validator of the record's model whose
    refusal is a plain ``ValueError``: the per-line path words it ``{field}: {message}: {fix}``, the field
    left out where the message names it (:func:`doxa.data.ingest.describe_validation_error`; the
    source rules, whose texts predate the table).
    ``"time"``: on a time as written, before it has its type (:class:`doxa.data.models._Record`'s
    ``_times``, which reads it with :func:`doxa.data.times.parse_time`: the check); worded as a
    ``"record"`` rule's. ``read(column)`` reads a JSON string as the moment ``sql`` holds.
    ``"sum"``: on a reading's masses together (:func:`reading_masses`), once each keeps the ``mass``
    rule (:func:`doxa.data.models.reading_mass_problem`); its message is the whole problem. ``fields``
    are masses a broken file sets, ``refused`` values that leave a valid reading's sum off 1.
    ``read``: where the columnar path reads a JSON string as another type (a time's moment), that SQL;
    ``sql`` then holds the value read. ``exact``: whether the SQL predicate gives the check's verdict
    on every value; where not, it proves a value (where it holds, so does the check) and a value it
    does not prove goes to the per-line path, which decides and words the message.
    """

    name: str
    fields: tuple[tuple[str, str], ...]
    check: Callable[[Any], bool]
    sql: Callable[[str], str]
    message: Callable[[Any], str]
    fix: str | Callable[[Any], str]
    refused: tuple = ()
    runs: str = "field"
    read: Callable[[str], str] | None = None
    exact: bool = True

    def fix_for(self, given) -> str:
        """The fix of a refused value ``given``."""
        return self.fix(given) if callable(self.fix) else self.fix


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


#: Cs, lone surrogates: no UTF-8 file can hold one, so no string of a record may (free text keeps
#: every other character as written, :func:`doxa.data.models._text`).
_SURROGATES = "\ud800-\udfff"
LONE_SURROGATE = re.compile(f"[{_SURROGATES}]")
#: Cc (C0 and C1 controls: NUL, ESC, DEL…) and Cs (lone surrogates)
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_SURROGATES}]")
#: The Unicode categories no id, name, alias, option, kind or layer may hold: controls (Cc), lone
#: surrogates (Cs) and invisible format characters (Cf: zero-width spaces and joiners U+200B–U+200D,
#: U+2060, U+FEFF, bidi marks and overrides U+200E/F, U+202A–U+202E, U+2066–U+2069, U+061C, …).
REFUSED_CATEGORIES = {"Cc": "control character", "Cs": "lone surrogate", "Cf": "invisible format character"}


def refused_char(char: str) -> str | None:
    """What ``char`` is, where no name may hold it (see REFUSED_CATEGORIES); None where it may."""
    return REFUSED_CATEGORIES.get(unicodedata.category(char))


def name_problem(value: str) -> tuple[str, str] | None:
    """Why an id, name, alias, option, kind or layer is refused and its fix, or None: visible characters
    only, NFC, trimmed, at most MAX_NAME_CHARS (docs/formats.md, "Ids and names")."""
    if not value:
        return "is empty", "give a non-empty value"
    found = _CONTROL.search(value)
    position = found.start() if found is not None else None
    if position is None and not value.isascii():
        position = next((i for i, c in enumerate(value) if refused_char(c)), None)
    if position is not None:
        char = value[position]
        return (f"contains the {refused_char(char)} U+{ord(char):04X} at position {position} of {value!r}",
                "remove it: names, ids and options are visible text")
    if value != value.strip():
        return f"{value!r} starts or ends with white space", f"write {value.strip()!r}"
    if len(value) > MAX_NAME_CHARS:
        return (f"is {len(value)} characters long (at most {MAX_NAME_CHARS})",
                "use a short name; long text belongs in a message's or question's text")
    if not value.isascii() and not unicodedata.is_normalized("NFC", value):
        return (f"{ascii(value)} is not in Unicode normal form NFC (a letter and its accent as two "
                "characters, or another decomposed form)",
                f"write {ascii(unicodedata.normalize('NFC', value))}: the same text, composed")
    return None


def id_problem(value: str) -> tuple[str, str] | None:
    """Why a record's own id is refused and its fix, or None: a name (:func:`name_problem`) without
    white space anywhere."""
    problem = name_problem(value)
    if problem is not None:
        return problem
    space = next((i for i, c in enumerate(value) if c.isspace()), None)
    if space is not None:
        return (f"{value!r} contains white space (U+{ord(value[space]):04X} at position {space})",
                f"write it without, e.g. {'-'.join(value.split())!r}")
    return None


# ------------------------------------------------------------------------ character classes (SQL)
def re2_class(chars: Iterable[str]) -> str:
    """An RE2 character class of exactly these characters, as ``\\x{…}`` ranges."""
    points = sorted({ord(c) for c in chars})
    ranges, start, prev = [], None, None
    for p in points:
        if start is None:
            start = prev = p
        elif p == prev + 1:
            prev = p
        else:
            ranges.append((start, prev))
            start = prev = p
    if start is not None:
        ranges.append((start, prev))
    body = "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges)
    return f"[{body}]"


@functools.cache
def _all_chars() -> tuple[str, ...]:
    """Every character outside planes 4 to 13 (unassigned in every Unicode version) and 15 to 16 (private
    use, which no class here holds): the characters the classes here are drawn from (built once, when a
    class is first needed: the per-line path never needs one)."""
    return tuple(chr(p) for p in itertools.chain(range(0xD800), range(0xE000, 0x40000), range(0xE0000, 0xF0000)))


@functools.cache
def _composing_seconds() -> frozenset[str]:
    """The second characters of Unicode's two-character canonical compositions."""
    return frozenset(chr(int(d.split()[1], 16)) for d in map(unicodedata.decomposition, _all_chars())
                     if d and not d.startswith("<") and len(d.split()) == 2)


def _nfc_doubtful(char: str) -> bool:
    """Whether ``char`` may leave a string not NFC: it is not NFC on its own (Unicode's NFC_Quick_Check
    "No"), it may compose with the character before it ("Maybe": the second character of a canonical
    composition, a Hangul vowel or final jamo) or it is a combining mark, which may be out of order.
    A string with none of these is NFC."""
    return (not unicodedata.is_normalized("NFC", char) or unicodedata.combining(char) != 0
            or char in _composing_seconds() or 0x1161 <= ord(char) <= 0x1175 or 0x11A8 <= ord(char) <= 0x11C2)


@functools.cache
def spaces_class() -> str:
    """White space (Python's ``str.isspace``), as an RE2 character class."""
    return re2_class(c for c in _all_chars() if c.isspace())


@functools.cache
def _name_refused(spaces_anywhere: bool) -> str:
    """The RE2 pattern of what :func:`name_problem` refuses (of ids, :func:`id_problem`: white space
    anywhere), derived from the same definitions: an empty value, a control or format character
    (:func:`refused_char`), white space at either end. A character that may leave the value not NFC
    is "not proved" (the per-line path decides)."""
    refused = re2_class(c for c in _all_chars() if refused_char(c) or _nfc_doubtful(c))
    spaces = spaces_class()
    return f"^$|{refused}|{spaces}" if spaces_anywhere else f"^$|{refused}|^{spaces}|{spaces}$"


def _names(name: str, problem: Callable[[str], tuple[str, str] | None], spaces_anywhere: bool,
           fields: tuple[tuple[str, str], ...], refused: tuple) -> Rule:
    """An id or name (:attr:`Rule.runs` ``"name"``) refused where ``problem`` finds one, which says why
    and the fix; its SQL predicate proves what ``problem`` passes (``spaces_anywhere``: ids)."""
    return Rule(name, fields,
                check=lambda value: problem(value) is None,
                sql=lambda column: (f"(NOT regexp_matches({column}, {sql_literal(_name_refused(spaces_anywhere))}) "
                                    f"AND length({column}) <= {MAX_NAME_CHARS})"),
                message=lambda given: problem(given)[0],
                fix=lambda given: problem(given)[1],
                refused=refused, runs="name", exact=False)


def _blank(name: str, fields: tuple[tuple[str, str], ...]) -> Rule:
    """A text that says something: not empty, not only white space (Python's ``str.isspace``, which
    :func:`spaces_class` spells out for SQL)."""
    return Rule(name, fields,
                check=lambda value: bool(value.strip()),
                sql=lambda column: f"(NOT regexp_matches({column}, {sql_literal(f'^{spaces_class()}*$')}))",
                message=lambda given: "is empty" if not given else f"is only white space ({len(given)} characters)",
                fix="write the text", refused=("", " ", " \t\n ", "\u3000\u2003"))


def _no_slash(name: str, fields: tuple[tuple[str, str], ...], what: Callable[[str], str], fix: str,
              refused: tuple, listed: bool = False) -> Rule:
    """No '/' in a source's id or any of its layers: the source's path joins them with '/'
    (:data:`DERIVED`), so a '/' in one would make another path. ``listed``: the value is a list (the
    layers), the message names its first string with a '/'; ``what(string)`` says what holds the '/'."""
    if listed:
        return Rule(name, fields,
                    check=lambda values: not any("/" in v for v in values),
                    sql=lambda column: (f"(NOT coalesce(list_bool_or(list_transform({column}, "
                                        "lambda x: contains(x, '/'))), false))"),
                    message=lambda given: f"{what(next(v for v in given if '/' in v))} contains '/'",
                    fix=fix, refused=refused, runs="record")
    return Rule(name, fields,
                check=lambda value: "/" not in value,
                sql=lambda column: f"(NOT contains({column}, '/'))",
                message=lambda given: f"{what(given)} contains '/'",
                fix=fix, refused=refused, runs="record")


# ------------------------------------------------------------------------ times
#: The ISO 8601 forms the columnar path proves (a date, or a date-time to the minute, second or
#: microsecond, in UTC, local or with an offset); :func:`doxa.data.times.parse_time` reads many more,
#: which go the per-line way.
TIME_FORM = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}"
             r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$")
#: The years of a moment the columnar path proves: well inside the years 1 to 9999 that Python's
#: datetimes (and so :func:`~doxa.data.times.parse_time`) hold, so no offset takes a proved time past them.
TIME_YEARS = (1001, 9998)


def time_sql(text: str) -> str:
    """SQL of the moment (a naive UTC TIMESTAMP, as :func:`~doxa.data.times.parse_time` gives it) of a
    string of :data:`TIME_FORM`; NULL for any other string, or a date that does not exist."""
    offset = (f"CASE WHEN {text} LIKE '%Z' THEN 0 "
              f"WHEN regexp_matches({text}, '[+-][0-9][0-9]:[0-9][0-9]$') THEN "
              f"(CASE WHEN substr({text}, -6, 1) = '-' THEN -1 ELSE 1 END) * "
              f"(TRY_CAST(substr({text}, -5, 2) AS INTEGER) * 60 + TRY_CAST(substr({text}, -2, 2) AS INTEGER)) "
              f"ELSE 0 END")
    local = f"TRY_CAST(regexp_replace({text}, '(Z|[+-][0-9][0-9]:[0-9][0-9])$', '') AS TIMESTAMP)"
    return f"CASE WHEN regexp_matches({text}, {sql_literal(TIME_FORM)}) THEN {local} - to_minutes({offset}) END"


def _time_problem(given) -> str | None:
    """Why :func:`~doxa.data.times.parse_time` refuses ``given``, in its words, or None."""
    try:
        parse_time(given)
    except ValueError as err:
        return str(err)
    return None


# ------------------------------------------------------------------------ a reading's sum
#: docs/formats.md: a reading's ``probs + unlisted + unclear + unrelated`` sums to 1 within this.
SUM_TOLERANCE = 1e-6
#: Sums this close to the edge of the tolerance are left to the per-line check (``math.fsum`` there,
#: plain double addition in SQL: they may differ in the last bits).
SUM_MARGIN = 1e-9


def reading_masses(probs: Iterable[float], unlisted: float, unclear: float, unrelated: float) -> list[float]:
    """What the ``sum`` rule holds: a reading's probabilities, then its unlisted, unclear and unrelated
    masses (in SQL: the list of the same, in the same order)."""
    return [*probs, unlisted, unclear, unrelated]


def _sums(masses: list[float]) -> tuple[float, float]:
    """(the probabilities' sum, the whole sum) of :func:`reading_masses`: the probabilities by
    ``math.fsum`` (exact, in any order), then the other masses added in turn."""
    in_probs = math.fsum(masses[:-3])
    return in_probs, in_probs + masses[-3] + masses[-2] + masses[-1]


def _sum_message(masses: list[float]) -> str:
    in_probs, total = _sums(masses)
    tolerance = f"{SUM_TOLERANCE:.0e}".replace("e-0", "e-")
    what = "probs + unlisted + unclear + unrelated" if masses[-3] else "probs + unclear + unrelated"
    return f"{what} sums to {total:.9g} but must sum to 1 (within {tolerance}; got {in_probs:.9g} in probs)"


#: Every rule of a field's value, by name (and the sum of a reading's masses).
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
    # a reading's probabilities, unclear, unrelated, one_off, unlisted and changed; the message quotes the
    # number read (``2.0`` for ``2``), no fix follows it
    Rule("mass", (("reading", "unclear"), ("reading", "unrelated"), ("reading", "one_off"), ("reading", "unlisted"),
                  ("reading", "changed")),
         check=lambda value: value is not None and math.isfinite(value) and 0.0 <= value <= 1.0,
         sql=lambda column: f"({column} BETWEEN 0.0 AND 1.0)",
         message=lambda value: f"must be a number in [0, 1], got {value!r}",
         fix="", refused=(1.5, -0.25, 2.5, -1.0, 1e308), runs="reading"),
    # every id, name, alias, option, kind, layer and reader name; a record's own id holds no white space
    _names("name", name_problem, False, (("subject", "name"), ("relation", "kind"), ("question", "kind"),
                                         ("reading", "reader")),
           refused=("", " a", "a\t", "a\x00b", "a\u200bb", "\ufeffa", "x" * (MAX_NAME_CHARS + 1), "e\u0301")),
    _names("id", id_problem, True, (("subject", "id"), ("question", "id")),
           refused=("", "a ", "a\x1bb", "a\u202eb", "x" * (MAX_NAME_CHARS + 1), "Ae\u0301", "a b", "a\u00a0b")),
    # a source's path is its layers and id joined by '/' (DERIVED): neither may hold one
    _no_slash("source_id", (("source", "id"),), lambda given: f"source id {given!r}",
              "ids name a leaf, layers go in 'layers'", refused=("a/b", "/src", "src/")),
    _no_slash("layers", (("source", "layers"),), lambda layer: f"layer {layer!r}",
              "give each layer as its own list item", refused=(["person/chat"], ["person", "chat/x"], ["/"]),
              listed=True),
    # a question's or instruction's text says something
    _blank("blank", (("question", "text"), ("instruction", "text"))),
    # every time of a core record: what parse_time reads (its message); the SQL proves the forms of
    # TIME_FORM within TIME_YEARS, and leaves the rest (a rare form, a year near the ends) to it
    Rule("time", (("message", "sent_at"), ("message", "received_at"), ("settlement", "at"), ("rejection", "at"),
                  ("instruction", "at")),
         check=lambda given: _time_problem(given) is None,
         read=time_sql,
         sql=lambda moment: f"({moment} IS NOT NULL AND year({moment}) BETWEEN {TIME_YEARS[0]} AND {TIME_YEARS[1]})",
         message=_time_problem, fix="",
         refused=("someday", "2026-02-30", "2026-01-01T24:30", "", "1 May 2026", 20260101),
         runs="time", exact=False),
    # a reading's masses sum to 1; the SQL proves sums within the tolerance less its margin
    Rule("sum", (("reading", "unclear"), ("reading", "unrelated")),
         check=lambda masses: abs(_sums(masses)[1] - 1.0) <= SUM_TOLERANCE,
         sql=lambda masses: f"(abs(list_sum({masses}) - 1.0) <= {SUM_TOLERANCE - SUM_MARGIN!r})",
         message=_sum_message, fix="renormalise them together", refused=(0.25, 0.5, 1.0),
         runs="sum", exact=False),
)}
#: The cap of every string of a record (:attr:`Rule.runs` ``"string"``).
TEXT = RULES["text"]
#: The bounds of each of a reading's masses (:attr:`Rule.runs` ``"reading"``).
MASS = RULES["mass"]
#: Ids and names, and a record's own id (:attr:`Rule.runs` ``"name"``).
NAME, ID = RULES["name"], RULES["id"]
#: Every time of a core record (:attr:`Rule.runs` ``"time"``).
TIME = RULES["time"]
#: A reading's masses together (:attr:`Rule.runs` ``"sum"``).
SUM = RULES["sum"]

_BY_FIELD: dict[tuple[str, str], tuple[Rule, ...]] = {
    field: tuple(rule for rule in RULES.values() if field in rule.fields and rule.runs != "sum")
    for field in {field for rule in RULES.values() for field in rule.fields}}
#: Every field some rule holds on its typed value by the record's own validator (:attr:`Rule.runs`
#: ``"field"`` and ``"record"``: :class:`doxa.data.models._Record`'s wrap validator runs those of its type).
RULED_FIELDS: tuple[str, ...] = tuple(sorted({name for (_, name), rules in _BY_FIELD.items()
                                              if any(rule.runs in ("field", "record") for rule in rules)}))


def rules_for(record_type: str, field: str) -> tuple[Rule, ...]:
    """The rules that hold ``field`` of ``record_type`` on its value alone (not the sum, which holds
    a reading's masses together), in :data:`RULES`' order."""
    return _BY_FIELD.get((record_type, field), ())


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
