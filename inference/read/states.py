"""Kept filter states: a read costs what it must, not what the store holds.

The scorer's belief in question ``q`` at time ``T`` is the forward filter run over its
events, then decayed to ``T`` (scorer.py). Everything before the decay depends only on
the evidence and the parameters, not on ``T``; so the state after each question's last
event is kept in ``belief_states`` with the parameter version and the evidence epoch it
was computed under, and a read at ``T ≥ last event`` (and after the store's newest message:
the states count each source's whole history, see model/independence.py) is

    b = ρ s + (1 - ρ) π,   ρ = exp(-λ (T - t_last))        (scorer.decay_states)
    b_j ← 0 for options rejected by T; renormalise; the calibration map

— a vectorised pass over Q × K numbers. A kept state counts only while its parameter
version is the newest and no evidence of its question (nor a merge, split or undo) came
after its epoch (:func:`doxa.data.bookkeeping.mark_evidence_changed`); any other question, or a
read at a time before its last event, is filtered from its evidence as before. Both
paths run the same numpy operations, so they agree to rounding (the property test asks
1e-12).

Who keeps them: `doxa train` computes every question's state from the evidence it fitted
on and writes them with the version it publishes, refreshing in the same write those of
the questions ingested while it fitted (:func:`refresh_changed_since`); each ingest that
touches a few questions refreshes theirs in its own write (:func:`refresh`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from doxa.data.evidence import Evidence, QuestionTable
from doxa.data.store import Store
from doxa.data.times import to_days

from .params import typed, with_defaults
from . import scorer

if TYPE_CHECKING:
    from doxa.data.params_document import ParamsDocument

#: An ingest refreshes the kept states of at most this many questions in its own write; a
#: bigger one leaves them to the nightly job (reads filter those questions meanwhile).
REFRESH_AT_INGEST = 2000


@dataclass
class States:
    """Filter states after each question's last event, in the question order of ``questions``."""

    questions: QuestionTable
    state: np.ndarray  # (Q, K_max)
    last_t: np.ndarray  # (Q,) days; NaN for a question without events (state = prior)
    n_evidence: np.ndarray  # (Q,)
    n_settled: np.ndarray  # (Q,)
    #: (Q, K_max) the base rates each state decays toward where its evidence made them (an open
    #: question's, doxa.model.named_values); NaN rows: the question's from the parameters
    base: np.ndarray | None = None


def version_key(params: dict[str, Any]) -> int:
    """The parameter version states are kept under (0: the defaults, nothing trained yet)."""
    return int(params.get("version") or 0)


def compute(evidence: Evidence, params: "ParamsDocument | dict[str, Any]") -> States:
    """Every question's state after its last event (all of ``evidence``, whatever its cut)."""
    params = typed(params)
    inputs = scorer.model_inputs(evidence, params)
    q, t, like = scorer.events(evidence, inputs.likelihood)
    state, _, last_t = scorer.filter_states(inputs.prior, inputs.rate, q, t, like,
                                            scorer.event_change(evidence, inputs.change), inputs.event_prior)
    n_q = len(evidence.questions.ids)
    base = np.where(evidence.questions.is_open[:, None], inputs.prior, np.nan)
    return States(questions=evidence.questions, state=state, last_t=last_t,
                  n_evidence=np.bincount(evidence.q, minlength=n_q),
                  n_settled=np.bincount(evidence.settle_q, minlength=n_q), base=base)


def write(store: Store, states: States, params: dict[str, Any], epoch: int, *, replace_all: bool = False) -> None:
    """Keep ``states`` (computed from the evidence as of ``epoch``); inside the caller's write."""
    store.write_states(states.questions.ids, states.questions.n_options, states.state, states.last_t,
                       states.n_evidence, states.n_settled, version_key(params), epoch, replace_all=replace_all,
                       base=states.base)


def refresh(store: Store, params: dict[str, Any], question_ids: list[str] | None) -> int:
    """Recompute and keep the states of ``question_ids`` (None: every question) now.

    Runs inside a write session (no other process changes the evidence meanwhile), so the
    states are those of the current epoch. Returns how many were kept.
    """
    with store.writing():
        epoch = store.evidence_epoch()
        evidence = store.load_evidence(None, question_ids)
        states = compute(evidence, params)
        write(store, states, params, epoch, replace_all=question_ids is None)
    return len(states.questions.ids)


def refresh_changed_since(store: Store, params: dict[str, Any], epoch: int) -> int:
    """Inside a write that kept states computed as of ``epoch`` (a publish): recompute those of
    the questions whose evidence changed after it (ingests during the fit), so reads find
    every state usable; more than :data:`REFRESH_AT_INGEST` of them, or a merge, split or
    undo after ``epoch``, are left to be read from their evidence. Returns how many were kept.
    """
    changed = store.questions_changed_since(epoch)
    if not changed or len(changed) > REFRESH_AT_INGEST:
        return 0
    return refresh(store, params, changed)


@dataclass
class ReadInputs:
    """What beliefs at one time are computed from, before the decay to that time."""

    questions: QuestionTable
    state: np.ndarray  # (Q, K_max): after each question's last event (the prior where it has none)
    last_t: np.ndarray  # (Q,) days; NaN without events
    n_evidence: np.ndarray
    n_settled: np.ndarray
    prior: np.ndarray  # (Q, K_max)
    rate: np.ndarray  # (Q,) changes per day
    rejections: dict[str, np.ndarray]  # q, t (days), answer: those at or before the read's time
    calibration: dict[str, Any]
    params_version: int | None
    newest: datetime | None  # the store's newest evidence then (Store.newest_evidence_time)


def read_inputs(store: Store, params: dict[str, Any], question_ids: list[str] | None, at: datetime,
                subjects: list[str] | None = None) -> ReadInputs:
    """The inputs of beliefs at ``at``: kept states where they count, the rest filtered from evidence.
    ``params`` is the JSON document: its calibration map is kept, as it is, with the inputs."""
    params = with_defaults(params)
    document = typed(params)
    t_query = to_days(at)
    with store.reading():
        if subjects is not None and question_ids is None:
            question_ids = []
        questions = store.question_table(question_ids, subjects=subjects)
        kept = store.kept_states(questions, version_key(params))
        usable = kept["found"] & ~(kept["last_t"] > t_query)  # NaN (no events) is usable at any time
        newest = store.newest_evidence_time()
        if newest is not None and t_query < to_days(newest):
            # states count each source's whole history, which may be longer than it was by then
            usable &= np.isnan(kept["last_t"])
        missing = np.flatnonzero(~usable)
        fresh = None
        if len(missing):
            ids = questions.ids[missing].tolist()
            fresh = store.load_evidence(at, ids)
        rejections = store.rejections_up_to(questions, at)
    n_q, k_max = len(questions.ids), questions.k_max
    state = np.zeros((n_q, k_max))
    last_t = np.full(n_q, np.nan)
    n_evidence = np.zeros(n_q, dtype=np.int64)
    n_settled = np.zeros(n_q, dtype=np.int64)
    have = np.flatnonzero(usable)
    state[have] = kept["state"][have, :k_max]
    last_t[have] = kept["last_t"][have]
    n_evidence[have] = kept["n_evidence"][have]
    n_settled[have] = kept["n_settled"][have]
    prior, rate = scorer.question_priors(_only_questions(questions), document)
    own = np.flatnonzero(usable & ~np.isnan(kept["base"][:, 0])) if n_q else np.zeros(0, np.int64)
    prior[own] = kept["base"][own, :k_max]  # an open question's, as its evidence left them
    if fresh is not None:
        # the loaded questions are those missing, in the same id order
        computed = compute(fresh, document)
        state[missing] = _width(computed.state, k_max)
        based = ~np.isnan(computed.base[:, 0]) if len(missing) else np.zeros(0, dtype=bool)
        prior[missing[based]] = _width(computed.base, k_max)[based]
        last_t[missing] = computed.last_t
        n_evidence[missing] = computed.n_evidence
        n_settled[missing] = computed.n_settled
    return ReadInputs(questions=questions, state=state, last_t=last_t, n_evidence=n_evidence, n_settled=n_settled,
                      prior=prior, rate=rate, rejections=rejections, calibration=params["calibration"],
                      params_version=params.get("version"), newest=newest)


def _width(rows: np.ndarray, k_max: int) -> np.ndarray:
    """``rows`` (Q, K) cut or padded with zeros to ``k_max`` columns."""
    return rows[:, :k_max] if rows.shape[1] >= k_max else np.pad(rows, ((0, 0), (0, k_max - rows.shape[1])))


def beliefs_from_inputs(inputs: ReadInputs, t_query: float) -> scorer.Beliefs:
    """Beliefs at ``t_query`` (days): the kept states decayed to it, rejections, the calibration map."""
    return scorer.beliefs_from_states(_only_questions(inputs.questions, inputs.rejections), inputs.state,
                                      inputs.prior, inputs.rate, inputs.last_t, t_query, inputs.calibration,
                                      n_evidence=inputs.n_evidence, n_settled=inputs.n_settled,
                                      params_version=inputs.params_version)


def beliefs_at(store: Store, params: dict[str, Any], question_ids: list[str] | None, at: datetime,
               subjects: list[str] | None = None) -> scorer.Beliefs:
    """Beliefs at ``at`` from the kept states, filtering only the questions without a usable one.

    Same result as ``scorer.score(store.load_evidence(at, question_ids), params, at)``.
    """
    return beliefs_from_inputs(read_inputs(store, params, question_ids, at, subjects), to_days(at))


# ------------------------------------------------------------------------ kept beside the store
_QUESTION_FIELDS = ("ids", "subjects", "kinds", "texts", "shapes", "options_key")


#: A kept entry counts only this long (days) after the question's last rejection, so that no
#: rounding of the two clocks' day numbers can put a rejection on the wrong side of a read.
REJECTION_MARGIN_DAYS = 1e-6


def cache_entries(inputs: ReadInputs, at: datetime, all_rejections: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """``inputs`` read at ``at``, as one JSON entry per question for :mod:`doxa.data.belief_cache`
    (question id → entry). Kept are only inputs read at or after the store's newest evidence (they
    hold all of it; else there are none), with *every* rejection of each question
    (``all_rejections``, indexed as ``inputs``); they count for reads from then on
    (:func:`entry_counts_at`), and before that a read filters as usual. Each entry is what a read
    of its question alone would keep: one question's table, state and prior, its rejections."""
    qt = inputs.questions
    newest = to_days(inputs.newest) if inputs.newest is not None else -np.inf
    if to_days(at) < newest:
        return {}
    entries = {}
    for i, question in enumerate(qt.ids.tolist()):
        k = int(qt.n_options[i])
        mine = all_rejections["q"] == i
        times = [float(t) for t in all_rejections["t"][mine]]
        entries[question] = {
            "format": 1,
            "table": {name: [np.asarray(getattr(qt, name), dtype=object)[i]] for name in _QUESTION_FIELDS}
                        | {"options": [list(qt.options[i])], "n_options": [k], "option_group": [0],
                           "id_hash": [int(qt.id_hash[i])], "is_open": [bool(qt.is_open[i])]},
            "state": [inputs.state[i, :k].tolist()], "last_t": [float(inputs.last_t[i])],
            "n_evidence": [int(inputs.n_evidence[i])], "n_settled": [int(inputs.n_settled[i])],
            "prior": [inputs.prior[i, :k].tolist()], "rate": [float(inputs.rate[i])],
            "rejections": {"q": [0] * len(times), "t": times, "answer": all_rejections["answer"][mine].tolist()},
            "calibration": inputs.calibration, "params_version": inputs.params_version,
            "newest_days": newest, "last_rejection_days": max(times, default=-np.inf),
        }
    return entries


def entry_counts_at(entry: dict[str, Any], t_query: float) -> bool:
    """Whether a kept entry gives the belief at ``t_query`` (days): at or after the newest evidence
    it was read with (as kept states count, :func:`read_inputs`), after its last rejection."""
    return t_query >= entry["newest_days"] and t_query > entry["last_rejection_days"] + REJECTION_MARGIN_DAYS


def inputs_from_entry(entry: dict[str, Any]) -> ReadInputs:
    """The inputs of one question kept by :func:`cache_entries`."""
    q = entry["table"]
    questions = QuestionTable(
        ids=np.asarray(q["ids"], dtype=object), subjects=np.asarray(q["subjects"], dtype=object),
        kinds=np.asarray(q["kinds"], dtype=object), texts=np.asarray(q["texts"], dtype=object),
        shapes=np.asarray(q["shapes"], dtype=object), options=[list(o) for o in q["options"]],
        n_options=np.asarray(q["n_options"], dtype=np.int64), options_key=np.asarray(q["options_key"], dtype=object),
        option_group=np.asarray(q["option_group"], dtype=np.int64), id_hash=np.asarray(q["id_hash"], dtype=np.uint64),
        is_open=np.asarray(q.get("is_open", [False]), dtype=bool))  # an entry kept before open questions: closed
    r = entry["rejections"]
    inputs = ReadInputs(
        questions=questions, state=np.asarray(entry["state"], dtype=np.float64),
        last_t=np.asarray(entry["last_t"], dtype=np.float64),
        n_evidence=np.asarray(entry["n_evidence"], dtype=np.int64),
        n_settled=np.asarray(entry["n_settled"], dtype=np.int64),
        prior=np.asarray(entry["prior"], dtype=np.float64), rate=np.asarray(entry["rate"], dtype=np.float64),
        rejections={"q": np.asarray(r["q"], dtype=np.int64), "t": np.asarray(r["t"], dtype=np.float64),
                    "answer": np.asarray(r["answer"], dtype=np.int64)},
        calibration=entry["calibration"], params_version=entry["params_version"], newest=None)
    return inputs


def _only_questions(questions: QuestionTable, rejections: dict[str, np.ndarray] | None = None) -> Evidence:
    """An :class:`Evidence` holding the questions (and their rejections) and no readings."""
    from doxa.data.evidence import SourceTable

    none_i, none_f = np.zeros(0, dtype=np.int64), np.zeros(0)
    rejections = rejections or {"q": none_i, "t": none_f, "answer": none_i}
    return Evidence(
        questions=questions, q=none_i, t=none_f, source_index=none_i, reader_index=none_i,
        probs=np.zeros((0, questions.k_max)), unclear=none_f, unrelated=none_f, one_off=none_f,
        settle_q=none_i, settle_t=none_f, settle_answer=none_i, settle_how=np.zeros(0, dtype=object),
        reject_q=rejections["q"], reject_t=rejections["t"], reject_answer=rejections["answer"],
        sources=SourceTable(ids=np.zeros(0, dtype=object), paths=np.zeros(0, dtype=object), trust=none_f),
        readers=np.zeros(0, dtype=object),
    )


__all__ = ["States", "ReadInputs", "compute", "write", "refresh", "refresh_changed_since", "read_inputs",
           "beliefs_from_inputs", "beliefs_at", "cache_entries", "entry_counts_at", "inputs_from_entry", "version_key", "REFRESH_AT_INGEST"]
