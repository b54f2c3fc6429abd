"""A question nobody prepared: `doxa ask "Does Maya have allergies?" --subject maya --options yes,no`.

Because every message is kept, a new question can be answered from old evidence then
and there (docs/design.md §5):

1. the question is created as an organizer record (text, subject, kind, options: never
   a probability); asking again with the same words reuses it;
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
from doxa.data.text import words

from doxa.inference.read.memory import Belief, Memory

from .readers import ReaderError, reader_from_env

DEFAULT_LIMIT = 20

NO_READER_HINT = (
    "No reader is configured, so nothing was read. Point doxa at an OpenAI-compatible server that "
    "returns logprobs: set DOXA_READER_URL (e.g. http://127.0.0.1:8080/v1 for llama.cpp's llama-server), "
    "and DOXA_READER_MODEL / DOXA_READER_KEY where the server needs them, then ask again "
    "(docs/readers.md). Or ingest `reading` records for {question} made by any other reader with "
    "`doxa ingest FILE`."
)


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


def _question_terms(memory: Memory, text: str, subject: str | None) -> list[str]:
    names = subject_match.subject_label_terms(memory.store, [subject]) if subject else set()
    terms = [t for t in search.content_terms(words(text), drop=names) if len(t) > 1]
    return terms or sorted(names)


def ask(
    memory: Memory,
    question_text: str,
    subject: str,
    options: list[str],
    *,
    reader=None,
    kind: str | None = None,
    question_id: str | None = None,
    at: datetime | None = None,
    limit: int = DEFAULT_LIMIT,
    use_env: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> AskResult:
    """Create (or reuse) the question, read the kept evidence for it, and return the belief.

    ``reader``: a :class:`~doxa.inference.agent.readers.Reader`; default ``reader_from_env()``
    when ``use_env``. ``kind`` and ``question_id`` default to words of the question
    ("Does Maya have allergies?" → kind ``allergies``, id ``maya.allergies``).
    ``progress(done, total)`` is called after each message read.
    """
    store = memory.store
    known = {s["id"]: s for s in store.subjects()}
    if subject not in known:
        hint = f": known subjects are {', '.join(sorted(known)[:10])}" if known else ": add a subject record first"
        raise StoreError(f"no subject {subject!r}{hint}")
    options = [o.strip() for o in options if o.strip()]
    if len(options) < 2 or len(set(options)) != len(options):
        raise StoreError(f"--options needs at least two distinct answers, comma-separated (got {options}): "
                         "e.g. --options yes,no")
    question_text = " ".join(question_text.split())
    if not question_text:
        raise StoreError("the question is empty: give it in words, e.g. \"Does Maya have allergies?\"")
    terms = _question_terms(memory, question_text, subject)
    kind = kind or _slug([t for t in terms if t not in search.STOPWORDS]) or "custom"
    question_id = question_id or f"{subject}.{kind}"
    shape = "yes_no" if sorted(options) == ["no", "yes"] else "choice"
    record = {"type": "question", "id": question_id, "subject": subject, "kind": kind,
              "text": question_text, "shape": shape, "options": options}

    created = True
    try:
        existing = store.question(question_id)
    except StoreError:
        existing = None
    if existing is not None:
        if list(existing["options"]) != options or existing["subject"] != subject:
            raise StoreError(
                f"question {question_id!r} exists with subject {existing['subject']!r} and options "
                f"{list(existing['options'])}: give another id (--id) or the same options")
        if existing["status"] != "active":
            raise StoreError(f"question {question_id!r} is {existing['status']}: give another id (--id)")
        record.update(kind=existing["kind"], text=existing["text"])
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
    terms = terms if terms is not None else _question_terms(memory, q["text"], q["subject"])
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
            reading = reader.read(hit.text, q["text"], options, subject=subject_name)
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


__all__ = ["ask", "read_question", "AskResult", "AskError", "NO_READER_HINT"]
