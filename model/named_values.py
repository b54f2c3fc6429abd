"""Base rates over a growing set of values: a value enters them once the evidence has named it (numpy only).

An open question (docs/design.md §2) runs its filter over the values named so far,
``v_1 … v_n``, and ``unlisted``. At a change the answer is drawn afresh from base rates,
the predictive of a Dirichlet process with new-value weight ``θ``: each value already
named counts once, and ``θ`` stands for a value never seen. The filter runs over the list
as it stands *now*, so a value first named at time ``t₂`` is among the states of every
step before ``t₂`` too; the question is what a change before ``t₂`` may draw.

Giving it a full share, ``1/(n+θ)``, there counts the value twice: it is on the list only
because the message at ``t₂`` named it, and a change just before ``t₂`` then lands on it
at no cost, so the message is explained by a change as cheaply as by a source telling the
truth about the old answer. Fitted on LongMemEval's settled answers, that made the half-life
collapse to a quarter of a day with θ near 0; with these base rates (and reported changes,
:mod:`doxa.model.changes`) the same fit lands at 14.5 days
(docs/measurements/2026-12-conversations.md). Before it is named, a value is one of the
values not yet seen; it shares the new-value mass with them.

Let ``m_j ∈ [0, 1]`` be how surely the events *before* a step have named value ``j``: the
largest ``r_j (1-u)(1-o)`` of a reading of it (the reader's probability that the message
states ``j``, times how clearly it states an answer at all), 1 once a settlement names it,
0 if nothing has. With ``M = Σ_j m_j`` over the ``n`` values and ``U = n - M + 1`` (the
unnamed part of the values, and ``unlisted``), the base rates of that step are::

    π(v_j)      = m_j / (M + θ)  +  θ / (M + θ) · (1 - m_j) / U
    π(unlisted) =                   θ / (M + θ) ·     1     / U

— the Chinese restaurant over the values named so far, each counted once, with the
new-value mass ``θ/(M+θ)`` spread evenly over everything not yet named. They sum to 1;
with every value named (``m = 1``) they are ``1/(n+θ)`` and ``θ/(n+θ)``, the form without
times; before any event, uniform over the ``n + 1`` states. ``m`` is a function of the
evidence alone (the reader's probabilities before any temperature), so the fit and the
scorer compute it once, here, and only ``θ`` is learned.
"""

from __future__ import annotations

import numpy as np


def stated_mass(r: np.ndarray, named: np.ndarray, clarity: np.ndarray, k_read: np.ndarray,
                settled: np.ndarray, k_settled: np.ndarray) -> np.ndarray:
    """(N + S, K_max) how surely each event names each value, readings then settlements: a
    reading's ``r_j (1-u)(1-o)`` (``clarity``) on the values it named (``named``), a settlement's 1
    on its answer (``settled``, its question having ``k_settled`` states); 0 on ``unlisted`` (state
    ``k - 1``) and beyond."""
    columns = np.arange(r.shape[1])[None, :]
    k_read, k_settled = np.asarray(k_read), np.asarray(k_settled)
    read = np.where((columns < (k_read[:, None] - 1)) & named,
                    np.clip(r, 0.0, 1.0) * np.clip(clarity, 0.0, 1.0)[:, None], 0.0)
    said = ((columns == np.asarray(settled)[:, None]) & (columns < (k_settled[:, None] - 1))).astype(np.float64)
    return np.vstack([read, said])


def named_so_far(q: np.ndarray, rank: np.ndarray, mass: np.ndarray, n_questions: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``m`` before each event (E, K_max) and after each question's last one (Q, K_max), for events
    sorted by (question, time) with ``rank`` their place in their question (0 first).

    A running maximum within each question, one rank at a time: an event's predecessor is the
    event before it in the stream."""
    before = np.zeros_like(mass)
    if len(q):
        by_rank = np.argsort(rank, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(rank))]
        for n in range(1, len(bounds) - 1):
            at = by_rank[bounds[n]:bounds[n + 1]]
            before[at] = np.maximum(before[at - 1], mass[at - 1])
    after = np.zeros((n_questions, mass.shape[1]))
    if len(q):
        last = np.r_[np.flatnonzero(np.diff(q)), len(q) - 1]
        after[q[last]] = np.maximum(before[last], mass[last])
    return before, after


def base_rates(theta: np.ndarray, named: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(…, K_max) the base rates of the module docstring for open questions of ``k`` states
    (``k - 1`` values, then ``unlisted``), new-value weight ``theta`` (…,) and ``m = named`` (…, K_max)."""
    k = np.asarray(k, dtype=np.float64)[..., None]
    theta = np.asarray(theta, dtype=np.float64)[..., None]
    columns = np.arange(named.shape[-1])
    value = columns < k - 1
    m = np.where(value, np.clip(named, 0.0, 1.0), 0.0)
    total = m.sum(axis=-1, keepdims=True)
    fresh = theta / (total + theta) / (k - total)  # the new-value mass per unit of what is unnamed
    return np.where(value, m / (total + theta) + fresh * (1.0 - m), np.where(columns == k - 1, fresh, 0.0))
