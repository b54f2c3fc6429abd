"""Every system the benchmark compares, behind one small interface (numpy; no torch, no pandas at import).

A system is a small class with ``fit(evidence, at) -> self`` (learn what it learns from
the evidence up to ``at``; most learn nothing) and ``predict(evidence, at) -> probs``
(``(Q, K_max)``, rows summing to 1 over each question's options, in
``evidence.questions`` order). ``evidence`` is always cut at ``at`` by the caller.

The systems (docs/design.md §6):

=============  =========================================================================
doxa-learned   doxa's scorer with parameters from the nightly fit (retrained by the bench)
oracle         doxa's scorer with the world's true parameters: the ceiling
doxa-equal     doxa's scorer, every source at one equal trust, default change rate
wording        doxa's filter with the reader's probabilities at face value: α = 1, no decay
latest-wins    the most recent statement's answer, at the confidence its reader gave it
majority       majority vote of the statements' answers; ties broken by the base rate
recall         Recall's computed confidence (seed ``recall-computed-confidence.md``)
engram         Engram's log-odds update rules (seed ``engram-confidence-docs.txt``)
dawid-skene    Dawid & Skene (1979) EM on the statements' answers (crowd-kit), per kind
fixed-options  latest-wins over the options a question was created with (open-question worlds)
=============  =========================================================================

The non-doxa systems work on *statements*: each reading that is about the question
(``unclear + unrelated < 0.5``; below that the reader says the message does not bear on
it, the minimal extraction step any memory has) states its top option with the
reader's probability for it; a settlement states the settled answer with certainty,
from the user. Every system sees the same stream, settlements included.

Why one file of ~600 lines: nine systems of 30-80 lines each behind one interface, sharing
the statement extraction and the base-rate helpers above them; one file reads as the
lineup the bench compares.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from doxa.data.evidence import Evidence, SourceTable, named_states

from doxa.inference.read.params import DEFAULT_CHANGE_RATE, DEFAULT_TRUST, default_params
from doxa.inference.read import scorer
from doxa.model.logistic import logit, sigmoid

#: A reading with ``unclear + unrelated`` at or above this is "not about the question".
RELEVANCE_CUTOFF = 0.5
#: Source index given to the user's settlements in a :class:`Statements` table.
USER = -1


# ============================================================================ shared
def option_mask(evidence: Evidence) -> np.ndarray:
    """(Q, K_max) True where the option exists."""
    qt = evidence.questions
    return np.arange(qt.k_max)[None, :] < qt.n_options[:, None]


def uniform(evidence: Evidence) -> np.ndarray:
    mask = option_mask(evidence)
    return mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)


def empirical_prior(evidence: Evidence) -> np.ndarray:
    """Base rates per (kind, options) from the settlements seen, add-one smoothed; (Q, K_max)."""
    qt = evidence.questions
    mask = option_mask(evidence)
    _, group = np.unique(qt.options_key.astype(str), return_inverse=True)
    counts = np.zeros((group.max() + 1 if len(group) else 0, qt.k_max))
    if len(evidence.settle_q):
        np.add.at(counts, (group[evidence.settle_q], evidence.settle_answer), 1.0)
    prior = (counts[group] + 1.0) * mask
    return prior / np.maximum(prior.sum(axis=1, keepdims=True), 1e-300)


@dataclass
class Statements:
    """Readings about the question and settlements, as one (question, time)-sorted table.

    ``source`` indexes ``evidence.sources`` (``USER`` for a settlement); ``stated`` is the
    reader's probability of the stated option (1 for a settlement); ``probs`` is the
    reading renormalised over the options (one-hot for a settlement).
    """

    q: np.ndarray
    t: np.ndarray
    option: np.ndarray
    stated: np.ndarray
    source: np.ndarray
    lasting: np.ndarray
    settled: np.ndarray
    probs: np.ndarray

    def __len__(self) -> int:
        return int(self.q.shape[0])


def statements(evidence: Evidence, *, cutoff: float = RELEVANCE_CUTOFF) -> Statements:
    """The statements of ``evidence`` (see :class:`Statements`).

    A reading of an open question states among the states it covers (the values it named and
    ``unlisted``): a value listed after it was read copies its ``unlisted`` mass in ``probs``
    (data/evidence.py, ``open_readings``), and must neither be stated by it nor count twice.
    """
    k_max = evidence.questions.k_max
    mask = named_states(evidence)
    raw = np.where(mask, evidence.probs, 0.0)
    about = (evidence.unclear + evidence.unrelated) < cutoff
    total = raw.sum(axis=1)
    about &= total > 0
    raw, mask, total = raw[about], mask[about], total[about]
    option = np.argmax(raw, axis=1)
    rows = np.arange(len(option))
    n_settle = len(evidence.settle_q)
    one_hot = np.zeros((n_settle, k_max))
    one_hot[np.arange(n_settle), evidence.settle_answer] = 1.0
    q = np.r_[evidence.q[about], evidence.settle_q]
    t = np.r_[evidence.t[about], evidence.settle_t]
    order = np.lexsort((t, q))  # stable: at one instant, readings come before the settlement
    return Statements(
        q=q[order],
        t=t[order],
        option=np.r_[option, evidence.settle_answer].astype(np.int64)[order],
        stated=np.r_[raw[rows, option], np.ones(n_settle)][order],
        source=np.r_[evidence.source_index[about], np.full(n_settle, USER)].astype(np.int64)[order],
        lasting=np.r_[evidence.one_off[about] < 0.5, np.ones(n_settle, bool)][order],
        settled=np.r_[np.zeros(len(option), bool), np.ones(n_settle, bool)][order],
        probs=np.vstack([raw / total[:, None], one_hot])[order],
    )


def _rank_batches(q_sorted: np.ndarray) -> list[np.ndarray]:
    """Index batches such that batch n holds the n-th row of every question (rows sorted by question)."""
    if len(q_sorted) == 0:
        return []
    starts = np.r_[0, np.flatnonzero(np.diff(q_sorted)) + 1]
    rank = np.arange(len(q_sorted)) - np.repeat(starts, np.diff(np.r_[starts, len(q_sorted)]))
    order = np.argsort(rank, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(rank))]
    return [order[bounds[n]:bounds[n + 1]] for n in range(len(bounds) - 1)]


class System:
    """The interface: ``fit(evidence, at) -> self`` and ``predict(evidence, at) -> (Q, K_max)``."""

    name = "system"
    #: True when ``fit`` learns from the evidence (then the bench refits it at every checkpoint).
    learns = False

    def fit(self, evidence: Evidence, at: float) -> "System":
        return self

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


# ============================================================================ doxa family
def without_stated_trust(evidence: Evidence) -> Evidence:
    """The same evidence with the user's stated source trust removed (for the equal-weight systems)."""
    src = evidence.sources
    return replace(evidence, sources=SourceTable(ids=src.ids, paths=src.paths, trust=np.full(len(src.ids), np.nan),
                                                 readings=src.readings))


def equal_trust_params(trust: float = DEFAULT_TRUST, change_rate: float = DEFAULT_CHANGE_RATE) -> dict[str, Any]:
    """One trust for every source, one change rate for every kind, uniform priors, reader at face value."""
    doc = default_params()
    doc["defaults"] = {"trust": float(trust), "trust_by_top_layer": {}, "change_rate": float(change_rate)}
    return doc


class DoxaScorer(System):
    """doxa's closed-form scorer (inference/read/scorer.py) under one parameter document.

    ``ignore_stated_trust`` drops the user's stated trust so that every source really
    gets the document's single trust (doxa-equal, wording).
    """

    def __init__(self, name: str, params: dict[str, Any], *, ignore_stated_trust: bool = False):
        self.name = name
        self.params = params
        self.ignore_stated_trust = ignore_stated_trust

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        if self.ignore_stated_trust:
            evidence = without_stated_trust(evidence)
        return scorer.score(evidence, self.params, at).probs


def doxa_equal() -> DoxaScorer:
    """doxa with every source at the default trust (0.7) and the default change rate."""
    return DoxaScorer("doxa-equal", equal_trust_params(), ignore_stated_trust=True)


def wording() -> DoxaScorer:
    """Weights from wording only: α = 1 (the reader's probabilities at face value), no decay."""
    return DoxaScorer("wording", equal_trust_params(trust=1.0, change_rate=0.0), ignore_stated_trust=True)


def oracle(params: dict[str, Any]) -> DoxaScorer:
    return DoxaScorer("oracle", params)


class LearnedDoxa(System):
    """doxa's scorer with the newest fitted parameters; ``fit`` runs the nightly training.

    ``trainer(evidence, at) -> params document`` is the nightly fit on the evidence up to
    ``at`` (days); until it has run once
    the scorer uses :func:`doxa.inference.read.params.default_params` (stated trust, else
    trust by top layer), exactly as a fresh store does. Fitted state: ``params_``,
    ``fits_`` (one entry per training: time, settlements seen, seconds).
    """

    name = "doxa-learned"
    learns = True

    def __init__(self, trainer: Callable[[Evidence, float], dict[str, Any]] | None = None):
        self.trainer = trainer
        self.params_: dict[str, Any] = default_params()
        self.fits_: list[dict[str, Any]] = []

    def fit(self, evidence: Evidence, at: float) -> "LearnedDoxa":
        if self.trainer is None:
            raise RuntimeError("doxa-learned has no trainer: pass the nightly fit as trainer=")
        started = time.perf_counter()
        self.params_ = self.trainer(evidence, at)
        diagnostics = self.params_.get("diagnostics") or {}
        self.fits_.append({"at": float(at), "settlements": int(len(evidence.settle_q)),
                           "readings": int(evidence.n_readings), "seconds": time.perf_counter() - started,
                           "steps": diagnostics.get("steps"), "converged": diagnostics.get("converged"),
                           "calibration": (self.params_.get("calibration") or {}).get("method")})
        return self

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        return scorer.score(evidence, self.params_, at).probs


# ============================================================================ simple memories
class LatestWins(System):
    """The most recent statement about a question is the answer.

    Its probability is what that statement's reader said (renormalised over the
    options; a settlement is certain). No statement: uniform.
    """

    name = "latest-wins"

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        st = statements(evidence)
        out = uniform(evidence)
        if len(st):
            last = np.r_[np.flatnonzero(np.diff(st.q)), len(st) - 1]
            out[st.q[last]] = st.probs[last]
        return out


class MajorityVote(System):
    """Majority vote of the statements' answers (a settlement is one vote).

    ``p_j = (votes_j + π_j) / (n + 1)`` with ``π`` the base rate counted from
    settlements (add-one): the argmax is the majority, ties go to the more common
    answer, and a question with no statement gets the base rate.
    """

    name = "majority"

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        st = statements(evidence)
        prior = empirical_prior(evidence)
        votes = np.zeros_like(prior)
        np.add.at(votes, (st.q, st.option), 1.0)
        return (votes + prior) / (votes.sum(axis=1, keepdims=True) + 1.0)


class FixedOptions(System):
    """latest-wins confined to the options each question was created with: a memory whose list of
    answers is fixed when the question is made (doxa before open questions).

    ``created`` maps a question id to the number of options it was created with (a question not in
    it: all its options); the first that many states are those options (an open question's values
    are appended in the order they were added). A statement of any later state — a value added since,
    or ``unlisted`` — is nothing this memory can hold and is skipped; the newest remaining statement
    is the answer, its probabilities renormalised over the creation options (uniform over them when
    it gives them nothing, and with no statement). On a closed question it is latest-wins.
    """

    name = "fixed-options"

    def __init__(self, created: dict[str, int] | None = None):
        self.created = created or {}

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        qt = evidence.questions
        n0 = np.array([min(self.created.get(q, k), k) for q, k in zip(qt.ids.tolist(), qt.n_options.tolist())],
                      dtype=np.int64)
        fixed = np.arange(qt.k_max)[None, :] < n0[:, None]
        out = fixed / np.maximum(fixed.sum(axis=1, keepdims=True), 1)
        st = statements(evidence)
        keep = st.option < n0[st.q]
        q, probs = st.q[keep], st.probs[keep] * fixed[st.q[keep]]
        if len(q):
            last = np.r_[np.flatnonzero(np.diff(q)), len(q) - 1]
            total = probs[last].sum(axis=1, keepdims=True)
            out[q[last]] = np.where(total > 0, probs[last] / np.where(total > 0, total, 1.0), out[q[last]])
        return out


# ============================================================================ Recall
class RecallConfidence(System):
    """Recall's computed confidence (seed: "Your agent's memory should compute confidence").

    Each option ``j`` of a question is a claim; its cell is the strongest statement
    of ``j`` (largest ``stated × calibration``)::

        effective_j = clamp01(stated × calibration + 0.15·tanh(supportMass) − 0.60·tanh(challengeMass))

    ``supportMass`` = Σ ``stated × calibration`` of the other statements of ``j``;
    ``challengeMass`` = the same sum over statements of any other option (each
    contradicts ``j``). An author's ``calibration = max(0.5, 1 − wrong rate × mean
    stated confidence when wrong) = max(0.5, 1 − Σ_wrong stated / n_judged)``: a
    statement is judged by the first settlement of its question at or after it (no
    track record: 1; the user's settlements: 1). The discount keys on being wrong
    while sure, never on hedging.

    Recall scores claims, not a distribution over exclusive answers; the bench reads it
    as ``p_j = effective_j / max(1, Σ effective) + (1 − min(1, Σ effective)) / K``:
    Recall's own numbers when the claims leave room, spread evenly otherwise; the
    argmax is always Recall's highest-confidence claim.
    """

    name = "recall"
    SUPPORT_CEILING = 0.15
    CHALLENGE_CEILING = 0.60
    CALIBRATION_FLOOR = 0.5

    def calibration(self, evidence: Evidence, st: Statements) -> np.ndarray:
        """Calibration factor per source (S,) from the settlements in ``evidence``."""
        n_src = len(evidence.sources.ids)
        cal = np.ones(n_src)
        reading = ~st.settled
        if not reading.any() or len(evidence.settle_q) == 0:
            return cal
        # settlements are sorted by (question, time) in Evidence; find the first at or after each statement
        order = np.lexsort((evidence.settle_t, evidence.settle_q))
        s_q, s_t, s_a = evidence.settle_q[order], evidence.settle_t[order], evidence.settle_answer[order]
        q, t = st.q[reading], st.t[reading]
        # one sortable key per (question, time); the span keeps float64 resolution far below a second
        t0 = min(s_t.min(), t.min())
        span = max(s_t.max(), t.max()) - t0 + 1.0
        pos = np.searchsorted(s_q * span + (s_t - t0), q * span + (t - t0), side="left")
        valid = pos < len(s_q)
        valid[valid] &= s_q[pos[valid]] == q[valid]
        src = st.source[reading][valid]
        wrong = s_a[pos[valid]] != st.option[reading][valid]
        judged = np.bincount(src, minlength=n_src)
        wrong_mass = np.bincount(src[wrong], weights=st.stated[reading][valid][wrong], minlength=n_src)
        seen = judged > 0
        cal[seen] = np.maximum(self.CALIBRATION_FLOOR, 1.0 - wrong_mass[seen] / judged[seen])
        return cal

    def effective(self, evidence: Evidence) -> np.ndarray:
        """Recall's effective confidence of every (question, option) claim; 0 where never stated."""
        st = statements(evidence)
        qt = evidence.questions
        eff = np.zeros((len(qt.ids), qt.k_max))
        if not len(st):
            return eff
        cal = np.r_[self.calibration(evidence, st), 1.0]  # index -1 (USER) → 1
        value = st.stated * cal[st.source]
        mass = np.zeros_like(eff)
        np.add.at(mass, (st.q, st.option), value)
        best = np.zeros_like(eff)
        np.maximum.at(best, (st.q, st.option), value)
        stated_any = np.zeros(eff.shape, dtype=bool)
        stated_any[st.q, st.option] = True
        support = mass - best
        challenge = mass.sum(axis=1, keepdims=True) - mass
        raw = best + self.SUPPORT_CEILING * np.tanh(support) - self.CHALLENGE_CEILING * np.tanh(challenge)
        return np.where(stated_any, np.clip(raw, 0.0, 1.0), 0.0)

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        eff = self.effective(evidence)
        mask = option_mask(evidence)
        total = eff.sum(axis=1, keepdims=True)
        room = 1.0 - np.minimum(total, 1.0)
        return (eff / np.maximum(total, 1.0) + room * mask / mask.sum(axis=1, keepdims=True)) * mask


# ============================================================================ Engram
class EngramConfidence(System):
    """Engram's confidence rules (seed: Engram docs, "Log-odds confidence"), one memory per question.

    Per question, in time order, with ``c`` the current memory's confidence:

    - a statement with no current memory creates one at its stated confidence
      (clipped to [0.10, 0.99]);
    - a statement that confirms the memory: ``c ← sigmoid(logit c + 0.05)``
      (ReinforcementConfidenceBoost);
    - one that contradicts it is a hard contradiction, ``c ← max(0.10, c − 0.20)``;
      if the statement is lasting (``one_off < 0.5``) and more confident than the
      weakened memory, newer information supersedes it: the old memory is archived
      (below 0.40) and the statement becomes the current memory at its stated confidence;
    - between events and up to the read, ``c ← c (1 − base_decay_rate)^days``
      (effective_decay_multiplier 1: one memory per question has no competitors).

    The seed gives no decay rate; ``base_decay_rate`` defaults to 0.001/day. The usage
    boost (+0.02 per recall) is not applied: the bench's reads are measurements, not use.
    The belief is ``c`` on the current memory's answer and ``(1 − c)/(K − 1)`` on each
    other option (uniform with no memory). Settlements are statements at 0.99.
    """

    name = "engram"
    CONFIRM_BOOST = 0.05
    CONTRADICTION_PENALTY = 0.20
    FLOOR = 0.10
    ARCHIVED_BELOW = 0.40
    MAX_CONFIDENCE = 0.99

    def __init__(self, base_decay_rate: float = 0.001):
        self.base_decay_rate = base_decay_rate

    def memories(self, evidence: Evidence, at: float) -> tuple[np.ndarray, np.ndarray]:
        """(current answer (Q,), −1 where none; its confidence at ``at`` (Q,))."""
        st = statements(evidence)
        n_q = len(evidence.questions.ids)
        current = np.full(n_q, -1, dtype=np.int64)
        conf = np.zeros(n_q)
        last_t = np.full(n_q, np.nan)
        keep = math.log1p(-self.base_decay_rate) if self.base_decay_rate < 1 else -np.inf
        stated = np.clip(st.stated, self.FLOOR, self.MAX_CONFIDENCE)
        for idx in _rank_batches(st.q):
            qs, t, option = st.q[idx], st.t[idx], st.option[idx]
            cur, c = current[qs], conf[qs]
            had = cur >= 0
            c = np.where(had, c * np.exp(keep * np.maximum(t - np.nan_to_num(last_t[qs]), 0.0)), c)
            s = stated[idx]
            same = had & (cur == option)
            against = had & ~same
            weakened = np.maximum(self.FLOOR, c - self.CONTRADICTION_PENALTY)
            supersede = against & st.lasting[idx] & (s > weakened)
            c = np.where(same, sigmoid(logit(np.clip(c, 1e-12, 1 - 1e-12)) + self.CONFIRM_BOOST), c)
            c = np.where(against, weakened, c)
            c = np.where(~had | supersede, s, c)
            current[qs] = np.where(~had | supersede, option, cur)
            conf[qs] = c
            last_t[qs] = t
        seen = current >= 0
        conf[seen] *= np.exp(keep * np.maximum(at - last_t[seen], 0.0)) if np.isfinite(at) else 1.0
        return current, conf

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        current, conf = self.memories(evidence, at)
        mask = option_mask(evidence)
        k = mask.sum(axis=1)
        out = uniform(evidence)
        seen = np.flatnonzero(current >= 0)
        rest = (1.0 - conf[seen]) / np.maximum(k[seen] - 1, 1)
        out[seen] = mask[seen] * rest[:, None]
        out[seen, current[seen]] = conf[seen]
        return out


# ============================================================================ Dawid–Skene
#: crowd-kit's floor on probabilities and error-matrix entries; kept so both engines agree.
DS_EPS = 1e-10


def dawid_skene(task: np.ndarray, worker: np.ndarray, label: np.ndarray, group_of_task: np.ndarray, k: int,
                *, n_iter: int = 100, tol: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """Dawid & Skene (1979) EM for many independent groups of tasks at once (numpy).

    One group is one crowd-kit ``DawidSkene().fit`` on that group's rows, step for step:
    majority-vote start; M-step ``e[w, l, c] ∝ max(ε, Σ_{rows of w with label l} T[task, c])``
    normalised over the labels ``l`` worker ``w`` used in the group; E-step
    ``T[t, c] ∝ max(ε, π_c) · Π_rows e[w, l, c]``; class priors ``π`` = mean of ``T``;
    classes are the labels seen in the group; each group stops when its ELBO (crowd-kit's
    form, per row) gains less than ``tol``. Returns ``T`` (tasks × k, zero rows for tasks
    without labels) and the iterations each group ran.
    """
    n_tasks = len(group_of_task)
    n_groups = int(group_of_task.max()) + 1 if n_tasks else 0
    row_group = group_of_task[task]
    pair_key = worker.astype(np.int64) * max(n_groups, 1) + row_group
    pair_ids, pair = np.unique(pair_key, return_inverse=True)
    n_pairs = len(pair_ids)
    pair_group = pair_ids % max(n_groups, 1)
    classes = np.zeros((n_groups, k), dtype=bool)
    classes[row_group, label] = True
    used = np.zeros((n_pairs, k), dtype=bool)
    used[pair, label] = True
    cells = used[:, :, None] & classes[pair_group][:, None, :]  # (P, l, c): entries crowd-kit's matrix has
    has_task = np.bincount(task, minlength=n_tasks) > 0
    tasks_in_group = np.bincount(group_of_task[has_task], minlength=n_groups).astype(np.float64)
    rows_in_group = np.bincount(row_group, minlength=n_groups).astype(np.float64)
    task_classes = classes[group_of_task]
    live_task = task_classes & has_task[:, None]
    task_group_live = np.where(has_task, group_of_task, n_groups)  # tasks without labels count nowhere

    def per_column(index, weights, length):
        return np.stack([np.bincount(index, weights=weights[:, c], minlength=length) for c in range(k)], axis=1)

    def priors_of(T):
        return per_column(task_group_live, T, n_groups + 1)[:n_groups] / np.maximum(tasks_in_group, 1.0)[:, None]

    def m_step(T, r):
        flat = per_column(pair[r] * k + label[r], T[task[r]], n_pairs * k).reshape(n_pairs, k, k)
        counts = np.where(cells, np.maximum(flat, DS_EPS), 0.0)
        total = counts.sum(axis=1, keepdims=True)
        return np.where(cells, counts / np.where(total > 0, total, 1.0), 0.0)

    def row_log(errors, r, log):
        own = classes[row_group[r]]
        with np.errstate(divide="ignore"):
            return np.where(own, log(np.where(own, errors[pair[r], label[r]], 1.0)), 0.0)

    def e_step(priors, errors, r):
        score = per_column(task[r], row_log(errors, r, np.log2), n_tasks)
        score += np.log2(np.maximum(priors, DS_EPS))[group_of_task]
        score = np.where(task_classes, score, -np.inf)
        peak = score.max(axis=1, keepdims=True)
        w = np.where(task_classes, np.exp2(score - np.where(np.isfinite(peak), peak, 0.0)), 0.0)
        total = w.sum(axis=1, keepdims=True)
        return np.where(has_task[:, None], w / np.where(total > 0, total, 1.0), 0.0)

    def elbo(T, priors, errors, r):
        g = row_group[r]
        log_prior = np.where(classes[g], np.log(np.maximum(priors, DS_EPS))[g], 0.0)
        joint = np.bincount(g, weights=(T[task[r]] * (row_log(errors, r, np.log) + log_prior)).sum(axis=1),
                            minlength=n_groups)
        clipped = np.where(live_task, np.maximum(T, DS_EPS), 1.0)
        entropy = -np.bincount(task_group_live, weights=(np.log(clipped) * clipped * live_task).sum(axis=1),
                               minlength=n_groups + 1)[:n_groups]
        return (joint + entropy) / np.maximum(rows_in_group, 1.0)

    all_rows = np.arange(len(task))
    T = np.zeros((n_tasks, k))
    T[:, :] = per_column(task, np.eye(k)[label], n_tasks)
    T = T / np.maximum(T.sum(axis=1, keepdims=True), 1.0)
    priors = priors_of(T)
    errors = m_step(T, all_rows)
    loss = np.full(n_groups, -np.inf)
    active = rows_in_group > 0
    iterations = np.zeros(n_groups, dtype=np.int64)
    rows = all_rows
    for _ in range(n_iter):
        if not active.any():
            break
        # groups that stopped keep their state; only the rows of the others are touched
        T_new = e_step(priors, errors, rows)
        priors_new = priors_of(T_new)
        errors_new = m_step(T_new, rows)
        new_loss = elbo(T_new, priors_new, errors_new, rows)
        T = np.where(active[group_of_task][:, None], T_new, T)
        priors = np.where(active[:, None], priors_new, priors)
        errors = np.where(active[pair_group][:, None, None], errors_new, errors)
        iterations += active
        still = active & ~(new_loss - loss < tol)
        loss = np.where(still, new_loss, loss)
        if still.sum() < active.sum():
            rows = np.flatnonzero(still[row_group])
        active = still
    # crowd-kit returns its final probabilities floored at ε (its ELBO clips them in place)
    T = np.where(live_task, np.maximum(T, DS_EPS), 0.0)
    return T, iterations


class DawidSkeneBaseline(System):
    """Dawid & Skene (1979) on the statements' answers, one model per (kind, options).

    Tasks are questions, workers are sources (the user's settlements are one more
    worker), labels are the statements' answers; EM learns a confusion matrix per
    worker and the class priors, and assumes each question's answer never changes.

    ``engine="numpy"`` (default) runs every kind's EM at once in :func:`dawid_skene`,
    which follows crowd-kit's ``DawidSkene`` step for step (tests/test_bench.py checks
    they agree to 1e-6); ``engine="crowd-kit"`` calls crowd-kit once per kind, the
    reference, far slower (pandas overhead per call and per EM step; figures in
    docs/measurements/2026-12-bench.md).
    """

    name = "dawid-skene"

    def __init__(self, n_iter: int = 100, tol: float = 1e-5, engine: str = "numpy"):
        if engine not in ("numpy", "crowd-kit"):
            raise ValueError(f"engine must be 'numpy' or 'crowd-kit', not {engine!r}")
        self.n_iter = n_iter
        self.tol = tol
        self.engine = engine

    def predict(self, evidence: Evidence, at: float) -> np.ndarray:
        st = statements(evidence)
        out = uniform(evidence)
        if not len(st):
            return out
        qt = evidence.questions
        _, group = np.unique(qt.options_key.astype(str), return_inverse=True)
        worker = np.where(st.source >= 0, st.source, len(evidence.sources.ids))
        if self.engine == "numpy":
            T, _ = dawid_skene(st.q, worker, st.option, group, qt.k_max, n_iter=self.n_iter, tol=self.tol)
        else:
            T = self._crowdkit(st.q, worker, st.option, group, qt.k_max, len(qt.ids))
        total = T.sum(axis=1, keepdims=True)
        return np.where(total > 0, T / np.where(total > 0, total, 1.0), out)

    def _crowdkit(self, task, worker, label, group, k, n_tasks) -> np.ndarray:
        import pandas as pd
        from crowdkit.aggregation import DawidSkene

        T = np.zeros((n_tasks, k))
        row_group = group[task]
        for g in np.unique(row_group).tolist():
            rows = row_group == g
            frame = pd.DataFrame({"task": task[rows], "worker": worker[rows], "label": label[rows]})
            proba = DawidSkene(n_iter=self.n_iter, tol=self.tol).fit_predict_proba(frame)
            T[np.ix_(proba.index.to_numpy(dtype=np.int64), proba.columns.to_numpy(dtype=np.int64))] = \
                proba.to_numpy(dtype=np.float64)
        return T


# ============================================================================ the line-up
SYSTEM_NAMES = ("doxa-learned", "oracle", "doxa-equal", "wording", "latest-wins", "majority", "recall",
                "engram", "dawid-skene")
#: Systems the bench adds on a world with open questions (on closed questions they repeat one above).
OPEN_SYSTEM_NAMES = ("fixed-options",)
ALL_SYSTEM_NAMES = SYSTEM_NAMES + OPEN_SYSTEM_NAMES


def lineup(oracle_params: dict[str, Any] | None, trainer: Callable[[Evidence, float], dict[str, Any]] | None,
           names: tuple[str, ...] = SYSTEM_NAMES, *, created: dict[str, int] | None = None) -> list[System]:
    """The benchmark's systems in report order (``oracle`` needs the world's true parameters;
    ``fixed-options`` the number of options each question was created with, ``created``)."""
    make: dict[str, Callable[[], System]] = {
        "doxa-learned": lambda: LearnedDoxa(trainer),
        "oracle": lambda: oracle(oracle_params or default_params()),
        "doxa-equal": doxa_equal,
        "wording": wording,
        "latest-wins": LatestWins,
        "majority": MajorityVote,
        "recall": RecallConfidence,
        "engram": EngramConfidence,
        "dawid-skene": DawidSkeneBaseline,
        "fixed-options": lambda: FixedOptions(created),
    }
    unknown = [n for n in names if n not in make]
    if unknown:
        raise ValueError(f"unknown system(s) {unknown}; choose from {list(ALL_SYSTEM_NAMES)}")
    return [make[n]() for n in names]
