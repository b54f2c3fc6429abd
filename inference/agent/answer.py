"""A question in words to an answer with its probability: `doxa answer "Where does Maya live?"`.

1. **Whom it is about.** ``--subject`` when given; else the subjects the words name
   (:func:`doxa.data.subject_match.match_subjects`: a name, an alias, "my sister"); else, when
   the words are in the first person ("I", "my", "me"), the user: the subject :data:`USER_ID`
   (or one with the alias ``me``), made the first time a question about the user is created
   (:data:`USER_SUBJECT`).
2. **Which tracked question it asks.** The subjects' questions are ranked by the question's words
   over their texts, kinds and evidence (:func:`doxa.data.question_ranking.rank_questions`, what
   `doxa context` ranks with). A clear best match is taken. When the next ones score within
   :data:`MARGIN` of it, or a lone best shares fewer than :data:`MIN_SHARED_WORDS` of the
   question's words (a subject's only question shares a word with nearly anything asked about
   the subject), the organizer's model picks among them (or none) — the only times a model is
   asked about a question that exists; with no model the best match is taken and the result
   says what was skipped.
3. **Otherwise a new question**, made as `doxa ask` makes one (:func:`doxa.inference.agent.ask.ask`):
   the model proposes its options from the kept messages that bear on it (the values they name),
   the question is open where the store has open questions, and the reader reads the messages.
   A question found is read too: the kept messages not yet read for it, when a reader is
   configured.
4. **Which time.** A question about an earlier value ("what was my previous job?", "where did I
   live before?", "initially") is answered from the belief's history
   (:mod:`doxa.inference.read.history`): the words decide (:func:`time_asked`). "previous" is the
   top answer just before its last change; "first" the top answer at the first evidence. The
   result says which time its answer is for (``at``, ``when``).
5. **The answer**: the top answer and its probability, ``act`` when it reaches the act threshold,
   else ``abstain``: "I don't know", with what would settle it; the alternatives; the evidence
   (each counted message with its date, source and text, as `doxa explain` gives them).

Nothing here writes a probability: questions are organizer records, readings the reader's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from doxa.data import question_ranking, search, subject_match
from doxa.data.errors import StoreError
from doxa.data.evidence import UNLISTED
from doxa.data.text import words
from doxa.data.times import utc_now

from doxa.inference.read.memory import Memory

from . import ask as asking
from .question_model import QuestionModel, question_model_from_env
from .readers import reader_from_env

#: The subject that stands for the user when a store has none: made the first time `doxa answer`
#: creates a question about the user. A store names its own user subject by giving it the alias "me".
USER_ID = "me"
USER_SUBJECT = {"type": "subject", "id": USER_ID, "name": "Me", "aliases": ["I", "my", "myself", "the user"]}
#: Words that make a question about the user.
FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself"})
#: Words that ask for the value before the latest change, and for the first value (``used to``: two words).
PREVIOUS_WORDS = frozenset({"previous", "previously", "before", "formerly", "former", "earlier", "prior", "used to"})
FIRST_WORDS = frozenset({"first", "initially", "originally", "original"})
#: Word pairs where a time word names a thing, not a time ("my first name" is the name now).
NOT_A_TIME = frozenset({"first name", "first names", "before tax", "prior art"})
#: A second question scoring at least (1 - MARGIN) of the best is too close to tell apart by words.
MARGIN = 0.25
#: At most this many close questions are shown to the model.
MAX_CHOICES = 5
#: A lone best match whose text and kind share fewer than this share of the question's words is a guess:
#: a subject's only question shares a word with nearly anything asked about the subject.
MIN_SHARED_WORDS = 0.5

NO_MODEL = ("configure one with DOXA_ORGANIZER_URL or DOXA_READER_URL, docs/readers.md; or track the question "
            "yourself: `doxa ask QUESTION --subject S --options A,B`")


@dataclass
class AnswerResult:
    """What `doxa answer --json` prints (docs/formats.md)."""

    asked: str
    question: str | None
    question_text: str | None
    subject: str | None
    answer: str | None
    p: float
    act: bool
    abstain: bool
    #: the answer in a sentence: the value, or "I don't know" and why
    message: str
    #: what would settle it, when abstaining
    settle: str | None
    alternatives: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    created: bool
    #: the time the answer is for: the time asked, or the earlier time a question about an earlier value asks
    at: str
    asked_at: str
    #: "now", "previous" (the value before the latest change) or "first" (the first value)
    when: str
    #: how the question was found: "search", "model" (which of close matches), "created", or None (none)
    found_by: str | None
    #: where the top answer changed, for a question about an earlier value
    changes: list[dict[str, Any]] = field(default_factory=list)
    readings: int = 0
    #: what was not done, and why (no model, no reader)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def time_asked(text: str) -> str:
    """"previous", "first" or "now": which time a question asks about, by its words."""
    tokens = words(text)
    pairs = {" ".join(p) for p in zip(tokens, tokens[1:])}
    named = {w for pair in pairs & NOT_A_TIME for w in pair.split()}
    tokens = [t for t in tokens if t not in named]
    if FIRST_WORDS & set(tokens):
        return "first"
    if PREVIOUS_WORDS & (set(tokens) | pairs):
        return "previous"
    return "now"


def user_subject(store) -> str | None:
    """The subject that is the user: :data:`USER_ID`, else the first with the alias "me"; None when none is."""
    subjects = store.subjects()
    if any(s["id"] == USER_ID for s in subjects):
        return USER_ID
    return next((s["id"] for s in subjects if "me" in {a.strip().lower() for a in s["aliases"]}), None)


def resolve_subjects(store, text: str, subject: str | None) -> tuple[list[str], bool]:
    """(the subjects the question is about, most specific first; whether it is about the user)."""
    known = {s["id"] for s in store.subjects()}
    user = user_subject(store)
    if subject is not None:
        if subject not in known:
            hint = f": known subjects are {', '.join(sorted(known)[:10])}" if known else ""
            raise StoreError(f"no subject {subject!r}{hint}")
        return [subject], subject == user
    named = [m for m in subject_match.match_subjects(store, text) if m["id"] != user]
    if named:  # the longest label is the most specific: "Maya's partner" names Sam, not Maya
        named.sort(key=lambda m: (-len(words(m["label"])), m["id"]))
        return [m["id"] for m in named], False
    if FIRST_PERSON & set(words(text)):
        return ([user] if user else []), True
    return [], False


def answer(
    memory: Memory,
    question: str,
    *,
    subject: str | None = None,
    at: datetime | None = None,
    act_at: float | None = None,
    reader=None,
    model: QuestionModel | None = None,
    use_env: bool = True,
    limit: int = asking.DEFAULT_LIMIT,
) -> AnswerResult:
    """Answer ``question`` (in words) from memory: see the module docstring.

    ``reader`` and ``model`` default to those configured in the environment when ``use_env``
    (``reader_from_env()``, ``question_model_from_env()``); ``at`` to now.
    """
    store = memory.store
    text = " ".join(question.split())
    if not text:
        raise StoreError("the question is empty: give it in words, e.g. \"Where does Maya live?\"")
    asked_at = at or utc_now()
    act_at = memory.act_at if act_at is None else act_at
    when = time_asked(text)
    subjects, about_user = resolve_subjects(store, text, subject)
    names = subject_match.subject_label_terms(store, subjects) if subjects else set()
    drop = names | FIRST_PERSON | PREVIOUS_WORDS | FIRST_WORDS | {"used", "current", "currently", "now"}
    terms = [t for t in search.content_terms(words(text), drop=drop) if len(t) > 1 and t not in drop]
    if model is None and use_env:
        model = question_model_from_env()
    if reader is None and use_env:
        reader = reader_from_env()
    skipped: list[str] = []

    found, found_by = _find_question(store, text, terms, subjects, asked_at, model, skipped)
    created, readings = False, 0
    if found is None:
        if model is None:
            skipped.append("creating a question for it: no model is configured to propose its options "
                           "(DOXA_ORGANIZER_URL or DOXA_READER_URL, docs/readers.md)")
            return _unanswered(text, subjects, asked_at, when, skipped,
                               "I don't know: no tracked question asks this" + (
                                   f" about {subjects[0]}" if subjects else ""))
        if not subjects:
            if about_user:
                memory.ingest([USER_SUBJECT])
                subjects = [USER_ID]
            else:
                raise StoreError("the question names no known subject and is not about the user (\"I\", \"my\"): "
                                 "give --subject S (`doxa beliefs` lists subjects' questions)")
        made = asking.ask(memory, text, subjects[0], None, reader=reader, model=model, at=asked_at, limit=limit,
                          use_env=False, new=True)
        found, found_by, created, readings = made.question["id"], "created", made.created, len(made.readings)
        if made.hint:
            skipped.append(f"reading the kept messages: no reader is configured (DOXA_READER_URL, docs/readers.md)")
    elif reader is not None:
        readings = len(asking.read_question(memory, found, reader, limit=limit).readings)
    else:
        q = store.question(found)
        unread = search.search_messages(store, asking.question_terms(memory, q["text"], q["subject"]),
                                        subject=q["subject"], limit=limit, include_assistant=False,
                                        exclude_read_for=found)
        if unread:
            skipped.append(f"reading {len(unread)} kept message(s) not yet read for {found}: no reader is configured "
                           "(DOXA_READER_URL, docs/readers.md)")
    return _answered(memory, text, found, found_by, created, readings, asked_at, act_at, when, skipped)


def _find_question(store, text: str, terms: list[str], subjects: list[str], at: datetime,
                   model: QuestionModel | None, skipped: list[str]) -> tuple[str | None, str | None]:
    """(the tracked question ``text`` asks, how it was found), or (None, None)."""
    if not terms:
        return None, None
    ranked = [r for r in question_ranking.rank_questions(store, terms, subject_ids=subjects or None, at=at)
              if r["score"] > 0]
    if not ranked:
        return None, None
    best = ranked[0]
    close = [r for r in ranked[1:MAX_CHOICES] if r["score"] >= (1.0 - MARGIN) * best["score"]]
    if not close and (model is None or _shared_words(best, terms) >= MIN_SHARED_WORDS):
        return best["id"], "search"
    if model is None:
        skipped.append(f"telling apart {len(close) + 1} questions that match about as well "
                       f"({', '.join(r['id'] for r in [best, *close])}): no model is configured; took the best, "
                       f"{best['id']} ({NO_MODEL})")
        return best["id"], "search"
    candidates = [{"id": r["id"], "text": r["text"], "options": list(store.question(r["id"])["options"])}
                  for r in [best, *close]]
    chosen = model.choose(text, candidates)
    return (chosen, "model") if chosen is not None else (None, None)


def _shared_words(ranked: dict[str, Any], terms: list[str]) -> float:
    """The share of the question's search terms found among a ranked question's text and kind words
    (a weak lone match goes to the model, which may say it asks something else)."""
    own = set(words(f"{ranked.get('text') or ''} {ranked.get('kind') or ''}".replace("_", " ")))
    return sum(t in own for t in terms) / len(terms)


def _unanswered(text: str, subjects: list[str], asked_at: datetime, when: str, skipped: list[str],
                message: str) -> AnswerResult:
    return AnswerResult(asked=text, question=None, question_text=None, subject=subjects[0] if subjects else None,
                        answer=None, p=0.0, act=False, abstain=True, message=message + ".",
                        settle="a tracked question that asks it: `doxa ask QUESTION --subject S --options A,B`, "
                               "or a model to create one (DOXA_ORGANIZER_URL or DOXA_READER_URL), then ask again",
                        alternatives=[], evidence=[], created=False, at=asked_at.isoformat(),
                        asked_at=asked_at.isoformat(), when=when, found_by=None, skipped=skipped)


def _answered(memory: Memory, text: str, question_id: str, found_by: str | None, created: bool, readings: int,
              asked_at: datetime, act_at: float, when: str, skipped: list[str]) -> AnswerResult:
    moment, changes, no_change = asked_at, [], None
    if when != "now":
        past = memory.history(question_id, end=asked_at, act_at=act_at)
        changes = [dict(c) for c in past.changes]
        points = past.points
        if when == "first" and points:
            moment = datetime.fromisoformat(points[0].at)
        elif when == "previous" and changes:
            index = [p.at for p in points].index(changes[-1]["at"])
            moment = datetime.fromisoformat(points[index - 1].at)
        elif when == "previous":
            no_change = points[-1].top if points else None
    belief = memory.belief(question_id, moment, act_at=act_at)
    why = memory.explain(question_id, moment)
    evidence = [{"message": t.message, "sent_at": t.sent_at, "source": t.source, "source_path": t.source_path,
                 "text": t.text, "stated": max(t.reader_probs, key=t.reader_probs.get) if t.reader_probs else None,
                 "llr_top": t.llr_top, "weight_left": t.weight_left}
                for t in why.terms if t.ignored is None]
    evidence += [{"settlement": s["answer"], "sent_at": _iso(s["settled_at"]), "source": s["by"], "how": s["how"]}
                 for s in why.settlements if s["settled_at"] <= moment]
    alternatives = [{"answer": o, "p": p} for o, p in sorted(belief.answers.items(), key=lambda kv: -kv[1])
                    if o != belief.top]
    top, p = belief.top, belief.p_top
    settle = None
    if no_change is not None or top is None or top == UNLISTED:
        act, top_shown = False, None
        message = (f"I don't know: no change of the answer is recorded up to {asked_at:%Y-%m-%d}, so nothing "
                   f"earlier than the current answer ({no_change}) is known." if no_change is not None
                   else "I don't know: every answer is ruled out." if top is None
                   else f"I don't know: the evidence points to a value not named yet ({p:.2f}).")
    else:
        act, top_shown = bool(belief.act), top
        period = "" if when == "now" else f" (as of {moment:%Y-%m-%d}, before the latest change)" \
            if when == "previous" else f" (at first, {moment:%Y-%m-%d})"
        message = (f"{top}{period}: {p:.2f}." if act else
                   f"I don't know: the best guess is {top}{period} at {p:.2f}, below the {act_at:.2f} needed to act.")
    if not act:
        settle = (f"ask the user “{belief.text}” and record the answer with `doxa correct {question_id} ANSWER`, or "
                  "a message from a trusted source that names it")
    return AnswerResult(asked=text, question=question_id, question_text=belief.text, subject=belief.subject,
                        answer=top_shown, p=p if top_shown is not None else 0.0, act=act, abstain=not act,
                        message=message, settle=settle, alternatives=alternatives, evidence=evidence,
                        created=created, at=moment.isoformat(), asked_at=asked_at.isoformat(), when=when,
                        found_by=found_by, changes=changes, readings=readings, skipped=skipped)


def _iso(value) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


__all__ = ["answer", "AnswerResult", "time_asked", "user_subject", "resolve_subjects", "USER_ID", "USER_SUBJECT",
           "MARGIN"]
