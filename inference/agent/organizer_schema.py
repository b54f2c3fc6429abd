"""What the organizer is shown and what it answers: the request, the output schema, and reading a reply.

Pure: no HTTP here (the model client is :mod:`.organizer_client`). For one message the
organizer is shown the message, its source, the subjects the memory knows that the message may
be about and the questions already tracked for them (found by doxa's own search, so it links
instead of duplicating) — :class:`OrganizerRequest` — and it answers with structure, never with
a number (:class:`OrganizerOutput`):

- ``links``: ids of existing questions the message bears on;
- ``new_values``: values the message states for an existing *open* question (one whose answers are
  values: an address, a job) that are not among its listed values — a new address extends
  ``maya.home`` instead of starting ``maya.home_2``;
- ``new_questions``: questions to start tracking (subject, kind, text, shape, options); shape
  ``value`` is a question whose answers are values, created open (docs/design.md §2, "Open
  questions") with the values the message names as its options;
- ``new_subjects`` and ``new_relations``: people or things the message names, and how they relate.

The schema has no field for a probability, a confidence or a score (tests check it): how much a
message says for an answer is the reader's job, and how far to believe it the fit's.

:meth:`OrganizerOutput.response_schema` is the JSON schema sent as ``response_format``, narrowed
to the message (links only to the questions shown). A reply is parsed as strict JSON after a
light repair (:func:`parse_reply`: code fences, prose around the object, trailing commas), then
validated and normalised (:func:`check_output`), which lists what a model should fix.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from doxa.data.ingest_rules import NAME
from doxa.data.models import UNLISTED

from .untrusted import untrusted

#: Most existing questions shown to the organizer for one message (the best-ranked for its words).
MAX_QUESTIONS_SHOWN = 20
#: Most of one subject's questions among them (its best-ranked): a small model links what it is shown,
#: so a person with many questions is shown the few the message's words rank first.
MAX_QUESTIONS_PER_SUBJECT = 6
#: Every subject is shown when the store has at most this many; else those the message names and their neighbours.
ALL_SUBJECTS_UP_TO = 25


# ---------------------------------------------------------------------------- the output schema
class _Strict(BaseModel):
    # every field is listed as required in the schema sent to the server (OpenAI strict mode
    # wants that), while parsing a reply without the schema still accepts an omitted empty list
    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_serialization_defaults_required=True)


class NewQuestion(_Strict):
    subject: str = Field(min_length=1, description="id of the subject it is about (known, or in new_subjects)")
    kind: str = Field(min_length=1, description="short snake_case name of what is asked, e.g. diet, home_city")
    text: str = Field(min_length=1, description="the question in words")
    shape: Literal["yes_no", "choice"]
    options: list[str] = Field(description="every plausible answer, at least 2, distinct; yes_no: [\"yes\", \"no\"]")


class NewValueQuestion(_Strict):
    # a question whose answers are values (an address, a job, a name, a time): created open, its
    # options the values the message names (none, one or more); later values join it (new_values).
    # (A comment, not a docstring: a docstring would be sent in the schema, to a small model.)

    subject: str = Field(min_length=1, description="id of the subject it is about (known, or in new_subjects)")
    kind: str = Field(min_length=1, description="short snake_case name of what is asked, e.g. home, job")
    text: str = Field(min_length=1, description="the question in words")
    shape: Literal["value"]
    options: list[str] = Field(description="only the values the message states, e.g. [\"12 Elm Street\"]")


class NewValue(_Strict):
    # a value the message states for an existing open question, not among its listed values

    question: str = Field(min_length=1, description="id of an existing open question, as listed")
    value: str = Field(min_length=1, description="the value as the message states it, short")


class NewSubject(_Strict):
    id: str = Field(min_length=1, description="lower-case words joined by _")
    name: str = Field(min_length=1)
    aliases: list[str] = []


class NewRelation(_Strict):
    from_: str = Field(alias="from", min_length=1)
    to: str = Field(min_length=1)
    kind: str = Field(min_length=1, description="e.g. partner, sibling, parent, colleague")


class OrganizerOutput(_Strict):
    """What the organizer decides for one message. No probabilities: the schema has no number at all."""

    links: list[str] = Field(default=[], description="ids of existing questions the message bears on")
    new_values: list[NewValue] = []
    new_questions: list[NewQuestion | NewValueQuestion] = []
    new_subjects: list[NewSubject] = []
    new_relations: list[NewRelation] = []

    @classmethod
    def response_schema(cls, request: "OrganizerRequest | None" = None) -> dict[str, Any]:
        """The JSON schema sent as ``response_format`` (titles and defaults left out: strict servers refuse them).

        With ``request``, the schema is that message's: ``links`` may only name the questions shown
        (none at all when none were shown), ``new_values`` only the open ones among them. A server
        that turns the schema into a grammar (llama.cpp) then cannot let a small model invent a
        question id, and a choice cannot be given fewer than two options; :func:`check_output`
        still checks both, for the servers that take no schema."""
        schema = _clean_schema(cls.model_json_schema(mode="serialization", by_alias=True))
        schema.pop("description", None)
        schema["$defs"]["NewQuestion"]["properties"]["options"]["minItems"] = 2
        schema["$defs"]["NewValueQuestion"]["properties"]["shape"] = {"type": "string", "enum": ["value"]}
        _bound_lengths(schema)
        if request is not None:
            links = schema["properties"]["links"]
            shown = sorted({q["id"] for q in request.questions})
            if shown:
                links["items"] = {"type": "string", "enum": shown}
            links["maxItems"] = len(shown)
            values = schema["properties"]["new_values"]
            open_shown = sorted({q["id"] for q in request.questions if q.get("open")})
            if open_shown:
                schema["$defs"]["NewValue"]["properties"]["question"] = {"type": "string", "enum": open_shown}
            else:
                values["maxItems"] = 0
        return schema


#: Upper bounds in the schema sent (not in the model: a reply past them, from a server that takes
#: no schema, is still read). Under a grammar a small model can repeat itself until it runs out
#: of tokens — measured: 10 of 40 messages lost to ``"links": ["x", "x", "x", …`` cut off at 768
#: tokens — and a bound is what lets the grammar close the list or string instead.
MAX_ITEMS = {"new_values": 4, "new_questions": 4, "new_subjects": 4, "new_relations": 4, "options": 12, "aliases": 4}
MAX_TEXT_LENGTH = 200
MAX_NAME_LENGTH = 80


def _bound_lengths(node: Any, name: str | None = None) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array" and name in MAX_ITEMS:
            node["maxItems"] = MAX_ITEMS[name]
        if node.get("type") == "string" and "enum" not in node:
            node["maxLength"] = MAX_TEXT_LENGTH if name == "text" else MAX_NAME_LENGTH
        for key, value in node.items():
            _bound_lengths(value, name if key == "items" else key)
    elif isinstance(node, list):
        for value in node:
            _bound_lengths(value, name)


def _clean_schema(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _clean_schema(v) for k, v in node.items() if k not in ("title", "default")}
    if isinstance(node, list):
        return [_clean_schema(v) for v in node]
    return node


# ---------------------------------------------------------------------------- the request
@dataclass
class OrganizerRequest:
    """What the organizer is shown for one message."""

    text: str
    source: str
    source_path: str
    sent_at: datetime
    #: ``{"id", "name", "aliases", "relations": ["partner: sam", …]}`` per subject shown
    subjects: list[dict[str, Any]] = field(default_factory=list)
    #: ``{"id", "subject", "text", "options"}`` per existing question shown
    questions: list[dict[str, Any]] = field(default_factory=list)
    #: every subject id of the store (new subjects must not reuse one)
    known_subject_ids: frozenset[str] = frozenset()

    def prompt(self) -> str:
        # every text here came from outside (the message) or from a model (names, questions): see untrusted
        body = untrusted(self.text)
        lines = [f"Message from {self.source_path} (source id {self.source}), sent {self.sent_at:%Y-%m-%d}:",
                 "<message>", body, "</message>", "", "Known subjects (id: name):"]
        if self.subjects:
            for s in self.subjects:
                extra = []
                if s.get("aliases"):
                    extra.append("aliases: " + ", ".join(s["aliases"]))
                extra += s.get("relations", [])
                lines.append(untrusted(f"- {s['id']}: {s['name']}" + (f" ({'; '.join(extra)})" if extra else "")))
        else:
            lines.append("(none yet)")
        lines += ["", "Existing questions (id (about subject): text [options]):"]
        if self.questions:
            for q in self.questions:
                # an open question's options are the values named so far ("open": new_values adds to them)
                about = f"about {q['subject']}, open" if q.get("open") else f"about {q['subject']}"
                lines.append(untrusted(f"- {q['id']} ({about}): {q['text']} [{' | '.join(q['options'])}]"))
        else:
            lines.append("(none yet)")
        lines += ["", "Reply with the JSON object only."]
        return "\n".join(lines)


def proposed_again(question: Any, shown: list[dict[str, Any]]) -> str | None:
    """The id of the question shown that a new question proposes again — the same ``subject.kind`` id, or the
    same subject and text (case aside) — or None: ``remember`` links that question instead of creating one.
    ``question``: a new question (a model or its ``dict``), ``shown``: the request's questions."""
    get = question.get if isinstance(question, dict) else lambda key, default=None: getattr(question, key, default)
    subject, base, text = get("subject"), f"{get('subject')}.{get('kind')}", str(get("text", "")).lower()
    return next((q["id"] for q in shown if q["id"] == base or (q.get("subject") == subject
                                                                and str(q.get("text", "")).lower() == text)), None)


def slug(text: str) -> str:
    """Lower-case words joined by ``_`` (ids and kinds the organizer proposes, normalised)."""
    return "_".join(re.findall(r"[^\W_]+", text.lower()))


#: What a model writes for "a value not named" on a value question: no value (``unlisted`` covers it).
PLACEHOLDER_VALUES = frozenset({UNLISTED, "unknown", "other", "others", "elsewhere", "not listed", "not given",
                                "not stated", "not known", "not yet known", "n/a", "tbd", "?"})
_AROUND_VALUE = " \t.,;:!?\"'`«»“”‘’"


def clean_value(value: str) -> str:
    """A value as stored: NFC, white space collapsed, quotes and punctuation around it dropped."""
    return " ".join(unicodedata.normalize("NFC", value).split()).strip(_AROUND_VALUE)


def value_key(value: str) -> str:
    """What two values are compared by: case, spacing and the punctuation around them left out
    ("5 oak lane." is "5 Oak Lane")."""
    return clean_value(value).casefold()


def same_value(value: str, options: list[str]) -> str | None:
    """The option ``value`` already is, up to case and spacing, or None."""
    key = value_key(value)
    return next((o for o in options if value_key(o) == key), None)


_WORD = re.compile(r"\w+")


def stated_in(text: str) -> Callable[[str], bool]:
    """``stated(value)``: whether the message ``text`` states ``value`` — its words, case aside, appear
    in the text one after another (or run together: "7am" states "7 am"). A value is what the
    evidence says, so one the text does not hold is a model's invention (a small model fills a value
    question with "Neighborhood 1"): code drops it rather than store it as an option. A value with no
    letter or digit is left to the other checks."""
    tokens = [w.casefold() for w in _WORD.findall(text)]
    joined = "".join(tokens)

    def stated(value: str) -> bool:
        wanted = [w.casefold() for w in _WORD.findall(value)]
        if not wanted:
            return True
        n = len(wanted)
        return any(tokens[i:i + n] == wanted for i in range(len(tokens) - n + 1)) or "".join(wanted) in joined

    return stated


def _values(values: list[str], where: str, problems: list[str],
            stated: Callable[[str], bool] = lambda value: True) -> list[str]:
    """A value question's values: cleaned, placeholders and values the message does not state dropped,
    distinct up to case and spacing."""
    out: list[str] = []
    for value in values:
        value = clean_value(value)
        if not value or value.casefold() in PLACEHOLDER_VALUES or same_value(value, out) or not stated(value):
            continue
        if not NAME.check(value):
            problems.append(f"{where}: value {value[:40]!r} {NAME.message(value)}: give the value itself, short")
            continue
        out.append(value)
    return out


def known_subject_resolver(request: OrganizerRequest):
    """``resolve(reference)`` → the id of the known subject a model's reference means, or None.

    A model rewrites ids in its own style ("ava_lopez" for the store's "ava-lopez", "Maya")
    or names a person instead ("Ava Lopez"): a reference counts as a known subject when it is
    its id, or equal to its id, name or an alias once both are slugged — and only where that
    points to one subject, so two people with one name are never merged by a guess.
    """
    by_slug: dict[str, set[str]] = {}
    for sid in request.known_subject_ids:
        by_slug.setdefault(slug(sid), set()).add(sid)
    for s in request.subjects:
        for label in [s.get("name") or "", *(s.get("aliases") or [])]:
            if slug(label):
                by_slug.setdefault(slug(label), set()).add(s["id"])

    def resolve(reference: str) -> str | None:
        if reference in request.known_subject_ids:
            return reference
        found = by_slug.get(slug(reference), set())
        return next(iter(found)) if len(found) == 1 else None

    return resolve


def check_output(output: OrganizerOutput, request: OrganizerRequest) -> tuple[OrganizerOutput, list[str]]:
    """The output normalised (known subjects under their stored ids, new ids and kinds slugged, links
    deduplicated, yes/no options in order, values cleaned), and what is wrong with it that a model
    should fix (unknown ids, bad options).

    New values are settled by code where code can: a value equal to an option of its question up to
    case and spacing is that option (the message is linked, nothing is added); a value for a shown
    question that is closed links it (its options are all its answers); a value for the question the
    same reply creates joins that question's options; a question given a value is linked."""
    problems: list[str] = []
    shown = {q["id"] for q in request.questions}
    links = list(dict.fromkeys(link.strip() for link in output.links))
    known = known_subject_resolver(request)
    new_subjects, seen_subjects = [], set()
    for s in output.new_subjects:
        if known(s.id) or (known(s.name) and not slug(s.id)):
            continue  # already known: nothing to add
        sid = slug(s.id) or slug(s.name)
        if not sid:
            problems.append(f"new_subjects: {s.id!r} has no letters: give an id such as \"uncle_tom\"")
            continue
        if sid in seen_subjects:
            continue
        seen_subjects.add(sid)
        new_subjects.append(NewSubject(id=sid, name=s.name.strip(), aliases=[a.strip() for a in s.aliases if a.strip()]))

    def subject_id(reference: str) -> str:
        return known(reference) or slug(reference)

    subjects = set(request.known_subject_ids) | seen_subjects
    stated = stated_in(request.text)
    questions = []
    for q in output.new_questions:
        subject = subject_id(q.subject)
        options = list(dict.fromkeys(o.strip() for o in q.options if o.strip()))
        where = f"new_questions ({q.text!r})"
        if subject not in subjects:
            problems.append(f"{where}: subject {q.subject!r} is neither a known subject id nor in new_subjects")
        if q.shape == "yes_no":
            if sorted(o.lower() for o in options) != ["no", "yes"]:
                problems.append(f"{where}: a yes_no question has options exactly [\"yes\", \"no\"]")
            options = ["yes", "no"]
        elif q.shape == "choice" and len(options) < 2:
            problems.append(f"{where}: a choice question needs at least 2 distinct options (\"value\" for an "
                            "answer that is a value, such as an address: its options are the values named)")
        kind = slug(q.kind)
        if not kind:
            problems.append(f"{where}: kind {q.kind!r} has no letters: give a snake_case name such as \"diet\"")
        if q.shape == "value":
            questions.append(NewValueQuestion(subject=subject, kind=kind, text=" ".join(q.text.split()),
                                              shape="value", options=_values(q.options, where, problems, stated)))
            continue
        questions.append(NewQuestion(subject=subject, kind=kind, text=" ".join(q.text.split()), shape=q.shape,
                                     options=options))
    # a model often also "links" the question it creates in the same reply, by the id that question
    # will get (subject.kind): that link is the new question itself, which is read anyway
    creating = {f"{q.subject}.{q.kind}" for q in questions} | {f"{q.subject}.{q.kind}" for q in output.new_questions}
    links = [link for link in links if link in shown or link not in creating]
    for link in links:
        if link not in shown:
            problems.append(f"links: {link!r} is not one of the existing question ids listed; link only those")
    new_values = _check_values(output.new_values, request, questions, links, problems, stated)
    relations = []
    for r in output.new_relations:
        ends = (subject_id(r.from_), subject_id(r.to))
        for end, given in zip(ends, (r.from_, r.to)):
            if end not in subjects:
                problems.append(f"new_relations: {given!r} is neither a known subject id nor in new_subjects")
        if ends[0] == ends[1]:
            continue
        relations.append(NewRelation(**{"from": ends[0], "to": ends[1], "kind": slug(r.kind) or r.kind}))
    clean = OrganizerOutput(links=links, new_values=new_values, new_questions=questions, new_subjects=new_subjects,
                            new_relations=relations)
    return clean, problems


def _check_values(given: list[NewValue], request: OrganizerRequest, questions: list, links: list[str],
                  problems: list[str], stated: Callable[[str], bool]) -> list[NewValue]:
    """The new values that add to a shown open question (see :func:`check_output`); ``questions``
    (the new ones) and ``links`` are extended in place. A value the message does not state
    (:func:`stated_in`) adds nothing: its question is linked, as for "a value not named"."""
    shown = {q["id"]: q for q in request.questions}
    creating = {f"{q.subject}.{q.kind}": q for q in questions}
    out: list[NewValue] = []
    for v in given:
        qid, where = v.question.strip(), f"new_values ({v.value!r})"
        value = clean_value(v.value)
        if not value or value.casefold() in PLACEHOLDER_VALUES or not stated(value):
            if qid in shown and qid not in links:
                links.append(qid)  # "a value not listed": the reader reads it as unlisted
            continue
        if not NAME.check(value):
            problems.append(f"{where}: {NAME.message(value)}: give the value itself, short")
            continue
        if qid in creating and qid not in shown:
            q = creating[qid]
            if q.shape == "value" and not same_value(value, q.options):
                q.options.append(value)
            continue
        if qid not in shown:
            problems.append(f"{where}: {qid!r} is not one of the existing open question ids listed; name only those")
            continue
        q = shown[qid]
        if qid not in links:
            links.append(qid)
        if not q.get("open") or same_value(value, list(q["options"])) or any(
                x.question == qid and value_key(x.value) == value_key(value) for x in out):
            continue  # a closed question (its options are all its answers), or a value it lists already
        out.append(NewValue(question=qid, value=value))
    return out


# ---------------------------------------------------------------------------- a window of turns
class TurnOutput(_Strict):
    # what one numbered turn of a window says: the same decisions as for one message

    turn: int = Field(ge=1, description="the turn's number, as shown")
    links: list[str] = Field(default=[], description="ids of existing questions the turn bears on")
    new_values: list[NewValue] = []
    new_questions: list[NewQuestion | NewValueQuestion] = []


class WindowOutput(_Strict):
    """What the organizer decides for a window of numbered turns: per turn that says something lasting,
    its links, new values and new questions; the window's new subjects and relations. No probabilities."""

    turns: list[TurnOutput] = []
    new_subjects: list[NewSubject] = []
    new_relations: list[NewRelation] = []

    @classmethod
    def response_schema(cls, request: "WindowRequest | None" = None) -> dict[str, Any]:
        """The JSON schema sent as ``response_format``: :meth:`OrganizerOutput.response_schema`'s
        bounds, with ``turn`` one of the window's numbers and ``links`` / ``new_values`` only the
        questions shown (see there)."""
        schema = _clean_schema(cls.model_json_schema(mode="serialization", by_alias=True))
        schema.pop("description", None)
        defs = schema["$defs"]
        defs["NewQuestion"]["properties"]["options"]["minItems"] = 2
        defs["NewValueQuestion"]["properties"]["shape"] = {"type": "string", "enum": ["value"]}
        _bound_lengths(schema)
        turn = defs["TurnOutput"]["properties"]
        for key in ("links", "new_values", "new_questions"):
            turn[key]["maxItems"] = MAX_ITEMS.get(key, 4)
        turn["turn"] = {"type": "integer", "minimum": 1}
        if request is not None:
            numbers = [n for n, _ in request.turns]
            turn["turn"] = {"type": "integer", "enum": numbers}
            schema["properties"]["turns"]["maxItems"] = len(numbers)
            shown = sorted({q["id"] for q in request.questions})
            if shown:
                turn["links"]["items"] = {"type": "string", "enum": shown}
            turn["links"]["maxItems"] = min(len(shown), MAX_ITEMS["new_values"])
            open_shown = sorted({q["id"] for q in request.questions if q.get("open")})
            if open_shown:
                defs["NewValue"]["properties"]["question"] = {"type": "string", "enum": open_shown}
            else:
                turn["new_values"]["maxItems"] = 0
        return schema


#: The fixed opening of every window prompt (byte-identical from call to call, after the
#: instructions, so a server that caches prompts — llama.cpp does — reads it once).
WINDOW_RULES = """This time you are shown a WINDOW of numbered turns from one conversation, not one message: \
everything the user said to an assistant in one session, in order. Every turn is the user's own words: "I", \
"me", "my" are the user, the subject named below. Apply the rules above to each turn, and reply with one JSON \
object and nothing else:
  {"turns": [{"turn": N, "links": [...], "new_values": [...], "new_questions": [...]}],
   "new_subjects": [...], "new_relations": [...]}
List only the turns that tell something lasting about the user or someone they know (job, home, family, \
pets, possessions, habits, preferences, plans, numbers and names that may change); leave out a turn that only \
asks the assistant for something. A question is created once: when a later turn of the window gives another \
value for a question an earlier turn created, propose that question again (same subject and kind) with the \
new value as its option. Each turn names the values it states itself, never those of other turns.
Example: turns 1 "I'm a nurse, any tips for night shifts?" and 2 "Can you explain how vaccines work?" and \
3 "I just started as a teacher, so no more night shifts." with no questions yet:
{"turns": [{"turn": 1, "links": [], "new_values": [], "new_questions": [{"subject": "me", "kind": "job", \
"text": "What is my job?", "shape": "value", "options": ["nurse"]}]},
 {"turn": 3, "links": [], "new_values": [], "new_questions": [{"subject": "me", "kind": "job", \
"text": "What is my job?", "shape": "value", "options": ["teacher"]}]}],
 "new_subjects": [], "new_relations": []}
"""
#: The longest text of one turn shown to the organizer (characters: the beginning, then an ellipsis).
MAX_TURN_CHARS = 1500


@dataclass
class WindowRequest(OrganizerRequest):
    """What the organizer is shown for a window of turns: the turns, numbered, with the subjects and
    questions (as for one message, ranked for all the turns' words). ``text`` is the turns joined."""

    #: (number, text) per turn, numbered from 1
    turns: list[tuple[int, str]] = field(default_factory=list)
    #: the subject the turns' "I" is
    user: str = "me"

    def prompt(self) -> str:
        # fixed part first (WINDOW_RULES), then what changes slowly (subjects, questions), the turns last
        lines = [WINDOW_RULES, "Known subjects (id: name):"]
        lines += _subject_lines(self.subjects)
        lines += ["", "Existing questions (id (about subject): text [options]):"]
        lines += _question_lines(self.questions)
        lines += ["", f"Turns from {self.source_path} (source id {self.source}; the user is the subject "
                      f"{self.user}), sent {self.sent_at:%Y-%m-%d}:"]
        for n, text in self.turns:
            shown = text if len(text) <= MAX_TURN_CHARS else text[:MAX_TURN_CHARS] + " …"
            lines += [f"<turn {n}>", untrusted(shown), f"</turn {n}>"]
        lines += ["", "Reply with the JSON object only."]
        return "\n".join(lines)

    def turn_request(self, number: int) -> OrganizerRequest:
        """One turn as a one-message request (what an organizer without a window path is shown)."""
        text = dict(self.turns)[number]
        return OrganizerRequest(text=text, source=self.source, source_path=self.source_path, sent_at=self.sent_at,
                                subjects=self.subjects, questions=self.questions,
                                known_subject_ids=self.known_subject_ids)


def _subject_lines(subjects: list[dict[str, Any]]) -> list[str]:
    if not subjects:
        return ["(none yet)"]
    out = []
    for s in subjects:
        extra = []
        if s.get("aliases"):
            extra.append("aliases: " + ", ".join(s["aliases"]))
        extra += s.get("relations", [])
        out.append(untrusted(f"- {s['id']}: {s['name']}" + (f" ({'; '.join(extra)})" if extra else "")))
    return out


def _question_lines(questions: list[dict[str, Any]]) -> list[str]:
    if not questions:
        return ["(none yet)"]
    out = []
    for q in questions:
        about = f"about {q['subject']}, open" if q.get("open") else f"about {q['subject']}"
        out.append(untrusted(f"- {q['id']} ({about}): {q['text']} [{' | '.join(q['options'])}]"))
    return out


def check_window_output(output: WindowOutput, request: WindowRequest) -> tuple[WindowOutput, list[str]]:
    """:func:`check_output` for a window, turn by turn, in turn order (a turn named twice is one turn):
    the window's new subjects count for every turn, and a question an earlier turn creates counts as
    shown for the later ones (so a later value for it joins it). Problems name the turn."""
    problems: list[str] = []
    numbers = {n for n, _ in request.turns}
    people, found = check_output(OrganizerOutput(new_subjects=output.new_subjects,
                                                 new_relations=output.new_relations), request)
    problems += found
    merged: dict[int, TurnOutput] = {}
    for t in output.turns:
        if t.turn not in numbers:
            problems.append(f"turns: turn {t.turn} is not one of the turns shown ({min(numbers)} to {max(numbers)})"
                            if numbers else f"turns: turn {t.turn} was not shown")
            continue
        if t.turn in merged:
            m = merged[t.turn]
            merged[t.turn] = TurnOutput(turn=t.turn, links=m.links + t.links, new_values=m.new_values + t.new_values,
                                        new_questions=m.new_questions + t.new_questions)
        else:
            merged[t.turn] = t
    created: list[dict[str, Any]] = []
    turns = []
    for number in sorted(merged):
        t = merged[number]
        shown = OrganizerRequest(text=dict(request.turns)[number], source=request.source,
                                 source_path=request.source_path,
                                 sent_at=request.sent_at, subjects=request.subjects,
                                 questions=request.questions + created, known_subject_ids=request.known_subject_ids)
        clean, found = check_output(OrganizerOutput(links=t.links, new_values=t.new_values,
                                                    new_questions=t.new_questions,
                                                    new_subjects=output.new_subjects), shown)
        problems += [f"turn {number}: {p}" for p in found]
        known = {q["id"] for q in created}
        for q in clean.new_questions:
            qid = f"{q.subject}.{q.kind}"
            if qid not in known and all(qid != x["id"] for x in request.questions):
                known.add(qid)
                created.append({"id": qid, "subject": q.subject, "text": q.text, "options": list(q.options),
                                "open": q.shape == "value"})
        if clean.links or clean.new_values or clean.new_questions:
            turns.append(TurnOutput(turn=number, links=clean.links, new_values=clean.new_values,
                                    new_questions=clean.new_questions))
    return WindowOutput(turns=turns, new_subjects=people.new_subjects, new_relations=people.new_relations), problems


# ---------------------------------------------------------------------------- parsing a reply
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


def _outermost_object(text: str) -> str | None:
    """The first balanced ``{…}`` of ``text`` (strings and escapes respected), or None."""
    start = text.find("{")
    if start < 0:
        return None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def parse_reply(content: str) -> tuple[dict[str, Any] | None, str, bool]:
    """(the JSON object, what is wrong when None, whether it needed repair).

    Repair is only what cannot change the meaning: a Markdown code fence, prose before or after
    the object, trailing commas. A reply cut off before its end is not completed (guessing the
    rest could invent a question); it is asked again.
    """
    text = content.strip()
    try:
        value = json.loads(text)
        if isinstance(value, dict):
            return value, "", False
        return None, f"the reply is JSON but not an object (got {type(value).__name__})", False
    except json.JSONDecodeError:
        pass
    fenced = _FENCE.match(text)
    candidate = _outermost_object(fenced.group(1) if fenced else text)
    if candidate is None:
        if "{" in text:
            return None, "the JSON object is not closed (the reply was cut off or malformed)", False
        return None, "the reply holds no JSON object", False
    for attempt in (candidate, _TRAILING_COMMA.sub(r"\1", candidate)):
        try:
            value = json.loads(attempt)
        except json.JSONDecodeError as err:
            problem = f"not valid JSON ({err.msg} at column {err.colno})"
            continue
        return value, "", True
    return None, problem, False


def validation_problems(err: ValidationError) -> list[str]:
    out = []
    for item in err.errors()[:6]:
        where = ".".join(str(x) for x in item["loc"]) or "reply"
        if item["type"] == "extra_forbidden":
            out.append(f"{where}: unknown key; use only the keys of the format")
        elif item["type"] == "missing":
            out.append(f"{where}: missing")
        else:
            out.append(f"{where}: {item['msg']}")
    return out


__all__ = ["OrganizerOutput", "OrganizerRequest", "WindowOutput", "WindowRequest", "TurnOutput", "WINDOW_RULES",
           "MAX_TURN_CHARS", "check_window_output", "NewQuestion", "NewValueQuestion", "NewValue", "NewSubject",
           "NewRelation", "check_output", "clean_value", "value_key", "same_value", "PLACEHOLDER_VALUES",
           "known_subject_resolver", "parse_reply", "slug", "validation_problems", "MAX_QUESTIONS_SHOWN",
           "MAX_QUESTIONS_PER_SUBJECT", "proposed_again",
           "ALL_SUBJECTS_UP_TO"]
