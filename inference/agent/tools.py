"""The verbs an agent calls, one function each, returning the JSON both front ends give.

`doxa VERB --json` prints exactly what the function returns (cli/), and the MCP server
(:mod:`doxa.inference.agent.mcp_server`) returns the same value as the tool's result, so the
two can never drift apart. Every function takes an open :class:`~doxa.inference.read.memory.Memory`
and plain arguments (times as ISO 8601 strings or datetimes) and returns plain JSON
values: dicts, lists, strings, numbers, booleans and None. Errors are
:class:`~doxa.data.errors.StoreError` (or its subclasses) whose text says what to change;
both front ends show that text as it is.

Probabilities in every result are computed when the function runs, from the evidence
and the latest published parameters; none is ever stored as a belief.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from doxa.data.errors import StoreError

from doxa.inference.read.memory import Memory


def _at(at: datetime | str | None) -> datetime | None:
    if at is None or isinstance(at, datetime):
        return at  # without importing the feedback verbs: a `doxa belief` process pays for each module
    from doxa.inference.read.feedback import moment_of

    return moment_of(at, StoreError)


def belief(mem: Memory, question: str, at: datetime | str | None = None, act_at: float | None = None) -> dict:
    """The probability of every answer to one question, flagged when too uncertain to act on."""
    return mem.belief(question, _at(at), act_at=act_at).to_dict()


def beliefs(mem: Memory, subject: str | None = None, at: datetime | str | None = None, act_at: float | None = None,
            limit: int = 0) -> list[dict]:
    """Every active belief, or one subject's, in question-id order (``limit`` 0: all)."""
    found = mem.beliefs(subject, _at(at), act_at=act_at).to_dicts()
    return found[:limit] if limit else found


def uncertain(mem: Memory, subject: str | None = None, at: datetime | str | None = None,
              act_at: float | None = None, limit: int = 0) -> list[dict]:
    """The beliefs to ask about before acting, most useful first (doxa.inference.read.feedback)."""
    return [u.to_dict() for u in mem.uncertain(subject, _at(at), act_at=act_at, limit=limit or None)]


def explain(mem: Memory, question: str, at: datetime | str | None = None) -> dict:
    """The belief term by term: each message, its source and trust, its weight left after decay."""
    return mem.explain(question, _at(at)).to_dict()


def context(mem: Memory, task: str, at: datetime | str | None = None, act_at: float | None = None,
            limit: int = 20) -> dict:
    """What a task needs to know: subjects named and one hop out, ranked beliefs, instructions, conflicts."""
    from .context import context as build

    return build(mem, task, at=_at(at), act_at=act_at, limit=limit).to_dict()


def search(mem: Memory, words: str, subject: str | None = None, limit: int = 20) -> dict:
    """Full-text search (BM25) over every kept message, best first."""
    from doxa.data import search as text_search

    if subject is not None and subject not in {s["id"] for s in mem.store.subjects()}:
        raise StoreError(f"no subject {subject!r}: `doxa beliefs` lists subjects' questions")
    terms = text_search.tokenize(mem.store, words)
    hits = text_search.search_messages(mem.store, terms, subject=subject, limit=limit)
    return {"words": words, "terms": terms, "hits": [h.to_dict() for h in hits]}


def ask(mem: Memory, question: str, subject: str, options: list[str] | None = None, kind: str | None = None,
        question_id: str | None = None, at: datetime | str | None = None, limit: int = 20,
        progress: Callable[[int, int], None] | None = None) -> dict:
    """A question nobody prepared: create it (options proposed by the organizer's model when none are
    given), read the kept evidence with the configured reader, answer now."""
    from .ask import ask as run

    return run(mem, question, subject, list(options or []), kind=kind, question_id=question_id, at=_at(at),
               limit=limit, progress=progress).to_dict()


def answer(mem: Memory, question: str, subject: str | None = None, at: datetime | str | None = None,
           act_at: float | None = None, limit: int = 20) -> dict:
    """A question in words: the tracked question it asks (found, or created with proposed options), its top
    answer with the probability, act or abstain, the alternatives and the evidence."""
    from .answer import answer as run

    return run(mem, question, subject=subject, at=_at(at), act_at=act_at, limit=limit).to_dict()


def history(mem: Memory, question: str, start: datetime | str | None = None, end: datetime | str | None = None,
            act_at: float | None = None) -> dict:
    """The top answer and its probability after each change of the question's evidence, and where it changed."""
    return mem.history(question, _at(start), _at(end), act_at=act_at).to_dict()


def correct(mem: Memory, question: str, answer: str, at: datetime | str | None = None, by: str = "user") -> dict:
    """The user corrected the assistant: a settlement (how: correction)."""
    return mem.correct(question, answer, at=at, by=by).to_dict()


def approve(mem: Memory, question: str, answer: str | None = None, at: datetime | str | None = None,
            by: str = "user") -> dict:
    """The user approved what was proposed (default: the top answer then), recorded with its probability then."""
    return mem.approve(question, answer, at=at, by=by).to_dict()


def outcome(mem: Memory, question: str, answer: str, how: str, at: datetime | str | None = None,
            by: str = "world") -> dict:
    """The world showed the answer (``how``, in words): a settlement (how: outcome)."""
    return mem.outcome(question, answer, how=how, at=at, by=by).to_dict()


def reject(mem: Memory, question: str, answer: str, at: datetime | str | None = None, by: str = "user") -> dict:
    """The user says this answer is not it: it reads 0 from then on."""
    return mem.reject(question, answer, at=at, by=by).to_dict()


def instruct(mem: Memory, subject: str | None, text: str, at: datetime | str | None = None, by: str = "user",
             rests_on: dict[str, str] | None = None) -> dict:
    """A directive from the user: kept beside beliefs, never merged with them."""
    return mem.instruct(subject, text, at=at, by=by, rests_on=rests_on).to_dict()


def remember(mem: Memory, text: str, source: str, sent_at: datetime | str | None = None, keep: bool = False) -> dict:
    """Keep a raw message as it arrived; the organizer links it to questions, the reader reads it.

    Returns what changed (beliefs before and after) and the model calls made; with no model
    configured the message is kept as pending for `doxa organize` and the result says so.
    """
    from .remember import remember as run

    return run(mem, text, source=source, sent_at=_at(sent_at), keep_on_failure=keep).to_dict()


def forget(mem: Memory, kind: str, id: str, reason: str | None = None, by: str = "user",
           dry_run: bool = False) -> dict:
    """Erase a message, a source or a subject and everything derived from it; the store file is rewritten
    so that its bytes leave the disk (``dry_run``: only what would go). See doxa.data.erasure."""
    return mem.forget(kind, id, reason=reason, by=by, dry_run=dry_run).to_dict()


def parse_rests_on(text: str | None) -> dict[str, str] | None:
    """'QUESTION=ANSWER' → {"question": ..., "answer": ...} (the CLI's --rests-on)."""
    if text is None:
        return None
    question, sep, answer = text.partition("=")
    if not sep or not question.strip() or not answer.strip():
        raise StoreError(f"rests_on {text!r} is not QUESTION=ANSWER: write e.g. maya.likes_loud_places=no")
    return {"question": question.strip(), "answer": answer.strip()}


__all__ = ["belief", "beliefs", "uncertain", "explain", "context", "search", "ask", "answer", "history", "correct", "approve",
           "outcome", "reject", "instruct", "remember", "parse_rests_on"]
