"""The organizer's decisions kept, replayed and cached; its mistakes collected as cases.

**Kept.** :class:`CachedOrganizer` wraps any :class:`~.organizer_client.Organizer`. Each call is keyed
by :func:`decision_key`, the SHA-256 of the exact inputs that decide a reply: the call's kind (message
or window), the request's prompt text as sent, the instructions text (the system prompt), the model
and the decoding settings (:func:`decoding_settings`: temperature, the reply's token bound, the
structured form configured, the client's ``extra_body``). The reply and output come back with a
decision row (:class:`Kept`); :func:`keeper` writes it with the messages decided, the instructions
version and the questions created and linked, inside the transaction that applies the output
(``remember``, ``organize`` and conversations call it), so a refused output — the organizer's own
check failing, or its records refused by ingest — never leaves a row.

**Cached.** Before calling the model, the wrapper looks the key up (in the store being written, or
in another store's kept decisions, for a replay into a fresh store): identical inputs return the
stored output, checked again against the request of now (the subjects known may have grown), with
zero model calls. Any change — the instructions, the model, a setting, the message, a question
shown — changes the prompt or the key, and the model is asked.

**Replayed.** :func:`rebuild_request` makes a kept decision's request again; :func:`replay` runs it
under other instructions or another organizer and returns the new output next to the kept one.

**Cases** (:func:`cases`): what people, the world and deterministic checkers said after the
organizer, each with the decision it concerns and the decision expected (docs/organizer.md,
"Mistakes collected"). These are the examples instruction search scores a new text on.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from doxa.data import maintenance as proposals_data
from doxa.data import organizer_decisions as kept_data
from doxa.data.question_ops import operations
from doxa.data.subject_match import match_subjects
from doxa.data.text import words
from doxa.data.times import parse_time

from .maintenance import TEXT_SIMILARITY_MIN, content_words, text_similarity
from .organizer_client import WINDOW_REPLY_TOKENS, Organized, Organizer
from .organizer_schema import (OrganizerOutput, OrganizerRequest, WindowOutput, WindowRequest, check_output,
                               check_window_output, value_key)

if TYPE_CHECKING:
    from doxa.data.session import Session


# ---------------------------------------------------------------------------- the key
def model_of(organizer: Organizer) -> str:
    """The model an organizer asks: its ``model`` setting, else its name (a Python organizer is its own model)."""
    return str(getattr(organizer, "model", None) or organizer.name)


def decoding_settings(organizer: Organizer, kind: str, request: OrganizerRequest) -> dict[str, Any]:
    """The settings that change a reply besides the prompt: for an HTTP organizer the temperature (0),
    the reply's token bound (a window's grows with its turns), the structured form configured
    (``auto``, ``schema``, ``object``, ``none``) and ``extra_body``; for another organizer its class (a
    :class:`CachedOrganizer`'s are those of the organizer it wraps)."""
    organizer = organizer.inner if isinstance(organizer, CachedOrganizer) else organizer
    if not hasattr(organizer, "max_tokens"):
        return {"organizer": f"{type(organizer).__module__}.{type(organizer).__qualname__}"}
    max_tokens = organizer.max_tokens
    if kind == kept_data.WINDOW:
        max_tokens = min(organizer.window_max_tokens,
                         WINDOW_REPLY_TOKENS[0] + WINDOW_REPLY_TOKENS[1] * len(request.turns))
    extra = dict(getattr(organizer, "extra_body", None) or {})
    settings = {"temperature": extra.pop("temperature", 0), "max_tokens": max_tokens,
                "structured": getattr(organizer, "structured", None), "extra_body": extra}
    if getattr(organizer, "steps", False) and kind != kept_data.WINDOW:  # named only when on: older keys stay
        settings["steps"] = True
    return settings


def decision_key(kind: str, prompt: str, instructions: str, model: str, settings: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``{"kind", "prompt", "instructions", "model", "settings"}``
    (keys sorted, no spaces, UTF-8): what the model is sent and how it decodes, nothing else."""
    doc = {"kind": kind, "prompt": prompt, "instructions": instructions, "model": model, "settings": settings}
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_json(request: OrganizerRequest) -> dict[str, Any]:
    """The request as JSON (what :func:`rebuild_request` reads): every field but the store's whole list of
    subject ids (``known_subject_ids``: large, and not shown to the model)."""
    out = asdict(request)
    out.pop("known_subject_ids", None)
    out["sent_at"] = request.sent_at.isoformat()
    if isinstance(request, WindowRequest):
        out["turns"] = [[n, text] for n, text in request.turns]
    return out


def rebuild_request(decision: dict[str, Any], known_subject_ids: set[str] | frozenset[str] | None = None
                    ) -> OrganizerRequest:
    """A kept decision's request, as it was shown (its prompt is the kept prompt). ``known_subject_ids``:
    the subjects a new reply may name without creating them (default: those shown, and those the kept
    output named that it did not create)."""
    doc = dict(decision["request"])
    doc["sent_at"] = parse_time(doc["sent_at"])
    if known_subject_ids is None:
        known = {s["id"] for s in doc["subjects"]}
        out = decision["output"]
        new = {s["id"] for s in out.get("new_subjects", [])}
        questions = out.get("new_questions", []) + [q for t in out.get("turns", []) for q in t.get("new_questions", [])]
        named = {q["subject"] for q in questions} | {r[k] for r in out.get("new_relations", []) for k in ("from", "to")}
        known_subject_ids = known | (named - new)
    doc["known_subject_ids"] = frozenset(known_subject_ids)
    if decision["kind"] == kept_data.WINDOW:
        doc["turns"] = [(int(n), text) for n, text in doc["turns"]]
        return WindowRequest(**doc)
    return OrganizerRequest(**doc)


# ---------------------------------------------------------------------------- the wrapper
@dataclass
class Kept(Organized):
    """An organizer's answer with the decision to keep (:func:`keeper` writes it); ``cached``: it came from
    a kept decision, with no model call."""

    decision: dict[str, Any] | None = None
    cached: bool = False


class _Replies:
    """Collects the raw reply texts of an HTTP organizer's calls while inside (its endpoint's ``post``
    wrapped for the call, as conversation's ``_metered`` does)."""

    def __init__(self, organizer: Organizer) -> None:
        self.endpoint = getattr(organizer, "endpoint", None)
        self.texts: list[str] = []

    def __enter__(self) -> "_Replies":
        post = getattr(self.endpoint, "post", None)
        if not callable(post):
            self.endpoint = None
            return self
        self._own = "post" in vars(self.endpoint)  # already wrapped by someone: restore theirs afterwards
        self._post = post

        def keeping(body, _post=post):
            answer = _post(body)
            try:
                content = answer["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                content = None
            if isinstance(content, str):
                self.texts.append(content)
            return answer

        self.endpoint.post = keeping
        return self

    def __exit__(self, *exc: object) -> None:
        if self.endpoint is None:
            return
        if self._own:
            self.endpoint.post = self._post
        else:
            del self.endpoint.post


class CachedOrganizer(Organizer):
    """``inner`` with its decisions kept and identical inputs answered from them (the module docstring).

    ``store``: where kept decisions are looked up (the store being written, or another store whose
    decisions a replay reuses). ``reuse=False`` always asks the model (a benchmark timing it) and still
    returns the decision to keep. Any other attribute is ``inner``'s (its endpoint, token counts), so
    metering code sees the model client it wraps."""

    def __init__(self, inner: Organizer, store: "Session | None", *, reuse: bool = True) -> None:
        self.inner, self.store, self.reuse = inner, store, reuse
        self.name = inner.name
        #: calls answered from kept decisions, and calls that went to the model
        self.hits = 0
        self.misses = 0

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copying, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def organize(self, request: OrganizerRequest, instructions: str) -> Kept:
        return self._decide(kept_data.MESSAGE, request, instructions, self.inner.organize)

    def organize_window(self, request: WindowRequest, instructions: str) -> Kept:
        return self._decide(kept_data.WINDOW, request, instructions, self.inner.organize_window)

    def _decide(self, kind: str, request: OrganizerRequest, instructions: str,
                call: Callable[[Any, str], Organized]) -> Kept:
        prompt = request.prompt()
        model, settings = model_of(self.inner), decoding_settings(self.inner, kind, request)
        key = decision_key(kind, prompt, instructions, model, settings)
        if self.reuse and self.store is not None:
            found = kept_data.find(self.store, key)
            if found is not None:
                output = _checked(kind, found["output"], request)
                if output is not None:
                    self.hits += 1
                    return Kept(output=output, calls=0, decision=found, cached=True)
        tokens = (getattr(self.inner, "prompt_tokens", None), getattr(self.inner, "completion_tokens", None))
        start = time.perf_counter()
        with _Replies(self.inner) as replies:
            organized = call(request, instructions)
        seconds = time.perf_counter() - start
        self.misses += 1
        used = [None if before is None else getattr(self.inner, name) - before
                for before, name in zip(tokens, ("prompt_tokens", "completion_tokens"))]
        questions = request.questions
        decision = {
            "key": key, "kind": kind, "organizer": self.inner.name, "model": model, "settings": settings,
            "prompt": prompt, "request": request_json(request),
            "shown": {"subjects": [s["id"] for s in request.subjects], "questions": [q["id"] for q in questions]},
            "reply": replies.texts[-1] if replies.texts else None,
            "output": organized.output.model_dump(mode="json", by_alias=True),
            "calls": organized.calls, "prompt_tokens": used[0], "completion_tokens": used[1], "seconds": seconds}
        return Kept(output=organized.output, calls=organized.calls, repaired=organized.repaired,
                    retried=organized.retried, decision=decision)


def _checked(kind: str, value: dict[str, Any], request: OrganizerRequest):
    """A kept output checked against the request of now, or None when it no longer passes (ask the model)."""
    if kind == kept_data.WINDOW:
        clean, problems = check_window_output(WindowOutput.model_validate(value), request)
    else:
        clean, problems = check_output(OrganizerOutput.model_validate(value), request)
    return None if problems else clean


def kept_organizer(organizer: Organizer | None, store: "Session", *, reuse: bool = True) -> Organizer | None:
    """``organizer`` wrapped in :class:`CachedOrganizer` over ``store`` (itself when already wrapped, None for None)."""
    if organizer is None or isinstance(organizer, CachedOrganizer):
        return organizer
    return CachedOrganizer(organizer, store, reuse=reuse)


def keeper(organized: Organized, *, messages: list[str], instructions_version: int | None,
           created: list[str], linked: list[str]) -> Callable[[Any], None]:
    """``write(con)``: keeps ``organized``'s decision (when its organizer kept one) inside the caller's
    transaction, with the messages decided, the instructions version and the questions applying it created
    and linked. A cached decision is written again only to add these messages (or to copy it into a
    fresh store)."""
    decision = getattr(organized, "decision", None)

    def write(con) -> None:
        if decision is None:
            return
        row = {k: v for k, v in decision.items() if k not in ("created_at",)}
        row.update(messages=list(messages), instructions_version=instructions_version, created=list(created),
                   linked=list(linked))
        kept_data.record(con, row)

    return write


# ---------------------------------------------------------------------------- replay
@dataclass
class Replayed:
    """A kept decision run again: the kept output and the new one (JSON), and how the new one was got."""

    key: str
    kept: dict[str, Any]
    output: dict[str, Any]
    calls: int
    same: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def replay(decision: dict[str, Any], organizer: Organizer, instructions: str, *,
           known_subject_ids: set[str] | None = None) -> Replayed:
    """Run a kept decision's request (:func:`rebuild_request`) under ``instructions`` with ``organizer``
    (another model, or the same one) and return the new output next to the kept one. Nothing is written:
    instruction search compares outputs; applying one is ``remember``'s. Raises ``OrganizerError``."""
    request = rebuild_request(decision, known_subject_ids)
    organized = (organizer.organize_window(request, instructions) if decision["kind"] == kept_data.WINDOW
                 else organizer.organize(request, instructions))
    output = organized.output.model_dump(mode="json", by_alias=True)
    return Replayed(key=decision["key"], kept=decision["output"], output=output, calls=organized.calls,
                    same=_canonical(output) == _canonical(decision["output"]))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# ---------------------------------------------------------------------------- cases
PERSON, WORLD, CHECKER = "person", "world", "checker"
#: Case kinds, in the order listed.
CASE_KINDS = ("duplicate", "split", "undone", "withdrawn", "dismissed", "duplicate_created", "subject_not_named",
              "too_few_options", "unrelated")
#: The kind of a case read from a file (:func:`.instruction_search.read_cases`): what a gold set says the
#: decision should have been (bench/organizer.py writes one from the generated world's truth).
GOLD = "gold"
#: A reading with at least this much on "unrelated" says the message does not bear on the question.
UNRELATED_AT_LEAST = 0.5
#: Words by which the author names themself (the author's own subject needs no name).
SELF_WORDS = frozenset({"i", "me", "my", "mine", "myself"})


@dataclass
class Case:
    """Something that happened after the organizer, with the decision it concerns (a key, or None when none
    was kept) and the decision expected. ``source``: person, world or checker."""

    id: str
    kind: str
    decision: str | None
    messages: list[str]
    questions: list[str]
    observed: str
    expected: dict[str, Any]
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cases(store: "Session") -> list[Case]:
    """Every case in ``store``: what people did (merges, splits and undos of what the organizer made, questions
    withdrawn, maintenance proposals dismissed), what the world's evidence said (a reading that the message
    does not bear on a question the organizer named for it) and what the checkers find (a new question that
    duplicates an older one, a question about a subject its message does not name, a closed question with fewer
    than two options). Ordered by kind (:data:`CASE_KINDS`), then id."""
    made = {q["id"]: q for q in kept_data.organizer_questions(store)}
    found: list[Case] = []
    found += _operation_cases(store, made)
    found += _withdrawn(made)
    found += _dismissed(store, made)
    found += _duplicates_created(store, made)
    found += _subjects_not_named(store, made)
    found += _too_few_options(made)
    found += _unrelated(store)
    order = {k: i for i, k in enumerate(CASE_KINDS)}
    return sorted(found, key=lambda c: (order[c.kind], c.id))


def _operation_cases(store, made: dict[str, dict[str, Any]]) -> list[Case]:
    ops = operations(store)
    by_id = {o["id"]: o for o in ops}
    out: list[Case] = []
    split_questions = [o["record"]["question"] for o in ops if o["op"] == "split" and not o["undone"]]
    linking: dict[str, list[dict[str, Any]]] = {}
    for row in kept_data.linking_decisions(store, split_questions):
        linking.setdefault(row["question"], []).append(row)
    for o in ops:
        record = o["record"]
        if o["op"] == "merge" and not o["undone"] and record["from"] in made:
            q = made[record["from"]]
            out.append(Case(f"duplicate:{o['id']}", "duplicate", q["decision"], q["messages"],
                            [record["from"], record["into"]],
                            f"created {record['from']}; {o['by']} merged it into {record['into']}",
                            {"links": [record["into"]], "new_questions": []}, PERSON))
        elif o["op"] == "split" and not o["undone"]:
            out += _split_cases(o, made, linking.get(record["question"], []))
        elif o["op"] == "undo":
            target = by_id.get(record.get("op"))
            if target is not None:
                out += _undo_cases(store, o, target, made)
    return out


def _assigned(record: dict[str, Any]) -> dict[str, list[str]]:
    return {m: ([qs] if isinstance(qs, str) else list(qs)) for m, qs in (record.get("assign") or {}).items()}


def _split_cases(o: dict[str, Any], made: dict[str, dict[str, Any]], linking: list[dict[str, Any]]) -> list[Case]:
    """One case per kept decision that created or linked the split question for messages the split
    assigned (the expected links: the new questions each message went to); one with no decision when the
    organizer created the question and no decision was kept."""
    record = o["record"]
    qid, assign = record["question"], _assigned(record)
    new = [q.get("id") for q in record.get("into", [])]
    observed = f"{o['by']} split {qid} into {', '.join(new)}"
    out = []
    for row in linking:
        messages = [m for m in row["messages"] if m in assign] or row["messages"]
        out.append(Case(f"split:{o['id']}:{row['key'][:12]}", "split", row["key"], messages, [qid, *new], observed,
                        {"links": {m: assign.get(m, []) for m in messages}}, PERSON))
    if not out and qid in made:
        out.append(Case(f"split:{o['id']}", "split", made[qid]["decision"], sorted(assign), [qid, *new], observed,
                        {"links": assign}, PERSON))
    return out


def _undo_cases(store, undo: dict[str, Any], target: dict[str, Any], made: dict[str, dict[str, Any]]) -> list[Case]:
    record = target["record"]
    observed = f"{undo['by']} undid {target['id']} ({target['op']} by {target['by']})"
    cid = f"undone:{target['id']}"
    if target["op"] == "merge":
        return [Case(cid, "undone", None, [], [record["from"], record["into"]], observed,
                     {"kept_apart": [record["from"], record["into"]]}, PERSON)]
    if target["op"] == "split":
        return [Case(cid, "undone", None, [], [record["question"]], observed,
                     {"kept_whole": record["question"]}, PERSON)]
    if target["op"] == "option_added":
        qid, value = record["question"], record["option"]
        for row in kept_data.linking_decisions(store, [qid]):
            decision = kept_data.find(store, row["key"])
            if decision is not None and _names_value(decision["output"], qid, value):
                return [Case(cid, "undone", row["key"], row["messages"], [qid], observed,
                             {"not_values": {qid: [value]}}, PERSON)]
        return [Case(cid, "undone", made.get(qid, {}).get("decision"), [], [qid], observed,
                     {"not_values": {qid: [value]}}, PERSON)]
    return []


def _names_value(output: dict[str, Any], qid: str, value: str) -> bool:
    """Whether an output (one message's or a window's) gives ``value`` to ``qid``."""
    parts = [output, *output.get("turns", [])]
    key = value_key(value)
    if any(v["question"] == qid and value_key(v["value"]) == key for p in parts for v in p.get("new_values", [])):
        return True
    return any(f"{q['subject']}.{q['kind']}" == qid and any(value_key(o) == key for o in q["options"])
               for p in parts for q in p.get("new_questions", []))


def _withdrawn(made: dict[str, dict[str, Any]]) -> list[Case]:
    return [Case(f"withdrawn:{q['id']}", "withdrawn", q["decision"], q["messages"], [q["id"]],
                 f"created {q['id']}; it was withdrawn", {"not_created": [q["id"]]}, PERSON)
            for q in made.values() if q["status"] == "withdrawn"]


def _dismissed(store, made: dict[str, dict[str, Any]]) -> list[Case]:
    """A dismissed maintenance proposal: the organizer was right to keep the questions as they are (the
    decision that created the question the proposal would have changed is a good example)."""
    out = []
    for p in proposals_data.proposals(store):
        if p.status != proposals_data.DISMISSED:
            continue
        record = p.record
        if p.op == "question_merge":
            pair = [record["from"], record["into"]]
            q = made.get(record["from"]) or made.get(record["into"]) or {}
            out.append(Case(f"dismissed:{p.id}", "dismissed", q.get("decision"), q.get("messages", []), pair,
                            f"maintenance proposed merging {record['from']} into {record['into']}; dismissed",
                            {"kept_apart": pair}, PERSON))
        else:
            q = made.get(record["question"], {})
            out.append(Case(f"dismissed:{p.id}", "dismissed", q.get("decision"), q.get("messages", []),
                            [record["question"]], f"maintenance proposed splitting {record['question']}; dismissed",
                            {"kept_whole": record["question"]}, PERSON))
    return out


def _duplicates_created(store, made: dict[str, dict[str, Any]]) -> list[Case]:
    """A question the organizer created whose text says what an older active question of the same subject
    says, by maintenance's text rule (:func:`~.maintenance.text_similarity`, at least
    :data:`~.maintenance.TEXT_SIMILARITY_MIN`, the subject's names left out): it should have linked that one."""
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for pair in kept_data.same_subject_pairs(store):
        drop = set().union(*(content_words(n) for n in pair["subject_names"] if n))
        similarity, _ = text_similarity(pair["new"]["text"], pair["old"]["text"], drop)
        new_id = pair["new"]["id"]
        if similarity >= TEXT_SIMILARITY_MIN and similarity > best.get(new_id, (0.0, None))[0]:
            best[new_id] = (similarity, pair["old"])
    out = []
    for new_id, (similarity, old) in best.items():
        q = made[new_id]
        out.append(Case(f"duplicate_created:{new_id}", "duplicate_created", q["decision"], q["messages"],
                        [new_id, old["id"]],
                        f"created {new_id} ({q['text']!r}) while {old['id']} ({old['text']!r}) existed: "
                        f"{similarity:.0%} of their content words shared",
                        {"links": [old["id"]], "new_questions": []}, CHECKER))
    return out


def _subjects_not_named(store, made: dict[str, dict[str, Any]]) -> list[Case]:
    """A question the organizer created about a subject that none of the messages it was created for names:
    no name, id or alias of the subject in the text (doxa's subject matcher), nor I/me/my for the author's own
    subject (the subjects the message's source names, as the organizer's request finds them)."""
    candidates = [q for q in made.values() if q["subject"] and q["messages"]]
    texts = kept_data.messages_of(store, sorted({m for q in candidates for m in q["messages"]}))
    named: dict[str, set[str]] = {}
    for mid, m in texts.items():
        found = {s["id"] for s in match_subjects(store, m["text"])}
        if SELF_WORDS & set(words(m["text"])):
            found |= {s["id"] for s in match_subjects(store, m["source"].replace("-", " ").replace("_", " "))}
        named[mid] = found
    out = []
    for q in candidates:
        shown = [m for m in q["messages"] if m in named]
        if not shown or any(q["subject"] in named[m] for m in shown):
            continue
        others = sorted(set().union(*(named[m] for m in shown)))
        out.append(Case(f"subject_not_named:{q['id']}", "subject_not_named", q["decision"], shown, [q["id"]],
                        f"created {q['id']} about {q['subject']}, which its message does not name",
                        {"subject_one_of": others}, CHECKER))
    return out


def _too_few_options(made: dict[str, dict[str, Any]]) -> list[Case]:
    return [Case(f"too_few_options:{q['id']}", "too_few_options", q["decision"], q["messages"], [q["id"]],
                 f"created the closed question {q['id']} with {len(q['options'])} option(s)",
                 {"options_at_least": 2, "or_open": True}, CHECKER)
            for q in made.values() if not q["open"] and len(q["options"]) < 2 and q["status"] == "active"]


def _unrelated(store) -> list[Case]:
    """A reading of a message against a question the organizer named for it that puts at least
    :data:`UNRELATED_AT_LEAST` on "unrelated": the evidence, read, says the link was not one."""
    rows = kept_data.unrelated_readings(store, UNRELATED_AT_LEAST)
    if not rows:
        return []
    by_message: dict[str, list[dict[str, Any]]] = {}
    for d in kept_data.decisions(store, messages=sorted({r["message"] for r in rows})):
        for m in d["messages"]:
            by_message.setdefault(m, []).append(d)
    out = []
    for r in rows:
        decision = next((d["key"] for d in reversed(by_message.get(r["message"], []))
                         if r["question"] in d["created"] or r["question"] in d["linked"]), None)
        out.append(Case(f"unrelated:{r['message']}:{r['question']}:{r['reader']}", "unrelated", decision,
                        [r["message"]], [r["question"]],
                        f"{r['reader']} read {r['message']} as {r['unrelated']:.0%} unrelated to {r['question']}",
                        {"not_links": [r["question"]]}, WORLD))
    return out


__all__ = ["CachedOrganizer", "Kept", "Replayed", "Case", "CASE_KINDS", "GOLD", "cases", "decision_key",
           "decoding_settings", "model_of", "kept_organizer", "keeper", "rebuild_request", "replay", "request_json"]
