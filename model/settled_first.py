"""Settled facts first: how much each reading may move trust, and the gradient cut that applies it.

A reading on an unsettled question says how reliable its source is only through agreement
with other readings. :func:`dependent_layers` finds the layers whose members agree with one
another on unsettled questions more than their settled record shows (:func:`layer_agreement`
counts the pairs); :func:`settled_first_weights` turns that into a per-event weight
``γ_p = min(1, cap · S_p / U_p)`` on the trust (and confusion-matrix) gradient; and
:func:`cut_gradient` applies a weight ``w`` to a tensor ``v`` as ``w·v + (1-w)·stop_grad(v)``:
the value unchanged, its gradient scaled by ``w``. :mod:`doxa.model.chains` lays the weights
out per slot.
"""

from __future__ import annotations

import numpy as np
import torch

from .events import EventStream
from .structure import ModelStructure

#: Unsettled readings under a layer that agrees with itself more than its settled record
#: shows may weigh in its trust at most this many times as much as its settled readings do
#: (see :func:`settled_first_weights`).
UNSETTLED_CAP = 1.0
#: A layer is *dependent* when the one-sided z of (within-layer agreement on unsettled
#: questions − on settled ones) exceeds this. Pairs that share a reading are not
#: independent, so the z overstates the evidence: 3 rather than 2.
DEPENDENCE_Z = 3.0
#: Pairs a layer needs, on unsettled questions to be able to lift itself, and on settled ones
#: to show what its independent members look like.
MIN_PAIRS = 20
#: Readings clearer than this (``(1-u)(1-o)``) take part in the agreement test.
CLEAR_WEIGHT = 0.5


def layer_agreement(stream: EventStream, structure: ModelStructure, clear: float = CLEAR_WEIGHT) -> np.ndarray:
    """(n_nodes, 2, 2) per layer and question state (0 unsettled, 1 settled): (agreeing, all) pairs.

    A source's *vote* on a question is an option that one of its clear readings (clarity
    ``(1-u)(1-o) ≥ clear``, before any independence discount: the test must see a campaign
    to catch it) states as its top; a source repeating itself votes once. Pairs are two
    votes on one question from two different sources of the layer (a leaf's parent); they
    agree when their options are equal. Counted by grouping, ``Σ n(n-1)/2`` over (layer,
    question[, option]) less the same over (…, source), so a source never pairs with itself.
    """
    n = structure.n_nodes
    out = np.zeros((n, 2, 2))
    rows = np.flatnonzero(~stream.is_settlement & (stream.clarity >= clear))
    if len(rows) == 0:
        return out
    settled_q = np.bincount(stream.q[stream.is_settlement], minlength=stream.n_questions) > 0
    leaf = stream.leaf[rows]
    parent = structure.tree.parent[leaf]
    votes = np.unique(np.column_stack((stream.q[rows], leaf, np.where(parent >= 0, parent, leaf),
                                       stream.logr[rows].argmax(axis=1))), axis=0)
    q, leaf, layer, option = votes.T
    state = settled_q[q].astype(np.int64)

    def pairs(*columns: np.ndarray) -> np.ndarray:
        keys, count = np.unique(np.column_stack((state, layer) + columns), axis=0, return_counts=True)
        flat = np.bincount(keys[:, 1] * 2 + keys[:, 0], weights=count * (count - 1) / 2.0, minlength=2 * n)
        return flat.reshape(n, 2)

    out[:, :, 1] = pairs(q) - pairs(q, leaf)
    out[:, :, 0] = pairs(q, option) - pairs(q, leaf, option)
    return out


def dependent_layers(stream: EventStream, structure: ModelStructure) -> np.ndarray:
    """(n_nodes,) bool: layers whose agreement on unsettled questions exceeds their settled record's.

    One-sided two-proportion z of within-layer pairwise agreement (:func:`layer_agreement`),
    unsettled against settled. A layer with fewer than ``MIN_PAIRS`` pairs on unsettled
    questions (e.g. one source per subject) has no self-agreement to lift it; one with that
    many there but fewer on settled questions has no record to vouch for it, and counts as
    dependent.
    """
    counts = layer_agreement(stream, structure)
    agree_u, pairs_u = counts[:, 0, 0], counts[:, 0, 1]
    agree_s, pairs_s = counts[:, 1, 0], counts[:, 1, 1]
    rate_u = agree_u / np.maximum(pairs_u, 1.0)
    rate_s = agree_s / np.maximum(pairs_s, 1.0)
    pooled = (agree_u + agree_s) / np.maximum(pairs_u + pairs_s, 1.0)
    se = np.sqrt(pooled * (1 - pooled) * (1 / np.maximum(pairs_u, 1.0) + 1 / np.maximum(pairs_s, 1.0)))
    z = np.where(se > 0, (rate_u - rate_s) / np.where(se > 0, se, 1.0), np.where(rate_u > rate_s, np.inf, 0.0))
    return (pairs_u >= MIN_PAIRS) & ((pairs_s < MIN_PAIRS) | (z > DEPENDENCE_Z))


def settled_first_weights(stream: EventStream, structure: ModelStructure, cap: float | None = UNSETTLED_CAP
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(E,) weights of each event in the gradient of trust, and in that of a confusion matrix:
    settled facts first.

    A reading on a question with no settlement in the fit says how reliable its source
    is only through agreement with other readings, and agreement is not independence: a
    club of sources that echo one another agrees with itself on every unsettled question,
    and the plain marginal likelihood pays it for that. The settled record shows what
    independent members look like: how often two of the layer's sources agree on settled
    questions. A layer (a leaf's parent) whose members agree with one another on unsettled
    questions no more than that (:func:`dependent_layers`) keeps its unsettled readings at
    full weight. For a dependent layer, with ``S_p`` readings on settled questions and
    ``U_p`` on unsettled ones, each unsettled reading enters the trust gradient with weight
    ``γ_p = min(1, cap · S_p / U_p)``: together they count at most ``cap`` times the
    layer's settled record, so self-agreement cannot run its trust away from what the
    settled record says. Values and every other parameter's gradient are untouched (a
    cut, as for the reader temperature). ``cap=None``: weight 1 everywhere (the plain
    marginal likelihood).

    The confusion matrices' weights cap every layer, dependent or not. A matrix has
    ``K(K-1)`` free numbers where trust has one, and fitted on agreement alone it can
    settle on a relabelling of the answers (Dawid–Skene's
    log-loss on the crowd sets is several times doxa's); on Bluebirds, matrices fed unsettled
    agreement at full weight cost more than any other choice on one split of five (figures:
    docs/measurements/2026-12-code-choices.md).
    """
    weight = np.ones(len(stream))
    if cap is None or len(stream) == 0:
        return weight, weight.copy()
    settled_q = np.bincount(stream.q[stream.is_settlement], minlength=stream.n_questions) > 0
    reading = ~stream.is_settlement
    parent = structure.tree.parent[stream.leaf[reading]]
    group = np.where(parent >= 0, parent, stream.leaf[reading])
    on_settled = settled_q[stream.q[reading]]
    n = structure.n_nodes
    s_count = np.bincount(group[on_settled], minlength=n).astype(np.float64)
    u_count = np.bincount(group[~on_settled], minlength=n).astype(np.float64)
    gamma = np.minimum(1.0, cap * s_count / np.maximum(u_count, 1.0))
    rows = np.flatnonzero(reading)
    confusion = weight.copy()
    confusion[rows] = np.where(on_settled, 1.0, gamma[group])
    weight[rows] = np.where(on_settled, 1.0, np.where(dependent_layers(stream, structure), gamma, 1.0)[group])
    return weight, confusion


def cut_gradient(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``value`` unchanged, its gradient scaled by ``weight`` (1 where the question is settled)."""
    if bool((weight >= 1).all()):
        return value
    return weight * value + (1 - weight) * value.detach()
