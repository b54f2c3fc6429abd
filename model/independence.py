"""Agreement is not independence: how much of a reading is evidence of its own (numpy only).

The story of :mod:`doxa.model.belief_model` treats readings as conditionally independent
given the answer. Two patterns break that, and a careful analyst discounts both:

- a *campaign*: sources with no history (at most :data:`FRESH_READINGS` messages with a
  counted reading in the store, a copy of an earlier message not counted) in one layer
  (the same parent node of the source tree) stating the same answer to one question within
  :data:`BURST_DAYS` of one another. Fresh accounts of one venue that arrive together and
  agree are, far more often than chance, one author (the copying sources of Dong,
  Berti-Équille & Srivastava, VLDB 2009, "Integrating conflicting data: the role of
  source dependence");
- *repetition*: one source stating the same answer to one question again within
  :data:`BURST_DAYS` (a counter added to the text defeats the store's copy detection,
  not this).

A reading in a campaign of ``n`` readings is independent evidence with probability
``c = 1/n``, and otherwise says nothing about the answer; in the emission that is one more
uninformative part, ``L(j) = (1 - c w)/K + c w B(j)`` with ``w = (1-u)(1-o)``, so ``n``
agreeing readings of a group move a belief about as far as one. Readings from sources
with a history, and single readings, keep ``c = 1``: corroboration by established sources
is evidence.

In a repetition group, only readings about as clear as a reading share its weight. Write
a reading's *strength* as how far it departs from saying nothing, ``s = w (K r_top -
1)/(K - 1)`` in ``[0, 1]`` (``r`` its probabilities over the options, renormalised; 0 for
an even reading, ``w`` for a certain one). A member of a repetition group ``G`` gets

    c_i = 1 / #{ j ∈ G : s_j ≥ s_i / 2 },

so members of like strength share as ``1/n`` did, and a fainter reading (under half as
clear) does not take a share of a clearer one, while it still shares its own with every
clearer member. Why: a source's messages are mostly about other things, and a small
reader reads many of them as near-even guesses (0.2–0.35 on each of three values) whose
top value is an accident. Under ``1/n`` each guess that shared its top value with the
source's one clear statement that day took a share of it: a plain "we have 25 now"
beside three near-even readings of unrelated turns counted 1/4, and the older value won
(docs/measurements/2026-12-conversations.md, "S haystacks"). What a hostile source gains:
members within a factor 2 of one another still count once together, and sorting a group
into strength octaves ``(m/2^{k+1}, m/2^k]`` below its clearest ``m``, octave ``k`` adds at
most ``m/2^k``, so ``Σ_G c_i s_i ≤ 2 m``: vague repeats can add at most one more clear
message's worth. Measured on ``doxa bench --world campaign``'s one-source attack, on the
same attacked beliefs (``doxa-equal``: 10th percentile of claims to flip, share of beliefs
that held against 20): ``1/n`` 18 and 0.89; this rule 15 and 0.89; two smoother rules,
``c_i = s_i / Σ_j min(s_i, s_j)``, 13 and 0.88, and the group counted as its clearest
statement, ``c = max s / Σ s``, 11 and 0.86. A campaign keeps ``1/n``: its accounts were
made to state the answer, so a vague reading of one of them is the reader's doubt about a
real claim, not a message about something else. A reading in both kinds of group takes the
smaller ``c``.

The rule is part of the model: the fit's event stream and the scorer both take ``c`` from
:func:`independent_share` of the same evidence, so the scorer stays the exact filter of the
fitted model.

Why the layer is part of a campaign's key (an honest change must be followed). The
discount is a statement about authorship: ``c = E[authors] / n``, with one author
behind a campaign group. For a group of fresh readings to have one author, one person
must control accounts in every venue the group spans. Coordinated accounts are made
where accounts are cheap to make: one platform, one chat, one forum; a layer node
(``friend/close/chat``, ``web/forum``) is such a venue, and the settled-first dependence
test (:mod:`doxa.model.settled_first`) tests dependence per layer for the same reason.
News of a real change (someone moved, changed jobs) reaches the user through the people
around them, in their several venues: a colleague at work, a sibling on the family chat,
a neighbour. Keying the campaign by ``(question, answer, layer)`` gives a group of fresh
readings spanning ``m`` layers ``m`` authors, ``n_ℓ`` readings in layer ``ℓ`` sharing one:

    c_i = 1 / n_{ℓ(i)},        Σ_i c_i = m    (the number of venues, each a separate author)

Under the old key ``(question, answer)`` the group had one author whatever it spanned,
and the chaining in time made it grow with every report ``≤ BURST_DAYS`` after the last:
an honest change told by fresh sources on consecutive days counted, however many told
it, as one reading against the whole established record (``Σ c_i = 1`` for any ``n``),
and was followed late or never (measured: docs/measurements/2026-12-honest-change.md). A
campaign inside one layer — every planted campaign of the generated worlds, and the
trusted-layer attack of ``doxa bench`` — is keyed exactly as before. What this gives up:
a campaign whose author also controls fresh accounts in ``m`` distinct layers counts
``m`` times, and fresh honest reporters who all sit in one layer still count once per
burst (the honest-change bench reports both).

Two other ways were weighed. Lifting the discount from groups that later evidence
agrees with makes ``c_i`` depend on readings after ``t_i``: the fit would score each
settlement with weights that know what came after it, and one outside reading that
happens to agree would lift a whole campaign. A softer burst, ``P(same author | gap Δ) =
e^{-Δ/τ}`` and ``E[authors] = 1 + Σ_k (1 - e^{-Δ_k/τ})`` over a group's gaps, cannot
separate the campaign world's bursts (about six claims in 24 hours, gaps near 3.4 h) from
reports a day apart: a ``τ`` that counts the daily reports nearly in full (6 h: ``1 -
e^{-4} = 0.98`` each) counts each campaign claim at ``1 - e^{-0.57} = 0.43``, about three
authors for six accounts.
"""

from __future__ import annotations

import numpy as np

from doxa.data.evidence import FRESH_READINGS, Evidence, named_states

#: Same-answer readings this close in time (days, chained) form one group.
BURST_DAYS = 2.0


def independent_share(evidence: Evidence, burst_days: float = BURST_DAYS) -> np.ndarray:
    """(N,) ``c`` of each reading: the smaller of 1 over its campaign's size and 1 over the number
    of its repetition group's members at least half as strong as it (module doc); 1 for a reading
    in neither."""
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
    member = states & fresh
    # layers of the few sources that can be in a campaign only: a store's sources are many and
    # mostly established, and reading every path's parent would cost the full read far more
    layer = np.zeros(n, dtype=np.int64)
    if member.any():
        used, which = np.unique(evidence.source_index[member], return_inverse=True)
        layer[member] = source_layers(src.paths[used])[which.reshape(-1)]
    campaign = _group_sizes(member, (evidence.q, stated, layer), evidence.t, burst_days)
    total = np.where(named_states(evidence), evidence.probs, 0.0).sum(axis=1)
    top = probs[np.arange(n), stated] / np.where(total > 0, total, 1.0)
    kk = k.astype(np.float64)
    clear = np.clip(1.0 - evidence.unclear - evidence.unrelated, 0.0, 1.0) * np.clip(1.0 - evidence.one_off, 0.0, 1.0)
    strength = np.where(states, clear * (kk * top - 1.0) / np.maximum(kk - 1.0, 1.0), 0.0).clip(0.0, 1.0)
    repeated = _share_among_as_clear(states, (evidence.q, evidence.source_index, stated), evidence.t, burst_days,
                                     strength)
    return np.minimum(1.0 / campaign, repeated)


def source_layers(paths: np.ndarray) -> np.ndarray:
    """(S,) int64: equal numbers for sources under one layer node (their path without the leaf id).

    A path is ``layer/…/layer/id``; a source with no layers has the root (``""``) as its
    layer. One pass over the sources (not the readings), in numpy's string routines.
    """
    if len(paths) == 0:
        return np.zeros(0, dtype=np.int64)
    parents = np.char.rpartition(np.asarray(paths, dtype=str), "/")[:, 0]
    return np.unique(parents, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _groups(member: np.ndarray, keys: tuple[np.ndarray, ...], t: np.ndarray,
            gap: float) -> tuple[np.ndarray, np.ndarray]:
    """The members' rows in group order and each one's group number (same keys, times chained within ``gap``)."""
    rows = np.flatnonzero(member)
    order = rows[np.lexsort((t[rows],) + tuple(k[rows] for k in reversed(keys)))]
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
    for key in keys:
        same &= key[order[1:]] == key[order[:-1]]
    same &= (t[order[1:]] - t[order[:-1]]) <= gap
    return order, (np.r_[0, np.cumsum(~same)] if len(order) else np.zeros(0, dtype=np.int64))


def _group_sizes(member: np.ndarray, keys: tuple[np.ndarray, ...], t: np.ndarray, gap: float) -> np.ndarray:
    """(N,) size of each member's group; 1 for non-members."""
    out = np.ones(len(t), dtype=np.int64)
    order, group = _groups(member, keys, t, gap)
    if len(order):
        out[order] = np.bincount(group)[group]
    return out


def _share_among_as_clear(member: np.ndarray, keys: tuple[np.ndarray, ...], t: np.ndarray, gap: float,
                          strength: np.ndarray) -> np.ndarray:
    """(N,) 1 over the number of members of each member's group at least half as strong as it; 1 for non-members."""
    out = np.ones(len(t))
    order, group = _groups(member, keys, t, gap)
    if len(order) < 2:
        return out
    s = strength[order]
    by = np.lexsort((s, group))  # within each group, weakest first
    g, s_sorted = group[by], s[by]
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    size = np.diff(np.r_[starts, len(g)])
    end = np.repeat(starts + size, size)
    # members of the same group with strength >= s_i / 2: from the first such (searchsorted on (group, s)) to the end
    key = g * 4.0 + s_sorted  # strengths lie in [0, 1]: one sorted key for (group, strength)
    first = np.searchsorted(key, g * 4.0 + s_sorted / 2, side="left")
    count = end - first
    out[order[by]] = 1.0 / np.maximum(count, 1)
    return out
