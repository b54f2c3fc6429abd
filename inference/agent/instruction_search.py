"""Instruction search: new versions of the organizer's instructions proposed by a model, scored on the
organizer's own mistakes, and kept only when they do better on cases they were not written for.

**Cases.** The store's cases (:func:`.organizer_memory.cases`) that have a kept decision (so their
request can be replayed) and an expected decision a replay can meet (a link expected to a question the
request showed; a question to keep that the kept output named). Each goes to one half by the first
byte of the SHA-256 of its id (even: the *search* half, odd: the *held-out* half), so a case stays in
its half from run to run. A case the active instructions already get right is *pinned*: no kept
candidate may get it wrong.

**Scoring a version** on a set of cases: each case's kept decision is replayed under the text
(:func:`.organizer_memory.replay`) through the decisions cache (:class:`.organizer_memory.CachedOrganizer`
over the store, whose key includes the instructions text): a replay done before costs zero calls, and
a new one is kept as a row of ``organizer_decisions`` with no version and nothing created or linked
(its ``messages`` are those of the decision it replays, so ``doxa forget`` finds it). Each case scores
1 (right) or 0 (wrong, or no valid reply): :func:`judge` says what right is for each expected decision.

**A round.** The parent (round 1: the active version) is scored on the search half; the cases it gets
wrong, at most ``minibatch`` of them, are the failing minibatch. The proposer
(:mod:`.instruction_proposer`) writes ``candidates`` texts, each shown the minibatch in another order and
the edits already tried under this parent. Each candidate is validated (:func:`validate`), then:

1. scored on the failing minibatch — dropped when it fixes none;
2. scored on the held-out half — rejected when a pinned case there regresses;
3. the gate, on the held-out scores paired with the parent's (``d_i = s_cand,i − s_parent,i``, ``n``
   cases, ``d̄`` their mean, ``SE = sqrt(Σ(d_i − d̄)² / (n (n − 1)))``, 0 when ``n = 1``): kept when
   ``d̄ > SE``, or when ``|d̄| ≤ SE`` and the text is shorter than the parent's; else rejected;
4. scored on the pinned cases of the search half it was not scored on yet — rejected when one regresses.

The best kept candidate of a round (highest held-out mean, then shortest) is the next round's parent,
so the gate is against the parent (the active version in round 1, a candidate that beat it after).
The search ends after ``rounds`` rounds, or when the parent gets every search case right.

**Kept, not activated.** Candidates are stored (``instruction_candidates``) with their parent, scores,
answered cases, diff and fate; the best is the last parent. ``activate=True`` (``--activate``) makes it
the active version through :func:`doxa.data.organizer_instructions.set_text` (``rollback`` returns);
without it a person reviews the diff and sets it (``doxa organizer-instructions set``).

**Budget and resume.** ``max_calls`` bounds the model calls of this run — organizer replays and proposer
calls together, every HTTP request counted (retries included): a request that would pass the bound is
not sent (a client's retries are cut to what is left) and the search stops, saying so. The search's id
is a hash of what it starts from (the active version, the cases, the organizer's and proposer's model
and settings); its state (rounds done, calls spent) and every candidate, written as soon as it is
proposed, are in the store, so a rerun resumes where it stopped, and a rerun with nothing new makes no
call. A reply the organizer gets wrong twice (no valid output) scores 0 and is not kept: a rerun asks
again. A server that fails (unreachable, an HTTP error) stops the search with its state saved.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from doxa.data import instruction_search as state_data
from doxa.data import organizer_decisions as kept_data
from doxa.data import organizer_instructions
from doxa.data.session import transaction
from doxa.data.text import words

from .instruction_proposer import Contrast, ProposerError
from .organizer_client import OrganizerError, Organizer
from .organizer_memory import (GOLD, WORLD, Case, CachedOrganizer, _names_value, cases, decoding_settings, model_of,
                               replay)
from .organizer_schema import (NewQuestion, NewRelation, NewSubject, NewValue, NewValueQuestion, OrganizerOutput,
                               TurnOutput, WindowOutput, proposed_again)

if TYPE_CHECKING:
    from doxa.data.session import Session

SEARCH, HELD_OUT = "search", "held_out"
#: A candidate is at most this long, and at most ``MAX_GROWTH`` times its parent.
MAX_CHARS = 6000
MAX_GROWTH = 1.5
#: A run of this many consecutive words shared with a stored message is copied evidence.
COPIED_RUN = 8
#: Words a candidate may not use more often than its parent: the organizer gives no probability or number.
NUMBER_WORDS = ("probability", "probabilities", "probable", "likelihood", "confidence", "percent", "percentage",
                "%", "score", "scores", "scoring", "rating", "numeric")
#: Edits already tried shown to the proposer (the latest).
TRIED_SHOWN = 3
TRIED_CHARS = 1500
#: The rejections whose diff is shown as tried: those scored, and a schema contradiction (not an empty,
#: identical, over-long or copied text: nothing to learn from, and a copy would be shown again).
_WORTH_SHOWING = ("fixes none", "below the gate", "a pinned case", "schema")


#: The expected-decision keys :func:`judge` scores, with the JSON type each takes in a case file
#: (:func:`read_cases`); ``links`` is a list (a duplicate) or an object (a split: per message).
JUDGED: dict[str, tuple[type, ...]] = {
    "links": (list, dict), "links_one_of": (list,), "not_links": (list,), "not_created": (list,), "not_values": (dict,),
    "kept_apart": (list,), "kept_whole": (str,), "subject_one_of": (list,), "options_at_least": (int,),
    "creates": (bool,), "nothing": (bool,),
}
#: Keys a case may carry that :func:`judge` reads with another (the store's own cases write them).
_ALSO_EXPECTED = ("new_questions", "or_open")
_CASE_FIELDS = {"id": str, "decision": str, "messages": list, "expected": dict, "questions": list, "kind": str,
                "observed": str, "source": str}
_CASE_REQUIRED = ("id", "decision", "messages", "expected")


class CaseFileError(ValueError):
    """A case file line that cannot be read: the message names the line and field, and the fix."""


def read_cases(path: str | Path) -> list[Case]:
    """The cases of a JSON Lines file (docs/formats.md, "Organizer cases"), one object per line: ``id``,
    ``decision`` (a kept decision's key), ``messages`` (the message ids it concerns) and ``expected`` (keys of
    :data:`JUDGED`), and optionally ``questions``, ``kind`` (default ``gold``), ``observed`` and ``source``
    (default ``world``). Blank lines are skipped. Raises :class:`CaseFileError` naming the first bad line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CaseFileError(f"cannot read the case file {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise CaseFileError(f"{path} is not UTF-8 text (byte {err.start}): write the cases as UTF-8 JSON Lines") from err
    out: list[Case] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise CaseFileError(f"{where}: not JSON ({err.msg} at column {err.colno}): write one JSON object per "
                                "line") from None
        if not isinstance(row, dict):
            raise CaseFileError(f"{where}: a case is a JSON object, got {type(row).__name__}")
        for name in _CASE_REQUIRED:
            if name not in row:
                raise CaseFileError(f"{where}: field {name!r} is missing: every case names its id, decision, "
                                    "messages and expected decision")
        for name, value in row.items():
            wanted = _CASE_FIELDS.get(name)
            if wanted is None:
                raise CaseFileError(f"{where}: unknown field {name!r}: the fields are {', '.join(_CASE_FIELDS)}")
            if not isinstance(value, wanted):
                raise CaseFileError(f"{where}: field {name!r} must be a JSON {_json_name(wanted)}, got {value!r:.60}")
        for name in ("messages", "questions"):
            if not all(isinstance(v, str) and v for v in row.get(name, [])):
                raise CaseFileError(f"{where}: field {name!r} must list ids (non-empty strings)")
        expected = row["expected"]
        for key, value in expected.items():
            types = JUDGED.get(key)
            if types is None and key not in _ALSO_EXPECTED:
                raise CaseFileError(f"{where}: expected key {key!r} is not one the judge scores: use "
                                    f"{', '.join(JUDGED)}")
            if types is not None and (not isinstance(value, types) or isinstance(value, bool) != (bool in types)):
                raise CaseFileError(f"{where}: expected {key!r} must be a JSON "
                                    f"{' or '.join(_json_name(t) for t in types)}, got {value!r:.60}")
        if not any(k in expected for k in JUDGED):
            raise CaseFileError(f"{where}: expected names nothing the judge scores: give one of {', '.join(JUDGED)}")
        if row["id"] in seen:
            raise CaseFileError(f"{where}: case id {row['id']!r} is given twice: each case needs its own id")
        seen.add(row["id"])
        out.append(Case(row["id"], row.get("kind", GOLD), row["decision"], list(row["messages"]),
                        list(row.get("questions", [])), row.get("observed", ""), expected, row.get("source", WORLD)))
    return out


def _json_name(t: type) -> str:
    return {list: "array", dict: "object", str: "string", int: "integer", bool: "true or false"}[t]


def schema_fields() -> frozenset[str]:
    """Every JSON key of the organizer's output schema (one message's and a window's), by the name sent."""
    names: set[str] = set()
    for model in (OrganizerOutput, WindowOutput, TurnOutput, NewQuestion, NewValueQuestion, NewValue, NewSubject,
                  NewRelation):
        names |= {f.alias or name for name, f in model.model_fields.items()}
    return frozenset(names)


OUTPUT_FIELDS = ("links", "new_values", "new_questions", "new_subjects", "new_relations")
_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')


class SearchStopped(RuntimeError):
    """The budget of model calls is spent: the search stops before the next call."""


# ---------------------------------------------------------------------------- cases
@dataclass
class SearchCase:
    """A case instruction search scores on: the case, its kept decision and its half."""

    case: Case
    decision: dict[str, Any]
    half: str
    pinned: bool = False

    @property
    def id(self) -> str:
        return self.case.id


def half_of(case_id: str) -> str:
    """The half a case belongs to: the first byte of the SHA-256 of its id, even → search, odd → held-out."""
    return SEARCH if hashlib.sha256(case_id.encode("utf-8")).digest()[0] % 2 == 0 else HELD_OUT


def _created(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [q for p in parts for q in p.get("new_questions", [])]


def _created_ids(parts: list[dict[str, Any]]) -> set[str]:
    return {f"{q['subject']}.{q['kind']}" for q in _created(parts)}


def _links(parts: list[dict[str, Any]]) -> set[str]:
    return {q for p in parts for q in p.get("links", [])}


def _parts(decision: dict[str, Any], output: dict[str, Any], messages: list[str]) -> list[dict[str, Any]]:
    """The pieces of an output about ``messages``: one message's whole output, or a window's turns of them
    (every turn when the decision's messages do not line up with its turns)."""
    if decision["kind"] != kept_data.WINDOW:
        return [output]
    turns = [int(n) for n, _ in decision["request"].get("turns", [])]
    ids = decision["messages"]
    turns_out = output.get("turns", [])
    if len(ids) != len(turns) or not messages:
        return list(turns_out)
    wanted = {n for n, m in zip(turns, ids) if m in messages}
    return [t for t in turns_out if t.get("turn") in wanted]


def _shown(decision: dict[str, Any]) -> set[str]:
    return {q["id"] for q in decision["request"].get("questions", [])}


def _as_applied(decision: dict[str, Any], parts: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """(links, created) of an output's ``parts`` as ``remember`` applies them to the request's questions: a
    question proposed again — a shown one's ``subject.kind`` id, or its subject and text — links it, as
    does a value given to it; only the rest is created."""
    shown = decision["request"].get("questions", [])
    links = _links(parts) | {v["question"] for p in parts for v in p.get("new_values", [])}
    created: set[str] = set()
    for q in _created(parts):
        same = proposed_again(q, shown)
        if same is None:
            created.add(f"{q['subject']}.{q['kind']}")
        else:
            links.add(same)
    return links, created


def _kept_named(case: Case, decision: dict[str, Any]) -> list[str]:
    parts = _parts(decision, decision["output"], case.messages)
    named = _links(parts) | _created_ids(parts)
    return [q for q in case.questions if q in named]


def scorable(case: Case, decision: dict[str, Any]) -> str | None:
    """Why a case with a kept decision cannot be scored by a replay (None: it can): an expected link to a
    question the request did not show (a split's new questions), or a question to keep that the kept output
    did not name."""
    expected = case.expected
    links = expected.get("links")
    if isinstance(links, list) and not set(links) <= _shown(decision):
        return "the question expected was not shown to the kept request"
    if "links_one_of" in expected and not set(expected["links_one_of"]) & _shown(decision):
        return "none of the questions expected was shown to the kept request"
    if isinstance(links, dict) and not {q for qs in links.values() for q in qs} <= _shown(decision):
        return "the questions expected were not shown to the kept request"
    if ("kept_apart" in expected or "kept_whole" in expected) and not _kept_named(case, decision):
        return "the kept decision named none of the questions to keep"
    if not any(k in expected for k in JUDGED):
        return f"no rule scores a {case.kind} case"
    return None


def judge(case: Case, decision: dict[str, Any], output: dict[str, Any]) -> int:
    """1 when ``output`` (a replay of the case's decision) is what the case expected, else 0. By expected key:

    - ``links`` (a list: a duplicate): it links every expected question, and does not create the case's
      other questions again (the duplicate);
    - ``links`` (per message: a split): each message's part links the questions it was assigned to;
    - ``not_created``: it creates none of them; ``not_values``: it gives none of those values to the question;
    - ``kept_apart`` / ``kept_whole`` (a dismissed proposal, an undone merge or split): it still names (links
      or creates) each of the case's questions the kept output named;
    - ``subject_one_of``: every question it creates is about one of those subjects;
    - ``options_at_least``: every closed question it creates has at least that many options;
    - ``not_links``: it neither links nor creates the question for the message;

    Links and creations are counted as ``remember`` applies them (:func:`_as_applied`): a shown question
    proposed again, or given a value, is linked.
    - ``links_one_of`` (a gold case: the message bears on a question shown, maybe made twice): it links at least
      one of them;
    - ``creates`` (a gold case: no question shown is the one it bears on): it creates a question (about one of
      ``subject_one_of``, where that is given too);
    - ``nothing`` (a gold case: the message bears on no question worth tracking): it neither links nor creates.
    """
    expected = case.expected
    parts = _parts(decision, output, case.messages)
    links, created = _as_applied(decision, parts)
    right = True
    wanted = expected.get("links")
    if isinstance(wanted, list):
        again = set(case.questions) - set(wanted)
        right &= set(wanted) <= links and not (again & created)
    elif isinstance(wanted, dict):
        for message, qs in wanted.items():
            right &= set(qs) <= _as_applied(decision, _parts(decision, output, [message]))[0]
    if "not_created" in expected:
        right &= not (set(expected["not_created"]) & created)
    for qid, values in (expected.get("not_values") or {}).items():
        right &= not any(_names_value({"turns": parts} if decision["kind"] == kept_data.WINDOW else parts[0]
                                      if parts else {}, qid, v) for v in values)
    if "kept_apart" in expected or "kept_whole" in expected:
        right &= set(_kept_named(case, decision)) <= links | created
    if "subject_one_of" in expected:
        right &= all(q["subject"] in expected["subject_one_of"] for q in _created(parts)
                     if f"{q['subject']}.{q['kind']}" in created)
    if "options_at_least" in expected:
        right &= all(q.get("shape") == "value" or len(q.get("options", [])) >= expected["options_at_least"]
                     for q in _created(parts))
    if "not_links" in expected:
        right &= not (set(expected["not_links"]) & (links | created))
    if "links_one_of" in expected:
        right &= bool(set(expected["links_one_of"]) & links)
    if expected.get("creates"):
        right &= bool(created)
    if expected.get("nothing"):
        right &= not (links | created)
    return int(bool(right))


def search_cases(store: "Session", extra: Sequence[Case] = ()) -> tuple[list[SearchCase], list[dict[str, str]]]:
    """The cases a search scores on, each with its half, and those left out with why: the store's, then
    ``extra`` (gold cases from a file, :func:`read_cases`)."""
    usable, skipped = [], []
    for case in [*cases(store), *extra]:
        decision = kept_data.find(store, case.decision) if case.decision else None
        if decision is None:
            skipped.append({"case": case.id, "why": "no kept decision to replay"})
            continue
        why = scorable(case, decision)
        if why:
            skipped.append({"case": case.id, "why": why})
            continue
        usable.append(SearchCase(case, decision, half_of(case.id)))
    return usable, skipped


# ---------------------------------------------------------------------------- validation
def _runs(text: str, n: int = COPIED_RUN) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def validate(text: str, parent: str, store: "Session", evidence: dict[str, str]) -> str | None:
    """Why a candidate is refused before any replay (None: it may be scored):

    - *malformed*: empty;
    - *no-op*: the parent's text (trailing spaces aside);
    - *too long*: over ``min(MAX_CHARS, MAX_GROWTH × len(parent))`` characters;
    - *copied*: a run of ``COPIED_RUN`` consecutive words (as the term index cuts them) that the parent does
      not have and that a message holds — a case's message, or any stored message holding every word of the
      run (``message_terms``): text from the evidence must not become instructions (``evidence``: the cases'
      messages, ``{id: text}``; the reason names the message, never its words);
    - *schema*: it uses a word of :data:`NUMBER_WORDS` more often than the parent (the organizer answers with
      no probability, score or number), writes a JSON key (``"name":``) the output schema does not have, or no
      longer names an output field the parent names (``"links"`` …: a renamed field).
    """
    if not text.strip():
        return "malformed: the proposer's reply holds no text"
    if text.rstrip() == parent.rstrip():
        return "no-op: the same text as its parent"
    limit = min(MAX_CHARS, int(MAX_GROWTH * len(parent)))
    if len(text) > limit:
        return f"too long: {len(text)} characters, over {limit} (at most {MAX_GROWTH:g}x the parent and {MAX_CHARS})"
    new = _runs(text) - _runs(parent)
    if new:
        copied = next((m for m, t in evidence.items() if new & _runs(t)), None)
        if copied is None:
            found = state_data.messages_with_runs(store, [list(r) for r in sorted(new)[:400]])
            copied = next((m for m, t in found.items() if new & _runs(t)), None)
        if copied is not None:
            return (f"copied: it repeats a run of {COPIED_RUN} words of message {copied} (the evidence is never "
                    "instructions; its text is not kept)")
    low_text, low_parent = text.lower(), parent.lower()
    for word in NUMBER_WORDS:
        pattern = re.escape(word) if word == "%" else rf"\b{re.escape(word)}\b"
        if len(re.findall(pattern, low_text)) > len(re.findall(pattern, low_parent)):
            return f"schema: it asks for a {word!r}; the organizer gives no probability, score or number"
    fields = schema_fields()
    unknown = sorted(set(_KEY.findall(text)) - fields)
    if unknown:
        return f"schema: it writes JSON key(s) the output schema does not have: {', '.join(unknown)}"
    dropped = [f for f in OUTPUT_FIELDS if f'"{f}"' in parent and f'"{f}"' not in text]
    if dropped:
        return f"schema: it no longer names the output field(s) {', '.join(dropped)}"
    return None


# ---------------------------------------------------------------------------- the budget
class Budget:
    """The model calls this run may make (``limit``) and has made (``used``). Each HTTP client's
    ``endpoint.post`` is wrapped (:meth:`meter`): a request is sent only while calls are left, with the
    client's retries cut to what is left, so ``used`` never passes ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = int(limit), 0
        self._wrapped: list[Any] = []

    @property
    def left(self) -> int:
        return self.limit - self.used

    def check(self) -> None:
        if self.left <= 0:
            raise SearchStopped(f"the budget of {self.limit} model call(s) (--max-calls) is spent")

    def meter(self, client: Any) -> bool:
        """Wrap ``client``'s endpoint (True), or say it has none (False: the caller counts its calls)."""
        endpoint = getattr(client, "endpoint", None)
        post = getattr(endpoint, "post", None)
        if not callable(post):
            return False
        if endpoint in self._wrapped:  # two clients on one endpoint: metered once
            return True
        budget = self

        def metered(body, _post=post, _endpoint=endpoint):
            budget.check()
            saved = _endpoint.retries
            _endpoint.retries = min(saved, budget.left - 1)
            before = _endpoint.requests
            try:
                return _post(body)
            finally:
                _endpoint.retries = saved
                budget.used += _endpoint.requests - before

        endpoint.post = metered
        self._wrapped.append(endpoint)
        return True

    def release(self) -> None:
        for endpoint in self._wrapped:
            del endpoint.post
        self._wrapped = []


# ---------------------------------------------------------------------------- scoring
@dataclass
class Scored:
    """One case replayed under one text: its score, the output (None: no valid reply) and the calls it took."""

    score: int
    output: dict[str, Any] | None
    calls: int


def invalid_reply(err: OrganizerError) -> bool:
    """Whether the organizer answered but gave nothing usable (a wrong case: 0), rather than its server
    failing (unreachable, an HTTP error: the search stops and a rerun resumes)."""
    text = str(err)
    return "no usable answer" in text or "the model refused" in text or getattr(err, "status", None) in (400, 422)


class Scorer:
    """Replays cases under texts through the decisions cache, keeping what each text scored in this run."""

    def __init__(self, store: "Session", organizer: Organizer, budget: Budget) -> None:
        inner = organizer.inner if isinstance(organizer, CachedOrganizer) else organizer
        self.store, self.budget = store, budget
        self.organizer = _Keeping(inner, store)
        self.metered = budget.meter(inner)
        self.done: dict[tuple[str, str], Scored] = {}

    def score(self, text: str, case: SearchCase) -> Scored:
        key = (hashlib.sha256(text.encode("utf-8")).hexdigest(), case.id)
        if key in self.done:
            return self.done[key]
        if not self.metered:
            self.budget.check()
        self.organizer.last = None
        try:
            replayed = replay(case.decision, self.organizer, text)
            output, calls = replayed.output, replayed.calls
        except OrganizerError as err:
            if not invalid_reply(err):
                raise  # the server failed, not the reply: a 0 here would be the server's score
            output, calls = None, 1
        if output is not None and self.organizer.last is not None:
            self._keep(case.decision)
        if not self.metered:
            self.budget.used += calls
        found = Scored(judge(case.case, case.decision, output) if output is not None else 0, output, calls)
        self.done[key] = found
        return found

    def _keep(self, replayed: dict[str, Any]) -> None:
        """Keep the replay just made (the organizer's last decision) as a row of ``organizer_decisions``."""
        decision = self.organizer.last
        if decision is None:
            return
        row = dict(decision, messages=list(replayed["messages"]), instructions_version=None, created=[], linked=[])
        with self.store.writing():
            with transaction(self.store.con) as con:
                kept_data.record(con, row)

    def scores(self, text: str, group: list[SearchCase]) -> dict[str, int]:
        return {c.id: self.score(text, c).score for c in group}


class _Keeping(CachedOrganizer):
    """A :class:`CachedOrganizer` that remembers the decision of its last model call (``last``)."""

    last: dict[str, Any] | None = None

    def _decide(self, kind, request, instructions, call):
        kept = super()._decide(kind, request, instructions, call)
        self.last = None if kept.cached else kept.decision
        return kept


def paired(candidate: dict[str, int], parent: dict[str, int]) -> dict[str, float]:
    """The gate's numbers on the cases both were scored on: means, ``d̄`` and its standard error."""
    ids = sorted(set(candidate) & set(parent))
    n = len(ids)
    d = [candidate[i] - parent[i] for i in ids]
    mean = sum(d) / n if n else 0.0
    se = (sum((x - mean) ** 2 for x in d) / (n * (n - 1))) ** 0.5 if n > 1 else 0.0
    return {"n": n, "mean": sum(candidate[i] for i in ids) / n if n else 0.0,
            "parent_mean": sum(parent[i] for i in ids) / n if n else 0.0, "diff": mean, "se": se}


def passes_gate(gate: dict[str, float], chars: int, parent_chars: int) -> bool:
    """``d̄ > SE``, or ``|d̄| ≤ SE`` and shorter than the parent."""
    return gate["diff"] > gate["se"] or (abs(gate["diff"]) <= gate["se"] and chars < parent_chars)


# ---------------------------------------------------------------------------- the search
@dataclass
class SearchResult:
    """What a run did: every candidate of the search (this run's and earlier runs'), the calls, the best."""

    search: str | None
    status: str
    message: str
    base_version: int
    rounds_done: int = 0
    rounds: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    calls_total: int = 0
    max_calls: int = 0
    cases: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    activated: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def search_id(base_version: int, text: str, organizer: Organizer, proposer: Any, case_ids: list[str]) -> str:
    """A search's id: what it starts from — the active version and its text, the organizer's model and
    settings, the proposer's model, server and mode, and the cases — hashed, so a rerun finds it."""
    inner = organizer.inner if isinstance(organizer, CachedOrganizer) else organizer
    doc = {"version": base_version, "text": text, "organizer": model_of(inner),
           "settings": decoding_settings(inner, kept_data.MESSAGE, None),
           "proposer": [getattr(proposer, "model", None), getattr(proposer, "chat_url", None),
                        getattr(proposer, "mode", None)],
           "cases": sorted(case_ids)}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    return "search-" + digest[:16]


def diff_text(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=old_name, tofile=new_name))


def _message_of(decision: dict[str, Any], messages: list[str]) -> str:
    request = decision["request"]
    if decision["kind"] != kept_data.WINDOW:
        return request.get("text", "")
    turns = request.get("turns", [])
    ids = decision["messages"]
    chosen = [t for (n, t), m in zip(turns, ids) if m in messages] if len(ids) == len(turns) else []
    return "\n".join(f"turn {n}: {t}" for n, t in turns if not chosen or t in chosen)


def _did(output: dict[str, Any] | None) -> str:
    if output is None:
        return "gave no valid reply"
    parts = [output] + output.get("turns", [])
    links = sorted(_links(parts))
    made = [f"{q['subject']}.{q['kind']} ({q['text']!r})" for q in _created(parts)]
    return (f"linked {', '.join(links) if links else 'nothing'}; "
            f"created {', '.join(made) if made else 'nothing'}")


def contrast(case: SearchCase, output: dict[str, Any] | None) -> Contrast:
    shown = [f"{q['id']}: {q.get('text', '')}" for q in case.decision["request"].get("questions", [])]
    return Contrast(case=case.id, kind=case.case.kind, message=_message_of(case.decision, case.case.messages),
                    questions=shown, did=_did(output),
                    expected=f"{case.case.observed}; expected: {expected_words(case.case.expected)}")


def expected_words(expected: dict[str, Any]) -> str:
    """An expected decision in words, for the proposer (a small model reads words better than JSON keys)."""
    said = []
    links = expected.get("links")
    if isinstance(links, list):
        said.append(f"link {', '.join(links)} instead of creating a question")
    elif isinstance(links, dict):
        said += [f"link {', '.join(qs)} for {m}" for m, qs in links.items()]
    if expected.get("links_one_of"):
        said.append(f"link {' or '.join(expected['links_one_of'])}")
    if expected.get("creates"):
        said.append("create a new question" + (f" about {' or '.join(expected['subject_one_of'])}"
                                               if expected.get("subject_one_of") else ""))
    elif expected.get("subject_one_of"):
        said.append(f"new questions only about {' or '.join(expected['subject_one_of'])}")
    if expected.get("nothing"):
        said.append("link nothing and create nothing")
    for key, verb in (("not_links", "do not link or create"), ("not_created", "do not create")):
        if expected.get(key):
            said.append(f"{verb} {', '.join(expected[key])}")
    for q, values in (expected.get("not_values") or {}).items():
        said.append(f"do not give {', '.join(map(repr, values))} to {q}")
    if expected.get("kept_apart"):
        said.append(f"keep {' and '.join(expected['kept_apart'])} as separate questions")
    if expected.get("kept_whole"):
        said.append(f"keep {expected['kept_whole']} as one question")
    if "options_at_least" in expected:
        said.append(f"give a closed question at least {expected['options_at_least']} options"
                    + (", or make it a value question" if expected.get("or_open") else ""))
    return "; ".join(said) or json.dumps(expected, ensure_ascii=False)


def run_search(store: "Session", organizer: Organizer, proposer: Any, *, rounds: int = 3, candidates: int = 3,
               max_calls: int = 200, minibatch: int = 3, activate: bool = False,
               by: str = "instruction search", extra_cases: Sequence[Case] = ()) -> SearchResult:
    """Search for better instructions (the module docstring); ``proposer`` has ``propose(text, contrasts,
    tried) -> str`` (:class:`.instruction_proposer.OpenAIChatProposer`); ``extra_cases``: gold cases to score
    on beside the store's (:func:`read_cases`). Raises ``ProposerError`` or ``OrganizerError`` when a model
    server fails (the search's state is saved first: a rerun resumes)."""
    if rounds < 1 or candidates < 1 or minibatch < 1 or max_calls < 0:
        raise ValueError("rounds, candidates and minibatch are at least 1, max_calls at least 0")
    active = organizer_instructions.current(store)
    usable, skipped = search_cases(store, extra_cases)
    halves = {h: [c for c in usable if c.half == h] for h in (SEARCH, HELD_OUT)}
    counts = {"search": len(halves[SEARCH]), "held_out": len(halves[HELD_OUT]), "skipped": skipped}
    result = SearchResult(None, "nothing", "", active.version, max_calls=max_calls, cases=counts)
    if not halves[SEARCH] or not halves[HELD_OUT]:
        result.message = (f"Nothing to search on: {len(usable)} case(s) with a kept decision to replay, "
                          f"{len(halves[SEARCH])} in the search half and {len(halves[HELD_OUT])} held out; a search "
                          "needs both halves (`doxa organizer-instructions cases` lists the cases; merges, splits, "
                          "undos and dismissed proposals of what the organizer made add more).")
        return result
    sid = search_id(active.version, active.text, organizer, proposer, [c.id for c in usable])
    state = state_data.search(store, sid) or {"id": sid, "base_version": active.version, "rounds_done": 0,
                                             "status": state_data.RUNNING, "stop_reason": None, "calls": 0,
                                             "started_at": None}
    result.search = sid
    budget = Budget(max_calls)
    scorer = Scorer(store, organizer, budget)
    proposer_metered = budget.meter(proposer)
    stored = {c["id"]: c for c in state_data.candidates(store, sid)}
    texts = {None: active.text}
    for c in stored.values():
        texts[c["id"]] = c["text"]
    try:
        status, message = _rounds(store, scorer, _Counted(proposer, budget, proposer_metered), active, halves,
                                  usable, state, stored, texts, result, rounds=rounds, candidates=candidates,
                                  minibatch=minibatch)
    except SearchStopped as stop:
        status, message = state_data.STOPPED, f"Stopped: {stop}; run the same search again with more calls to resume."
    except (ProposerError, OrganizerError) as err:
        state.update(status=state_data.STOPPED, stop_reason=f"a model server failed: {err}"[:500],
                     calls=state["calls"] + budget.used)
        state_data.save_search(store, state)
        raise
    finally:
        budget.release()
    state.update(status=status, stop_reason=message, calls=state["calls"] + budget.used)
    state_data.save_search(store, state)
    result.status, result.message = status, message
    result.calls, result.calls_total, result.rounds_done = budget.used, state["calls"], state["rounds_done"]
    _report(store, sid, result)
    if activate and result.best is not None:
        found, _ = organizer_instructions.set_text(store, result.best["text"], by=by,
                                                       note=f"instruction search {sid}: candidate {result.best['id']}")
        state_data.set_status(store, result.best["id"], state_data.ACTIVATED)
        result.best["status"] = state_data.ACTIVATED
        result.activated = found.version
    return result


class _Counted:
    """A proposer whose calls the budget counts one per proposal when its endpoint is not metered (a
    proposer without HTTP)."""

    def __init__(self, proposer: Any, budget: Budget, metered: bool) -> None:
        self.proposer, self.budget, self.metered = proposer, budget, metered

    def propose(self, text: str, contrasts: list[Contrast], tried: list[str]) -> str:
        if not self.metered:
            self.budget.check()
            self.budget.used += 1
        return self.proposer.propose(text, contrasts, tried)


def _rounds(store, scorer: Scorer, proposer, active, halves, usable, state, stored, texts, result, *,
            rounds: int, candidates: int, minibatch: int) -> tuple[str, str]:
    """Run the rounds not done yet; returns the search's (status, message)."""
    active_scores = scorer.scores(active.text, usable)
    pinned = {c.id for c in usable if active_scores[c.id] == 1}
    for c in usable:
        c.pinned = c.id in pinned
    result.cases["pinned"] = len(pinned)
    evidence = {c.decision["messages"][0] if c.decision["messages"] else c.decision["key"]:
                _message_of(c.decision, []) for c in usable}
    parent_id: str | None = None
    for r in range(1, state["rounds_done"] + 1):  # the parents rounds already done chose
        best = _best([c for c in stored.values() if c["round"] == r and c["status"] in (state_data.KEPT,
                                                                                        state_data.ACTIVATED)])
        if best is not None:
            parent_id = best["id"]
    for r in range(state["rounds_done"] + 1, rounds + 1):
        parent = texts[parent_id]
        search_scores = scorer.scores(parent, halves[SEARCH])
        failing = [c for c in halves[SEARCH] if search_scores[c.id] == 0][:minibatch]
        if not failing:
            return state_data.DONE, (f"Done: the {'active version' if parent_id is None else parent_id} gets every "
                                     "case of the search half right.")
        held_parent = scorer.scores(parent, halves[HELD_OUT])
        for position in range(candidates):
            cid = f"{state['id']}:{r}:{position}"
            row = stored.get(cid)
            if row is not None and row["status"] != state_data.PENDING:
                continue
            if row is None:
                tried = [c["diff"][:TRIED_CHARS] for c in stored.values() if c["parent"] == parent_id
                         and c["status"] == state_data.REJECTED and (c["reason"] or "").startswith(_WORTH_SHOWING)
                         ][-TRIED_SHOWN:]
                shown = failing[position % len(failing):] + failing[:position % len(failing)]
                contrasts = [contrast(c, scorer.score(parent, c).output) for c in shown]
                text = proposer.propose(parent, contrasts, tried)
                why = validate(text, parent, store, evidence)
                twin = next((c["id"] for c in stored.values() if c["parent"] == parent_id and c["text"]
                             and c["text"].rstrip() == text.rstrip()), None)
                if why is None and twin is not None:  # scored already, under the same parent: no call again
                    why = f"already tried: the same text as {twin}"
                copied = bool(why) and why.startswith("copied")  # a message's words are not kept here
                row = {"id": cid, "search_id": state["id"], "round": r, "position": position,
                       "parent_version": active.version, "parent": parent_id, "text": "" if copied else text,
                       "scores": {}, "answered": {}, "status": state_data.REJECTED if why else state_data.PENDING,
                       "reason": why,
                       "diff": "" if copied else diff_text(parent, text, parent_id or f"organizer v{active.version}",
                                                           cid)}
                state_data.save_candidate(store, row)  # pending: a run stopped from here on never asks for it again
                stored[cid] = row
                texts[cid] = row["text"]
                if why:
                    continue
            _judge_candidate(store, scorer, row, parent, failing, halves, held_parent)
            stored[cid] = row
        best = _best([c for c in stored.values() if c["round"] == r and c["status"] == state_data.KEPT])
        if best is not None:
            parent_id = best["id"]
        state["rounds_done"] = r
        state_data.save_search(store, dict(state, calls=state["calls"] + scorer.budget.used))
    return state_data.DONE, f"Done: {rounds} round(s)."


def _judge_candidate(store, scorer: Scorer, row: dict[str, Any], parent: str, failing: list[SearchCase],
                     halves: dict[str, list[SearchCase]], held_parent: dict[str, int]) -> None:
    """Score and gate one validated candidate; its row is saved with its fate."""
    text = row["text"]

    def settle(status: str, reason: str | None) -> None:
        row.update(status=status, reason=reason)
        state_data.save_candidate(store, row)
    mini = scorer.scores(text, failing)
    row["answered"].update(mini)
    row["scores"]["minibatch"] = {"n": len(mini), "fixed": sum(mini.values())}
    if not any(mini.values()):
        settle(state_data.REJECTED, f"fixes none of the {len(mini)} failing case(s) of the minibatch")
        return
    held = scorer.scores(text, halves[HELD_OUT])
    row["answered"].update(held)
    gate = paired(held, held_parent)
    row["scores"]["held_out"] = gate
    regressed = sorted(c.id for c in halves[HELD_OUT] if c.pinned and held[c.id] == 0)
    if regressed:
        settle(state_data.REJECTED, "a pinned case regresses: " + ", ".join(regressed))
        return
    if not passes_gate(gate, len(text), len(parent)):
        settle(state_data.REJECTED, f"below the gate: held-out mean {gate['mean']:.3f} vs {gate['parent_mean']:.3f} "
                                    f"(difference {gate['diff']:+.3f}, SE {gate['se']:.3f})")
        return
    rest = [c for c in halves[SEARCH] if c.pinned and c.id not in row["answered"]]
    pinned = scorer.scores(text, rest)
    row["answered"].update(pinned)
    regressed = sorted(i for i, s in pinned.items() if s == 0)
    row["scores"]["pinned"] = {"n": sum(c.pinned for c in halves[SEARCH] + halves[HELD_OUT]),
                               "regressed": len(regressed)}
    if regressed:
        settle(state_data.REJECTED, "a pinned case regresses: " + ", ".join(regressed))
        return
    settle(state_data.KEPT, f"held-out mean {gate['mean']:.3f} vs {gate['parent_mean']:.3f} "
                            f"(difference {gate['diff']:+.3f}, SE {gate['se']:.3f})")


def _best(kept: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The highest held-out mean, then the shortest text, then the first proposed."""
    if not kept:
        return None
    return min(kept, key=lambda c: (-c["scores"].get("held_out", {}).get("mean", 0.0), len(c["text"]),
                                    c["round"], c["position"]))


def _report(store, sid: str, result: SearchResult) -> None:
    """Fill ``result.rounds`` and ``result.best`` from the store (this run's candidates and earlier runs')."""
    rows = state_data.candidates(store, sid)
    by_round: dict[int, list[dict[str, Any]]] = {}
    for c in rows:
        by_round.setdefault(c["round"], []).append(c)
    result.rounds = [{"round": r, "candidates": [
        {"id": c["id"], "parent": c["parent"], "status": c["status"], "reason": c["reason"], "scores": c["scores"],
         "chars": len(c["text"])} for c in sorted(found, key=lambda c: c["position"])]}
        for r, found in sorted(by_round.items())]
    best = None
    for r in sorted(by_round):
        found = _best([c for c in by_round[r] if c["status"] in (state_data.KEPT, state_data.ACTIVATED)])
        if found is not None:
            best = found
    if best is not None:
        result.best = {k: best[k] for k in ("id", "parent", "parent_version", "text", "scores", "answered", "diff",
                                            "status", "reason")}


__all__ = ["SEARCH", "HELD_OUT", "MAX_CHARS", "MAX_GROWTH", "COPIED_RUN", "NUMBER_WORDS", "Budget", "SearchCase",
           "SearchResult", "SearchStopped", "half_of", "judge", "paired", "passes_gate", "run_search", "schema_fields",
           "scorable", "search_cases", "search_id", "validate", "read_cases", "CaseFileError", "JUDGED"]
