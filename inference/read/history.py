"""The history of a belief: the top answer and its probability after each change of evidence.

`doxa history Q` (and ``mem.history(q)``) answers "what did doxa believe, and when did that change?".
A point is made at each distinct time one of the question's events happened — a reading of a
message sent then, a settlement, a rejection — and holds the belief as of that time: what
``mem.belief(q, at=that time)`` gives, from the evidence up to it. ``changes`` lists the
points where the top answer differs from the point before.

It is the scorer's filter (:mod:`doxa.inference.read.scorer`) run once over the question's
events, keeping the state after each event instead of only the last:

1. the evidence up to the window's end is loaded once, its likelihoods computed once
   (:func:`~doxa.inference.read.scorer.model_inputs`) and merged with the settlements into the
   one event stream (:func:`~doxa.inference.read.scorer.events`);
2. :func:`filter_path` runs the filter's recursion over that stream, one step per event, keeping
   each step's state (the steps of :func:`~doxa.inference.read.scorer.filter_states`; no re-run per
   event);
3. every point's belief is then assembled at once, as arrays: the state of the point's last
   event decayed to the point (:func:`~doxa.inference.read.scorer.decay_states`), the options
   rejected by then set to 0, the calibration map
   (:func:`~doxa.inference.read.scorer.apply_calibration`) — the assembly every read ends in.

Each reading is weighed as the evidence up to the window's end weighs it. That equals a read at
the point's time except where a group of same-answer readings (a burst of fresh sources, or one
source repeating itself within two days: :mod:`doxa.model.independence`) straddles the point:
the history then discounts the group's first readings as the whole group, a read made at the
time could not yet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from doxa.data.errors import StoreError
from doxa.data.store import Store
from doxa.data.times import from_days, to_days

from .params import published, typed
from . import scorer


@dataclass
class HistoryPoint:
    """The belief right after the events at one time."""

    at: str
    top: str | None
    p: float
    probs: dict[str, float]
    act: bool
    #: the last event at this time: {"kind": "reading", "message", "source", "stated"} or
    #: {"kind": "settlement", "answer", "how"} or {"kind": "rejection", "answer"}
    event: dict[str, Any]
    #: the other events at this same time, in the filter's order (usually none)
    also: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class History:
    question: str
    text: str
    subject: str | None
    start: str | None
    end: str
    act_at: float
    params_version: int | None
    points: list[HistoryPoint]
    #: where the top answer changed from the point before: {"at", "from", "to"}
    changes: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def filter_path(prior: np.ndarray, rate: float, t: np.ndarray, like: np.ndarray,
                change: np.ndarray | None = None, event_prior: np.ndarray | None = None) -> np.ndarray:
    """(N, K) the filter state after each of one question's N events (sorted by time).

    The recursion of :func:`doxa.inference.read.scorer.filter_states`, step for step — decay
    toward the prior by ``ρ = exp(-λ Δt)`` (weighed by a reported change's ``g(same), g(differ)``,
    ``change`` (N, 2)) — toward each step's own base rates where they change along the way
    (``event_prior`` (N, K), an open question's) — Bayes with the event's likelihood, restart from
    the evidence alone where it is impossible under the belief — for one question, keeping every state.
    """
    n = len(t)
    out = np.empty((n, prior.shape[0]))
    b = (prior if event_prior is None or not n else event_prior[0]).copy()
    rho = np.exp(-rate * np.maximum(np.diff(t, prepend=t[:1]), 0.0)) if n else np.zeros(0)
    for i in range(n):
        base = prior if event_prior is None else event_prior[i]
        if i > 0 and change is not None:
            moved = (1.0 - rho[i]) * base
            b = change[i, 0] * b * (rho[i] + moved) + change[i, 1] * moved * (1.0 - b)
        elif i > 0:
            b *= rho[i]
            b += (1.0 - rho[i]) * base
        b *= like[i]
        z = b.sum()
        if z <= scorer._TINY:  # as the scorer: evidence impossible under the belief
            b = like[i].copy()
            z = b.sum()
        b /= z
        out[i] = b
    return out


def _event_order(evidence) -> np.ndarray:
    """The order :func:`doxa.inference.read.scorer.events` merges readings and settlements in, for
    one question: row i < N is reading i, row N + j settlement j."""
    order = scorer.event_order(evidence)
    return np.arange(len(evidence.t)) if order is None else order


def history(store: Store, question_id: str, *, start: datetime | None, end: datetime,
            act_at: float) -> History:
    """The belief in ``question_id`` after each change of its evidence up to ``end``; the points
    from ``start`` on (None: from the first). See the module docstring."""
    with store.reading():
        q = store.question(question_id)
        if q["status"] != "active":
            raise StoreError(f"question {question_id!r} is {q['status']}: `doxa beliefs` lists active ones")
        evidence = store.load_evidence(end, [question_id], with_messages=True)
        params = published(store)
    document = typed(params)
    qt = evidence.questions
    if len(qt.ids) != 1:
        raise StoreError(f"question {question_id!r} is not active: `doxa beliefs` lists active ones")
    options = list(qt.options[0])
    k = int(qt.n_options[0])
    inputs = scorer.model_inputs(evidence, document)
    _, t, like = scorer.events(evidence, inputs.likelihood)
    prior, rate = inputs.prior[0], float(inputs.rate[0])
    steps = inputs.event_prior
    states = filter_path(prior, rate, t, like, scorer.event_change(evidence, inputs.change), steps)
    # what a point decays toward after its last event: the base rates as that event left them (an open
    # question's grow as values are named: the next step's, or the last ones after the last event)
    after = np.tile(prior, (len(t), 1)) if steps is None else np.vstack([steps[1:], prior[None, :]])
    before_any = prior if steps is None or not len(t) else steps[0]

    # the events, described in the filter's order; then the rejections
    described = _reading_events(evidence, options) + [
        {"kind": "settlement", "answer": options[a], "how": str(h)}
        for a, h in zip(evidence.settle_answer.tolist(), evidence.settle_how.tolist())]
    everything = [described[i] for i in _event_order(evidence).tolist()] + [
        {"kind": "rejection", "answer": options[a]} for a in evidence.reject_answer.tolist()]

    # one point per distinct time of an event or a rejection
    point_t, group_of = np.unique(np.r_[t, evidence.reject_t], return_inverse=True)
    n_points = len(point_t)
    last = np.searchsorted(t, point_t, side="right") - 1  # each point's last filter event (-1: none yet)
    has = last >= 0
    state = np.tile(before_any, (n_points, 1))
    state[has] = states[last[has]]
    base = np.tile(before_any, (n_points, 1))
    base[has] = after[last[has]]
    last_t = np.full(n_points, np.nan)
    last_t[has] = t[last[has]]
    raw = scorer.decay_states(state, base, np.full(n_points, rate), last_t, point_t)
    if len(evidence.reject_t):  # the options rejected by each point read 0 (scorer.apply_rejections, per point)
        onehot = np.zeros((len(evidence.reject_t), raw.shape[1]))
        onehot[np.arange(len(evidence.reject_t)), evidence.reject_answer] = 1.0
        ruled_out = (evidence.reject_t[None, :] <= point_t[:, None]).astype(np.float64) @ onehot > 0
        raw = np.where(ruled_out, 0.0, raw)
        total = raw.sum(axis=1, keepdims=True)
        raw = np.where(total > 0, raw / np.where(total > 0, total, 1.0), raw)
    probs = np.round(scorer.apply_calibration(document.calibration, raw), 6)[:, :k]
    top = probs.argmax(axis=1) if n_points else np.zeros(0, dtype=np.int64)
    p_top = probs.max(axis=1) if n_points else np.zeros(0)

    groups: list[list[dict[str, Any]]] = [[] for _ in range(n_points)]
    for index, event in zip(group_of.reshape(-1).tolist(), everything):
        groups[index].append(event)
    points = [HistoryPoint(at=from_days(x).isoformat(), top=options[j] if p > 0 else None, p=p,
                           probs=dict(zip(options, row)), act=bool(p > 0 and p >= act_at), event=g[-1], also=g[:-1])
              for x, j, p, row, g in zip(point_t.tolist(), top.tolist(), p_top.tolist(), probs.tolist(), groups)]
    changed = [i for i in range(1, n_points) if points[i].top != points[i - 1].top]
    shown = np.ones(n_points, dtype=bool) if start is None else point_t >= to_days(start)
    changes = [{"at": points[i].at, "from": points[i - 1].top, "to": points[i].top} for i in changed if shown[i]]
    return History(question_id, q["text"], q["subject"], _stamp(start), end.isoformat(), act_at,
                   document.version, [pt for pt, keep in zip(points, shown.tolist()) if keep], changes)


def _reading_events(evidence, options: list[str]) -> list[dict[str, Any]]:
    """One description per counted reading: the message, its source, the option the reader put first."""
    n = len(evidence.t)
    if n == 0:
        return []
    k = len(options)
    stated = np.argmax(evidence.probs[:, :k], axis=1).tolist()
    messages = evidence.message.tolist() if evidence.message is not None else [None] * n
    sources = evidence.source.tolist()
    return [{"kind": "reading", "message": m, "source": s, "stated": options[j]}
            for m, s, j in zip(messages, sources, stated)]


def _stamp(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


__all__ = ["History", "HistoryPoint", "history", "filter_path"]
