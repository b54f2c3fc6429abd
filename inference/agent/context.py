"""What a task needs to know: `doxa context "book Maya's birthday dinner"` (docs/design.md §5).

Beliefs form a graph: subjects → their questions; subjects → related subjects. For a
task, :func:`context`

1. finds the subjects it names, by name, id or alias, as whole words in any case and
   with any punctuation ("Maya's", "MAYA," and the alias "my sister" all name Maya);
2. steps one hop out along relations, either direction (Sam, Maya's partner, who will
   be at the dinner: no search on "Maya" finds that Sam is vegetarian);
3. ranks those subjects' questions by relevance to the task::

       relevance = (FLOOR · (2 if score > 0 else 1) + score / max score) · HOP_DECAY ** hop
       score(d)  = Σ_q w_q · idf(q) · (S(tf_own(q, d)) + EVIDENCE_WEIGHT · S(tf_ev(q, d)))

   over the task's words (without the subjects' own names, which every candidate shares,
   and without stop words; ``w_q = 1``) and the question words the curated task lexicon
   adds for them ("dinner" → diet, allergies, restaurant…; ``w_q = LEXICON_WEIGHT``).
   ``tf_own`` is the word's BM25-normalised frequency in the question's text and kind;
   ``tf_ev`` the same in the evidence read for it, weighted by how related the reader
   found each message (data/search.py :func:`~doxa.data.question_ranking.rank_questions`). So
   "dinner" reaches "What does Maya eat?" through the note "Maya is vegetarian, remember
   for dinners." read for it. A question matching the task comes first, a question of a
   named subject before the same of a related one, and a related subject's question that
   matches the task at all (even through the lexicon alone) before a named subject's
   question that matches nothing: a match lifts its question by one more FLOOR, which one
   hop's halving cannot undo.

   A question of a subject the task names that also matches one of the task's own words
   (in its text or its evidence, not only through the lexicon) is lifted by
   ``NAMED_MATCH_LIFT``, above every other question. "text my flatmate about the lease"
   names Tom and his lease: his question about the lease answers the task; Priya's phone
   number, one hop out and reached only through the lexicon's guess "text → phone", is
   context, however well that guess scores;
4. returns every answer of each with its probability, an ``ask`` flag where the top
   answer is below the act threshold (an uncertain answer is shown as uncertain, not
   hidden), and a one-line reason;
5. returns the instructions for the same subjects beside the beliefs, never merged with
   them. Where the current belief cuts against the answer an instruction rests on (its
   top answer is another), the instruction still stands and a question for the user is
   attached: "… Keep following “Avoid loud restaurants for Maya”?".

Reads are logged like any other read (see :class:`doxa.inference.read.memory.Memory`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from doxa.data import search
from doxa.data import question_ranking
from doxa.data import subject_match
from doxa.data.text import words

from doxa.inference.read.uncertain import instruction_contradicted
from doxa.data.times import as_moment, utc_now
from doxa.inference.read.memory import Memory
from doxa.inference.read.results import Belief

#: Weight of a question that matches no word of the task, relative to the best match (a
#: question that matches anything gets twice that, plus its share of the best score).
FLOOR = 0.1
#: Each hop along a relation halves a question's relevance.
HOP_DECAY = 0.5
#: Added to the relevance of a named subject's question that matches a word of the task
#: itself: the most any other question reaches (a named subject's best match, 2·FLOOR + 1),
#: so each such question ranks above every question without the lift.
NAMED_MATCH_LIFT = 2 * FLOOR + 1.0
DEFAULT_LIMIT = 20


@dataclass
class ContextQuestion:
    question: str
    subject: str | None
    subject_name: str | None
    text: str
    kind: str
    hop: int | None  # 0: named in the task; 1: one relation away; None: found by words alone
    via: str | None  # "Sam is Maya's partner"
    relevance: float
    bm25: float
    matched: list[str]  # index terms of the question's text and kind the task's words matched
    answers: dict[str, float]
    top: str | None
    p_top: float
    ask: bool
    n_evidence: int
    reason: str
    #: task word → the message read for this question that matched it most (``message``, ``text``)
    evidence: dict[str, dict[str, str]] = field(default_factory=dict)
    lexicon: list[str] = field(default_factory=list)  # "dinner → diet": what the task lexicon added


@dataclass
class ContextInstruction:
    id: str
    subject: str | None
    text: str
    given_at: str
    rests_on: dict[str, str] | None
    stands: bool = True  # evidence never outranks the user
    conflict: dict[str, Any] | None = None
    note: str | None = None


@dataclass
class Context:
    task: str
    at: str
    act_at: float
    subjects: list[dict[str, Any]]
    questions: list[ContextQuestion]
    instructions: list[ContextInstruction]
    terms: list[str]
    note: str | None = None
    params_version: int | None = None
    truncated: int = 0  # questions left out by the limit
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def conflicts(self) -> list[ContextInstruction]:
        return [i for i in self.instructions if i.conflict is not None]


def _relation_phrase(row: dict[str, Any]) -> str:
    if row["forward"]:
        return f"{row['name']} is {row['via_name']}'s {row['kind']}"
    return f"{row['via_name']} is {row['name']}'s {row['kind']}"


#: A quoted message is cut to this many characters in a reason.
QUOTE_CHARS = 60


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return f"“{text}”" if len(text) <= QUOTE_CHARS else f"“{text[:QUOTE_CHARS - 1].rstrip()}…”"


def _matches(q: ContextQuestion) -> str:
    """Why the question matched: its own words, then its evidence (quoted), then the task lexicon."""
    why = []
    if q.matched:
        why.append(f"{', '.join(q.matched)} in its text")
    by_message: dict[str, list[str]] = {}  # one quote per message, after the words it matched
    for term, hit in q.evidence.items():
        by_message.setdefault(hit["message"], []).append(term)
    texts = {hit["message"]: hit["text"] for hit in q.evidence.values()}
    why += [f"{', '.join(terms)} in its evidence ({_quote(texts[m])})" for m, terms in by_message.items()]
    if q.lexicon:
        why.append(f"{', '.join(q.lexicon)} by the task lexicon")
    return ("matches " + " and ".join(why)) if why else "no word of the task matches"


def _reason(q: ContextQuestion, act_at: float) -> str:
    who = q.subject_name or q.subject or "no subject"
    if q.hop == 0:
        parts = [f"{who} is named in the task"]
    elif q.hop == 1:
        parts = [f"one hop out: {q.via}"]
    else:
        parts = ["no subject named; found by the task's words"]
    parts.append(_matches(q))
    if q.top is None:
        parts.append("every answer is rejected: ask")
    elif q.n_evidence == 0:
        parts.append(f"no evidence yet ({q.top} {q.p_top:.2f} is the prior): ask")
    elif q.ask:
        parts.append(f"{q.top} only {q.p_top:.2f} (< {act_at:.2f}): ask")
    else:
        parts.append(f"{q.top} {q.p_top:.2f}: act")
    return "; ".join(parts)


def context(
    memory: Memory,
    task: str,
    *,
    at: datetime | str | None = None,
    act_at: float | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> Context:
    """Everything ``task`` needs from memory: ranked beliefs, instructions, conflicts.

    ``at``: None (now), an ISO 8601 string or a datetime, as for :meth:`Memory.belief`."""
    with memory.store.reading():  # one read-only hold of the store for the whole context
        return _context(memory, task, at=at, act_at=act_at, limit=limit)


def _context(memory: Memory, task: str, *, at: datetime | None, act_at: float | None,
             limit: int | None) -> Context:
    store = memory.store
    act_at = memory.act_at if act_at is None else act_at
    at = as_moment(at) or utc_now()
    named = subject_match.match_subjects(store, task)
    related: list[dict[str, Any]] = []
    seen = {s["id"] for s in named}
    for row in subject_match.neighbours(store, sorted(seen)):
        if row["id"] not in seen:
            seen.add(row["id"])
            related.append(row)
    subjects = ([{"id": s["id"], "name": s["name"], "label": s["label"], "hop": 0, "via": None} for s in named]
                + [{"id": r["id"], "name": r["name"], "label": None, "hop": 1, "via": _relation_phrase(r)}
                   for r in related])
    by_subject = {s["id"]: s for s in subjects}
    # the words that named a subject say who, not what: every candidate shares them
    names = {w for s in named for w in words(s["label"])}
    terms = [t for t in search.content_terms(words(task), drop=names) if len(t) > 1]

    instructions = store.instructions(list(by_subject)) if by_subject else []
    rests = [i["rests_on_question"] for i in instructions if i["rests_on_question"]]
    statuses = _statuses(store, rests)
    note = None
    loaded = None
    if subjects:
        # one load serves both the ranking (the words of each question's evidence) and the beliefs
        extra_ids = [q for q in dict.fromkeys(rests) if statuses.get(q) == "active"]
        all_beliefs, loaded = memory.scored(extra_ids, at, subjects=list(by_subject), act_at=act_at,
                                            with_messages=True)
        ranked = question_ranking.rank_questions(store, terms, subject_ids=list(by_subject), at=at, loaded=loaded)
    else:
        note = ("no subject named in the task: give a subject's name or alias (`doxa beliefs` lists "
                "questions); showing questions that match the task's words")
        ranked = [r for r in question_ranking.rank_questions(store, terms, at=at) if r["score"] > 0] if terms else []
    best = max((r["score"] for r in ranked), default=0.0)
    scored = []
    for r in ranked:
        subject = by_subject.get(r["subject"])
        hop = subject["hop"] if subject else None
        rel = (r["score"] / best) if best > 0 else 0.0
        relevance = (FLOOR * (2.0 if r["score"] > 0 else 1.0) + rel) * (HOP_DECAY ** (hop or 0))
        if hop == 0 and (r["matched"] or r["evidence"]):
            relevance += NAMED_MATCH_LIFT
        scored.append((relevance, hop if hop is not None else 9, r, subject))
    scored.sort(key=lambda x: (-x[0], x[1], x[2]["id"]))
    truncated = 0
    if limit is not None and len(scored) > limit:
        truncated = len(scored) - limit
        scored = scored[:limit]

    wanted = [r["id"] for _, _, r, _ in scored]
    if loaded is None:
        extra_ids = [q for q in dict.fromkeys(rests) if q not in wanted and statuses.get(q) == "active"]
        found = memory.beliefs(at=at, question_ids=wanted + extra_ids, act_at=act_at) if wanted or extra_ids else []
    else:  # log the reads the context answers with: the questions it returns and what instructions rest on
        position = {qid: i for i, qid in enumerate(all_beliefs.question_ids.tolist())}
        found = [all_beliefs[position[q]] for q in dict.fromkeys(wanted + extra_ids) if q in position]
        memory.log(at, found)
    beliefs: dict[str, Belief] = {b.question: b for b in found}

    questions = []
    for relevance, _, r, subject in scored:
        b = beliefs.get(r["id"])
        if b is None:
            continue
        q = ContextQuestion(
            question=r["id"], subject=r["subject"], subject_name=subject["name"] if subject else None,
            text=r["text"], kind=r["kind"], hop=subject["hop"] if subject else None,
            via=subject["via"] if subject else None, relevance=round(relevance, 6), bm25=round(r["score"], 6),
            matched=r["matched"], answers=b.answers, top=b.top, p_top=b.p_top, ask=not b.act,
            n_evidence=b.n_evidence, reason="", evidence=r["evidence"],
            lexicon=[f"{term} → {word}" for term, word in r["lexicon"]])
        q.reason = _reason(q, act_at)
        questions.append(q)

    out_instructions = [_instruction(memory, i, beliefs, statuses, at) for i in instructions]
    version = next(iter(beliefs.values())).params_version if beliefs else None
    return Context(task=task, at=at.isoformat(), act_at=act_at, subjects=subjects, questions=questions,
                   instructions=out_instructions, terms=terms, note=note, params_version=version,
                   truncated=truncated)


def _statuses(store, question_ids: list[str]) -> dict[str, str]:
    if not question_ids:
        return {}
    rows = store.execute("SELECT id, status FROM questions WHERE list_contains(?, id)",
                         [sorted(set(question_ids))]).fetchall()
    return dict(rows)


def _instruction(memory: Memory, row: dict[str, Any], beliefs: dict[str, Belief], statuses: dict[str, str],
                 at: datetime) -> ContextInstruction:
    rests_q, rests_a = row["rests_on_question"], row["rests_on_answer"]
    out = ContextInstruction(
        id=row["id"], subject=row["subject"], text=row["text"], given_at=row["given_at"].isoformat(),
        rests_on={"question": rests_q, "answer": rests_a} if rests_q else None)
    if not rests_q:
        return out
    status = statuses.get(rests_q)
    if status != "active":
        out.note = (f"rests on {rests_q!r}, which is {status or 'unknown'}: say which current question it "
                    "rests on, so doxa can tell you when the evidence turns against it")
        return out
    belief = beliefs.get(rests_q)
    if belief is None or not instruction_contradicted(belief.top, rests_a):
        return out
    evidence = _strongest_against(memory, rests_q, at)
    quote = ""
    if evidence:
        quote = f", e.g. “{evidence['text']}” ({evidence['source']}, {evidence['sent_at'][:10]})"
    ask_user = (f"{belief.text} The evidence now says {belief.top} ({belief.p_top:.2f}), not {rests_a}{quote}. "
                f"Keep following “{row['text']}”?")
    out.conflict = {
        "question": rests_q, "rests_on_answer": rests_a, "answers": belief.answers, "top": belief.top,
        "p_top": belief.p_top, "p_rests_on": belief.answers.get(rests_a, 0.0), "evidence": evidence,
        "ask_user": ask_user,
    }
    return out


def _strongest_against(memory: Memory, question_id: str, at: datetime) -> dict[str, Any] | None:
    """The counted message pushing hardest, as of ``at``, toward the current top answer."""
    terms = [t for t in memory.explain(question_id, at).terms
             if t.ignored is None and t.llr_top is not None and t.llr_top > 0]
    if not terms:
        return None
    best = max(terms, key=lambda t: t.llr_top * (t.weight_left or 0.0))
    return {"message": best.message, "text": best.text, "source": best.source, "sent_at": best.sent_at}


__all__ = ["context", "Context", "ContextQuestion", "ContextInstruction", "FLOOR", "HOP_DECAY", "NAMED_MATCH_LIFT"]
