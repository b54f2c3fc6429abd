"""Agreement is not independence: how much of a reading is evidence of its own (numpy only).

The story of :mod:`doxa.model.belief_model` treats readings as conditionally independent
given the answer. Two patterns break that, and a careful analyst discounts both:

- a *campaign*: sources with no history (at most :data:`FRESH_READINGS` messages with a
  counted reading in the store, a copy of an earlier message not counted) stating the same
  answer to one question within :data:`BURST_DAYS` of one another. Fresh accounts that
  arrive together and agree are, far more often than chance, one author (the copying
  sources of Dong, Berti-Équille & Srivastava, VLDB 2009, "Integrating conflicting data:
  the role of source dependence");
- *repetition*: one source stating the same answer to one question again within
  :data:`BURST_DAYS` (a counter added to the text defeats the store's copy detection,
  not this).

A reading in a group of ``n`` such readings is independent evidence with probability
``c = 1/n``, and otherwise says nothing about the answer; in the emission that is one more
uninformative part, ``L(j) = (1 - c w)/K + c w B(j)`` with ``w = (1-u)(1-o)``, so ``n``
agreeing readings of a group move a belief about as far as one. Readings from sources
with a history, and single readings, keep ``c = 1``: corroboration by established sources
is evidence. The rule is part of the model: the fit's event stream and the scorer both
take ``c`` from :func:`independent_share` of the same evidence, so the scorer stays the
exact filter of the fitted model.
"""

from __future__ import annotations

import numpy as np

from doxa.data.evidence import FRESH_READINGS, Evidence

#: Same-answer readings this close in time (days, chained) form one group.
BURST_DAYS = 2.0


def independent_share(evidence: Evidence, burst_days: float = BURST_DAYS) -> np.ndarray:
    """(N,) ``c`` of each reading: 1 over the size of its campaign or repetition group (module doc)."""
    n = int(evidence.n_readings)
    if n == 0:
        return np.ones(0)
    k = evidence.questions.n_options[evidence.q]
    probs = np.where(np.arange(evidence.probs.shape[1])[None, :] < k[:, None], evidence.probs, -1.0)
    stated = np.argmax(probs, axis=1)
    # a reading with no single top option states nothing, so it joins no group
    second = np.sort(probs, axis=1)[:, -2] if probs.shape[1] > 1 else np.full(n, -1.0)
    states = probs[np.arange(n), stated] > second + 1e-9
    src = evidence.sources
    history = src.readings if src.readings is not None else np.bincount(evidence.source_index,
                                                                        minlength=len(src.ids))
    fresh = np.asarray(history)[evidence.source_index] <= FRESH_READINGS
    campaign = _group_sizes(states & fresh, (evidence.q, stated), evidence.t, burst_days)
    repeated = _group_sizes(states, (evidence.q, evidence.source_index, stated), evidence.t, burst_days)
    return 1.0 / np.maximum(campaign, repeated)


def _group_sizes(member: np.ndarray, keys: tuple[np.ndarray, ...], t: np.ndarray, gap: float) -> np.ndarray:
    """(N,) size of each member's group (same keys, times chained within ``gap``); 1 for non-members."""
    out = np.ones(len(t), dtype=np.int64)
    rows = np.flatnonzero(member)
    if len(rows) < 2:
        return out
    order = rows[np.lexsort((t[rows],) + tuple(k[rows] for k in reversed(keys)))]
    same = np.ones(len(order) - 1, dtype=bool)
    for key in keys:
        same &= key[order[1:]] == key[order[:-1]]
    same &= (t[order[1:]] - t[order[:-1]]) <= gap
    group = np.r_[0, np.cumsum(~same)]
    out[order] = np.bincount(group)[group]
    return out
