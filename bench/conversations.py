"""doxa on real conversations: LongMemEval questions answered by doxa and by the memories people pick instead.

Not a CI test: with ``--reader model`` it needs a model server (scripts/setup_llm.sh, then
scripts/llm_server.sh, or any OpenAI-compatible endpoint); ``--reader oracle`` needs none.

    python bench/conversations.py --data PATH --url http://127.0.0.1:8765/v1 [--systems doxa,rag,…]
        [--reader model|oracle] [--limit N] [--skip N] [--out DIR] [--json]

``PATH`` is a folder of LongMemEval records (one JSON object per file) or LongMemEval's own
single JSON list (``longmemeval_oracle.json``, ``longmemeval_s.json``). LongMemEval (Wu et al.,
ICLR 2025, MIT) is not part of the repository.

Protocol. For each question a fresh in-memory store (or prompt) gets its haystack, and every
system answers on the same endpoint, at the question's date (or just after the last turn, for
the few questions dated earlier on the day of their last session: :attr:`Record.asked_at`).
``--limit`` takes questions from each category in turn; ``--skip`` leaves out the first ones of
that order. Each answer is appended to ``OUT/results.jsonl`` as it comes, and ``--resume`` goes on
with that file: answers already there are kept (a failed one is asked again), the rest are asked,
and the report covers every answer the folder holds — so a run of hours can be stopped and taken
up again, in another session, with the same settings (refused otherwise; each answer records the
commit it ran on); ``--redo SYSTEMS`` asks those systems' kept answers again (their code
changed). ``--export DEST`` copies a folder's answers without the data's texts (questions, gold
answers, answers), so a run longer than one machine's life is kept in the repository and resumed
from it (``--out DEST --resume``). Without ``--resume`` a folder that already holds answers is
refused, not overwritten:

- ``doxa``: ``remember_conversation`` (organize + read every turn), then ``mem.answer``;
- ``doxa-lazy``: ``remember_conversation(keep_only=True)`` (no model call at ingest), then
  ``mem.answer``, which creates the question, reads the turns search finds and answers;
  ingest cost and question-time cost are reported apart;
- ``doxa-learned``: ``doxa``'s store, read again under the parameters the nightly job fits from
  the *other* questions' settled oracle stores (:class:`OracleLearned`, cross-fitted; the fitted
  kind's change rate and new-value weight given to the kind of the question ``doxa`` tracks):
  what doxa says once it has learned from settled answers. Run beside ``doxa`` it costs no
  model call of its own (the same store, its question already read); alone, it runs the pipeline;
- ``doxa-lazy-learned``: the same for ``doxa-lazy``'s store (beside ``doxa-lazy``, listed after it);
- ``full-context``: every session in the prompt, cut from the oldest end to fit the context
  (``--context-tokens``; a question whose prompt was cut is counted in ``truncated``);
- ``full-user``: every user turn with its session's date, cut the same way;
- ``rag``: the ``--k`` user turns BM25 ranks highest for the question (doxa's own BM25 twin,
  :func:`doxa.data.search.bm25`);
- ``latest-fact``: a mem0-style fact memory: one call per user turn extracts its facts and says
  which stored fact each replaces (ADD / UPDATE: the newest wins), then the answer from the facts;
- ``doxa-oracle-reader``: doxa with no model: the question is tracked as an open question of the
  user, each ``has_answer`` turn is a value of its own, read from the annotation as naming its own
  value (:data:`ORACLE_OWN`), and a turn after another one on an earlier day as reporting a change
  (``changed`` 1: LongMemEval's knowledge updates are updates by construction, so a perfect reader
  would read the later turn as one; docs/design.md §2, reported changes); the answer is the chosen
  turn, right when its text contains the gold answer; questions whose gold no turn contains are
  counted apart (``unscorable``). Earlier-value questions are answered from history by
  ``answer``'s word rule;
- ``doxa-oracle-learned``: the same, read under the parameters the nightly job fits from the
  other questions' answers (:class:`OracleLearned`: cross-fitted, each question's own answer never
  used for it);
- ``latest-oracle``: the newest ``has_answer`` turn wins.

Scores (LoCoMo's normalisation: lowercase, punctuation and the words a/an/the/and removed; no
stemmer): ``accuracy`` — an answerable question is right when the normalised gold answer (or
the gold without a parenthesised remark) is contained in the answer, word for word; an ``_abs``
question is right when the system abstains; ``f1`` — token F1 against the gold (answerable
questions); ``abstain_correct`` — share of ``_abs`` questions abstained on; ``false_abstain`` —
share of answerable questions abstained on; ``misses`` (doxa's systems) — why its top value was
wrong, question by question (:func:`miss_reason`). Confidence (doxa's ``p``; a baseline's probability
of its generated answer, the product of its tokens' probabilities, where the server returns
log-probabilities; ``latest-oracle`` states none): every question counts with the confidence of
the value the system named (0 when it named none) against whether that value is right (never on
``_abs``): ECE, Brier, accuracy at 50/80/100% coverage and AURC
(:mod:`doxa.inference.learn.metrics`), and a risk–coverage plot. Cost: model calls, prompt and
completion tokens (the server's ``usage``), seconds, per question and per user turn.

Goals (:func:`goals`): the issue's bars for doxa against the best other model system on the same
run — knowledge-update accuracy, acc@50% 15 points above acc@100%, the lowest AURC, 2 of 3
``_abs`` abstained on, single-session-user within 3 points, doxa-lazy at least rag's accuracy
with no model call at ingest — each printed as met or missed.

Results: ``--out`` (report.md, results.json, risk_coverage.png); ``--json`` prints one object
whose ``rows`` hold one entry per (system, LongMemEval ``question_type``). Progress on stderr.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import subprocess
import sys
import time
import unicodedata
import zlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from doxa.inference.agent.conversation import ModelCost

MODEL_SYSTEMS = ("doxa", "doxa-lazy", "doxa-learned", "doxa-lazy-learned", "full-context", "full-user", "rag",
                 "latest-fact")
ORACLE_SYSTEMS = ("doxa-oracle-reader", "doxa-oracle-learned", "latest-oracle")
ALL_SYSTEMS = MODEL_SYSTEMS + ORACLE_SYSTEMS
#: The oracle reader's reading of a has_answer turn: its own value with this probability, the rest
#: spread over the other values and "unclear" (an annotation is near certain, not certain).
ORACLE_OWN = 0.9
#: Characters per token when a prompt is fitted to the context: conservative for English with a
#: BPE tokenizer (Qwen's averages about 4), so an estimate rarely overflows the server's window.
CHARS_PER_TOKEN = 3.0
#: Tokens kept free for the instructions around the haystack and the reply.
PROMPT_RESERVE = 220
#: Characters of one user turn shown to the fact extractor (some turns paste whole documents).
TURN_CHARS = 1500
COVERAGES = (0.5, 0.8, 1.0)


# ----------------------------------------------------------------------------- LongMemEval records
@dataclass
class Turn:
    role: str
    content: str
    has_answer: bool
    at: datetime  # the session's date, plus the turn's index in seconds (keeps the order within a session)
    session: str
    index: int


@dataclass
class Record:
    """One LongMemEval question and its haystack."""

    id: str
    category: str
    question: str
    answer: str
    date: datetime
    sessions: list[tuple[str, datetime, list[Turn]]]
    raw: dict[str, Any] = field(repr=False)

    @property
    def abstain(self) -> bool:
        """LongMemEval's ``_abs`` questions: the haystack never states the answer."""
        return self.id.endswith("_abs")

    @property
    def asked_at(self) -> datetime:
        """When the question is asked: its date, or just after the last turn when a session is dated
        later. LongMemEval builds every haystack before its question, but some questions carry an
        earlier time of day than the last session of the same day; asked at that time, the newest
        turns would not have happened yet."""
        last = max((t.at for t in self.turns), default=self.date)
        return max(self.date, last + timedelta(seconds=1))

    @property
    def turns(self) -> list[Turn]:
        return [t for _, _, turns in self.sessions for t in turns]

    @property
    def user_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.role == "user"]


def parse_date(text: str) -> datetime:
    """LongMemEval's ``"2023/06/15 (Thu) 00:49"`` as an aware UTC datetime."""
    day, _, clock = re.sub(r"\s*\([^)]*\)\s*", " ", text).strip().partition(" ")
    return datetime.strptime(f"{day} {clock or '00:00'}", "%Y/%m/%d %H:%M").replace(tzinfo=timezone.utc)


def to_record(raw: dict[str, Any]) -> Record:
    sessions = []
    ids = raw.get("haystack_session_ids") or [f"s{i}" for i in range(len(raw["haystack_sessions"]))]
    for sid, date, turns in zip(ids, raw["haystack_dates"], raw["haystack_sessions"]):
        start = parse_date(date)
        sessions.append((str(sid), start, [
            Turn(t["role"], t["content"], bool(t.get("has_answer")), start + timedelta(seconds=i), str(sid), i)
            for i, t in enumerate(turns)]))
    sessions.sort(key=lambda s: s[1])  # the haystack's order is not always the calendar's
    return Record(id=str(raw["question_id"]), category=raw["question_type"], question=raw["question"],
                  answer=str(raw["answer"]), date=parse_date(raw["question_date"]), sessions=sessions, raw=raw)


def load_records(path: str | Path) -> list[Record]:
    """The records of a folder of LongMemEval files (each one record or a list), or of one such file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no LongMemEval data at {path}: pass --data, a folder of its records or its JSON list")
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    out = []
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        out += [to_record(r) for r in (data if isinstance(data, list) else [data])]
    if not out:
        raise FileNotFoundError(f"no LongMemEval record in {path}")
    return out


def spread(records: list[Record], limit: int | None) -> list[Record]:
    """The first ``limit`` records (all: None) taken in turn from each category (in the data's
    order), so a small run, or a long one stopped part-way, still covers every category."""
    limit = len(records) if limit is None else min(limit, len(records))
    queues: dict[str, list[Record]] = {}
    for r in records:
        queues.setdefault(r.category, []).append(r)
    out: list[Record] = []
    while len(out) < limit:
        for queue in queues.values():
            if queue and len(out) < limit:
                out.append(queue.pop(0))
    return out


# ----------------------------------------------------------------------------- scoring
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PARENTHESES = re.compile(r"\([^)]*\)")
_ABSTAIN = re.compile(r"\b(i do ?n[o']?t know|not (mentioned|stated|specified|provided|enough)|no information|"
                      r"cannot (tell|determine|know)|can ?n[o']?t (tell|determine|know)|unknown)\b|^none$")


def normalise(text: str) -> str:
    """LoCoMo's answer normalisation: lowercase, punctuation deleted (any script's: "a.m." is "am"),
    the words a/an/the/and removed, spaces collapsed."""
    text = "".join(c for c in str(text).lower() if not unicodedata.category(c).startswith("P"))
    return " ".join(_ARTICLES.sub(" ", text).split())


def gold_forms(gold: str) -> list[str]:
    """The normalised gold answer, and the same without a parenthesised remark ("Yes. (You have a road
    bike too.)" → "yes"); empty forms dropped."""
    forms = dict.fromkeys(f for f in (normalise(gold), normalise(_PARENTHESES.sub(" ", gold))) if f)
    return list(forms)


def contains(text: str, gold: str) -> bool:
    """Whether a gold form appears in ``text`` word for word, after normalisation."""
    padded = f" {normalise(text)} "
    return any(f" {form} " in padded for form in gold_forms(gold))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD/LoCoMo token F1 of the normalised answer against the best gold form."""
    pred = normalise(prediction).split()
    best = 0.0
    for form in gold_forms(gold):
        ref = form.split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            precision, recall = common / len(pred), common / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def is_abstention(answer: str | None) -> bool:
    """An answer that says it does not know (None, empty, or the usual phrasings)."""
    return answer is None or not normalise(answer) or bool(_ABSTAIN.search(normalise(answer)))


def judge(record: Record, answer: str | None, abstained: bool) -> dict[str, Any]:
    """correct (abstaining is right on ``_abs`` and wrong elsewhere), the named value's correctness, f1."""
    value_right = (not record.abstain) and answer is not None and contains(answer, record.answer)
    correct = abstained if record.abstain else (not abstained and value_right)
    f1 = None if record.abstain else (0.0 if abstained or answer is None else token_f1(answer, record.answer))
    return {"correct": bool(correct), "value_right": bool(value_right), "f1": f1}


def brier(confidence: np.ndarray, correct: np.ndarray) -> float:
    """Brier score of a stated probability that the answer is right: mean (p − right)²."""
    return float(np.mean((confidence - correct) ** 2)) if len(confidence) else float("nan")


def confidence_scores(confidence: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """ECE, Brier, accuracy at 50/80/100% coverage and AURC, from the shared metrics module."""
    from doxa.inference.learn.metrics import aurc, expected_calibration_error, selective_accuracy

    out = {"ece": expected_calibration_error(confidence, correct), "brier": brier(confidence, correct),
           "aurc": aurc(confidence, correct)}
    for c in COVERAGES:
        out[f"acc_at_{int(c * 100)}"] = selective_accuracy(confidence, correct, c)
    return out


# ----------------------------------------------------------------------------- cost
@dataclass
class Cost(ModelCost):
    """A model's cost (calls, tokens, seconds), which two readings of a counter subtract."""

    def __sub__(self, other: "Cost") -> "Cost":
        return Cost(self.calls - other.calls, self.prompt_tokens - other.prompt_tokens,
                    self.completion_tokens - other.completion_tokens, self.seconds - other.seconds)


class Meter:
    """Counts every request of the clients it is attached to: calls, the server's token usage, seconds.

    Each client's :class:`~doxa.inference.agent.llm_http.ChatEndpoint` (the one place every request of
    every doxa client and of the baselines goes through) is put behind a counting stand-in, so all
    systems are counted the same way. A stand-in rather than a patched ``post``: doxa's own cost
    meter (inference/agent/conversation.py) patches ``post`` on the endpoint for a while and then
    deletes the patch, which would take a patch of ours with it."""

    def __init__(self) -> None:
        self.total = Cost()

    def attach(self, client):
        client.endpoint = _CountedEndpoint(client.endpoint, self.total)
        return client

    def now(self) -> Cost:
        return Cost(**asdict(self.total))


class _CountedEndpoint:
    """An endpoint that counts into ``total`` and hands every request to the real one; any other
    attribute (``requests``, ``chat_url``, …) is the real endpoint's."""

    def __init__(self, inner, total: Cost) -> None:
        self.inner, self.total = inner, total

    def post(self, body):
        started, sent = time.perf_counter(), self.inner.requests
        try:
            reply = self.inner.post(body)
        finally:  # HTTP requests sent, retries included: what the server had to answer
            self.total.calls += self.inner.requests - sent
            self.total.seconds += time.perf_counter() - started
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if isinstance(usage, dict):
            self.total.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.total.completion_tokens += int(usage.get("completion_tokens") or 0)
        return reply

    def __getattr__(self, name):
        return getattr(self.inner, name)


# ----------------------------------------------------------------------------- the baselines' model
def _chat_client_class():
    """The baselines' client, a :class:`ChatClient` like doxa's reader and organizer (same URL,
    model, retries), defined on first use so ``--reader oracle`` imports no model code."""
    from doxa.inference.agent.llm_http import READER_ENV, ChatClient

    @dataclass
    class AnswerModel(ChatClient):
        """Plain chat completions for the baselines: the reply's text and, where the server gives
        log-probabilities, the probability of the whole reply (the product of its tokens')."""

        max_tokens: int = 32
        logprobs: bool = True

        names = READER_ENV  # ChatClient declares these three as class variables
        role = "answer model"
        error = RuntimeError

        def complete(self, system: str, user: str, max_tokens: int | None = None,
                     with_logprobs: bool = False) -> tuple[str, float | None]:
            body: dict[str, Any] = {"messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": user}],
                                    "temperature": 0, "max_tokens": max_tokens or self.max_tokens, **self.extra_body}
            if self.model:
                body["model"] = self.model
            if with_logprobs and self.logprobs:
                body.update(logprobs=True, top_logprobs=1)
            reply = self.endpoint.post(body)
            choice = (reply.get("choices") or [{}])[0]
            text = ((choice.get("message") or {}).get("content") or "").strip()
            return text, _sequence_probability(choice.get("logprobs"))

    return AnswerModel


def _sequence_probability(logprobs: Any) -> float | None:
    """exp(Σ log p) over the generated tokens, from either logprobs layout; None when absent."""
    if not isinstance(logprobs, dict):
        return None
    values = [t.get("logprob") for t in logprobs.get("content") or [] if isinstance(t, dict)]
    values = values or list(logprobs.get("token_logprobs") or [])
    values = [v for v in values if isinstance(v, (int, float))]
    return float(math.exp(sum(values))) if values else None


ANSWER_SYSTEM = (
    "You answer a question about the user from their past conversations with an assistant. Reply with "
    "the answer only, as short as possible (a few words), no explanation. When something changed over "
    "time, give the latest value unless the question asks about an earlier one. When the conversations "
    "do not say, reply exactly: I don't know.")

FACTS_SYSTEM = (
    "You keep a memory of facts about the user. You are shown stored facts and a new message the user "
    "wrote. Reply with one line per fact about the user that the message states: \"ADD: <fact>\" for a "
    "new fact, or \"UPDATE <n>: <fact>\" when it replaces stored fact n (a newer value of the same "
    "thing). Facts are short sentences about the user. When the message states no fact about the user, "
    "reply: NONE")
#: "ADD: fact", "UPDATE 2: fact"; an UPDATE with no number (or one not shown) is an ADD.
_FACT_LINE = re.compile(r"^\s*(?:[-*]\s*)?(ADD|UPDATE)\s*(\d+)?\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def fit(lines: list[str], budget_tokens: int) -> tuple[list[str], bool]:
    """The newest lines (the end of the list) that fit ``budget_tokens``, and whether any was cut.

    Older lines go first: the current value of something that changed is in the newest ones, and a
    line longer than the whole budget keeps its end."""
    budget = max(1, int(budget_tokens * CHARS_PER_TOKEN))
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) + 1 > budget:
            if not kept:
                kept.append(line[-budget:])
            return kept[::-1], True
        kept.append(line)
        used += len(line) + 1
    return kept[::-1], False


def _day(moment: datetime) -> str:
    return moment.strftime("%Y/%m/%d (%a) %H:%M")


def _question_prompt(record: Record, context_title: str, lines: list[str]) -> str:
    return (f"{context_title}\n" + "\n".join(lines) +
            f"\n\nToday is {_day(record.asked_at)}.\nQuestion: {record.question}\nAnswer:")


# ----------------------------------------------------------------------------- one system's answer
@dataclass
class Outcome:
    """One system's answer to one question."""

    answer: str | None
    abstained: bool
    confidence: float | None = None
    ingest: Cost = field(default_factory=Cost)
    question: Cost = field(default_factory=Cost)
    truncated: bool = False
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Systems:
    """The systems that answer through the model endpoint; each method answers one record."""

    def __init__(self, args) -> None:
        from doxa.inference.agent.organizer_client import OpenAIChatOrganizer
        from doxa.inference.agent.question_model import QuestionModel
        from doxa.inference.agent.readers import OpenAIChatReader

        common = {"url": args.url, "model": args.model, "timeout_s": args.timeout, "retries": args.retries}
        self.meter = Meter()
        self.args = args
        self.model = self.meter.attach(_chat_client_class()(**common, logprobs=not args.no_logprobs))
        self.organizer = self.meter.attach(OpenAIChatOrganizer(**common))
        self.reader = self.meter.attach(OpenAIChatReader(**common))
        self.questions = self.meter.attach(QuestionModel(**common))
        self.budget = args.context_tokens - PROMPT_RESERVE - args.answer_tokens
        #: doxa-learned's and doxa-lazy-learned's outcomes, kept by :meth:`doxa` by (system, record id)
        self.learned_outcomes: dict[tuple[str, str], Outcome] = {}

    def _ask(self, record: Record, title: str, lines: list[str]) -> tuple[str, float | None, bool]:
        """The model's answer over ``lines`` cut to the context; a server that still finds the prompt
        too long (HTTP 400) is asked once more with half of it."""
        kept, cut = fit(lines, self.budget)
        try:
            text, p = self.model.complete(ANSWER_SYSTEM, _question_prompt(record, title, kept),
                                          self.args.answer_tokens, with_logprobs=True)
        except RuntimeError as err:
            if getattr(err, "status", None) != 400:
                raise
            kept, _ = fit(lines, self.budget // 2)
            cut = True
            text, p = self.model.complete(ANSWER_SYSTEM, _question_prompt(record, title, kept),
                                          self.args.answer_tokens, with_logprobs=True)
        return text, p, cut

    def _prompted(self, record: Record, title: str, lines: list[str], **extra) -> Outcome:
        before = self.meter.now()
        text, p, cut = self._ask(record, title, lines)
        abstained = is_abstention(text)
        # an "I don't know" names no value: its confidence in a value is 0 (module docstring)
        return Outcome(answer=text, abstained=abstained, confidence=None if p is None else 0.0 if abstained else p,
                       question=self.meter.now() - before, truncated=cut, extra={"reply_p": p, **extra})

    def full_context(self, record: Record) -> Outcome:
        lines = []
        for sid, start, turns in record.sessions:
            lines.append(f"[session on {_day(start)}]")
            lines += [f"{t.role}: {' '.join(t.content.split())}" for t in turns]
        return self._prompted(record, "Conversations (oldest first):", lines)

    def full_user(self, record: Record) -> Outcome:
        lines = [f"[{_day(t.at)}] {' '.join(t.content.split())}" for t in record.user_turns]
        return self._prompted(record, "What the user said (oldest first):", lines)

    def rag(self, record: Record) -> Outcome:
        from doxa.data import search
        from doxa.data.text import words

        turns = record.user_turns
        scores, _ = search.bm25(search.content_terms(words(record.question)), [words(t.content) for t in turns])
        order = np.argsort(-np.asarray(scores), kind="stable")[: self.args.k]
        top = sorted((turns[i] for i in order if scores[i] > 0), key=lambda t: t.at)
        lines = [f"[{_day(t.at)}] {' '.join(t.content.split())}" for t in top]
        return self._prompted(record, "What the user said that may bear on it (oldest first):", lines,
                              k=self.args.k, retrieved=len(top),
                              retrieved_has_answer=sum(t.has_answer for t in top))

    def latest_fact(self, record: Record) -> Outcome:
        from doxa.data import search
        from doxa.data.text import words

        facts: list[dict[str, Any]] = []  # {"text", "at"}; an UPDATE replaces the fact in place
        before = self.meter.now()
        for turn in record.user_turns:
            related = []
            if facts:  # the stored facts that share words with the turn: what an UPDATE may name
                scores, _ = search.bm25(search.content_terms(words(turn.content)), [words(f["text"]) for f in facts])
                related = [i for i in np.argsort(-np.asarray(scores), kind="stable")[:5] if scores[i] > 0]
            shown = "\n".join(f"{n}. {facts[i]['text']}" for n, i in enumerate(related, start=1)) or "(none)"
            reply, _ = self.model.complete(
                FACTS_SYSTEM, f"Stored facts:\n{shown}\n\nNew message ({_day(turn.at)}):\n"
                              f"{' '.join(turn.content.split())[:TURN_CHARS]}", max_tokens=160)
            for m in _FACT_LINE.finditer(reply):
                fact = {"text": m.group(3), "at": turn.at}
                n = int(m.group(2)) if m.group(2) else 0
                if 1 <= n <= len(related):
                    facts[related[n - 1]] = fact  # the newest wins
                else:
                    facts.append(fact)
        ingest = self.meter.now() - before
        lines = [f"[{_day(f['at'])}] {f['text']}" for f in sorted(facts, key=lambda f: f["at"])]
        out = self._prompted(record, "Facts about the user (oldest first):", lines, facts=len(facts))
        out.ingest = ingest
        return out

    def doxa(self, record: Record, *, lazy: bool = False, learned: dict[str, Any] | None = None) -> Outcome:
        """``doxa`` (``doxa-lazy`` with ``lazy``); with ``learned`` (a parameter document), the same
        store is then read again under it, and that outcome kept for ``doxa-learned`` (with ``lazy``:
        ``doxa-lazy-learned``; :meth:`doxa_learned`)."""
        import doxa

        memory = doxa.open(":memory:", log_reads=False)
        try:
            if not hasattr(memory, "remember_conversation"):
                return Outcome(answer=None, abstained=True, error="remember_conversation is not in this doxa")
            before = self.meter.now()
            kept = memory.remember_conversation(
                conversation_sessions(record), keep_only=lazy,
                organizer=None if lazy else self.organizer, reader=None if lazy else self.reader)
            ingest = self.meter.now() - before
            asking = self.meter.now()
            result = memory.answer(record.question, at=record.asked_at, reader=self.reader, model=self.questions,
                                   use_env=False)
            out = _doxa_outcome(result, ingest=ingest, question=self.meter.now() - asking, conversation=_to_dict(kept),
                                miss=miss_reason(memory, result, record))
            if self.args.keep_stores:  # every turn, question and reading, to look at or refit later
                folder = Path(self.args.out) / "stores"
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / f"{'doxa-lazy' if lazy else 'doxa'}-{record.id}.jsonl", "w", encoding="utf-8") as f:
                    memory.export(f)
            if learned is not None:
                key = (learned_name(lazy), record.id)
                try:  # the twin's failure is its own: the answer above stands
                    memory.store.publish_params(learned_for(learned, memory, result.question))
                    again = memory.answer(record.question, at=record.asked_at, reader=self.reader,
                                          model=self.questions, use_env=False)
                except Exception as err:
                    self.learned_outcomes[key] = Outcome(answer=None, abstained=True,
                                                         error=f"{type(err).__name__}: {err}"[:500])
                else:
                    # its question-time cost: both answers (the first made the question it reads)
                    self.learned_outcomes[key] = _doxa_outcome(
                        again, ingest=ingest, question=self.meter.now() - asking, conversation=_to_dict(kept),
                        params="fitted on the other questions' settled oracle stores",
                        miss=miss_reason(memory, again, record))
            return out
        finally:
            memory.close()

    def doxa_learned(self, record: Record, learned: "OracleLearned", *, lazy: bool = False) -> Outcome:
        """``doxa-learned`` (``doxa-lazy-learned`` with ``lazy``): the outcome :meth:`doxa` kept for the
        record, else the pipeline run for it."""
        key = (learned_name(lazy), record.id)
        if key not in self.learned_outcomes:
            params = learned.params_for(record)
            if params is None:
                return Outcome(answer=None, abstained=True, error="no other question has a settled answer to learn from")
            self.doxa(record, lazy=lazy, learned=params)
        return self.learned_outcomes.pop(key)


def learned_name(lazy: bool) -> str:
    """The system that reads ``doxa``'s store (``doxa-lazy``'s, with ``lazy``) under learned parameters."""
    return "doxa-lazy-learned" if lazy else "doxa-learned"


def learned_for(document: dict[str, Any], memory, question: str | None) -> dict[str, Any]:
    """``document`` (fitted on oracle stores, whose one kind is ``asked``) with that kind's entry also
    given to the kind of ``question`` (the question doxa tracks, whose kind the model named): what
    the fit learned about questions asked of a user's conversation, for this one."""
    out = copy.deepcopy(document)
    if question is not None and "asked" in out.get("kinds", {}):
        kind = memory.store.question(question)["kind"]
        out["kinds"][kind] = copy.deepcopy(out["kinds"]["asked"])
    out.pop("version", None)
    return out


def conversation_sessions(record: Record) -> list[Any]:
    """The record's sessions as ``remember_conversation`` takes them (inference/agent/conversation.py)."""
    from doxa.inference.agent.conversation import Session

    # naive UTC, as conversation.py reads LongMemEval's own dates
    return [Session(sid, start.replace(tzinfo=None), [(t.role, t.content) for t in turns])
            for sid, start, turns in record.sessions]


def _to_dict(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else None


def _doxa_outcome(result, *, ingest: Cost | None = None, question: Cost | None = None, **extra) -> Outcome:
    """An :class:`~doxa.inference.agent.answer.AnswerResult` as an outcome: its answer when it acts,
    else an abstention; its top answer's ``p`` is the confidence of the value it names (acting or not)."""
    return Outcome(answer=result.answer, abstained=bool(result.abstain),
                   confidence=float(result.p) if result.answer is not None else None,
                   ingest=ingest or Cost(), question=question or Cost(),
                   extra={"when": result.when, "found_by": result.found_by, "created": result.created,
                          "readings": result.readings, "tracked": result.question,
                          "alternatives": result.alternatives[:3], **extra})


#: At or above this probability on a value a reading states it clearly (for :func:`miss_reason`).
CLEAR_READING = 0.8


def miss_reason(memory, result, record: Record) -> str | None:
    """Why doxa's top value is not the gold answer, from its store (None when it is, and on ``_abs``):
    ``no question``; ``earlier value unknown`` (asked for the value before a change none recorded);
    ``not an option`` (no option holds the gold answer); ``never read clearly`` (no reading puts
    :data:`CLEAR_READING` on an option that holds it); ``lost to a clear rival`` (read clearly, and
    another option was too: the belief chose the other); ``lost`` (read clearly, no clear rival)."""
    if record.abstain or (result.answer is not None and contains(str(result.answer), record.answer)):
        return None
    if result.question is None:
        return "no question"
    if result.answer is None and result.when != "now":
        return "earlier value unknown"
    try:  # a diagnosis that fails must not take the answer with it
        options = list(memory.store.question(result.question)["options"])
        terms = memory.explain(result.question, record.asked_at).terms
    except Exception as err:  # noqa: BLE001 - any store error: say so, keep the answer
        return f"not diagnosed ({type(err).__name__})"
    gold = {o for o in options if contains(o, record.answer)}
    if not gold:
        return "not an option"

    def clear(values: set[str]) -> bool:
        return any(t.reader_probs.get(v, 0.0) >= CLEAR_READING for t in terms for v in values)

    if not clear(gold):
        return "never read clearly"
    return "lost to a clear rival" if clear(set(options) - gold) else "lost"


# ----------------------------------------------------------------------------- the oracle systems
def oracle_records(record: Record, tag: str = "") -> tuple[list[dict[str, Any]], dict[str, Turn], str]:
    """The records of the oracle's store for one question (module docstring): the user, their chat,
    every user turn, the question with a value per evidence turn, and the annotation's readings;
    with the values (name → turn) and the question's id. ``tag`` keeps the ids of several
    questions apart in one store (each question is another user: a leaf of its own under
    ``person/self/chat``)."""
    from doxa.inference.agent.answer import USER_ID, USER_SUBJECT

    turns = record.user_turns
    option = {f"turn {t.session} {t.index}": t for t in record.user_turns if t.has_answer}  # a value per turn
    ids = {id(t): f"m{tag}.{n}" for n, t in enumerate(turns)}  # "." keeps tag 2, turn 10 apart from tag 21, turn 0
    user, chat = f"{USER_ID}{tag}", f"chat{tag}"
    qid = f"{user}.asked"
    records: list[dict[str, Any]] = [{**USER_SUBJECT, "id": user},
                                     {"type": "source", "id": chat, "layers": ["person", "self", "chat"]}]
    records += [{"type": "message", "id": ids[id(t)], "source": chat, "sent_at": t.at.isoformat(),
                 "text": t.content} for t in turns]
    records.append({"type": "question", "id": qid, "subject": user, "kind": "asked", "text": record.question,
                    "shape": "choice", "open": True, "options": list(option)})
    rest = (1.0 - ORACLE_OWN) / 2  # half to the other values, half to "unclear"
    first_day = min((t.at.date() for t in option.values()), default=None)
    for name, t in option.items():
        others = [o for o in option if o != name]
        probs = {name: ORACLE_OWN, **{o: rest / len(others) for o in others}}
        records.append({"type": "reading", "message": ids[id(t)], "question": qid, "reader": "annotation",
                        "probs": probs, "unclear": 1.0 - sum(probs.values()), "unrelated": 0.0, "one_off": 0.0,
                        **({"changed": 1.0} if t.at.date() > first_day else {})})
    return records, option, qid


def oracle_settlement(record: Record, option: dict[str, Turn], qid: str) -> dict[str, Any] | None:
    """What the user would say on being asked, as a settlement: the value holding the gold answer,
    true at the time asked. None where the question has no such value (``_abs``, or no turn holds
    the gold) or asks about an earlier value (when that was true is not known)."""
    from doxa.inference.agent.answer import time_asked

    if record.abstain or time_asked(record.question) != "now":
        return None
    right = [name for name, t in option.items() if contains(t.content, record.answer)]
    if not right:
        return None
    return {"type": "settlement", "question": qid, "answer": max(right, key=lambda name: option[name].at),
            "at": record.asked_at.isoformat(), "how": "outcome", "by": "benchmark"}


class OracleLearned:
    """``doxa-oracle-learned``: the oracle reader, with trust, change rates, base rates and the
    calibration map learned by the nightly job from the *other* questions' answers, as a store
    learns from what its users settle. Cross-fitted: the questions fall in ``folds`` groups by a
    hash of their id (not by anything they hold); a question is answered with the parameters fitted
    on the other groups, each of its own questions settled with its gold answer
    (:func:`oracle_settlement`), never its own. A group with no settled question to learn from
    keeps the defaults (``params`` says which). The calibration map is fitted on held-out folds of
    the training questions, as the nightly job fits it (``FOLDS`` None)."""

    FIT = {"max_steps": 300, "min_steps": 150, "n_draws": 40}
    FOLDS: int | None = None

    def __init__(self, records: list[Record], folds: int = 5, seed: int = 0) -> None:
        self.records, self.folds, self.seed = records, folds, seed
        self.documents: dict[int, dict[str, Any] | None] = {}

    def fold(self, record: Record) -> int:
        return zlib.crc32(record.id.encode()) % self.folds

    def params_for(self, record: Record) -> dict[str, Any] | None:
        fold = self.fold(record)
        if fold not in self.documents:
            self.documents[fold] = self.fit([r for r in self.records if self.fold(r) != fold])
        return self.documents[fold]

    def fit(self, training: list[Record]) -> dict[str, Any] | None:
        """The nightly job on ``training``, each question settled (:func:`oracle_settlement`): its
        parameter document, or None when nothing there is settled."""
        import doxa
        from doxa.inference.learn.fit import NothingToFit
        from doxa.inference.learn.train import train

        records, last = [], None
        for n, record in enumerate(training):
            kept, option, qid = oracle_records(record, tag=f"-{n}")
            settled = oracle_settlement(record, option, qid)
            records += kept + ([settled] if settled else [])
            last = max(last or record.asked_at, record.asked_at)
        if last is None:
            return None
        memory = doxa.open(":memory:", log_reads=False)
        try:
            memory.ingest(records)
            at = last + timedelta(seconds=1)  # the store's clock is naive UTC
            at = at.astimezone(timezone.utc).replace(tzinfo=None) if at.tzinfo else at
            return train(memory.store, at=at, fit_options=self.FIT, folds=self.FOLDS,
                         progress=False, seed=self.seed).document
        except NothingToFit:
            return None
        finally:
            memory.close()

    def __call__(self, record: Record) -> Outcome:
        params = self.params_for(record)
        out = oracle_reader(record, params)
        out.extra["params"] = f"fitted without fold {self.fold(record)}" if params else "defaults"
        return out


def oracle_reader(record: Record, params: dict[str, Any] | None = None) -> Outcome:
    """doxa with perfect readings and no model (module docstring): the chosen turn's text is the
    answer; read under ``params`` (a parameter document) where given, else the defaults."""
    import doxa
    from doxa.inference.agent.answer import USER_ID

    records, option, _ = oracle_records(record)
    memory = doxa.open(":memory:", log_reads=False)
    try:
        memory.ingest(records)
        if params is not None:
            memory.store.publish_params(params)
        result = memory.answer(record.question, subject=USER_ID, at=record.asked_at, use_env=False)
    finally:
        memory.close()
    chosen = option.get(result.answer) if result.answer is not None else None
    out = _doxa_outcome(result)
    out.answer = chosen.content if chosen is not None else None
    out.abstained = out.abstained or chosen is None
    return out


def latest_oracle(record: Record) -> Outcome:
    evidence = [t for t in record.user_turns if t.has_answer]
    newest = max(evidence, key=lambda t: t.at) if evidence else None
    return Outcome(answer=newest.content if newest else None, abstained=newest is None)


def scorable(record: Record) -> bool:
    """Whether some has_answer user turn contains the gold answer: what the oracle systems can get right."""
    return record.abstain or any(contains(t.content, record.answer) for t in record.user_turns if t.has_answer)


# ----------------------------------------------------------------------------- the run
def run(records: list[Record], systems: list[str], args, progress: Callable[[str], None] = lambda s: None,
        sink: Callable[[dict[str, Any]], None] = lambda r: None,
        skip: set[tuple[str, str]] = frozenset()) -> list[dict[str, Any]]:
    """One result per (system, record) not in ``skip``: the answer, its judgement, confidence and
    cost; each is also handed to ``sink`` as it comes (a long run stopped part-way keeps what it did)."""
    needs_model = [s for s in systems if s in MODEL_SYSTEMS]
    model = Systems(args) if needs_model else None
    learned = OracleLearned(records) if {"doxa-learned", "doxa-lazy-learned", "doxa-oracle-learned"} & set(systems) \
        else None

    def beside(plain: str) -> bool:  # its learned twin reads its store again (asked in the same pass, after it)
        twin = learned_name(plain == "doxa-lazy")
        return plain in systems and twin in systems and systems.index(plain) < systems.index(twin)

    with_learned, with_lazy_learned = beside("doxa"), beside("doxa-lazy")
    answer = {"full-context": lambda r: model.full_context(r), "full-user": lambda r: model.full_user(r),
              "rag": lambda r: model.rag(r), "latest-fact": lambda r: model.latest_fact(r),
              "doxa": lambda r: model.doxa(r, learned=learned.params_for(r) if with_learned else None),
              "doxa-lazy": lambda r: model.doxa(r, lazy=True,
                                                learned=learned.params_for(r) if with_lazy_learned else None),
              "doxa-learned": lambda r: model.doxa_learned(r, learned),
              "doxa-lazy-learned": lambda r: model.doxa_learned(r, learned, lazy=True),
              "doxa-oracle-reader": oracle_reader, "latest-oracle": latest_oracle}
    if "doxa-oracle-learned" in systems:
        answer["doxa-oracle-learned"] = learned
    results = []
    for n, record in enumerate(records, start=1):
        for system in systems:
            if (system, record.id) in skip:
                continue
            started = time.perf_counter()
            try:
                out = answer[system](record)
            except Exception as err:  # a failed question is a wrong answer, reported; the run goes on
                out = Outcome(answer=None, abstained=True, error=f"{type(err).__name__}: {err}"[:500])
            verdict = judge(record, out.answer, out.abstained)
            if out.error:  # a failure is no abstention: wrong everywhere, _abs questions included
                verdict.update(correct=False, value_right=False)
            if system in ORACLE_SYSTEMS:
                verdict["f1"] = None  # their answer is a whole turn: containment is their measure, not F1
            results.append({
                "system": system, "id": record.id, "category": record.category, "abs": record.abstain,
                "question": record.question, "gold": record.answer, "answer": out.answer,
                "abstained": out.abstained, **verdict, "confidence": out.confidence,
                "scorable": scorable(record), "user_turns": len(record.user_turns),
                "ingest": asdict(out.ingest), "at_question": asdict(out.question),
                "wall_seconds": time.perf_counter() - started, "truncated": out.truncated, "error": out.error,
                **out.extra})
            sink(results[-1])
            progress(f"[{n}/{len(records)}] {system:<18} {record.id:<14} "
                     f"{'right' if verdict['correct'] else 'wrong'}  {str(out.answer)[:60]!r}"
                     + (f"  error: {out.error[:80]}" if out.error else ""))
    return results


def earlier_answers(out: Path, settings: dict[str, Any], *, resume: bool,
                    redo: frozenset[str] = frozenset(), check_settings: bool = True) -> list[dict[str, Any]]:
    """The answers ``out`` holds from an earlier run, to go on with (``resume``); a failed answer
    (``error``) is left out, so it is asked again, and so are the answers of the systems in ``redo``
    (their code changed since). Refused (ValueError, saying what to do) when the folder holds
    answers and ``resume`` is off — they would be overwritten — or when they were made with other
    settings, which would mix two benchmarks in one table."""
    path = out / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if not any(line.strip() for line in lines):
        return []
    if not resume:
        raise ValueError(f"{path} already holds {len(lines)} answers: pass --resume to go on with them, "
                         "or choose another --out")
    stated = out / "settings.json"
    if check_settings and stated.exists():
        before = json.loads(stated.read_text(encoding="utf-8"))
        if before.get("data"):  # earlier runs stated the data's whole path; its name is what identifies it
            before["data"] = Path(before["data"]).name
        changed = sorted(k for k in set(before) | set(settings) if before.get(k) != settings.get(k))
        if changed:
            what = ", ".join(f"{k}: {before.get(k)!r} then, {settings.get(k)!r} now" for k in changed)
            raise ValueError(f"{out} was run with other settings ({what}): use the same ones to resume, "
                             "or choose another --out")
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # a run killed while writing its last line: that answer is asked again
                continue
            raise ValueError(f"{path}, line {number}: not JSON; remove that line to resume") from None
        if not row.get("error") and row.get("system") not in redo:
            kept.append(row)
    return kept


#: What an exported row leaves out: the texts of the questions, gold answers and answers (the data's
#: own words, which stay out of the repository); ids, verdicts, confidences and costs remain.
DATA_TEXT = ("question", "gold", "answer", "alternatives", "tracked")


def export_answers(out: Path, dest: Path) -> int:
    """Copy ``out``'s answers and settings to ``dest`` without the data's texts (:data:`DATA_TEXT`),
    so a run of many hours can be kept in the repository and resumed from there in a later session
    (``--out DEST --resume``): the report needs none of the texts. Returns the rows written."""
    rows = earlier_answers(out, {}, resume=True, check_settings=False)
    settings_path = out / "settings.json"
    if not rows or not settings_path.exists():
        raise ValueError(f"{out} holds no answers to export: run the benchmark with --out {out} first")
    dest.mkdir(parents=True, exist_ok=True)
    fresh = dest / "results.jsonl.new"
    fresh.write_text("".join(json.dumps({k: v for k, v in row.items() if k not in DATA_TEXT}, default=str) + "\n"
                             for row in rows), encoding="utf-8")
    os.replace(fresh, dest / "results.jsonl")
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    if settings.get("data"):  # the data set's name, never where it lay on the machine that ran it
        settings["data"] = Path(settings["data"]).name
    (dest / "settings.json").write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    return len(rows)


def _commit() -> str | None:
    """The commit this run's code is at (with ``-dirty`` for uncommitted changes), so a table
    gathered over several resumed runs says what ran."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def summarise(results: list[dict[str, Any]], group: Callable[[dict], tuple]) -> list[dict[str, Any]]:
    """One row per group of results (system and category, or system alone)."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault(group(r), []).append(r)
    rows = []
    for key, items in groups.items():
        system = items[0]["system"]
        oracle = system in ORACLE_SYSTEMS
        scored = [r for r in items if r["scorable"] or not oracle]  # the oracle rows count apart what no turn holds
        answerable = [r for r in scored if not r["abs"]]
        absent = [r for r in scored if r["abs"]]
        turns = sum(r["user_turns"] for r in items)
        cost = {k: sum(r["ingest"][k] + r["at_question"][k] for r in items)
                for k in ("calls", "prompt_tokens", "completion_tokens", "seconds")}
        row = {"system": system, "category": items[0]["category"] if len(key) > 1 else "all", "n": len(scored),
               "unscorable": len(items) - len(scored),
               "accuracy": _mean([r["correct"] for r in scored]),
               "f1": _mean([r["f1"] for r in answerable]),
               "abstain_correct": _mean([r["abstained"] for r in absent]), "n_abs": len(absent),
               "false_abstain": _mean([r["abstained"] for r in answerable]),
               "errors": sum(r["error"] is not None for r in items),
               "truncated": sum(bool(r["truncated"]) for r in items),
               "calls": cost["calls"] / len(items), "prompt_tokens": cost["prompt_tokens"] / len(items),
               "completion_tokens": cost["completion_tokens"] / len(items), "seconds": cost["seconds"] / len(items),
               "calls_per_turn": cost["calls"] / max(turns, 1), "seconds_per_turn": cost["seconds"] / max(turns, 1),
               "ingest_calls": sum(r["ingest"]["calls"] for r in items) / len(items),
               "ingest_seconds": sum(r["ingest"]["seconds"] for r in items) / len(items),
               "question_calls": sum(r["at_question"]["calls"] for r in items) / len(items),
               "question_seconds": sum(r["at_question"]["seconds"] for r in items) / len(items),
               "ece": None, "brier": None, "aurc": None, **{f"acc_at_{int(c * 100)}": None for c in COVERAGES}}
        if "k" in items[0]:
            row["k"] = items[0]["k"]
        if any("miss" in r for r in items):  # doxa's: why its top value was wrong (miss_reason)
            row["misses"] = dict(sorted(Counter(r["miss"] for r in items if r.get("miss")).items()))
        if scored and any(r["confidence"] is not None for r in scored):
            confidence = np.array([r["confidence"] or 0.0 for r in scored])
            right = np.array([float(r["value_right"]) for r in scored])
            row.update(confidence_scores(confidence, right))
        rows.append({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()})
    rows.sort(key=lambda r: (r["category"], ALL_SYSTEMS.index(r["system"]) if r["system"] in ALL_SYSTEMS else 99))
    return rows


KNOWLEDGE_UPDATE, SINGLE_SESSION = "knowledge-update", "single-session-user"
#: doxa's own variants: "the best other system" is the best of the rest on the same model
DOXA_SYSTEMS = ("doxa", "doxa-lazy", "doxa-learned", "doxa-lazy-learned")


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark's goals for doxa (issue 37), each met or missed, from the (system, category)
    rows of this run; a goal whose systems or category the run lacks is left out. "Other" systems
    are the model baselines (not doxa's variants, not the oracle rows)."""
    at = {(r["system"], r["category"]): r for r in rows}

    def best_other(category: str, key: str, pick=max) -> tuple[str, float] | None:
        found = [(s, r[key]) for (s, c), r in at.items() if c == category and s in MODEL_SYSTEMS
                 and s not in DOXA_SYSTEMS and r[key] is not None]
        return pick(found, key=lambda item: item[1]) if found else None

    out: list[dict[str, Any]] = []

    def goal(text: str, value: float, against: str, met: bool) -> None:
        out.append({"goal": text, "doxa": round(value, 4), "against": against, "met": bool(met)})

    ku = at.get(("doxa", KNOWLEDGE_UPDATE))
    if ku is not None:
        best = best_other(KNOWLEDGE_UPDATE, "accuracy")
        if best is not None and ku["accuracy"] is not None:
            goal("knowledge-update: doxa's accuracy at least the best other system's", ku["accuracy"],
                 f"{best[0]} {best[1]:.2f}", ku["accuracy"] >= best[1])
        if ku["acc_at_50"] is not None and ku["acc_at_100"] is not None:
            goal("knowledge-update: doxa's accuracy at 50% coverage at least 15 points above its accuracy at 100%",
                 ku["acc_at_50"], f"acc@100% {ku['acc_at_100']:.2f}", ku["acc_at_50"] >= ku["acc_at_100"] + 0.15)
        lowest = best_other(KNOWLEDGE_UPDATE, "aurc", pick=min)
        if lowest is not None and ku["aurc"] is not None:
            goal("knowledge-update: doxa's AURC the lowest of all systems", ku["aurc"],
                 f"{lowest[0]} {lowest[1]:.3f}", ku["aurc"] <= lowest[1])
        if ku["n_abs"]:
            abstained = round(ku["abstain_correct"] * ku["n_abs"])
            goal("knowledge-update: at least 2 of 3 `_abs` questions abstained on", abstained / ku["n_abs"],
                 f"{abstained} of {ku['n_abs']}", abstained * 3 >= 2 * ku["n_abs"])
    ssu = at.get(("doxa", SINGLE_SESSION))
    best = best_other(SINGLE_SESSION, "accuracy")
    if ssu is not None and best is not None and ssu["accuracy"] is not None:
        goal("single-session-user: doxa within 3 points of the best", ssu["accuracy"], f"{best[0]} {best[1]:.2f}",
             ssu["accuracy"] >= best[1] - 0.03)
    for (system, category), lazy in sorted(at.items()):
        rag = at.get(("rag", category))
        if system in ("doxa-lazy", "doxa-lazy-learned") and category != "all" and rag is not None \
                and lazy["accuracy"] is not None:
            goal(f"{category}: {system} at least as accurate as rag, with no model call at ingest",
                 lazy["accuracy"], f"rag {rag['accuracy']:.2f}; ingest calls {lazy['ingest_calls']:.1f}",
                 lazy["accuracy"] >= rag["accuracy"] and lazy["ingest_calls"] == 0)
    return out


# ----------------------------------------------------------------------------- the report
def _cell(value, spec: str = ".2f") -> str:
    if value is None:
        return "–"
    return format(value, spec) if isinstance(value, float) else str(value)


def markdown(report: dict[str, Any]) -> str:
    head = ["system", "n", "accuracy", "F1", "abstain ok", "false abstain", "ECE", "Brier", "acc@50%", "acc@80%",
            "acc@100%", "AURC", "calls/q", "tokens in/q", "tokens out/q", "s/q", "calls/turn", "s/turn",
            "ingest s/q", "question s/q"]
    keys = ["system", "n", "accuracy", "f1", "abstain_correct", "false_abstain", "ece", "brier", "acc_at_50",
            "acc_at_80", "acc_at_100", "aurc", "calls", "prompt_tokens", "completion_tokens", "seconds",
            "calls_per_turn", "seconds_per_turn", "ingest_seconds", "question_seconds"]
    specs = {"prompt_tokens": ".0f", "completion_tokens": ".0f", "calls": ".1f", "seconds": ".1f",
             "ingest_seconds": ".1f", "question_seconds": ".1f", "seconds_per_turn": ".2f", "calls_per_turn": ".2f",
             "aurc": ".3f", "ece": ".3f", "brier": ".3f"}
    lines = [f"# Conversation benchmark: {report['data']}", "",
             f"{report['questions']} questions; systems: {', '.join(report['systems'])}; reader: {report['reader']}; "
             f"model: {report.get('model') or '–'} at {report.get('url') or '–'}; run {report['date']}."
             + (f" {report['asked_after_last_turn']} question(s) dated before their last turn were asked just after "
                "it." if report.get("asked_after_last_turn") else "")
             + (f" Gathered over resumed runs ({report['resumed']} answers kept from earlier ones); code at "
                f"{', '.join(report['commits'])}." if report.get("resumed") else ""), ""]
    for category in [*report["categories"], "all"]:
        rows = [r for r in report["rows"] + report["totals"] if r["category"] == category]
        if not rows:
            continue
        lines += [f"## {category}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(_cell(r.get(k), specs.get(k, ".2f")) for k in keys) + " |" for r in rows]
        notes = [f"{r['system']}: {r['unscorable']} question(s) no evidence turn contains the gold of (not scored)"
                 for r in rows if r["unscorable"]]
        notes += [f"{r['system']}: prompt cut to the context on {r['truncated']} question(s)"
                  for r in rows if r["truncated"]]
        notes += [f"{r['system']}: {r['errors']} question(s) failed (counted wrong)" for r in rows if r["errors"]]
        notes += [f"{r['system']}: k = {r['k']}" for r in rows if r.get("k")]
        notes += [f"{r['system']}, why its top value was wrong: "
                  + ", ".join(f"{why} {n}" for why, n in r["misses"].items()) for r in rows if r.get("misses")]
        lines += [""] + [f"- {n}" for n in notes] + ([""] if notes else [])
    lines += ["Accuracy: the normalised gold answer contained in the answer (abstaining is right on `_abs` "
              "questions, wrong elsewhere). Confidence figures: every question with the confidence of the value "
              "named (0 when none) against whether it is right. Cost: per question (q) and per user turn.", ""]
    if report.get("goals"):
        lines += ["## Goals", "", "| goal | doxa | against | |", "|---|---|---|---|"]
        lines += [f"| {g['goal']} | {g['doxa']:.2f} | {g['against']} | {'met' if g['met'] else 'missed'} |"
                  for g in report["goals"]] + [""]
    if report.get("plots"):
        lines += [f"![{p}]({p})" for p in report["plots"]] + [""]
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], out: Path) -> list[str]:
    """risk_coverage.png: error rate on the answered against coverage, one panel per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from doxa.inference.learn.metrics import risk_coverage_curve

    categories = sorted({r["category"] for r in results})
    systems = [s for s in ALL_SYSTEMS if any(r["system"] == s and r["confidence"] is not None for r in results)]
    if not systems:
        return []
    fig, axes = plt.subplots(1, len(categories), figsize=(5 * len(categories), 3.8), squeeze=False)
    for ax, category in zip(axes[0], categories):
        for i, system in enumerate(systems):
            items = [r for r in results if r["system"] == system and r["category"] == category
                     and (r["scorable"] or system not in ORACLE_SYSTEMS)]
            if not items:
                continue
            coverage, risk = risk_coverage_curve(np.array([r["confidence"] or 0.0 for r in items]),
                                                 np.array([float(r["value_right"]) for r in items]))
            ax.plot(coverage, risk, label=system, color=plt.cm.tab10(i % 10), lw=1.4)
        ax.set_title(category, fontsize=10)
        ax.set_xlabel("coverage (share answered)")
        ax.set_ylabel("error rate on the answered")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "risk_coverage.png", dpi=110)
    plt.close(fig)
    return ["risk_coverage.png"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a folder of LongMemEval records, or its single JSON list (required but "
                                        "with --export)")
    parser.add_argument("--url", default=os.environ.get("DOXA_READER_URL"),
                        help="the OpenAI-compatible base URL every system uses (default $DOXA_READER_URL)")
    parser.add_argument("--model", default=os.environ.get("DOXA_READER_MODEL"), help="the model name to send")
    parser.add_argument("--systems", default=None,
                        help=f"comma-separated, of {', '.join(ALL_SYSTEMS)} (default: all the reader mode allows)")
    parser.add_argument("--reader", choices=("model", "oracle"), default="model",
                        help="oracle: no model at all, only doxa-oracle-reader and latest-oracle")
    parser.add_argument("--limit", type=int, default=None,
                        help="at most this many questions, taken across categories (0 with --resume: ask nothing, "
                             "report what --out holds)")
    parser.add_argument("--skip", type=int, default=0,
                        help="leave out the first N of that order (run a long benchmark in parts)")
    parser.add_argument("--k", type=int, default=5, help="user turns rag retrieves (default 5)")
    parser.add_argument("--context-tokens", type=int, default=2048, help="the model's context (default 2048)")
    parser.add_argument("--answer-tokens", type=int, default=32, help="tokens an answer may take (default 32)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model call before a retry")
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--no-logprobs", action="store_true", help="do not ask the baselines' answers for logprobs")
    parser.add_argument("--out", default="bench-conversations", help="folder for report.md, results.json, plots")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--keep-stores", action="store_true",
                        help="write each question's doxa store (doxa, doxa-lazy) as a `doxa export` under OUT/stores/, "
                             "before a learned twin reads it")
    parser.add_argument("--resume", action="store_true",
                        help="go on with the answers --out already holds (same settings): ask only the rest")
    parser.add_argument("--export", default=None, metavar="DEST",
                        help="copy --out's answers and settings to DEST without the data's texts (to keep a long "
                             "run in the repository and resume it later with --out DEST --resume), then stop")
    parser.add_argument("--redo", default="",
                        help="with --resume: systems whose kept answers are asked again (comma-separated; "
                             "their code changed since); the others' are kept")
    args = parser.parse_args(argv)
    redo = frozenset(x.strip() for x in args.redo.split(",") if x.strip())
    if redo and not args.resume:
        parser.error("--redo goes with --resume: it names the kept answers of --out to ask again")
    if redo - set(ALL_SYSTEMS):
        parser.error(f"--redo: unknown system(s) {', '.join(sorted(redo - set(ALL_SYSTEMS)))}; "
                     f"known: {', '.join(ALL_SYSTEMS)}")

    if args.export:
        try:
            n = export_answers(Path(args.out), Path(args.export))
        except ValueError as err:
            parser.error(str(err))
        print(f"{n} answers of {args.out} written to {args.export} (without the data's texts)", file=sys.stderr)
        return 0

    if not args.data:
        parser.error("--data is required: a folder of LongMemEval records, or its single JSON list")
    allowed = ORACLE_SYSTEMS if args.reader == "oracle" else ALL_SYSTEMS
    systems = [s.strip() for s in args.systems.split(",") if s.strip()] if args.systems else list(allowed)
    unknown = [s for s in systems if s not in ALL_SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}: choose among {', '.join(ALL_SYSTEMS)}")
    if args.reader == "oracle" and any(s not in ORACLE_SYSTEMS for s in systems):
        parser.error(f"--reader oracle runs no model: only {', '.join(ORACLE_SYSTEMS)}")
    if any(s in MODEL_SYSTEMS for s in systems) and not args.url:
        parser.error("the model systems need --url (or $DOXA_READER_URL): an OpenAI-compatible base URL")

    records = spread(load_records(args.data), args.skip + args.limit if args.limit is not None else None)[args.skip:]
    say = (lambda line: print(line, file=sys.stderr, flush=True))
    out = Path(args.out)
    # the data set by its name, not where it lies: a run kept in the repository (--export) resumes on another machine
    settings = {"data": Path(args.data).resolve().name, "reader": args.reader, "model": args.model, "k": args.k, "context_tokens": args.context_tokens,
                "answer_tokens": args.answer_tokens, "logprobs": not args.no_logprobs, "oracle_own": ORACLE_OWN}
    try:
        earlier = earlier_answers(out, settings, resume=args.resume, redo=redo)
    except ValueError as err:
        parser.error(str(err))
    done = {(r["system"], r["id"]) for r in earlier}
    if done:
        say(f"{len(earlier)} answers kept from {out / 'results.jsonl'}")
    say(f"{len(records)} questions × {len(systems)} systems")
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    (out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    commit = _commit()
    # the kept answers (failed ones and a cut last line left out) replace the file in one rename, so
    # a run killed at any moment leaves them whole; the new ones are appended as they come
    fresh = out / "results.jsonl.new"
    fresh.write_text("".join(json.dumps(kept, default=str) + "\n" for kept in earlier), encoding="utf-8")
    os.replace(fresh, out / "results.jsonl")
    with open(out / "results.jsonl", "a", encoding="utf-8") as partial:
        results = earlier + run(records, systems, args, progress=say, skip=done,
                                sink=lambda r: (r.update(commit=commit),
                                                partial.write(json.dumps(r, default=str) + "\n"), partial.flush()))
    asked = {r.id: r for r in records}
    systems = list(dict.fromkeys([r["system"] for r in results] + systems))
    report = {
        "data": str(args.data), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "reader": args.reader, "url": args.url if any(s in MODEL_SYSTEMS for s in systems) else None,
        "model": args.model, "systems": systems, "questions": len({r["id"] for r in results}),
        "categories": sorted({r["category"] for r in results}),
        "asked_after_last_turn": sum(r.asked_at > r.date for r in asked.values()),
        "settings": {"k": args.k, "context_tokens": args.context_tokens, "answer_tokens": args.answer_tokens,
                     "oracle_own": ORACLE_OWN},
        "commits": sorted({r.get("commit") or "unknown" for r in results}),
        "resumed": len(earlier),
        "seconds": time.perf_counter() - started,
        "rows": summarise(results, lambda r: (r["system"], r["category"])),
        "totals": summarise(results, lambda r: (r["system"],)),
    }
    report["goals"] = goals(report["rows"])
    report["plots"] = plot(results, out)
    (out / "results.json").write_text(json.dumps({**report, "results": results}, indent=1, default=str))
    (out / "report.md").write_text(markdown(report) + "\n")
    say(f"wrote {out / 'report.md'} and {out / 'results.json'} in {report['seconds']:.0f} s")
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
