"""The closed-form scorer: the exact posterior of docs/design.md §2 under fitted parameters (numpy only).

For question ``q`` (``K`` options, kind ``k``) the belief at time ``T`` is a forward
filter over its events in time order::

    b ← π_k
    for each event i at time t_i:
        b ← ρ_i b + (1 - ρ_i) π_k,          ρ_i = exp(-λ_k (t_i - t_{i-1}))   (decay toward the prior;
                                             a reading that reports a change weighs the two ways
                                             there, doxa.model.changes)
        b ← b ⊙ L_i / Σ_j b_j L_i(j)                                          (Bayes)
    b ← ρ_T b + (1 - ρ_T) π_k,              ρ_T = exp(-λ_k (T - t_last))
    b_j ← 0 for rejected options; renormalise; apply the output calibration map
    (temperature T with an optional floor ε: b ← (1-ε) b^(1/T)/Z + ε/K_live; or isotonic).

A reading's likelihood, with ``u = unclear + unrelated``, ``o = one_off``, the reader's
probabilities ``r`` renormalised over the options and tempered ``r̃ ∝ r^(1/τ)``::

    L_i(j) = (1 - c_i w_i) / K + c_i w_i · B_i(j),   w_i = (1-u)(1-o)
    B_i(j) = ᾱ r̃_j + (1-ᾱ)(1-r̃_j)/(K-1),  ᾱ = max(α_s, 1/K)   (one number of trust)
    B_i(j) = Σ_c r̃_c C_s[j, c]                        (a biased source's confusion matrix)

The floor ``ᾱ ≥ 1/K`` makes a source whose trust says it is noise move beliefs toward
nothing: only a confusion matrix (fitted where settled facts show a source systematically
states a wrong answer) can make a statement count against what it states.

``c_i`` is the reading's independent share (:mod:`doxa.model.independence`): 1 for most
readings, ``1/n`` for each of ``n`` same-answer readings of one campaign of fresh sources
or of one source repeating itself, so together they count about once.

A settlement is ``L = one-hot(answer)`` at its time. With ``λ = 0`` the filter is the
familiar sum ``log p_j/p_m = log π_j/π_m + Σ_i log L_i(j)/L_i(m)``.

Everything is vectorised over all questions at once: events are sorted by
(question, time) and processed rank by rank (the n-th event of every question in one
numpy step, on contiguous slices), so the Python loop runs max-events-per-question
times, not once per event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from doxa.data.evidence import Evidence, named_states
from doxa.model import changes, named_values
from doxa.model.independence import independent_share

from .params import (confusion_for_source, kind_change_rate, kind_prior, new_value_weight, reader_temperature,
                     trust_for_source, typed)

if TYPE_CHECKING:
    from doxa.data.params_document import Calibration, ParamsDocument

# Every entry below that takes ``params`` takes the typed document (a :class:`ParamsDocument`);
# one given as a dict (JSON, as the store and the fit hold it) is typed once, at the entry, by
# :func:`doxa.inference.read.params.typed`.

_TINY = 1e-300


@dataclass
class ModelInputs:
    """Per-question priors/rates and per-reading likelihoods under one parameter document."""

    prior: np.ndarray  # (Q, K_max), 0 beyond K
    rate: np.ndarray  # (Q,) λ per day
    likelihood: np.ndarray  # (N, K_max) L_i(j), 0 beyond K
    trust: np.ndarray  # (N,) α used per reading (NaN where a confusion matrix was used)
    trust_node: np.ndarray  # (S,) object: the node or rule each source's trust came from
    #: (N, 2) ``g(same), g(differ)`` of each reading's reported change (:mod:`doxa.model.changes`);
    #: None: no reading reports one
    change: np.ndarray | None = None
    #: (E, K_max) the base rates each event's step decays toward, in :func:`events` order; None
    #: where they are ``prior``'s throughout (no open question: :func:`open_base_rates`)
    event_prior: np.ndarray | None = None


@dataclass
class Beliefs:
    """Beliefs of every question in an :class:`Evidence`, in its question order."""

    evidence: Evidence
    probs: np.ndarray  # (Q, K_max) calibrated belief, 0 beyond K
    raw: np.ndarray  # (Q, K_max) before the calibration map
    n_evidence: np.ndarray  # (Q,) readings counted
    n_settled: np.ndarray  # (Q,) settlements seen
    last_event: np.ndarray  # (Q,) time of the last event (NaN if none)
    params_version: int | None

    @property
    def top(self) -> np.ndarray:
        return np.argmax(self.probs, axis=1)

    @property
    def p_top(self) -> np.ndarray:
        return self.probs.max(axis=1)

    def answers(self, i: int) -> dict[str, float]:
        options = self.evidence.questions.options[i]
        return {o: float(self.probs[i, j]) for j, o in enumerate(options)}


# ---------------------------------------------------------------------------- inputs
def question_priors(evidence: Evidence, params: "ParamsDocument | dict[str, Any]") -> tuple[np.ndarray, np.ndarray]:
    """``π`` (Q, K_max) and ``λ`` (Q,), computed once per distinct (kind, options); an open
    question's ``π`` here is before any event (:func:`open_base_rates` gives its steps')."""
    params = typed(params)
    qt = evidence.questions
    k_max = qt.k_max
    first, group = qt.option_groups()
    group_prior = np.zeros((len(first), k_max))
    group_rate = np.zeros(len(first))
    for g, i in enumerate(first.tolist()):
        k = int(qt.n_options[i])
        # an open question's base rates before its evidence names a value: uniform over its states
        # (doxa.model.named_values; its events' own are open_base_rates')
        group_prior[g, :k] = 1.0 / k if qt.is_open[i] else kind_prior(params, str(qt.kinds[i]), qt.options[i])
        group_rate[g] = kind_change_rate(params, str(qt.kinds[i]))
    return np.take(group_prior, group, axis=0), np.take(group_rate, group)


def source_trust(evidence: Evidence, params: "ParamsDocument | dict[str, Any]") -> tuple[np.ndarray, np.ndarray]:
    """α per source (S,) and where it came from."""
    params = typed(params)
    src = evidence.sources
    alpha = np.empty(len(src.ids))
    where = np.empty(len(src.ids), dtype=object)
    for s, (path, stated) in enumerate(zip(src.paths.tolist(), src.trust.tolist())):
        alpha[s], where[s] = trust_for_source(params, path, None if math.isnan(stated) else stated)
    return alpha, where


def _renormalised(evidence: Evidence) -> np.ndarray:
    """r (N, K_max): the reader's probabilities renormalised over the states it covers (uniform
    where it gave none), before any temperature."""
    k = evidence.questions.n_options[evidence.q]
    mask = np.arange(evidence.probs.shape[1])[None, :] < k[:, None]
    named = mask if evidence.unnamed is None else named_states(evidence)
    r = np.where(mask, evidence.probs, 0.0)
    total = np.where(named, r, 0.0).sum(axis=1, keepdims=True)
    return np.where(total > 0, r / np.where(total > 0, total, 1.0), mask / k[:, None])


def tempered_reading(evidence: Evidence, params: "ParamsDocument | dict[str, Any]",
                     r: np.ndarray | None = None) -> np.ndarray:
    """r̃ (N, K_max): reader probabilities over the options, renormalised and tempered (``r``: the
    renormalised ones, :func:`_renormalised`, where the caller has them)."""
    params = typed(params)
    k = evidence.questions.n_options[evidence.q]
    mask = np.arange(evidence.probs.shape[1])[None, :] < k[:, None]
    # the states the reading's own probabilities cover: an open question's unnamed values copy its
    # ``unlisted`` column and are not counted twice in its total (they end up equal to r̃_unlisted)
    named = mask if evidence.unnamed is None else named_states(evidence)
    tau = np.array([reader_temperature(params, str(r)) for r in evidence.readers.tolist()])
    inv_tau = (1.0 / tau[evidence.reader_index])[:, None] if len(tau) else np.ones((0, 1))
    r = _renormalised(evidence) if r is None else r
    if np.all(tau == 1.0):  # untempered readers (the default): skip log/exp over every reading
        return r
    with np.errstate(divide="ignore"):
        logr = np.where(r > 0, np.log(np.where(r > 0, r, 1.0)), -np.inf) * inv_tau
    logr = np.where(mask, logr, -np.inf)
    peak = logr.max(axis=1, keepdims=True)
    w = np.exp(logr - np.where(np.isfinite(peak), peak, 0.0))
    w = np.where(mask, w, 0.0)
    total = np.where(named, w, 0.0).sum(axis=1, keepdims=True)
    return w / np.where(total > 0, total, 1.0)


def model_inputs(evidence: Evidence, params: "ParamsDocument | dict[str, Any]") -> ModelInputs:
    params = typed(params)
    prior, rate = question_priors(evidence, params)
    alpha_src, where = source_trust(evidence, params)
    n, k_max = evidence.probs.shape
    k = evidence.questions.n_options[evidence.q].astype(np.float64)
    mask = np.arange(k_max)[None, :] < k[:, None]
    r = _renormalised(evidence)
    tempered = tempered_reading(evidence, params, r)
    alpha = alpha_src[evidence.source_index] if n else np.zeros(0)
    alpha = np.maximum(alpha, 1.0 / np.maximum(k, 1.0))  # below chance is noise, not contrarian
    kk = k[:, None]
    bracket = alpha[:, None] * tempered + (1.0 - alpha[:, None]) * (1.0 - tempered) / np.maximum(kk - 1.0, 1.0)
    trust_used = alpha.copy()
    if params.confusion and n:
        bracket, used = _apply_confusion(evidence, params, tempered, bracket)
        trust_used[used] = np.nan
    u = np.clip(evidence.unclear + evidence.unrelated, 0.0, 1.0)[:, None]
    o = np.clip(evidence.one_off, 0.0, 1.0)[:, None]
    share = independent_share(evidence)
    informative = share[:, None] * (1.0 - u) * (1.0 - o)
    like = (1.0 - informative) / kk + informative * bracket
    like = np.where(mask, like, 0.0)
    reported = changes.change_weight(evidence.changed, share, evidence.unrelated, evidence.one_off) if n else None
    change = None if reported is None else np.stack(changes.step_factors(
        reported, alpha_src[evidence.source_index]), axis=1)
    event_prior, prior = open_base_rates(evidence, params, prior, r)
    return ModelInputs(prior=prior, rate=rate, likelihood=like, trust=trust_used, trust_node=where, change=change,
                       event_prior=event_prior)


def _apply_confusion(evidence: Evidence, params: "ParamsDocument", tempered, bracket):
    """Replace the bracket by r̃ Cᵀ for readings whose (source node, kind) has a fitted matrix."""
    qt = evidence.questions
    kinds = qt.kinds[evidence.q]
    used = np.zeros(len(kinds), dtype=bool)
    pairs = np.unique(np.stack([evidence.source_index.astype(str), kinds.astype(str)], axis=1), axis=0)
    for s_str, kind in pairs:
        s = int(s_str)
        # an open question's states are its own values: no kind-wide matrix describes them
        rows = (evidence.source_index == s) & (kinds == kind) & ~qt.is_open[evidence.q]
        if not rows.any():
            continue
        k = int(qt.n_options[evidence.q[rows][0]])
        matrix, _node = confusion_for_source(params, str(evidence.sources.paths[s]), kind, k)
        if matrix is None:
            continue
        c = np.asarray(matrix, dtype=np.float64)
        bracket[np.ix_(rows, np.arange(k))] = tempered[rows, :k] @ c.T
        used |= rows
    return bracket, used


# ---------------------------------------------------------------------------- filter
def forward_filter(
    prior: np.ndarray,
    rate: np.ndarray,
    event_q: np.ndarray,
    event_t: np.ndarray,
    event_like: np.ndarray,
    at: float | np.ndarray,
    event_change: np.ndarray | None = None,
    event_prior: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the filter for all questions; events must be sorted by (question, time).

    Returns (belief at ``at`` before rejections/calibration (Q, K), log marginal
    likelihood per question (Q,), time of each question's last event (Q,)): the states
    of :func:`filter_states`, decayed to ``at`` by :func:`decay_states`.
    """
    state, log_marginal, last_t = filter_states(prior, rate, event_q, event_t, event_like, event_change, event_prior)
    return decay_states(state, prior, rate, last_t, at), log_marginal, last_t


def filter_states(
    prior: np.ndarray,
    rate: np.ndarray,
    event_q: np.ndarray,
    event_t: np.ndarray,
    event_like: np.ndarray,
    event_change: np.ndarray | None = None,
    event_prior: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The filter up to each question's last event: (state after it (Q, K), log marginal
    likelihood (Q,), the event's time (Q,), NaN for a question without events, whose
    state is its prior). Events must be sorted by (question, time). ``event_change`` (E, 2):
    ``g(same), g(differ)`` of each event's reported change (:func:`event_change`), which turn the
    decay before it into ``g(same) b (ρ + (1-ρ) π) + g(differ) (1-ρ) π (1 - b)``
    (:mod:`doxa.model.changes`); None: none reported. ``event_prior`` (E, K): the base rates of
    each event's step where they change along the way (open questions, :func:`open_base_rates`;
    a first event starts from its own); None: ``prior`` throughout.

    Questions are laid out longest first, and events rank-major in that order: the
    questions that still have an n-th event are then a prefix of the layout, and the
    n-th events of all of them a contiguous block, so each step works on slices (no
    gathers or scatters per step).
    """
    n_q = prior.shape[0]
    log_marginal = np.zeros(n_q)
    last_t = np.full(n_q, np.nan)
    if len(event_q) == 0:
        return prior.copy(), log_marginal, last_t
    counts = np.bincount(event_q, minlength=n_q)
    layout = np.argsort(-counts, kind="stable")  # question at each position, longest first
    position = np.empty(n_q, dtype=np.int64)
    position[layout] = np.arange(n_q)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    rank = np.arange(len(event_q)) - starts[event_q]
    alive = np.bincount(rank)  # questions with an n-th event: a prefix of the layout
    block = np.r_[0, np.cumsum(alive)]
    slot = block[rank] + position[event_q]
    source_row = np.empty(len(slot), dtype=np.int64)
    source_row[slot] = np.arange(len(slot))
    # np.take gathers whole rows several times faster than fancy indexing does
    like = np.take(event_like, source_row, axis=0)
    times = np.take(event_t, source_row)
    change = None if event_change is None else np.take(event_change, source_row, axis=0)
    steps = None if event_prior is None else np.take(event_prior, source_row, axis=0)

    belief = prior[layout]  # a copy, in layout order
    prior_l, rate_l = belief.copy(), rate[layout]
    marginal_l = np.zeros(n_q)
    last_l = np.zeros(n_q)
    for n in range(len(alive)):
        c = int(alive[n])
        b = belief[:c]
        t = times[block[n]:block[n + 1]]
        base = prior_l[:c] if steps is None else steps[block[n]:block[n + 1]]
        if n > 0:
            rho = np.exp(-rate_l[:c] * np.maximum(t - last_l[:c], 0.0))[:, None]
            if change is None:
                b *= rho
                b += (1.0 - rho) * base
            else:
                g = change[block[n]:block[n + 1]]
                moved = (1.0 - rho) * base
                b[:] = g[:, :1] * b * (rho + moved) + g[:, 1:] * moved * (1.0 - b)
        elif steps is not None:
            b[:] = base
        event = like[block[n]:block[n + 1]]
        b *= event
        z = b.sum(axis=1)
        dead = z <= _TINY
        if dead.any():  # evidence impossible under the belief: restart from the evidence alone
            b[dead] = event[dead]
            z[dead] = b[dead].sum(axis=1)
        b /= z[:, None]
        marginal_l[:c] += np.log(np.maximum(z, _TINY))
        last_l[:c] = t
    has_l = counts[layout] > 0
    state = np.empty_like(belief)
    state[layout] = belief
    log_marginal[layout] = marginal_l
    last_t[layout] = np.where(has_l, last_l, np.nan)
    return state, log_marginal, last_t


def decay_states(state: np.ndarray, prior: np.ndarray, rate: np.ndarray, last_t: np.ndarray,
                 at: float | np.ndarray) -> np.ndarray:
    """Beliefs at ``at`` from the states after each question's last event (``last_t``; NaN:
    none, the state is the prior): ``ρ s + (1-ρ) π`` with ``ρ = exp(-λ (at - t_last))``."""
    has = ~np.isnan(last_t)
    at_arr = np.broadcast_to(np.asarray(at, dtype=np.float64), last_t.shape)
    gap = np.where(has & np.isfinite(at_arr), np.maximum(at_arr - np.where(has, last_t, 0.0), 0.0), 0.0)
    rho = np.exp(-rate * gap)[:, None]
    return np.where(has[:, None], rho * state + (1.0 - rho) * prior, state)


def event_change(evidence: Evidence, change: np.ndarray | None) -> np.ndarray | None:
    """(E, 2) the change factors of :func:`events`' stream, settlements (1, 1); None: none."""
    if change is None:
        return None
    order = event_order(evidence)
    out = np.vstack([change, np.ones((len(evidence.settle_q), 2))])
    return out if order is None else out[order]


def event_order(evidence: Evidence) -> np.ndarray | None:
    """The order of :func:`events` over readings then settlements; None: the readings as they are."""
    if len(evidence.settle_q) == 0:
        return None
    q = np.r_[evidence.q, evidence.settle_q]
    t = np.r_[evidence.t, evidence.settle_t]
    # readings are sorted and settlements few: a stable sort of one (question, time) key is
    # near-linear on such input, where a two-key lexsort sorts from scratch
    key = q.astype(np.float64) * 1e6 + (t - (t.min() if len(t) else 0.0))
    return np.argsort(key, kind="stable")


def events(evidence: Evidence, likelihood: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Readings and settlements merged into one (question, time)-sorted event stream."""
    k_max = likelihood.shape[1] if likelihood.ndim == 2 else evidence.questions.k_max
    like = likelihood.reshape(-1, k_max)
    order = event_order(evidence)
    if order is None:  # readings arrive sorted by (question, time) already
        return evidence.q, evidence.t, like
    settle_like = np.zeros((len(evidence.settle_q), k_max))
    settle_like[np.arange(len(evidence.settle_q)), evidence.settle_answer] = 1.0
    return (np.r_[evidence.q, evidence.settle_q][order], np.r_[evidence.t, evidence.settle_t][order],
            np.vstack([like, settle_like])[order])


def open_base_rates(evidence: Evidence, params: "ParamsDocument", prior: np.ndarray, r: np.ndarray
                    ) -> tuple[np.ndarray | None, np.ndarray]:
    """The base rates of each event's step, in :func:`events` order (None: ``prior``'s
    throughout, no open question), and those after each question's last event: an open
    question's values enter them as the evidence names them (:mod:`doxa.model.named_values`); ``r``:
    the readings' renormalised probabilities (:func:`_renormalised`)."""
    qt = evidence.questions
    if not qt.is_open.any():
        return None, prior
    n, k_max = evidence.probs.shape
    k_read = qt.n_options[evidence.q]
    u = np.clip(evidence.unclear + evidence.unrelated, 0.0, 1.0)
    o = np.clip(evidence.one_off, 0.0, 1.0)
    mass = named_values.stated_mass(r, named_states(evidence), (1 - u) * (1 - o), k_read,
                                    evidence.settle_answer, qt.n_options[evidence.settle_q])
    order = event_order(evidence)
    q = np.r_[evidence.q, evidence.settle_q].astype(np.int64)
    if order is not None:
        q, mass = q[order], mass[order]
    starts = np.r_[0, np.flatnonzero(np.diff(q)) + 1] if len(q) else np.zeros(0, np.int64)
    rank = np.arange(len(q)) - np.repeat(starts, np.diff(np.r_[starts, len(q)]))
    before, after = named_values.named_so_far(q, rank, mass, len(qt.ids))
    kinds, kind_of = np.unique(np.asarray(qt.kinds, dtype=str), return_inverse=True)
    theta = np.array([new_value_weight(params, kind) for kind in kinds.tolist()])[kind_of.reshape(-1)]
    final = np.where(qt.is_open[:, None], named_values.base_rates(theta, after, qt.n_options), prior)
    event_prior = np.where(qt.is_open[q][:, None], named_values.base_rates(theta[q], before, qt.n_options[q]),
                           np.take(prior, q, axis=0))
    return event_prior, final


def apply_rejections(evidence: Evidence, belief: np.ndarray) -> np.ndarray:
    if len(evidence.reject_q) == 0:
        return belief
    out = belief.copy()
    out[evidence.reject_q, evidence.reject_answer] = 0.0
    total = out.sum(axis=1, keepdims=True)
    return np.where(total > 0, out / np.where(total > 0, total, 1.0), out)


def calibration_fields(calibration: "Calibration | dict[str, Any] | None") -> tuple[str, Any, Any, Any, Any]:
    """(method, temperature, floor, x, y) of a calibration map: the typed document's
    (:class:`~doxa.data.params_document.Calibration`), or the map as JSON (a dict: what a kept
    belief-cache entry holds, or a map being fitted), read as it is; a field left out is ``None``."""
    if isinstance(calibration, dict) or calibration is None:
        get = (calibration or {}).get
        return get("method", "none"), get("temperature"), get("floor"), get("x"), get("y")
    return calibration.method, calibration.temperature, calibration.floor, calibration.x, calibration.y


def apply_calibration(calibration: "Calibration | dict[str, Any] | None", belief: np.ndarray) -> np.ndarray:
    """The output calibration map fitted nightly (docs/design.md §4.3)."""
    method, temperature, floor, x, y = calibration_fields(calibration)
    if method == "none" or belief.size == 0:
        return belief
    if method == "temperature":
        temp = float(temperature)
        with np.errstate(divide="ignore"):
            logp = np.where(belief > 0, np.log(np.where(belief > 0, belief, 1.0)) / temp, -np.inf)
        peak = logp.max(axis=1, keepdims=True)
        w = np.where(belief > 0, np.exp(logp - np.where(np.isfinite(peak), peak, 0.0)), 0.0)
        total = w.sum(axis=1, keepdims=True)
        out = np.where(total > 0, w / np.where(total > 0, total, 1.0), belief)
        floor = float(floor or 0.0)
        if floor > 0:  # (1-ε) p + ε/K over the options still alive: no live answer reads below ε/K
            live = out > 0
            n_live = np.maximum(live.sum(axis=1, keepdims=True), 1)
            out = np.where(live, (1.0 - floor) * out + floor / n_live, 0.0)
        return out
    if method == "isotonic":
        xs = np.asarray(x, dtype=np.float64)
        ys = np.asarray(y, dtype=np.float64)
        top = belief.argmax(axis=1)
        rows = np.arange(belief.shape[0])
        p_top = belief[rows, top]
        new_top = np.clip(np.interp(p_top, xs, ys), 0.0, 1.0)
        rest = 1.0 - p_top
        scale = np.where(rest > 0, (1.0 - new_top) / np.where(rest > 0, rest, 1.0), 0.0)
        out = belief * scale[:, None]
        out[rows, top] = new_top
        total = out.sum(axis=1, keepdims=True)
        return np.where(total > 0, out / np.where(total > 0, total, 1.0), belief)
    raise ValueError(f"unknown calibration method {method!r} in the parameter document")


def score(evidence: Evidence, params: "ParamsDocument | dict[str, Any]", at: float | None = None, *,
          calibrate: bool = True, inputs: ModelInputs | None = None) -> Beliefs:
    """Beliefs of every question in ``evidence`` at time ``at`` (days; default: evidence.at or latest)."""
    params = typed(params)
    inputs = inputs or model_inputs(evidence, params)
    if at is None:
        at = evidence.at
    q, t, like = events(evidence, inputs.likelihood)
    state, _, last_t = filter_states(inputs.prior, inputs.rate, q, t, like, event_change(evidence, inputs.change),
                                     inputs.event_prior)
    n_q = len(evidence.questions.ids)
    return beliefs_from_states(evidence, state, inputs.prior, inputs.rate, last_t, at,
                               params.calibration if calibrate else None,
                               n_evidence=np.bincount(evidence.q, minlength=n_q),
                               n_settled=np.bincount(evidence.settle_q, minlength=n_q),
                               params_version=params.version)


def beliefs_from_states(evidence: Evidence, state: np.ndarray, prior: np.ndarray, rate: np.ndarray,
                        last_t: np.ndarray, at: float, calibration: "Calibration | dict[str, Any] | None", *,
                        n_evidence: np.ndarray, n_settled: np.ndarray, params_version: int | None) -> Beliefs:
    """Beliefs at ``at`` (days) from the filter states after each question's last event: the
    one assembly every read ends in, whichever tier the states came from (a kept entry, kept
    states, or :func:`filter_states` just now; see :mod:`doxa.inference.read.tiers`)::

        b = ρ s + (1 - ρ) π,   ρ = exp(-λ (at - t_last))     (:func:`decay_states`; no decay at a
                                                              time that is no number: "latest")
        b_j ← 0 for the answers rejected by ``at``, renormalised  (:func:`apply_rejections`)
        p = the calibration map of b                           (:func:`apply_calibration`; None: none)

    ``evidence`` supplies the questions and the rejections (those up to ``at``)."""
    raw = decay_states(state, prior, rate, last_t, at if np.isfinite(at) else np.inf)
    raw = apply_rejections(evidence, raw)
    probs = apply_calibration(calibration, raw) if calibration is not None else raw
    return Beliefs(evidence=evidence, probs=probs, raw=raw, n_evidence=n_evidence, n_settled=n_settled,
                   last_event=last_t, params_version=params_version)


def log_likelihood_ratio(likelihood_row: np.ndarray, j: int, k: int) -> float:
    """log L(j) against the mean of the other options' likelihoods: one message's push toward j
    (0 where j is the only state, as an open question with no value named yet has: nothing to push
    it away from)."""
    others = np.delete(likelihood_row[:k], j)
    if others.size == 0:
        return 0.0
    return float(np.log(max(likelihood_row[j], _TINY)) - np.log(max(others.mean(), _TINY)))
