"""The Python API programs use: open a store, ingest, read beliefs and explanations.

>>> import doxa
>>> mem = doxa.open(":memory:")
>>> mem.ingest_file("maya.jsonl")                         # doctest: +SKIP
>>> mem.belief("maya.diet").answers                       # doctest: +SKIP
{'vegetarian': 0.12, 'eats fish': 0.81, 'eats meat': 0.07}

Reads never change beliefs; each read is logged in ``reads`` so calibration can be
checked against outcomes later. Nothing here imports torch, pyro or pandas.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from doxa.data.store import SMALL_LOG, Store, StoreError, from_days, to_days

from .params import default_params, trust_for_source, with_defaults
from . import scorer

if TYPE_CHECKING:
    from . import feedback

DEFAULT_ACT_AT = 0.8


def utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def as_moment(at: "datetime | date | str | None") -> datetime | None:
    """An ``at`` as every reading function takes it: None (now), an ISO 8601 string
    ("2026-05-01", "2026-05-01T10:00:00+02:00"), a date, or a datetime (aware ones are
    converted to UTC). Raises ValueError saying what is accepted."""
    from doxa.data.times import parse_time

    if at is None:
        return None
    if isinstance(at, date) and not isinstance(at, datetime):
        at = datetime(at.year, at.month, at.day)
    return parse_time(at)


@dataclass
class Belief:
    """The probability of every answer to one question at one time."""

    question: str
    at: str
    answers: dict[str, float]
    top: str | None
    p_top: float
    act: bool
    params_version: int | None
    text: str = ""
    subject: str | None = None
    kind: str = ""
    n_evidence: int = 0
    n_settled: int = 0
    rejected: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvidenceTerm:
    """One evidence unit's contribution to a belief (docs/design.md §3, "Explanations")."""

    message: str
    sent_at: str
    text: str
    source: str
    source_path: str
    trust: float | None
    trust_from: str
    reader: str
    reader_probs: dict[str, float]
    unclear: float
    unrelated: float
    one_off: float
    llr_top: float | None  # log-likelihood ratio for the top answer at its time
    weight_left: float | None  # exp(-λ (T - t)): how much of it remains at the query time
    ignored: str | None = None


@dataclass
class Explanation:
    belief: Belief
    prior: dict[str, float]
    change_rate_per_day: float
    half_life_days: float | None
    terms: list[EvidenceTerm]
    settlements: list[dict[str, Any]]
    rejections: list[dict[str, Any]]
    calibration: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for s in out["settlements"] + out["rejections"]:
            for key, value in list(s.items()):
                if isinstance(value, datetime):
                    s[key] = value.isoformat()
        return out


class BeliefList(Sequence):
    """Many beliefs at one time, held as the scorer's arrays (a columnar result).

    A sequence of :class:`Belief`: ``len``, indexing, slicing and iteration behave like a
    list's, but each :class:`Belief` object is built only when that item is looked at, so
    scoring 100,000 questions does not also cost 100,000 Python objects. ``question_ids``,
    ``probs`` (Q, K_max; 0 beyond a question's options), ``p_top`` and ``act`` are the
    arrays themselves.
    """

    def __init__(self, at: datetime, beliefs: scorer.Beliefs, act_at: float):
        self.at = at
        self.beliefs = beliefs
        self.act_at = act_at
        qt = beliefs.evidence.questions
        self.questions = qt
        self.question_ids = qt.ids
        self.probs = np.round(beliefs.probs, 6)
        self.p_top = self.probs.max(axis=1) if len(self.probs) else np.zeros(0)
        self.top_index = beliefs.top
        # act on the reported (rounded) probability, so the flag and the number never disagree
        self.act = (self.p_top > 0) & (self.p_top >= act_at)
        self.params_version = beliefs.params_version
        self._rejected: dict[int, list[str]] | None = None
        self._stamp = at.isoformat()

    def __len__(self) -> int:
        return len(self.question_ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._make(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("belief index out of range")
        return self._make(index % n if n else index)

    def __iter__(self):
        return (self._make(i) for i in range(len(self)))

    def to_dicts(self) -> list[dict[str, Any]]:
        """``[b.to_dict() for b in self]``, built straight from the arrays (several times faster)."""
        qt, beliefs = self.questions, self.beliefs
        rejected = self._rejections()
        probs, p_top, top, act = self.probs.tolist(), self.p_top.tolist(), self.top_index.tolist(), self.act.tolist()
        n_evidence, n_settled = beliefs.n_evidence.tolist(), beliefs.n_settled.tolist()
        ids, texts, subjects, kinds = qt.ids.tolist(), qt.texts.tolist(), qt.subjects.tolist(), qt.kinds.tolist()
        return [{"question": str(ids[i]), "at": self._stamp, "answers": dict(zip(options, probs[i])),
                 "top": options[top[i]] if p_top[i] > 0 else None, "p_top": p_top[i], "act": act[i],
                 "params_version": self.params_version, "text": str(texts[i]), "subject": subjects[i],
                 "kind": str(kinds[i]), "n_evidence": n_evidence[i], "n_settled": n_settled[i],
                 "rejected": list(rejected.get(i, []))}
                for i, options in enumerate(qt.options)]

    def _rejections(self) -> dict[int, list[str]]:
        if self._rejected is None:
            ev = self.beliefs.evidence
            self._rejected = {}
            for qi, a in zip(ev.reject_q.tolist(), ev.reject_answer.tolist()):
                self._rejected.setdefault(qi, []).append(self.questions.options[qi][a])
        return self._rejected

    def _make(self, i: int) -> Belief:
        qt, beliefs = self.questions, self.beliefs
        options = qt.options[i]
        p_top = float(self.p_top[i])
        return Belief(
            question=str(qt.ids[i]), at=self._stamp,
            answers=dict(zip(options, self.probs[i, :len(options)].tolist())),
            top=options[int(self.top_index[i])] if p_top > 0 else None, p_top=p_top,
            act=bool(self.act[i]), params_version=self.params_version,
            text=str(qt.texts[i]), subject=qt.subjects[i], kind=str(qt.kinds[i]),
            n_evidence=int(beliefs.n_evidence[i]), n_settled=int(beliefs.n_settled[i]),
            rejected=list(self._rejections().get(i, [])),
        )


class Memory:
    """A doxa store plus the scorer. Create with :func:`doxa.open`."""

    def __init__(self, store: Store, *, act_at: float = DEFAULT_ACT_AT, log_reads: bool = True,
                 keep_states: bool = True):
        self.store = store
        self.act_at = act_at
        self.log_reads = log_reads
        #: read beliefs from the kept filter states (inference/read/states.py); off: filter every read from scratch
        self.keep_states = keep_states
        store.on_evidence_change = self._refresh_states
        store.entries_at_close = self._entries_at_close

    def _refresh_states(self, changes: dict[str, Any]) -> None:
        from . import states

        touched = changes.get("questions") or set()
        if self.keep_states and touched and not changes.get("structure") and len(touched) <= states.REFRESH_AT_INGEST:
            states.refresh(self.store, self.params(), sorted(touched))

    def _entries_at_close(self, question_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What reads of ``question_ids`` would keep beside the store (data/belief_cache.py), read
        by a writer just before it closes the store, so that their first read opens nothing."""
        if not self.keep_states:
            return {}
        from . import states

        at = utc_now()
        with self.store.reading():
            inputs = states.read_inputs(self.store, self.params(), question_ids, at)
            return states.cache_entries(inputs, at, self.store.rejections_up_to(inputs.questions, None))

    @classmethod
    def open(cls, path=None, *, lock_timeout: float | None = None, **kwargs) -> "Memory":
        """A Memory over the store at ``path``; the file is held only while an operation runs
        (see :class:`~doxa.data.store.Store`), so other processes read and write it meanwhile."""
        return cls(Store.open(path, lock_timeout=lock_timeout), **kwargs)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- ingest
    def ingest_file(self, path) -> dict[str, int]:
        return self.store.ingest_file(path)

    def ingest_lines(self, lines: Iterable[str]) -> dict[str, int]:
        return self.store.ingest_lines(lines)

    def ingest(self, records: Iterable[dict], *, also=None) -> dict[str, int]:
        """Ingest records, all or nothing. ``also(con)`` runs inside the same transaction (see Store.ingest_batch)."""
        return self.store.ingest_records(records, also=also)

    # ---------------------------------------------------------------- raw messages
    def remember(self, text: str, *, source: str, sent_at=None, **kwargs):
        """Keep a raw message, have the organizer and the reader do their part, return the beliefs it moved.

        See :func:`doxa.inference.agent.remember.remember` (``organizer=``, ``reader=``, ``keep_on_failure=``)."""
        from doxa.inference.agent.remember import remember

        return remember(self, text, source=source, sent_at=sent_at, **kwargs)

    def organize(self, **kwargs):
        """Finish the messages `remember` kept pending (see :func:`doxa.inference.agent.remember.organize_pending`)."""
        from doxa.inference.agent.remember import organize_pending

        return organize_pending(self, **kwargs)

    # ---------------------------------------------------------------- params
    def params(self) -> dict[str, Any]:
        version, body = self.store.latest_params()  # a read session of its own unless one is open
        if body is None:
            return default_params()
        return with_defaults(body, f"published parameter version {version} is malformed (`doxa train` publishes "
                                     "a new one)")

    # ---------------------------------------------------------------- beliefs
    def _score(self, question_ids: list[str] | None, at: datetime | None, with_messages: bool = False,
               subjects: list[str] | None = None):
        at = as_moment(at) or utc_now()
        evidence = self.store.load_evidence(at, question_ids, with_messages=with_messages, subjects=subjects)
        params = self.params()
        inputs = scorer.model_inputs(evidence, params)
        beliefs = scorer.score(evidence, params, to_days(at), inputs=inputs)
        return at, evidence, params, inputs, beliefs

    def _read(self, question_ids: list[str] | None, at: datetime | None,
              subjects: list[str] | None = None) -> tuple[datetime, scorer.Beliefs]:
        """Beliefs for `belief`, `beliefs` and `context`: from the kept states where they count."""
        at = as_moment(at) or utc_now()
        if not self.keep_states:
            at, _, _, _, beliefs = self._score(question_ids, at, subjects=subjects)
            return at, beliefs
        from . import states

        with self.store.reading():
            return at, states.beliefs_at(self.store, self.params(), question_ids, at, subjects=subjects)

    def _kept_belief(self, question_id: str, at: datetime) -> scorer.Beliefs | None:
        """One question's belief through what reads keep beside the store (data/belief_cache.py): from
        a kept entry that counts, opening nothing; else read from the store and kept for the next
        read. None where keeping does not apply: a store in memory, or one this process has open
        already (a write of its own may be half done), or while a writer has it."""
        if not self.keep_states or self.store.in_memory or self.store.is_open:
            return None
        from doxa.data import belief_cache

        from . import states

        # both read before the store is opened: see belief_cache
        current, stamp = belief_cache.generation(self.store.path), belief_cache.file_stamp(self.store.path)
        if current is None or stamp is None or stamp != current.stamp:
            return None
        t_query = to_days(at)
        if current.newest_days is None or t_query >= current.newest_days:  # else kept states do not count
            entry = belief_cache.load(self.store.path, question_id, current)
            if entry is not None and entry.get("format") == 1 and states.entry_counts_at(entry, t_query):
                return states.beliefs_from_inputs(states.inputs_from_entry(entry), t_query)
        with self.store.reading():
            self.store.question(question_id)  # clear error for unknown ids
            inputs = states.read_inputs(self.store, self.params(), [question_id], at)
            if len(inputs.questions.ids) == 1:
                kept = states.cache_entries(inputs, at, self.store.rejections_up_to(inputs.questions, None))
                if question_id in kept:
                    belief_cache.save(self.store.path, question_id, current.token, kept[question_id])
        return states.beliefs_from_inputs(inputs, t_query)

    def _beliefs_from(self, at: datetime, beliefs: scorer.Beliefs, act_at: float) -> "BeliefList":
        return BeliefList(at, beliefs, act_at)

    def scored(self, question_ids: list[str] | None = None, at: "datetime | str | None" = None, *,
               subjects: list[str] | None = None, act_at: float | None = None,
               with_messages: bool = False) -> tuple["BeliefList", Any]:
        """Beliefs of ``question_ids`` and of every question about ``subjects``, with the evidence
        they were computed from (``with_messages``: message ids and texts too). Nothing is logged:
        log what is answered with :meth:`log`."""
        with self.store.reading():
            at, evidence, _, _, beliefs = self._score(question_ids, at, with_messages=with_messages,
                                                      subjects=subjects)
        return self._beliefs_from(at, beliefs, act_at if act_at is not None else self.act_at), evidence

    def log(self, at: datetime, found: "Sequence[Belief]") -> None:
        """Record these beliefs in the read log (when logging is on), as every read does."""
        self._log(at, found)

    def _log(self, at: datetime, found: "Sequence[Belief]") -> None:
        if not self.log_reads or not len(found):
            return
        if isinstance(found, BeliefList) and len(found) > SMALL_LOG:
            beliefs, qt = found.beliefs, found.questions
            self.store.log_belief_matrix(qt.ids, at, beliefs.probs, qt.n_options, beliefs.params_version)
            return
        self.store.log_reads([(b.question, at, list(b.answers.values()), b.top or "", b.p_top, b.params_version)
                              for b in found])

    def belief(self, question_id: str, at: "datetime | str | None" = None, *, act_at: float | None = None) -> Belief:
        at = as_moment(at) or utc_now()
        beliefs = self._kept_belief(question_id, at)
        if beliefs is None:
            with self.store.reading():
                self.store.question(question_id)  # clear error for unknown ids
                at, beliefs = self._read([question_id], at)
        found = self._beliefs_from(at, beliefs, act_at if act_at is not None else self.act_at)
        if not found:
            raise StoreError(f"question {question_id!r} is not active (merged or split): `doxa beliefs` lists active ones")
        self._log(at, found)
        return found[0]

    def beliefs(self, subject: str | None = None, at: "datetime | str | None" = None, *,
                question_ids: list[str] | None = None, act_at: float | None = None) -> "BeliefList":
        """Every active belief (or a subject's, or the named questions'), in question-id order.

        The result is a :class:`BeliefList`: a sequence computed as arrays in one pass,
        whose :class:`Belief` objects are made only when an item is looked at.
        """
        with self.store.reading():
            if subject is not None:
                question_ids = self._subject_question_ids(subject)
            at, beliefs = self._read(question_ids, at)
        found = self._beliefs_from(at, beliefs, act_at if act_at is not None else self.act_at)
        self._log(at, found)
        return found

    def _subject_question_ids(self, subject: str) -> list[str]:
        question_ids = self.store.question_ids_for_subject(subject)
        if not question_ids and subject not in {s["id"] for s in self.store.subjects()}:
            raise StoreError(f"no subject {subject!r}: known subjects are listed by `doxa beliefs`")
        return question_ids

    def refresh_states(self, question_ids: list[str] | None = None) -> int:
        """Recompute the kept filter states (of ``question_ids``, or all) in one write; returns how many.

        `doxa train` keeps every state and an ingest those it touches, so this is needed only
        after bulk imports or merges, when reads would otherwise filter many questions anew.
        """
        from . import states

        return states.refresh(self.store, self.params(), question_ids)

    # ---------------------------------------------------------------- explanations
    def explain(self, question_id: str, at: "datetime | str | None" = None) -> Explanation:
        with self.store.reading():
            return self._explain(question_id, at)

    def _explain(self, question_id: str, at: datetime | None) -> Explanation:
        question = self.store.question(question_id)
        at, evidence, params, inputs, beliefs = self._score([question_id], at, with_messages=True)
        found = self._beliefs_from(at, beliefs, self.act_at)
        if not found:
            raise StoreError(f"question {question_id!r} is not active (merged or split)")
        belief = found[0]
        options = list(question["options"])
        k = len(options)
        top_j = options.index(belief.top) if belief.top in options else 0
        rate = float(inputs.rate[0])
        t_query = to_days(at)
        counted = {}
        if evidence.message is not None:
            for row, mid in enumerate(evidence.message.tolist()):
                counted[mid] = row
        alpha_by_source = dict(zip(evidence.sources.ids.tolist(), zip(
            [float(a) for a in scorer.source_trust(evidence, params)[0]], inputs.trust_node.tolist())))
        terms = []
        for item in self.store.evidence_for_explain(question_id, at):
            row = counted.get(item["message"]) if item["ignored"] is None else None
            reader_probs = {o: float(p) for o, p in zip(options, item["probs"])}
            if row is not None and evidence.reader[row] != item["reader"]:
                row = None
                item["ignored"] = "another reader's reading of the same message counts instead"
            if item["ignored"] is None and row is None:
                item["ignored"] = "not counted"
            if row is not None:
                like = inputs.likelihood[row]
                llr = scorer.log_likelihood_ratio(like, top_j, k)
                weight = math.exp(-rate * max(t_query - evidence.t[row], 0.0))
                alpha, node = alpha_by_source.get(item["source"], (None, ""))
                if math.isnan(inputs.trust[row]):
                    node = f"confusion matrix ({node})"
            elif item["is_assistant"]:
                llr = weight = alpha = None
                node = "never evidence"
            else:
                llr = weight = None
                stated = item["stated_trust"]
                alpha, node = trust_for_source(params, item["path"], stated)
            terms.append(EvidenceTerm(
                message=item["message"], sent_at=item["sent_at"].isoformat(), text=item["text"],
                source=item["source"], source_path=item["path"], trust=alpha, trust_from=node,
                reader=item["reader"], reader_probs=reader_probs, unclear=float(item["unclear"]),
                unrelated=float(item["unrelated"]), one_off=float(item["one_off"]),
                llr_top=llr, weight_left=weight, ignored=item["ignored"],
            ))
        prior = {o: float(inputs.prior[0, j]) for j, o in enumerate(options)}
        return Explanation(
            belief=belief, prior=prior, change_rate_per_day=rate,
            half_life_days=(math.log(2) / rate) if rate > 0 else None,
            terms=terms, settlements=self.store.settlements([question_id]),
            rejections=self.store.rejections(question_id), calibration=params["calibration"],
        )

    # ---------------------------------------------------------------- feedback (settled facts)
    # Each verb writes one docs/formats.md record through :meth:`ingest` and is idempotent; see
    # doxa.inference.read.feedback for what is recorded and how a repeat is recognised.
    def correct(self, question: str, answer: str, *, at: datetime | str | None = None,
                by: str = "user") -> feedback.Feedback:
        """The user corrected the assistant: ``question``'s answer is ``answer`` (a settlement)."""
        return _feedback().settle(self, "correct", question, answer, at=at, by=by)

    def approve(self, question: str, answer: str | None = None, *, at: datetime | str | None = None,
                by: str = "user") -> feedback.Feedback:
        """The user approved what was proposed: ``answer``, by default the top answer at ``at``,
        recorded with the probability doxa gave it then."""
        return _feedback().settle(self, "approve", question, answer, at=at, by=by)

    def outcome(self, question: str, answer: str, *, how: str, at: datetime | str | None = None,
                by: str = "world") -> feedback.Feedback:
        """The world showed the answer (``how``: "the parcel arrived")."""
        verbs = _feedback()
        if not how or not how.strip():
            raise verbs.FeedbackError("an outcome needs how the world showed it, e.g. how=\"the parcel arrived\"")
        return verbs.settle(self, "outcome", question, answer, at=at, by=by, note=how)

    def reject(self, question: str, answer: str, *, at: datetime | str | None = None,
               by: str = "user") -> feedback.Feedback:
        """The user says ``answer`` is not it: it reads 0 from ``at`` on."""
        return _feedback().reject(self, question, answer, at=at, by=by)

    def instruct(self, subject: str | None, text: str, *, at: datetime | str | None = None, by: str = "user",
                 rests_on: dict[str, str] | None = None) -> feedback.Feedback:
        """A directive from the user (never a belief, never evidence); ``rests_on``:
        ``{"question": ..., "answer": ...}``, the belief it presumes."""
        return _feedback().instruct(self, subject, text, at=at, by=by, rests_on=rests_on)

    def uncertain(self, subject: str | None = None, at: datetime | None = None, *, act_at: float | None = None,
                  limit: int | None = None) -> list[feedback.Uncertain]:
        """The beliefs to ask about before acting — below the act threshold, or with an instruction
        resting on another answer — most useful first (doxa.inference.read.feedback defines "useful")."""
        question_ids = self._subject_question_ids(subject) if subject is not None else None
        return _feedback().uncertain(self, question_ids, at, act_at=act_at, limit=limit)


def _feedback():
    """doxa.inference.read.feedback, imported at the first feedback verb: a read does not need it,
    and a fresh `doxa belief` process pays for every module it imports."""
    from . import feedback

    return feedback


@contextmanager
def open_store(path=None, **kwargs) -> Iterator[Memory]:
    """The store for one operation: opened here, closed (the file released) when the block ends.

    Long-lived owners (the MCP server) open the store through this for every request rather
    than hold the file, so other processes (`doxa train`, the CLI) can use it between requests.
    """
    memory = Memory.open(path, **kwargs)
    try:
        yield memory
    finally:
        memory.close()


__all__ = ["Memory", "Belief", "open_store", "BeliefList", "Explanation", "EvidenceTerm", "utc_now", "as_moment",
           "from_days", "np"]
