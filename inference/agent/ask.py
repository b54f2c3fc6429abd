"""A question nobody prepared: `doxa ask "Does Maya have allergies?" --subject maya --options yes,no`.

Because every message is kept, a new question can be answered from old evidence then
and there (docs/design.md §5):

1. the question is created as an organizer record (text, subject, kind, options: never
   a probability); asking again with the same words reuses it. Without options, the
   organizer's model proposes them from the kept messages that bear on the question — the
   values they name (:meth:`~.question_model.QuestionModel.propose`), with the question's kind
   and its text — and the question is a value question (:func:`open_question_fields`);
2. the kept messages bearing on the subject (naming them, or already read for one of
   their questions) are searched with the question's words (BM25, word variants:
   "allergies" finds "allergic"; data/search.py); the assistant's own notes are left out;
3. a reader reads each hit against the question (``reader_from_env()`` — see
   docs/readers.md — or a :class:`~doxa.inference.agent.readers.Reader` passed in), and the
   readings are ingested like any others;
4. the scorer computes the belief.

With no reader configured nothing is read: the hits are listed with how to configure
one (the question is still created, so readings made elsewhere can be ingested for it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Callable

from doxa.data import search
from doxa.data import subject_match
from doxa.data.errors import StoreError
from doxa.data.evidence import UNLISTED
from doxa.data.text import words

from doxa.inference.read.memory import Memory
from doxa.inference.read.results import Belief

from .question_model import QuestionModel, question_model_from_env
from .readers import ReaderError, reader_from_env

DEFAULT_LIMIT = 20

NO_READER_HINT = (
    "No reader is configured, so nothing was read. Point doxa at an OpenAI-compatible server that "
    "returns logprobs: set DOXA_READER_URL (e.g. http://127.0.0.1:8080/v1 for llama.cpp's llama-server), "
    "and DOXA_READER_MODEL / DOXA_READER_KEY where the server needs them, then ask again "
    "(docs/readers.md). Or ingest `reading` records for {question} made by any other reader with "
    "`doxa ingest FILE`."
)


NO_MODEL_FOR_OPTIONS = (
    "no --options given and no model is configured to propose them: give the possible answers, e.g. "
    "--options yes,no, or set DOXA_ORGANIZER_URL (or DOXA_READER_URL) to an OpenAI-compatible server "
    "(docs/readers.md) so the organizer's model names them from the kept messages")


def open_question_fields() -> dict[str, Any]:
    """The one place where a question doxa creates from a question in words is made *open* (a value
    question whose options grow with the evidence, docs/formats.md `question`)."""
    return {"open": True}


class AskError(StoreError):
    """Asking failed part-way; readings made before the failure are kept (they are valid evidence)."""


@dataclass
class AskResult:
    question: dict[str, Any]
    created: bool
    terms: list[str]
    hits: list[search.SearchHit]
    readings: list[dict[str, Any]] = field(default_factory=list)
    already_read: int = 0
    reader: str | None = None
    belief: Belief | None = None
    hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hits"] = [h.to_dict() for h in self.hits]
        out["belief"] = self.belief.to_dict() if self.belief else None
        return out


def _slug(words: list[str]) -> str:
    return "_".join(words[:3])


def question_terms(memory: Memory, text: str, subject: str | None) -> list[str]:
    """The words of a question that search the kept messages: its content words, the subject's own names left out."""
    names = subject_match.subject_label_terms(memory.store, [subject]) if subject else set()
    terms = [t for t in search.content_terms(words(text), drop=names) if len(t) > 1]
    return terms or sorted(names)


def ask(
    memory: Memory,
    question_text: str,
    subject: str,
    options: list[str] | None = None,
    *,
    reader=None,
    model: QuestionModel | None = None,
    kind: str | None = None,
    question_id: str | None = None,
    at: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
    use_env: bool = True,
    progress: Callable[[int, int], None] | None = None,
    new: bool = False,
) -> AskResult:
    """Create (or reuse) the question, read the kept evidence for it, and return the belief.

    ``reader``: a :class:`~doxa.inference.agent.readers.Reader`; default ``reader_from_env()``
    when ``use_env``. ``kind`` and ``question_id`` default to words of the question
    ("Does Maya have allergies?" → kind ``allergies``, id ``maya.allergies``).
    ``options`` None (or empty): an existing question of that id keeps its own, else ``model``
    (default ``question_model_from_env()`` when ``use_env``) proposes them from the kept messages;
    with no model that is an error saying how to fix it.
    ``progress(done, total)`` is called after each message read.
    ``new``: the caller found that no tracked question asks this (``answer`` does): a kind the model
    proposes that is the id of a tracked question of the subject is then not taken, and the id from
    the question's own words stands (a small model names every question "job", the kind of its
    prompt's example; ``answer`` would read another question's evidence as this one's).
    """
    store = memory.store
    known = {s["id"]: s for s in store.subjects()}
    if subject not in known:
        hint = f": known subjects are {', '.join(sorted(known)[:10])}" if known else ": add a subject record first"
        raise StoreError(f"no subject {subject!r}{hint}")
    given = [o.strip() for o in (options or []) if o.strip()]
    if given and (len(given) < 2 or len(set(given)) != len(given)):
        raise StoreError(f"--options needs at least two distinct answers, comma-separated (got {given}): "
                         "e.g. --options yes,no")
    question_text = " ".join(question_text.split())
    if not question_text:
        raise StoreError("the question is empty: give it in words, e.g. \"Does Maya have allergies?\"")
    terms = question_terms(memory, question_text, subject)
    stored_text = question_text
    extra: dict[str, Any] = {}
    named = kind is not None, question_id is not None
    kind = kind or _slug([t for t in terms if t not in search.STOPWORDS]) or "custom"
    question_id = question_id or f"{subject}.{kind}"
    existing = _existing(store, question_id)
    proposed = not given and existing is None
    if proposed:  # the model names the options (and the kind, unless given)
        if model is None and use_env:
            model = question_model_from_env()
        if model is None:
            raise StoreError(NO_MODEL_FOR_OPTIONS)
        hits = search.search_messages(store, terms, subject=subject, limit=limit, include_assistant=False)
        proposal = model.propose(question_text, known[subject]["name"], [h.text for h in hits])
        given, extra = proposed_options(proposal.options)
        stored_text = proposal.text or question_text
        taken = proposal.kind and not named[1] and new and _existing(store, f"{subject}.{proposal.kind}") is not None
        if proposal.kind and not named[0] and not taken:
            kind = proposal.kind
            if not named[1]:
                question_id = f"{subject}.{kind}"
                existing = _existing(store, question_id)
    options = list(existing["options"]) if existing is not None and (proposed or not given) else given
    shape = "yes_no" if sorted(options) == ["no", "yes"] else "choice"
    record = {"type": "question", "id": question_id, "subject": subject, "kind": kind,
              "text": stored_text, "shape": shape, "options": options, **extra}

    created = True
    if existing is not None:
        if (given and not proposed and list(existing["options"]) != options) or existing["subject"] != subject:
            raise StoreError(
                f"question {question_id!r} exists with subject {existing['subject']!r} and options "
                f"{list(existing['options'])}: give another id (--id) or the same options")
        if existing["status"] != "active":
            raise StoreError(f"question {question_id!r} is {existing['status']}: give another id (--id)")
        record.update(kind=existing["kind"], text=existing["text"], options=list(existing["options"]))
        created = False
    else:
        memory.ingest([record])
    question = {k: record[k] for k in ("id", "subject", "kind", "text", "shape", "options")}

    if reader is None and use_env:
        reader = reader_from_env()
    if reader is None:
        hits = search.search_messages(store, terms, subject=subject, limit=limit, include_assistant=False)
        return AskResult(question=question, created=created, terms=terms, hits=hits,
                         belief=memory.belief(question_id, at), hint=NO_READER_HINT.format(question=question_id))
    result = read_question(memory, question_id, reader, terms=terms, limit=limit, progress=progress)
    result.created = created
    result.belief = memory.belief(question_id, at)
    return result


def _existing(store, question_id: str) -> dict[str, Any] | None:
    try:
        return store.question(question_id)
    except StoreError:
        return None


def proposed_options(options: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The options of a question made from proposed ones, and the record's extra fields: a yes/no
    question is closed; any other is open (:func:`open_question_fields`), taking the proposed values
    as they are (its ``unlisted`` remainder stands for every value not named, so no "something
    else" option is needed; it may start with none)."""
    options = list(dict.fromkeys(o for o in options if o and o != UNLISTED))
    if sorted(options) == ["no", "yes"]:
        return options, {}
    return options, open_question_fields()


def read_question(
    memory: Memory,
    question_id: str,
    reader,
    *,
    terms: list[str] | None = None,
    limit: int = DEFAULT_LIMIT,
    progress: Callable[[int, int], None] | None = None,
) -> AskResult:
    """Have ``reader`` read the kept messages that bear on an existing question; ingest the readings.

    Messages already read for the question are skipped. Used by :func:`ask` and by
    `doxa replay --read` for questions no reading carried over to.
    """
    store = memory.store
    q = store.question(question_id)
    subject_name = None
    if q["subject"]:
        subject_name = next((s["name"] for s in store.subjects() if s["id"] == q["subject"]), q["subject"])
    terms = terms if terms is not None else question_terms(memory, q["text"], q["subject"])
    all_hits = search.search_messages(store, terms, subject=q["subject"], limit=limit, include_assistant=False)
    hits = search.search_messages(store, terms, subject=q["subject"], limit=limit, include_assistant=False,
                                  exclude_read_for=question_id)
    options = list(q["options"])
    records: list[dict[str, Any]] = []
    result = AskResult(question={k: q[k] for k in ("id", "subject", "kind", "text", "shape", "options")},
                       created=False, terms=terms, hits=hits, already_read=len(all_hits) - len(hits),
                       reader=getattr(reader, "name", type(reader).__name__))
    try:
        for done, hit in enumerate(hits, start=1):
            # an open question is read with its "not listed" choice (docs/readers.md)
            reading = (reader.read(hit.text, q["text"], options, subject=subject_name, open=True) if q["open"]
                       else reader.read(hit.text, q["text"], options, subject=subject_name))
            records.append(reading.to_record(hit.message, question_id))
            if progress:
                progress(done, len(hits))
    except ReaderError as err:
        if records:
            memory.ingest(records)
        raise AskError(f"the reader failed after {len(records)} of {len(hits)} message(s) "
                       f"({len(records)} reading(s) kept): {err}") from err
    if records:
        memory.ingest(records)
    result.readings = records
    return result


__all__ = ["ask", "read_question", "AskResult", "AskError", "NO_READER_HINT", "NO_MODEL_FOR_OPTIONS",
           "open_question_fields", "proposed_options", "question_terms"]
