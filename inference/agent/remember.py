"""`remember`: a raw message in, the beliefs it changed out (the loop of docs/design.md, one message at a time).

For each message:

1. it is kept exactly as it arrived (text, source, time);
2. the organizer (:mod:`.organizer_client`) is shown it with the subjects it may be about and the
   questions already tracked for them (doxa's own search ranks them) and says which questions
   it bears on, which new values it states for an open question (each an ``option_added``: a new
   address extends ``maya.home``, it does not start ``maya.home_2``), which new ones to track (a
   question whose answers are values is created open), which new subjects and relations it names;
3. the reader reads the message against each of those questions (one call per question, or
   one for all of them where the reader has a batch path; an open question with its ``unlisted``
   answer);
4. all of it — message, subjects, relations, questions, readings, the message's state — is
   written in one transaction: a failure at any step leaves the store as it was;
5. the beliefs of those questions are scored before and after, and the ones that moved returned.

The organizer is called once per message (twice when its first reply had to be sent back),
the reader once per (message, question) at most. With no model configured, the message is kept
and marked pending with the step skipped and how to configure it; :func:`organize_pending`
(``doxa organize``) finishes pending messages later. Nothing is deleted or invalidated by a
model: a message only ever adds readings, and the scorer weighs them.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable

from doxa.data import organizer_instructions, question_ranking, remembered, search, subject_match
from doxa.data.errors import StoreError
from doxa.data.text import words
from doxa.data.times import parse_time, utc_now

from .organizer_client import Organizer, OrganizerError, organizer_from_env
from .organizer_memory import keeper, kept_organizer
from .organizer_schema import (ALL_SUBJECTS_UP_TO, MAX_QUESTIONS_PER_SUBJECT, MAX_QUESTIONS_SHOWN, OrganizerRequest,
                               same_value)

if TYPE_CHECKING:  # Memory.remember calls into this module: only the type is needed here
    from doxa.inference.read.memory import Memory


NO_ORGANIZER_HINT = (
    "No organizer is configured, so the message was kept but not organized (pending). Point doxa at an "
    "OpenAI-compatible chat server: set DOXA_READER_URL (used for both) or DOXA_ORGANIZER_URL, e.g. "
    "http://127.0.0.1:8080/v1 for llama.cpp's llama-server, with DOXA_*_MODEL / DOXA_*_KEY where the server needs "
    "them (docs/organizer.md), then run `doxa organize`.")
NO_READER_HINT = (
    "No reader is configured, so the questions were linked but not read (pending). Set DOXA_READER_URL to an "
    "OpenAI-compatible server that returns logprobs (docs/readers.md), then run `doxa organize`.")


class RememberError(StoreError):
    """A message could not be remembered; the text says whether it was kept (pending) or not stored at all."""


@dataclass
class BeliefChange:
    question: str
    text: str
    before: dict[str, float] | None  # None: the question is new
    after: dict[str, float]
    top: str | None
    p_top: float


@dataclass
class RememberResult:
    message: str
    status: str  # done | pending | already
    source: str
    sent_at: str
    skipped: list[str] = field(default_factory=list)
    hint: str | None = None
    organizer: str | None = None
    instructions_version: int | None = None
    reader: str | None = None
    linked: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    #: values the message added to open questions (question → values; ``option_added`` records)
    values_added: dict[str, list[str]] = field(default_factory=dict)
    #: questions the organizer proposed as new that already existed: linked instead
    deduplicated: dict[str, str] = field(default_factory=dict)
    new_subjects: list[str] = field(default_factory=list)
    new_relations: list[dict[str, str]] = field(default_factory=list)
    readings: int = 0
    changed: list[BeliefChange] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=lambda: {"organizer": 0, "reader": 0})
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------- what the organizer is shown
def organizer_request(memory: "Memory", text: str, source: str, source_path: str, sent_at: datetime,
                      messages: int = 1) -> OrganizerRequest:
    """The message with the subjects it may be about and the existing questions ranked for its words
    (``messages``: how many messages ``text`` joins — a window's turns —, each allowed its handful of a
    subject's questions)."""
    store = memory.store
    every = store.subjects()
    named = {s["id"] for s in subject_match.match_subjects(store, text)}
    named |= {s["id"] for s in subject_match.match_subjects(store, source.replace("-", " ").replace("_", " "))}
    near = subject_match.neighbours(store, sorted(named))
    shown_ids = set(named) | {n["id"] for n in near}
    if len(every) <= ALL_SUBJECTS_UP_TO:
        shown_ids = {s["id"] for s in every}
    relations: dict[str, list[str]] = {}
    for r in store.relations():
        if r["from"] in shown_ids:
            relations.setdefault(r["from"], []).append(f"{r['kind']}: {r['to']}")
    subjects = [{"id": s["id"], "name": s["name"], "aliases": s["aliases"], "relations": relations.get(s["id"], [])}
                for s in every if s["id"] in shown_ids]
    questions: list[dict[str, Any]] = []
    # only the questions of the subjects the message names, where it names any (their neighbours
    # stay among the subjects, for a new question): a small model shown another person's
    # question links it — measured on a real 1.5B model, 21 of 40 messages linked off their
    # person when every question was shown, and the neighbours' questions alone still drew
    # messages about Pablo to his friend Ava's question
    asked_about = set(named) if named else shown_ids
    if asked_about:
        terms = [t for t in search.content_terms(words(text)) if len(t) > 1]
        ranked = question_ranking.rank_questions(store, terms, subject_ids=sorted(asked_about), evidence=False)
        # the best-ranked first, at most a handful per subject; with room to spare every question of
        # these subjects is shown
        chosen = best_per_subject(ranked, MAX_QUESTIONS_PER_SUBJECT * max(1, messages), MAX_QUESTIONS_SHOWN)
        if chosen:
            table = store.question_table(chosen)
            order = {q: i for i, q in enumerate(chosen)}
            rows = sorted(zip(table.ids.tolist(), table.subjects.tolist(), table.texts.tolist(), table.options,
                              table.is_open.tolist()), key=lambda row: order[row[0]])
            # an open question's states end with "unlisted": its options are the values before it
            questions = [{"id": q, "subject": s, "text": t, "options": list(o[:-1] if is_open else o),
                          "open": bool(is_open)} for q, s, t, o, is_open in rows]
    return OrganizerRequest(text=text, source=source, source_path=source_path, sent_at=sent_at, subjects=subjects,
                            questions=questions, known_subject_ids=frozenset(s["id"] for s in every))


def best_per_subject(ranked: list[dict[str, Any]], per_subject: int, at_most: int) -> list[str]:
    """The ids of ``ranked`` (best first, each with its ``subject``) in their order, at most ``per_subject``
    of one subject and ``at_most`` in all."""
    taken: dict[Any, int] = {}
    out = []
    for row in ranked:
        if len(out) == at_most:
            break
        if taken.get(row["subject"], 0) < per_subject:
            taken[row["subject"]] = taken.get(row["subject"], 0) + 1
            out.append(row["id"])
    return out


# ---------------------------------------------------------------------------- sources and ids
def message_id_for(text: str, source: str, sent_at: datetime) -> str:
    """A message's id from its content: remembering the same message twice stores it once."""
    key = f"{source}\x1f{sent_at.isoformat()}\x1f{text}"
    return "msg-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


def _source(store, source: str) -> tuple[str, str, dict | None]:
    """(source id, its path, a source record to add or None) for ``--source``: an id, or a path for a new one."""
    source = source.strip().strip("/")
    leaf = source.rsplit("/", 1)[-1]
    row = store.execute("SELECT id, path FROM sources WHERE id = ?", [leaf]).fetchone()
    if row is not None:
        if "/" in source and source != row[1]:
            raise RememberError(f"source {leaf!r} is stored with path {row[1]!r}, not {source!r}: give its id alone, "
                                "or a new id for a new source")
        return row[0], row[1], None
    if "/" not in source or not leaf:
        raise RememberError(f"unknown source {source!r}: give a new source as its path, layers first and its id last "
                            "(e.g. person/self/chat/maya-chat or user/notes/my-notes), or ingest a source record")
    layers = source.split("/")[:-1]
    return leaf, source, {"type": "source", "id": leaf, "layers": layers}


def _stored_question(store, qid: str) -> tuple[list[str], bool] | None:
    """(options, open) of a stored question, or None."""
    row = store.execute("SELECT options, is_open FROM questions WHERE id = ?", [qid]).fetchone()
    return None if row is None else (list(row[0]), bool(row[1]))


def _option_op_id(store, qid: str, value: str) -> str | None:
    """None where the record's own default id, ``option:<question>:<value>``, is free; else the first
    free of ``…-2``, ``…-3`` (an earlier addition of the value, since undone, holds it)."""
    base = f"option:{qid}:{value}"
    taken = {i for (i,) in store.execute("SELECT id FROM organizer_ops WHERE id = ? OR starts_with(id, ?)",
                                         [base, base + "-"]).fetchall()}
    n = 1
    while (candidate := base if n == 1 else f"{base}-{n}") in taken:
        n += 1
    return None if candidate == base else candidate


def _new_question_id(store, base: str, taken: set[str]) -> str:
    candidate, n = base, 1
    while candidate in taken or store.execute("SELECT 1 FROM questions WHERE id = ?", [candidate]).fetchone():
        n += 1
        candidate = f"{base}_{n}"
    return candidate


class Decisions:
    """What organizer outputs decide, turned into records: subjects, relations, new questions (each
    created once, a re-proposal linked instead), values new to open questions (``option_added``).

    One message's output is applied once; a window of turns (:mod:`.conversation`) applies each
    turn's output in order to the same object, so a question one turn creates is the one a later
    turn links or adds a value to (by its id, or by proposing it again)."""

    def __init__(self, store, request: OrganizerRequest, by: str, instructions_version: int, at: datetime) -> None:
        self.store, self.by, self.version, self.at = store, by, instructions_version, at
        self.existing_text = {(q["subject"], " ".join(q["text"].lower().split())): q["id"] for q in request.questions}
        self.taken: set[str] = set()
        #: question records created, in order
        self.created: list[dict[str, Any]] = []
        #: subject.kind proposed → the id of the question created for it
        self.proposed: dict[str, str] = {}
        #: values new to stored open questions, in the order named: question → values (an option_added each)
        self.adding: dict[str, list[str]] = {}
        self.deduplicated: dict[str, str] = {}
        self._people: list[dict[str, Any]] = []

    def people(self, out) -> tuple[list[str], list[dict[str, str]]]:
        """Records for the new subjects and relations of ``out``: (subject ids, relations) added."""
        ids, relations = [], []
        known = {r["id"] for r in self._people if r["type"] == "subject"}
        for s in out.new_subjects:
            if s.id in known:
                continue
            known.add(s.id)
            self._people.append({"type": "subject", "id": s.id, "name": s.name, "aliases": s.aliases})
            ids.append(s.id)
        for r in out.new_relations:
            self._people.append({"type": "relation", "from": r.from_, "to": r.to, "kind": r.kind})
            relations.append({"from": r.from_, "to": r.to, "kind": r.kind})
        return ids, relations

    def _created(self, qid: str) -> dict[str, Any] | None:
        return next((r for r in self.created if r["id"] == qid), None)

    def _add_value(self, qid: str, value: str, valued: list[str]) -> None:
        made = self._created(qid)
        if made is not None:  # a question this window created: the value joins its options
            if made.get("open"):
                if same_value(value, made["options"]) is None:
                    made["options"].append(value)
                valued.append(qid)
            return
        stored = _stored_question(self.store, qid)
        if stored is None or not stored[1]:
            return  # closed (or gone): its options are all its answers; the reading says which
        if same_value(value, stored[0] + self.adding.get(qid, [])) is None:
            self.adding.setdefault(qid, []).append(value)
            valued.append(qid)

    def apply(self, out) -> tuple[list[str], list[str]]:
        """(the questions ``out`` bears on — links, re-proposals, questions given a value —, the questions
        it created), in order."""
        linked = list(dict.fromkeys(self.proposed.get(q, q) for q in out.links))
        created_here: list[str] = []
        valued: list[str] = []
        for v in out.new_values:
            self._add_value(self.proposed.get(v.question, v.question), v.value, valued)
        for q in out.new_questions:
            base = f"{q.subject}.{q.kind}"
            same = self.existing_text.get((q.subject, q.text.lower()))
            if same is None and base in self.proposed:
                same = self.proposed[base]  # proposed again (in this message, or an earlier turn of the window)
            if same is None:
                row = self.store.execute("SELECT id, subject, status FROM questions WHERE id = ?", [base]).fetchone()
                if row is not None and row[2] == "active" and row[1] == q.subject:
                    same = row[0]  # the organizer re-proposed a question it was not shown: link it
            if same is not None:
                self.deduplicated[f"{q.subject}: {q.text}"] = same
                if same not in linked and same not in created_here:
                    linked.append(same)
                if q.shape != "value":
                    continue  # a closed list's options are possible answers, not values the message states
                for value in q.options:  # the values it does not list yet join it where it is open
                    self._add_value(same, value, valued)
                continue
            qid = _new_question_id(self.store, base, self.taken)
            self.taken.add(qid)
            self.proposed[base] = qid
            created_here.append(qid)
            record = {"type": "question", "id": qid, "subject": q.subject, "kind": q.kind, "text": q.text,
                      "shape": q.shape, "options": list(q.options), "created_by": self.by,
                      "instructions_version": self.version}
            if q.shape == "value":  # a question whose answers are values: open, its options the values named
                record.update(shape="choice", open=True)
            self.created.append(record)
        for qid in valued:
            if qid not in linked and qid not in created_here:
                linked.append(qid)
        return linked, created_here

    def records(self) -> list[dict[str, Any]]:
        """Every record decided so far: subjects and relations, new questions, then the values added."""
        out = list(self._people) + list(self.created)
        for qid, values in self.adding.items():
            for value in values:
                op = {"type": "option_added", "question": qid, "option": value, "by": self.by,
                      "at": self.at.isoformat()}
                taken_id = _option_op_id(self.store, qid, value)
                out.append(op if taken_id is None else {**op, "id": taken_id})
        return out


# ---------------------------------------------------------------------------- one message
@dataclass
class _Message:
    id: str
    text: str
    source: str
    source_path: str
    sent_at: datetime
    records: list[dict[str, Any]]  # what must be written with it (the message and a new source; none once stored)


def _scores(memory: "Memory", question_ids: list[str], at: datetime) -> dict[str, Any]:
    if not question_ids:
        return {}
    found, _ = memory.scored(question_ids, at)
    return {b.question: b for b in found}


def _requests(model) -> int | None:
    value = getattr(model, "requests", None)
    return value if isinstance(value, int) else None


def _process(memory: "Memory", msg: _Message, organizer: Organizer | None, reader, *,
             questions_to_read: list[str] | None = None) -> RememberResult:
    """Organize (unless ``questions_to_read`` says which questions already), read, write it all at once."""
    store = memory.store
    result = RememberResult(message=msg.id, status="done", source=msg.source, sent_at=msg.sent_at.isoformat())
    records = list(msg.records)
    state: dict[str, Any] = {"message": msg.id, "status": remembered.DONE}
    at = max(utc_now(), msg.sent_at)
    # the organizer's decision, kept in the transaction that applies it (none when it did not run)
    keep: Callable[[Any], None] = lambda con: None

    def also(con) -> None:  # inside the ingest's transaction: the message's state, and the decision applied
        remembered.mark_remembered(con, [state])
        keep(con)

    # -- the organizer ---------------------------------------------------------------
    if questions_to_read is None:
        if organizer is None:
            result.status, result.skipped, result.hint = "pending", ["organizer", "reader"], NO_ORGANIZER_HINT
            state.update(status=remembered.PENDING, waiting_for="organizer", reason="no organizer configured")
            memory.ingest(records, also=lambda con: remembered.mark_remembered(con, [state]))
            return result
        instructions = organizer_instructions.current(store, organizer_instructions.ORGANIZER)
        request = organizer_request(memory, msg.text, msg.source, msg.source_path, msg.sent_at)
        organized = organizer.organize(request, instructions.text)
        out = organized.output
        result.organizer, result.instructions_version = organizer.name, instructions.version
        result.calls["organizer"] = organized.calls
        state.update(organizer=organizer.name, instructions_version=instructions.version,
                     organizer_calls=organized.calls)
        decisions = Decisions(store, request, organizer.name, instructions.version, at)
        result.new_subjects, result.new_relations = decisions.people(out)
        linked, created = decisions.apply(out)
        records += decisions.records()
        result.linked, result.created = linked, created
        result.values_added = decisions.adding
        result.deduplicated = decisions.deduplicated
        question_records = {q["id"]: q for q in decisions.created}
        keep = keeper(organized, messages=[msg.id], instructions_version=instructions.version, created=created,
                      linked=linked)
    else:
        linked = [q for q in questions_to_read
                  if (store.execute("SELECT status FROM questions WHERE id = ?", [q]).fetchone() or [""])[0] == "active"]
        result.linked, question_records = linked, {}
    to_read = result.linked + result.created
    state["questions"] = to_read

    # -- the reader ------------------------------------------------------------------
    before = _scores(memory, result.linked, at)
    if to_read and reader is None:
        result.status, result.skipped, result.hint = "pending", ["reader"], NO_READER_HINT
        state.update(status=remembered.PENDING, waiting_for="reader", reason="no reader configured")
        memory.ingest(records, also=also)
        return result
    if to_read:
        names = {s["id"]: s["name"] for s in store.subjects()}
        names.update({r["id"]: r["name"] for r in records if r["type"] == "subject"})
        asked = []
        for qid in to_read:
            q = question_records.get(qid) or store.question(qid)
            stored = None if qid in question_records else _stored_question(store, qid)
            is_open = bool(q.get("open")) if stored is None else stored[1]
            options = list(q["options"]) + result.values_added.get(qid, [])
            asked.append((qid, q["text"], options, names.get(q["subject"], q["subject"]), is_open))
        start = _requests(reader)
        readings = read_questions(reader, msg.text, [(text, options, subject, is_open)
                                                     for _, text, options, subject, is_open in asked])
        end = _requests(reader)
        result.calls["reader"] = (end - start) if start is not None and end is not None else len(asked)
        result.reader = getattr(reader, "name", type(reader).__name__)
        records += [reading.to_record(msg.id, qid) for (qid, *_), reading in zip(asked, readings)]
        result.readings = len(readings)
        state.update(reader=result.reader, reader_calls=result.calls["reader"])

    memory.ingest(records, also=also)
    after = _scores(memory, to_read, at)
    for qid in to_read:
        b = after.get(qid)
        if b is None:
            continue
        old = before.get(qid)
        old_answers = old.answers if old is not None else None
        if old_answers is not None and all(o in old_answers and abs(old_answers[o] - p) < 1e-6
                                           for o, p in b.answers.items()):
            continue
        result.changed.append(BeliefChange(question=qid, text=b.text, before=old_answers, after=b.answers,
                                           top=b.top, p_top=b.p_top))
    return result


def read_questions(reader, message_text: str, questions: list[tuple[str, list[str], str | None, bool]]) -> list:
    """The readings of one message against (question text, options, person, open) each, in order: by
    the reader's batch path where it has one, else one ``read`` each; an open question is read with
    its ``unlisted`` choice (``read(…, open=True)``).

    A reader that cannot read an open question (its ``read`` takes no ``open``) reads its listed
    values as a closed list, so its reading puts nothing on ``unlisted``; with no value listed yet
    there is nothing it can be asked, and the error says so."""
    read_many = getattr(reader, "read_many", None)
    if callable(read_many) and getattr(reader, "reads_open", False):  # takes (text, options, person, open)
        return read_many(message_text, questions)
    if callable(read_many) and not any(is_open for *_, is_open in questions):
        return read_many(message_text, [(text, options, subject) for text, options, subject, _ in questions])
    out = []
    for text, options, subject, is_open in questions:
        if is_open and _takes_open(reader.read):
            out.append(reader.read(message_text, text, options, subject=subject, open=True))
            continue
        if is_open and len(options) < 2:
            from .readers import ReaderError

            raise ReaderError(
                f"reader {getattr(reader, 'name', type(reader).__name__)!r} cannot read the open question "
                f"{text!r}: it has {len(options)} value(s) listed and this reader has no 'unlisted' choice (its "
                "read() takes no open=True); use OpenAIChatReader (DOXA_READER_URL), or add open=True to its read()")
        out.append(reader.read(message_text, text, options, subject=subject))
    return out


def _takes_open(method) -> bool:
    try:
        return "open" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def _failure(err: Exception, kept: bool) -> str:
    what = "organizer" if isinstance(err, OrganizerError) else "reader"
    if kept:
        return (f"the {what} failed; the message was kept as pending (nothing else was written): `doxa organize` "
                f"retries it. {err}")
    return (f"the {what} failed, so nothing was stored (run it again, or pass --keep to keep the message as "
            f"pending for `doxa organize`): {err}")


def _model_errors():
    from .readers import ReaderError

    return (OrganizerError, ReaderError)


def _models(organizer, reader, use_env: bool):
    if use_env and organizer is None:
        organizer = organizer_from_env()
    if use_env and reader is None:
        from .readers import reader_from_env

        reader = reader_from_env()
    return organizer, reader


def remember(memory: "Memory", text: str, *, source: str, sent_at: datetime | str | None = None,
             organizer: Organizer | None = None, reader=None, use_env: bool = True, keep_on_failure: bool = False,
             message_id: str | None = None, reuse_decisions: bool = True) -> RememberResult:
    """Keep ``text`` as a message from ``source`` sent at ``sent_at`` (default now), organize it, read it.

    ``source``: a stored source id, or a new source's path (``person/self/chat/maya-chat``: layers,
    then its id). ``organizer`` / ``reader``: default from the environment when ``use_env``
    (:func:`~.organizer_client.organizer_from_env`, :func:`~.readers.reader_from_env`). On a model failure
    nothing is written and :class:`RememberError` is raised; with ``keep_on_failure`` the message is
    kept as pending first. Remembering the same message again changes nothing (status ``already``).
    The organizer's decision is kept with the message (table ``organizer_decisions``); identical inputs
    decided before are answered from there with no model call unless ``reuse_decisions`` is False
    (:mod:`.organizer_memory`).
    """
    organizer, reader = _models(organizer, reader, use_env)
    organizer = kept_organizer(organizer, memory.store, reuse=reuse_decisions)
    msg = _prepare(memory, text, source, sent_at, message_id)
    if msg is None or isinstance(msg, RememberResult):
        return msg
    try:
        return _process(memory, msg, organizer, reader)
    except _model_errors() as err:
        if keep_on_failure:
            state = {"message": msg.id, "status": remembered.PENDING, "waiting_for": "organizer", "reason": str(err)[:500]}
            memory.ingest(msg.records, also=lambda con: remembered.mark_remembered(con, [state]))
        raise RememberError(_failure(err, keep_on_failure)) from err


def _prepare(memory: "Memory", text: str, source: str, sent_at, message_id: str | None):
    """The message to process, or a RememberResult when it was remembered before."""
    if not isinstance(text, str) or not text.strip():
        raise RememberError("the message is empty: give its text as it arrived")
    when = parse_time(sent_at) if isinstance(sent_at, str) else (sent_at or utc_now().replace(microsecond=0))
    if when.tzinfo is not None:
        when = parse_time(when.isoformat())
    source_id, path, source_record = _source(memory.store, source)
    mid = message_id or message_id_for(text, source_id, when)
    state = remembered.remembered_state(memory.store, mid)
    stored = memory.store.execute("SELECT text, source, sent_at FROM messages WHERE id = ?", [mid]).fetchone()
    if stored is not None and (stored[0], stored[1], stored[2]) != (text, source_id, when):
        raise RememberError(f"message {mid!r} is stored with other content: evidence is never edited; give another id")
    if state is not None and state["status"] == remembered.DONE:
        return RememberResult(message=mid, status="already", source=source_id, sent_at=when.isoformat(),
                              linked=state["questions"], organizer=state["organizer"],
                              instructions_version=state["instructions_version"], reader=state["reader"],
                              hint="already remembered: nothing new")
    if state is not None:  # pending: finish it as `doxa organize` would
        return _Message(mid, text, source_id, path, when, [])
    records = ([source_record] if source_record else []) + [
        {"type": "message", "id": mid, "source": source_id, "sent_at": when.isoformat(), "text": text}]
    if stored is not None:
        records = []  # ingested before, by other means: organize it now
    return _Message(mid, text, source_id, path, when, records)


def remember_many(memory: "Memory", messages: Iterable[dict[str, Any]], *, organizer: Organizer | None = None,
                  reader=None, use_env: bool = True, keep_on_failure: bool = False,
                  progress: Callable[[int, int], None] | None = None, reuse_decisions: bool = True
                  ) -> list[RememberResult]:
    """:func:`remember` for each ``{"text", "source", "sent_at"?, "id"?}``, one transaction per message.

    Without ``keep_on_failure`` the first failure stops the batch (the messages before it are
    stored; the error says how many); with it, a failed message is kept pending and the batch goes on.
    """
    items = list(messages)
    organizer, reader = _models(organizer, reader, use_env)
    organizer = kept_organizer(organizer, memory.store, reuse=reuse_decisions)
    out: list[RememberResult] = []
    for done, item in enumerate(items, start=1):
        try:
            result = remember(memory, item["text"], source=item["source"], sent_at=item.get("sent_at"),
                              organizer=organizer, reader=reader, use_env=False, keep_on_failure=keep_on_failure,
                              message_id=item.get("id"))
        except RememberError as err:
            if not keep_on_failure:
                raise RememberError(f"message {done} of {len(items)}: {err} ({done - 1} before it are stored)") from err
            result = RememberResult(message=item.get("id") or "", status="pending", source=item["source"],
                                    sent_at=str(item.get("sent_at") or ""), error=str(err))
        out.append(result)
        if progress:
            progress(done, len(items))
    return out


def organize_pending(memory: "Memory", *, organizer: Organizer | None = None, reader=None, use_env: bool = True,
                     limit: int | None = None, progress: Callable[[int, int], None] | None = None,
                     reuse_decisions: bool = True) -> list[RememberResult]:
    """Finish the messages kept pending (`doxa organize`): organize those waiting for the organizer,
    read those waiting for the reader. One transaction per message; the first failure stops (the
    messages before it are done, the failed one stays pending). ``reuse_decisions``: as for :func:`remember`."""
    organizer, reader = _models(organizer, reader, use_env)
    organizer = kept_organizer(organizer, memory.store, reuse=reuse_decisions)
    pending = remembered.pending_messages(memory.store, limit=limit)
    out = []
    for done, row in enumerate(pending, start=1):
        waiting = row["waiting_for"]
        missing = "organizer" if waiting == "organizer" and organizer is None else (
            "reader" if reader is None else None)
        if missing:  # left as it is: nothing to write until the model is configured
            out.append(RememberResult(message=row["message"], status="pending", source=row["source"],
                                      sent_at=row["sent_at"].isoformat(), skipped=[missing],
                                      hint=NO_ORGANIZER_HINT if missing == "organizer" else NO_READER_HINT,
                                      linked=row["questions"]))
            if progress:
                progress(done, len(pending))
            continue
        path = memory.store.execute("SELECT path FROM sources WHERE id = ?", [row["source"]]).fetchone()[0]
        msg = _Message(row["message"], row["text"], row["source"], path, row["sent_at"], [])
        try:
            result = _process(memory, msg, organizer, reader,
                              questions_to_read=row["questions"] if waiting == "reader" else None)
        except _model_errors() as err:
            raise RememberError(f"pending message {done} of {len(pending)} ({row['message']}): "
                                f"{_failure(err, True)} ({done - 1} before it are done)") from err
        out.append(result)
        if progress:
            progress(done, len(pending))
    return out


__all__ = ["remember", "remember_many", "organize_pending", "organizer_request", "RememberResult", "BeliefChange",
           "RememberError", "message_id_for", "NO_ORGANIZER_HINT", "NO_READER_HINT"]
