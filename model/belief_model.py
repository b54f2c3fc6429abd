"""The generative story of DESIGN §2 in Pyro, and the same forward filter in torch.

One small hidden-Markov network per question ``q`` (``K`` options, kind ``k``):

- the answer ``z_t`` changes at rate ``λ_k`` per day; over a gap ``Δ`` it persists with
  ``ρ = exp(-λ_k Δ)``, else it is redrawn from the base rates ``π_k``:
  ``P(z_{t+Δ}=i | z_t=j) = ρ [i=j] + (1-ρ) π_k[i]``;
- a reading of a message from source ``s`` (reader output ``r`` over the options,
  ``u = unclear + unrelated``, ``o = one_off``) has the emission

      L(j) = (u + (1-u) o) / K + (1-u)(1-o) Σ_c r̃_c C_s[j, c],      r̃ ∝ r^(1/τ_reader)

  with ``C_s[j, c] = α_s [j=c] + (1-α_s)[j≠c]/(K-1)`` (one number of trust) or a full
  confusion matrix for biased sources; for a reading stated with certainty ``L(j)`` is
  exactly ``P(message states c | z=j)``, i.e. the Dawid–Skene emission (Dawid & Skene 1979);
- a settlement observes ``z`` at its time (``L`` = one-hot).

Priors::

    logit α_root ~ Normal(logit 0.7, 1.5)          σ_d ~ HalfNormal(1)   (one per depth d)
    logit α_node ~ Normal(logit α_parent, σ_depth)  (non-centred where few readings fall under
                                                     the node, centred where many: trust_logits)
    (a user-stated trust on a source replaces logit α_parent for its leaf)
    π_k ~ Dirichlet(1)                              log λ_k = μ + s η_k,  μ ~ N(log(ln2/365), 2), s ~ HalfNormal(1)
    log τ_reader ~ Normal(0, 0.5)
    confusion (optional): logit C_node[j, ·] = log C^trust(α_node)[j, ·] + Σ_{a ∈ ancestors(node)} σc_depth(a) η_a[j, ·]

The marginal likelihood of a question is ``1ᵀ A_N ⋯ A_1 π`` with ``A_n = diag(L_n) M_n``
(``M_n`` the change matrix over the gap before event ``n``). :func:`chain_log_marginal`
evaluates that product as a balanced binary tree (the associative-scan view of
filtering, Särkkä & García-Fernández 2021, "Temporal parallelization of Bayesian
smoothers"): each question's events are padded to a power of two and questions are
laid out longest first (:class:`Chains`), so padding at most doubles the work, the
sequential depth is ``log2`` of the longest question, and the cost of one SVI step is
linear in the number of readings. :func:`forward_filter` is the plain sequential
filter (rank by rank, like the numpy scorer) used for beliefs and predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyro
import pyro.distributions as dist
import torch

from doxa.data.evidence import Evidence

from .tree import SourceTree

DEFAULT_ROOT_TRUST = 0.7
ROOT_TRUST_SCALE = 1.5
TRUST_SCALE_PRIOR = 1.0
CONFUSION_SCALE_PRIOR = 1.5
RATE_LOC_PRIOR = math.log(math.log(2.0) / 365.0)
RATE_LOC_SCALE = 2.0
RATE_SCALE_PRIOR = 1.0
READER_LOG_TEMPERATURE_SCALE = 0.5
#: A settlement is an observation; this leak keeps two contradicting settlements at one
#: instant from making the likelihood exactly zero (and the gradient NaN).
SETTLEMENT_LEAK = 1e-6
#: Stand-in for log 0 of a reader probability: finite so gradients stay finite, small
#: enough that r̃ is exactly 0 after tempering for any plausible temperature.
LOG_ZERO = -1.0e4


# =============================================================================== structure
@dataclass
class ModelStructure:
    """What the latent variables are indexed by: source tree, kinds, readers, confusion pairs.

    Built from the readings alone, so it is the same whichever settlements a fit
    sees (a held-out fold can warm-start from the full fit).
    """

    tree: SourceTree
    leaf_of_source: np.ndarray  # (S,) node of each evidence source
    stated_logit: np.ndarray  # (V,) logit of the user-stated trust of a leaf; NaN where none
    node_messages: np.ndarray  # (V,) readings under each node
    ancestors: np.ndarray  # (V, D) ancestor (or self) at each depth, -1 past the node
    kinds: np.ndarray  # (n_kinds,) str
    kind_options: list[list[str]]
    kind_k: np.ndarray  # (n_kinds,) option count of each kind's canonical options
    kind_slot: np.ndarray  # (n_kinds,) row of the kind in its option-count group
    question_kind: np.ndarray  # (Q,)
    question_k: np.ndarray  # (Q,)
    question_canonical: np.ndarray  # (Q,) bool: the question has its kind's options
    readers: np.ndarray  # (R,) str
    pairs: dict[int, "PairTable"] = field(default_factory=dict)  # K → (node, kind) pairs

    @property
    def n_nodes(self) -> int:
        return self.tree.n_nodes

    @property
    def max_depth(self) -> int:
        return self.tree.max_depth

    @property
    def n_kinds(self) -> int:
        return int(self.kinds.shape[0])

    def kinds_with_k(self, k: int) -> np.ndarray:
        return np.flatnonzero(self.kind_k == k)

    @property
    def group_ks(self) -> list[int]:
        return sorted(int(k) for k in np.unique(self.kind_k))

    @classmethod
    def from_evidence(cls, evidence: Evidence) -> "ModelStructure":
        qt = evidence.questions
        tree, leaf_of_source = SourceTree.from_paths(evidence.sources.paths.astype(str))
        stated = np.full(tree.n_nodes, np.nan)
        trust = np.asarray(evidence.sources.trust, dtype=np.float64)
        has = np.isfinite(trust)
        clipped = np.clip(trust[has], 1e-3, 1 - 1e-3)
        stated[leaf_of_source[has]] = np.log(clipped) - np.log1p(-clipped)
        leaf_per_reading = leaf_of_source[evidence.source_index] if evidence.n_readings else np.zeros(0, np.int64)

        kinds, question_kind = np.unique(qt.kinds.astype(str), return_inverse=True)
        # canonical options of a kind: the option list most of its questions use
        keys, key_of_question, key_count = np.unique(qt.options_key.astype(str), return_inverse=True,
                                                     return_counts=True)
        kind_of_key = np.zeros(len(keys), dtype=np.int64)
        kind_of_key[key_of_question] = question_kind
        best = np.lexsort((keys, -key_count, kind_of_key))  # per kind: most used, then by name
        first_of_kind = best[np.r_[0, np.flatnonzero(np.diff(kind_of_key[best])) + 1]]
        canonical_key = np.empty(len(kinds), dtype=np.int64)
        canonical_key[kind_of_key[first_of_kind]] = first_of_kind
        representative = np.zeros(len(keys), dtype=np.int64)
        representative[key_of_question] = np.arange(len(key_of_question))
        kind_rep_question = representative[canonical_key]
        kind_options = [list(qt.options[i]) for i in kind_rep_question.tolist()]
        kind_k = np.asarray(qt.n_options, dtype=np.int64)[kind_rep_question]
        kind_slot = np.zeros(len(kinds), dtype=np.int64)
        for k in np.unique(kind_k):
            members = np.flatnonzero(kind_k == k)
            kind_slot[members] = np.arange(len(members))
        question_canonical = key_of_question == canonical_key[question_kind]

        structure = cls(
            tree=tree,
            leaf_of_source=leaf_of_source,
            stated_logit=stated,
            node_messages=tree.subtree_counts(leaf_per_reading),
            ancestors=tree.ancestors(np.arange(tree.n_nodes)),
            kinds=kinds,
            kind_options=kind_options,
            kind_k=kind_k,
            kind_slot=kind_slot,
            question_kind=question_kind.astype(np.int64),
            question_k=np.asarray(qt.n_options, dtype=np.int64),
            question_canonical=question_canonical,
            readers=np.asarray(evidence.readers, dtype=str),
        )
        structure.pairs = PairTable.build_all(structure, evidence)
        return structure


@dataclass
class PairTable:
    """(node, kind) pairs that carry a confusion matrix, for kinds with ``K`` options.

    Every (leaf, kind) with a reading on a question in the kind's canonical options,
    and all ancestors of those leaves for the same kind.
    """

    k: int
    node: np.ndarray  # (n,)
    kind: np.ndarray  # (n,)
    ancestors: np.ndarray  # (n, D) pair index of the ancestor pair at each depth, -1 past it
    keys: np.ndarray  # (n,) sorted node * n_kinds + kind

    def lookup(self, node: np.ndarray, kind: np.ndarray, n_kinds: int) -> np.ndarray:
        """Pair index of each (node, kind), -1 where there is none."""
        key = np.asarray(node, dtype=np.int64) * n_kinds + np.asarray(kind, dtype=np.int64)
        if len(self.keys) == 0:
            return np.full(key.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        return np.where(self.keys[pos] == key, pos, -1).astype(np.int64)

    @classmethod
    def build_all(cls, structure: ModelStructure, evidence: Evidence) -> dict[int, "PairTable"]:
        if evidence.n_readings == 0:
            return {}
        qk = structure.question_kind[evidence.q]
        canonical = structure.question_canonical[evidence.q]
        leaves = structure.leaf_of_source[evidence.source_index]
        n_kinds = structure.n_kinds
        out: dict[int, PairTable] = {}
        for k in structure.group_ks:
            if k < 2:
                continue
            rows = canonical & (structure.kind_k[qk] == k)
            if not rows.any():
                continue
            leaf_kind = np.unique(leaves[rows] * n_kinds + qk[rows])
            leaf, kind = leaf_kind // n_kinds, leaf_kind % n_kinds
            anc = structure.ancestors[leaf]  # (m, D)
            node_all = anc.reshape(-1)
            kind_all = np.repeat(kind, anc.shape[1])
            keep = node_all >= 0
            keys = np.unique(node_all[keep] * n_kinds + kind_all[keep])
            table = cls(k=k, node=keys // n_kinds, kind=keys % n_kinds,
                        ancestors=np.zeros((0, 0), dtype=np.int64), keys=keys)
            anc_nodes = structure.ancestors[table.node]
            anc_pairs = table.lookup(np.maximum(anc_nodes, 0), np.repeat(table.kind[:, None], anc_nodes.shape[1], 1),
                                     n_kinds)
            table.ancestors = np.where(anc_nodes >= 0, anc_pairs, -1)
            out[k] = table
        return out


# =============================================================================== events
@dataclass
class EventStream:
    """Readings and settlements of all questions merged, sorted by (question, time).

    Readings come before a settlement at the same instant (as in the scorer), so the
    prediction for a settlement uses every reading up to and including its time.
    """

    q: np.ndarray  # (E,)
    t: np.ndarray  # (E,)
    is_settlement: np.ndarray  # (E,) bool
    answer: np.ndarray  # (E,) settled option (0 for readings)
    leaf: np.ndarray  # (E,) source leaf node (0 for settlements)
    reader: np.ndarray  # (E,)
    logr: np.ndarray  # (E, K_max) log of the reader's probabilities over the options (LOG_ZERO for 0)
    mix: np.ndarray  # (E,) u + (1-u) o: the part of a reading that says nothing about the lasting answer
    weight: np.ndarray  # (E,) (1-u)(1-o)
    reading_row: np.ndarray  # (E,) row in the evidence readings, -1 for settlements
    settlement_row: np.ndarray  # (E,) row in the evidence settlements, -1 for readings
    rank: np.ndarray  # (E,) position within the question's events
    n_questions: int

    @classmethod
    def from_evidence(cls, evidence: Evidence, structure: ModelStructure,
                      settlement_mask: np.ndarray | None = None) -> "EventStream":
        k_q = structure.question_k
        n, k_max = evidence.probs.shape if evidence.n_readings else (0, max(int(k_q.max(initial=2)), 2))
        s_ok = (evidence.settle_answer >= 0) & (evidence.settle_answer < k_q[evidence.settle_q])
        if settlement_mask is not None:
            s_ok &= np.asarray(settlement_mask, dtype=bool)
        s_rows = np.flatnonzero(s_ok)
        n_s = len(s_rows)

        probs = np.asarray(evidence.probs, dtype=np.float64).reshape(n, k_max)
        k_read = k_q[evidence.q].astype(np.int64)
        valid = np.arange(k_max)[None, :] < k_read[:, None]
        r = np.where(valid, np.clip(probs, 0.0, None), 0.0)
        total = r.sum(axis=1, keepdims=True)
        r = np.where(total > 0, r / np.where(total > 0, total, 1.0), valid / np.maximum(k_read, 1)[:, None])
        with np.errstate(divide="ignore"):
            logr = np.where(r > 0, np.log(np.where(r > 0, r, 1.0)), LOG_ZERO)
        u = np.clip(evidence.unclear + evidence.unrelated, 0.0, 1.0)
        o = np.clip(evidence.one_off, 0.0, 1.0)

        q = np.r_[evidence.q, evidence.settle_q[s_rows]].astype(np.int64)
        t = np.r_[evidence.t, evidence.settle_t[s_rows]].astype(np.float64)
        order = np.lexsort((t, q))  # stable: readings before settlements at equal times
        is_settle = np.r_[np.zeros(n, bool), np.ones(n_s, bool)]
        answer = np.r_[np.zeros(n, np.int64), evidence.settle_answer[s_rows]]
        leaf = np.r_[structure.leaf_of_source[evidence.source_index] if n else np.zeros(0, np.int64),
                     np.zeros(n_s, np.int64)]
        reader = np.r_[evidence.reader_index.astype(np.int64), np.zeros(n_s, np.int64)]
        logr_all = np.vstack([logr, np.zeros((n_s, k_max))])
        mix = np.r_[u + (1 - u) * o, np.zeros(n_s)]
        weight = np.r_[(1 - u) * (1 - o), np.ones(n_s)]
        reading_row = np.r_[np.arange(n), np.full(n_s, -1)]
        settlement_row = np.r_[np.full(n, -1), s_rows]

        q = q[order]
        starts = np.r_[0, np.flatnonzero(np.diff(q)) + 1] if len(q) else np.zeros(0, np.int64)
        lengths = np.diff(np.r_[starts, len(q)])
        rank = np.arange(len(q)) - np.repeat(starts, lengths)
        return cls(q=q, t=t[order], is_settlement=is_settle[order], answer=answer[order], leaf=leaf[order],
                   reader=reader[order], logr=logr_all[order], mix=mix[order], weight=weight[order],
                   reading_row=reading_row[order], settlement_row=settlement_row[order], rank=rank,
                   n_questions=len(k_q))

    def __len__(self) -> int:
        return int(self.q.shape[0])


#: Cost model for grouping option counts (seconds per tree level; per slot and K³):
#: on a small store a few padded groups beat many small ones; on a large store each
#: option count keeps its own group.
LEVEL_COST = 5e-4
SLOT_COST = 2e-8


@dataclass
class Chains:
    """Questions laid out for the tree product of :func:`chain_log_marginal`.

    Each question's events are padded (with identity steps) to a power-of-two length,
    and questions are placed longest first, so every question starts at a multiple of
    its own padded length. Level ``ℓ`` of the tree multiplies neighbouring pairs; after
    it, the questions of padded length ``2^ℓ`` are finished and form the tail of the
    array, which is cut off. Padding at most doubles the work; one level is a handful
    of tensor operations whatever the number of questions.

    A group holds the questions of the option counts ``ks`` (ascending), all padded to
    ``k = ks[-1]`` options; options beyond a question's own count are impossible
    (likelihood and prior 0).
    """

    k: int
    ks: tuple[int, ...]
    question: torch.Tensor  # (B,) question index, in layout order
    kind: torch.Tensor  # (B,)
    prior_row: torch.Tensor  # (B,) row in the group's prior table (see group_prior_table)
    size_log2: np.ndarray  # (B,) non-increasing
    offset: np.ndarray  # (B,) first slot
    # per slot (L,)
    dt: torch.Tensor  # days since the previous event (0 for a first event and padding)
    is_reading: torch.Tensor  # bool
    n_options: torch.Tensor  # the question's own option count
    fixed_like_t: torch.Tensor  # (k, L): one-hot settlements (with a tiny leak), ones for padding
    valid_t: torch.Tensor  # (k, L) bool: option exists for the slot's question
    leaf: torch.Tensor
    reader: torch.Tensor
    logr_t: torch.Tensor  # (k, L) log reader probabilities, options first (LOG_ZERO beyond K)
    mix: torch.Tensor
    weight: torch.Tensor
    pair: torch.Tensor  # row in the group's confusion table, -1: one-number form
    n_events: int
    subsample: int | None = None

    SLOT_FIELDS = ("dt", "is_reading", "n_options", "leaf", "reader", "mix", "weight", "pair")
    OPTION_FIELDS = ("fixed_like_t", "valid_t", "logr_t")

    @property
    def slot_question(self) -> torch.Tensor:
        """(L,) row of each slot's question in this layout."""
        if getattr(self, "_slot_question", None) is None:
            self._slot_question = torch.as_tensor(np.repeat(np.arange(len(self.size_log2)),
                                                            np.left_shift(1, self.size_log2)))
        return self._slot_question

    @property
    def has_pairs(self) -> bool:
        return bool((self.pair >= 0).any())

    @property
    def soft_and_settled(self) -> bool:
        """Some reading is not certain (so τ matters) and some question is settled."""
        if getattr(self, "_soft_and_settled", None) is None:
            settled = bool((~self.is_reading & (self.fixed_like_t.amax(0) < 1.0)).any())
            certain = (self.logr_t >= 0).any(0) | ~self.is_reading  # one option at log 1 = 0
            self._soft_and_settled = settled and not bool(certain.all())
        return self._soft_and_settled

    @property
    def n_questions(self) -> int:
        return int(self.question.shape[0])

    @property
    def n_slots(self) -> int:
        return int(self.dt.shape[0])

    @property
    def name(self) -> str:
        return "questions_k" + "_".join(str(k) for k in self.ks)

    def take(self, idx: torch.Tensor | None) -> "Chains":
        """The chains of a subset of questions (``idx`` into layout order), laid out afresh."""
        if idx is None:
            return self
        chosen = np.sort(idx.numpy())  # ascending layout order keeps sizes non-increasing
        sizes = np.left_shift(1, self.size_log2[chosen])
        slots = _ranges(self.offset[chosen], sizes)
        slot_t = torch.as_tensor(slots)
        rows = torch.as_tensor(chosen)
        fields = {name: getattr(self, name).index_select(0, slot_t) for name in self.SLOT_FIELDS}
        fields.update({name: getattr(self, name).index_select(1, slot_t) for name in self.OPTION_FIELDS})
        return Chains(k=self.k, ks=self.ks, question=self.question[rows], kind=self.kind[rows],
                      prior_row=self.prior_row[rows], size_log2=self.size_log2[chosen],
                      offset=np.r_[0, np.cumsum(sizes)[:-1]], n_events=len(slots), **fields)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``range(s, s + n)`` for each pair, vectorised."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64), lengths) + offsets


def group_tables(structure: ModelStructure, ks: tuple[int, ...]) -> tuple[dict[int, int], dict[int, int]]:
    """Row offsets of each option count in a group's prior table and confusion table.

    Prior table: for each ``K`` in ``ks``, the base rates of the kinds with ``K`` options
    and then a uniform row, all padded to the group's width. Confusion table: the
    pairs of each ``K`` in turn.
    """
    prior_offset, pair_offset = {}, {}
    rows = pairs = 0
    for kk in ks:
        prior_offset[kk] = rows
        rows += len(structure.kinds_with_k(kk)) + 1
        pair_offset[kk] = pairs
        table = structure.pairs.get(kk)
        pairs += len(table.node) if table is not None else 0
    return prior_offset, pair_offset


def group_prior_table(derived: "Derived", ks: tuple[int, ...], k: int, dtype) -> torch.Tensor:
    parts = []
    for kk in ks:
        table = derived.prior_table.get(kk)
        if table is None:
            table = torch.full((1, kk), 1.0 / kk, dtype=dtype)
        parts.append(torch.nn.functional.pad(table, (0, k - kk)))
    return torch.cat(parts)


def group_confusion_table(derived: "Derived", ks: tuple[int, ...], k: int) -> torch.Tensor | None:
    parts = [torch.nn.functional.pad(derived.confusion[kk], (0, k - kk, 0, k - kk))
             for kk in ks if kk in derived.confusion]
    return torch.cat(parts) if parts else None


def _option_groups(ks: np.ndarray, slots_by_k: dict[int, int], depth_by_k: dict[int, int]) -> list[tuple[int, ...]]:
    """Merge option-count groups upward where one padded group is cheaper than two.

    Cost model of one group (measured on a 2-core CPU): a fixed ``LEVEL_COST`` per tree
    level for the Python and autograd overhead, plus ``SLOT_COST`` per slot and K³.
    """
    groups: list[list[int]] = []
    for kk in sorted(int(x) for x in ks.tolist()):
        if groups:
            prev = groups[-1]
            slots_prev = sum(slots_by_k[x] for x in prev)
            depth_prev = max(depth_by_k[x] for x in prev)
            apart = (LEVEL_COST * depth_prev + SLOT_COST * slots_prev * prev[-1] ** 3
                     + LEVEL_COST * depth_by_k[kk] + SLOT_COST * slots_by_k[kk] * kk ** 3)
            together = LEVEL_COST * max(depth_prev, depth_by_k[kk]) + SLOT_COST * (slots_prev + slots_by_k[kk]) * kk ** 3
            if together < apart:
                prev.append(kk)
                continue
        groups.append([kk])
    return [tuple(g) for g in groups]


def make_chains(stream: EventStream, structure: ModelStructure, dtype=torch.float32,
                events_per_step: int | None = None, merge: bool = True) -> list[Chains]:
    """Lay out every question for the tree product, in option-count groups.

    ``events_per_step`` sets plate subsampling: each group draws its share of that many
    padded slots per step. ``merge=False`` keeps one group per option count.
    """
    if len(stream) == 0:
        return []
    q = stream.q
    starts = np.r_[0, np.flatnonzero(np.diff(q)) + 1]
    lengths = np.diff(np.r_[starts, len(q)])
    questions = q[starts]
    k_of = structure.question_k[questions]
    size_log2 = np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64)
    keep = k_of >= 2  # a one-option question carries no information
    if not keep.any():
        return []
    slots = np.left_shift(1, size_log2)
    total_slots = int(slots[keep].sum())
    present = np.unique(k_of[keep])
    slots_by_k = {int(kk): int(slots[keep & (k_of == kk)].sum()) for kk in present}
    dt_all = np.maximum(np.where(stream.rank > 0, stream.t - np.r_[stream.t[:1], stream.t[:-1]], 0.0), 0.0)

    out: list[Chains] = []
    depth_by_k = {int(kk): int(size_log2[keep & (k_of == kk)].max()) + 1 for kk in present}
    scale = 1.0 if events_per_step is None else min(1.0, events_per_step / max(total_slots, 1))
    groups = (_option_groups(present, {kk: int(v * scale) for kk, v in slots_by_k.items()}, depth_by_k)
              if merge else [(int(kk),) for kk in present])
    for ks in groups:
        kg = ks[-1]
        prior_offset, pair_offset = group_tables(structure, ks)
        members = np.flatnonzero(keep & np.isin(k_of, ks))
        members = members[np.argsort(-size_log2[members], kind="stable")]  # longest first
        sizes = slots[members]
        offset = np.r_[0, np.cumsum(sizes)[:-1]]
        n_slots = int(sizes.sum())
        ev = _ranges(starts[members], lengths[members])
        slot = _ranges(offset, lengths[members])  # where each event goes

        def grid(values, fill, dtype_np):
            out_arr = np.full((n_slots,) + values.shape[1:], fill, dtype=dtype_np)
            out_arr[slot] = values
            return out_arr

        qs = questions[members]
        kq = k_of[members]
        kind_q = structure.question_kind[qs]
        canonical = structure.question_canonical[qs] & (structure.kind_k[kind_q] == kq)
        base_row = np.asarray([prior_offset[int(x)] for x in kq.tolist()], dtype=np.int64) if len(kq) else kq
        n_same_k = np.asarray([len(structure.kinds_with_k(int(x))) for x in kq.tolist()], dtype=np.int64) \
            if len(kq) else kq
        prior_row = base_row + np.where(canonical, structure.kind_slot[kind_q], n_same_k)
        event_row = np.repeat(np.arange(len(members)), lengths[members])
        k_event = kq[event_row]
        reading = ~stream.is_settlement[ev]
        pair = np.full(len(ev), -1, dtype=np.int64)
        for kk in ks:
            table = structure.pairs.get(kk)
            if table is None:
                continue
            ok = reading & canonical[event_row] & (k_event == kk)
            found = table.lookup(stream.leaf[ev][ok], kind_q[event_row][ok], structure.n_kinds)
            pair[np.flatnonzero(ok)] = np.where(found >= 0, found + pair_offset[kk], -1)
        fixed = np.ones((len(ev), kg))
        settled = np.flatnonzero(~reading)
        valid_event = np.arange(kg)[None, :] < k_event[:, None]
        fixed[settled] = np.where(valid_event[settled], SETTLEMENT_LEAK / k_event[settled, None], 0.0)
        fixed[settled, stream.answer[ev][settled]] = 1 - SETTLEMENT_LEAK + SETTLEMENT_LEAK / k_event[settled]
        logr = np.full((len(ev), kg), LOG_ZERO)
        width = min(kg, stream.logr.shape[1])
        logr[:, :width] = np.where(valid_event[:, :width], stream.logr[ev, :width], LOG_ZERO)
        subsample = None
        if events_per_step is not None and total_slots > events_per_step:
            subsample = int(max(1, math.ceil(len(members) * events_per_step / total_slots)))
            subsample = subsample if subsample < len(members) else None
        valid_grid = grid(valid_event, True, bool)
        out.append(Chains(
            k=int(kg), ks=tuple(int(x) for x in ks),
            question=torch.as_tensor(qs, dtype=torch.long),
            kind=torch.as_tensor(kind_q, dtype=torch.long),
            prior_row=torch.as_tensor(prior_row, dtype=torch.long),
            size_log2=size_log2[members],
            offset=offset,
            dt=torch.as_tensor(grid(dt_all[ev], 0.0, np.float64), dtype=dtype),
            is_reading=torch.as_tensor(grid(reading, False, bool)),
            n_options=torch.as_tensor(grid(k_event.astype(np.float64), float(kg), np.float64), dtype=dtype),
            fixed_like_t=torch.as_tensor(grid(fixed, 1.0, np.float64).T.copy(), dtype=dtype),
            valid_t=torch.as_tensor(valid_grid.T.copy()),
            leaf=torch.as_tensor(grid(stream.leaf[ev], 0, np.int64)),
            reader=torch.as_tensor(grid(stream.reader[ev], 0, np.int64)),
            logr_t=torch.as_tensor(grid(logr, 0.0, np.float64).T.copy(), dtype=dtype),
            mix=torch.as_tensor(grid(stream.mix[ev], 0.0, np.float64), dtype=dtype),
            weight=torch.as_tensor(grid(stream.weight[ev], 0.0, np.float64), dtype=dtype),
            pair=torch.as_tensor(grid(pair, -1, np.int64)),
            n_events=len(ev),
            subsample=subsample,
        ))
    return out


# =============================================================================== latents
def logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def sample_latents(structure: ModelStructure, confusion: bool, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Every global latent of the story, under its prior (see module docstring)."""
    zeros = lambda *shape: torch.zeros(shape, dtype=dtype)  # noqa: E731
    ones = lambda *shape: torch.ones(shape, dtype=dtype)  # noqa: E731
    d = max(structure.max_depth, 1)
    latents = {
        "trust_root": pyro.sample("trust_root", dist.Normal(torch.tensor(logit(DEFAULT_ROOT_TRUST), dtype=dtype),
                                                            torch.tensor(ROOT_TRUST_SCALE, dtype=dtype))),
        "trust_scale": pyro.sample("trust_scale", dist.HalfNormal(TRUST_SCALE_PRIOR * ones(d)).to_event(1)),
    }

    def sample_level(name: str, loc: torch.Tensor, scale: torch.Tensor, centred: torch.Tensor) -> torch.Tensor:
        value = pyro.sample(name, dist.Normal(torch.where(centred, loc, torch.zeros((), dtype=dtype)),
                                              torch.where(centred, scale, torch.ones((), dtype=dtype))).to_event(1))
        latents[name] = value
        return value

    trust_logits(structure, latents["trust_root"], latents["trust_scale"], sample_level)
    latents.update({
        "rate_loc": pyro.sample("rate_loc", dist.Normal(torch.tensor(RATE_LOC_PRIOR, dtype=dtype),
                                                        torch.tensor(RATE_LOC_SCALE, dtype=dtype))),
        "rate_scale": pyro.sample("rate_scale", dist.HalfNormal(torch.tensor(RATE_SCALE_PRIOR, dtype=dtype))),
        "rate_offset": pyro.sample("rate_offset", dist.Normal(zeros(structure.n_kinds),
                                                              ones(structure.n_kinds)).to_event(1)),
    })
    for k in structure.group_ks:
        n_k = len(structure.kinds_with_k(k))
        latents[f"base_rates_{k}"] = pyro.sample(f"base_rates_{k}", dist.Dirichlet(ones(n_k, k)).to_event(1))
    n_r = max(len(structure.readers), 1)
    latents["reader_log_temperature"] = pyro.sample(
        "reader_log_temperature", dist.Normal(zeros(n_r), READER_LOG_TEMPERATURE_SCALE * ones(n_r)).to_event(1))
    if confusion:
        latents["confusion_scale"] = pyro.sample("confusion_scale",
                                                 dist.HalfNormal(CONFUSION_SCALE_PRIOR * ones(d)).to_event(1))
        for k, table in structure.pairs.items():
            n_p = len(table.node)
            latents[f"confusion_offset_{k}"] = pyro.sample(
                f"confusion_offset_{k}", dist.Normal(zeros(n_p, k, k), ones(n_p, k, k)).to_event(3))
    return latents


@dataclass
class Derived:
    """The parameters the likelihood uses, as deterministic functions of the latents."""

    trust_logit: torch.Tensor  # (V,)
    confusion: dict[int, torch.Tensor]  # K → (pairs, K, K) rows sum to 1; empty when off
    prior_table: dict[int, torch.Tensor]  # K → (kinds with K + 1, K); last row uniform
    rate: torch.Tensor  # (n_kinds,) λ per day
    inv_temperature: torch.Tensor  # (R,)

    @property
    def trust(self) -> torch.Tensor:
        return torch.sigmoid(self.trust_logit)


#: Nodes with at least this many readings under them get a centred prior (their data
#: pin them, so the mean-field guide should not couple them to their parent); the rest
#: are non-centred (Papaspiliopoulos, Roberts & Sköld 2007; Gorinova et al. 2020).
CENTRED_MIN_MESSAGES = 20


def trust_logits(structure: ModelStructure, root: torch.Tensor, scale: torch.Tensor, level_value) -> torch.Tensor:
    """Node logits, one depth at a time: ``x = loc + σ_d^(1-c) (z - c·loc)`` per node.

    ``loc`` is the parent's logit (the root's for a top layer; the user's stated trust
    for a leaf that has one), ``c`` = 1 for a centred node (``z ~ N(loc, σ_d)``) and 0 for
    a non-centred one (``z ~ N(0, 1)``). ``level_value(name, loc, σ, centred)`` returns
    ``z`` of a level: a ``pyro.sample`` in the model, a lookup in :func:`derive`.
    """
    dtype = root.dtype
    logits = torch.zeros(structure.n_nodes, dtype=dtype)
    stated = torch.as_tensor(structure.stated_logit, dtype=dtype)
    centred_all = torch.as_tensor(structure.node_messages >= CENTRED_MIN_MESSAGES)
    parent = torch.as_tensor(structure.tree.parent)
    pieces = []
    for d, level in enumerate(structure.tree.levels()):
        idx = torch.as_tensor(level)
        par = parent[idx]
        parent_logit = root.expand(len(level)) if d == 0 else logits[par.clamp_min(0)]
        own_stated = stated[idx]
        loc = torch.where(torch.isnan(own_stated), parent_logit, torch.nan_to_num(own_stated))
        sigma = scale[d].expand(len(level))
        centred = centred_all[idx]
        z = level_value(f"trust_level_{d + 1}", loc, sigma, centred)
        x = torch.where(centred, z, loc + sigma * z)
        logits = logits.index_put((idx,), x)
        pieces.append(x)
    return torch.cat(pieces) if pieces else logits


def derive(structure: ModelStructure, latents: dict[str, torch.Tensor]) -> Derived:
    dtype = latents["trust_root"].dtype
    trust_logit = trust_logits(structure, latents["trust_root"], latents["trust_scale"],
                               lambda name, loc, sigma, centred: latents[name])

    confusion: dict[int, torch.Tensor] = {}
    if "confusion_scale" in latents:
        c_scale = latents["confusion_scale"]
        for k, table in structure.pairs.items():
            eta = latents[f"confusion_offset_{k}"]  # (n, k, k)
            anc = torch.as_tensor(np.maximum(table.ancestors, 0), dtype=torch.long)
            has = torch.as_tensor(table.ancestors >= 0)[..., None, None]
            dev = torch.where(has, c_scale[None, : anc.shape[1], None, None] * eta[anc],
                              torch.zeros((), dtype=dtype)).sum(1)
            base = trust_confusion_logits(trust_logit[torch.as_tensor(table.node)], k)
            confusion[k] = torch.softmax(base + dev, dim=-1)

    prior_table = {}
    for k in structure.group_ks:
        uniform = torch.full((1, k), 1.0 / k, dtype=dtype)
        prior_table[k] = torch.cat([latents[f"base_rates_{k}"], uniform], dim=0)
    # clamped: with no gaps in time (e.g. crowd labels) λ is unidentified and a draw far
    # in the tail must not overflow (λ·0 = inf·0 would be NaN)
    log_rate = (latents["rate_loc"] + latents["rate_scale"] * latents["rate_offset"]).clamp(-40.0, 12.0)
    return Derived(trust_logit=trust_logit, confusion=confusion, prior_table=prior_table, rate=log_rate.exp(),
                   inv_temperature=torch.exp(-latents["reader_log_temperature"]))


def trust_confusion_logits(trust_logit: torch.Tensor, k: int) -> torch.Tensor:
    """log of the one-number confusion matrix α[j=c] + (1-α)[j≠c]/(K-1), shape (..., K, K)."""
    on = torch.nn.functional.logsigmoid(trust_logit)[..., None, None]
    off = torch.nn.functional.logsigmoid(-trust_logit)[..., None, None] - math.log(max(k - 1, 1))
    eye = torch.eye(k, dtype=trust_logit.dtype)
    return eye * on + (1 - eye) * off


# =============================================================================== likelihood
def reading_likelihood(logr: torch.Tensor, mix: torch.Tensor, weight: torch.Tensor, inv_tau: torch.Tensor,
                       trust: torch.Tensor, confusion: torch.Tensor | None = None) -> torch.Tensor:
    """L(j) of DESIGN §2 for readings over ``K = logr.shape[-1]`` options (any leading shape).

    ``confusion`` (…, K, K), where given, replaces the one-number bracket by ``Σ_c r̃_c C[j, c]``.
    """
    k = logr.shape[-1]
    scaled = logr * inv_tau[..., None]
    # by hand: torch's softmax kernel is several times slower over a last axis of 2–5
    r_t = (scaled - scaled.detach().amax(dim=-1, keepdim=True)).exp()
    r_t = r_t / r_t.sum(dim=-1, keepdim=True)
    if confusion is None:
        a = trust[..., None]
        bracket = a * r_t + (1 - a) * (1 - r_t) / max(k - 1, 1)
    else:
        bracket = (confusion @ r_t[..., None]).squeeze(-1)
    return mix[..., None] / k + weight[..., None] * bracket


def chains_likelihood(chains: Chains, derived: Derived, readings_only: bool = False) -> torch.Tensor:
    """(K, L) likelihood of every slot, options first: readings under ``derived``, fixed rows for the rest.

    Options-first (batch-last) layout: the K×K products of :func:`chain_log_marginal`
    run as broadcasts over long contiguous rows, several times faster than batched
    tiny matrix multiplies on a CPU.
    """
    k = chains.k
    leaf = chains.leaf
    kq = chains.n_options
    scaled = chains.logr_t * derived.inv_temperature[chains.reader]
    r_t = (scaled - scaled.detach().amax(dim=0, keepdim=True)).exp()
    r_t = r_t / r_t.sum(dim=0, keepdim=True)
    table = group_confusion_table(derived, chains.ks, k) if chains.has_pairs else None
    a = derived.trust[leaf] if derived.trust.numel() else torch.ones_like(chains.mix)
    bracket = a * r_t + (1 - a) * (1 - r_t) / (kq - 1).clamp_min(1.0)
    if table is not None:
        with_pair = chains.pair >= 0
        conf = table[chains.pair.clamp_min(0)]  # (L, K, K)
        by_matrix = (conf * r_t.T[:, None, :]).sum(-1).T  # Σ_c C[j, c] r̃_c
        bracket = torch.where(with_pair, by_matrix, bracket)
    like = (chains.mix / kq + chains.weight * bracket) * chains.valid_t
    # without settlements, their slots are plain decay steps (L = 1)
    return torch.where(chains.is_reading, like, torch.ones_like(like) if readings_only else chains.fixed_like_t)


def chain_log_marginal(chains: Chains, derived: Derived, readings_only: bool = False) -> torch.Tensor:
    """log P(all events of each question), (B,) in layout order, by a binary tree of K×K products.

    ``readings_only``: log P(readings), the settlements left out.
    """
    k = chains.k
    like = chains_likelihood(chains, derived, readings_only)  # (K, L)
    prior = group_prior_table(derived, chains.ks, k, like.dtype)[chains.prior_row].T  # (K, B)
    slot_prior = prior[:, chains.slot_question]  # (K, L)
    rate = derived.rate[chains.kind][chains.slot_question]
    rho = torch.exp(-rate * chains.dt)  # padding has dt = 0 → identity
    eye = torch.eye(k, dtype=like.dtype)[:, :, None]
    # A_n = diag(L_n) M_n with M[i, j] = ρ[i=j] + (1-ρ) π_i; stored (K, K, L)
    a = (like * (1 - rho) * slot_prior)[:, None, :] + eye * (like * rho)[:, None, :]
    products, scales = _TreeProduct.apply(a, chains.size_log2, chains.offset)
    total = (products * prior[None, :, :]).sum(dim=(0, 1))
    return total.clamp_min(1e-38).log() + scales


class _TreeProduct(torch.autograd.Function):
    """``A_N ⋯ A_1`` of every question in a :class:`Chains` layout, with a hand-written backward.

    Forward: level by level, multiply neighbouring pairs (later @ earlier), rescale each
    product by its largest entry (the log of the scale is returned separately and needs
    no gradient: it cancels in ``log 1ᵀ P π``), and cut off the questions that are done.
    Backward: the same levels in reverse, ``∂X = ∂C Yᵀ``, ``∂Y = Xᵀ ∂C`` for ``C = X Y``.
    One autograd node instead of a dozen per level keeps the step cheap.
    Inputs and outputs are options-first: ``a`` (K, K, L) → products (K, K, B), scales (B,).
    """

    @staticmethod
    def forward(ctx, a, size_log2, offset):
        k = a.shape[0]
        x = a
        log_scale = torch.zeros(a.shape[-1], dtype=a.dtype)
        saved, cuts, finished_x, finished_scale = [], [], [], []
        top = int(size_log2[0]) if len(size_log2) else -1
        for level in range(top + 1):
            if level > 0:
                pairs = x.reshape(k, k, -1, 2)
                later, earlier = pairs[..., 1], pairs[..., 0]
                x = (later[:, :, None, :] * earlier[None, :, :, :]).sum(1)
                peak = x.amax(dim=(0, 1)).clamp_min(1e-30)
                x = x / peak
                log_scale = log_scale.reshape(-1, 2).sum(1) + peak.log()
                saved.append((later, earlier, peak))
            first_done = int(np.searchsorted(-size_log2, -level))
            cut = x.shape[-1]
            if first_done < len(size_log2) and size_log2[first_done] == level:
                cut = int(offset[first_done]) >> level
            cuts.append(cut)
            finished_x.append(x[..., cut:])
            finished_scale.append(log_scale[cut:])
            x, log_scale = x[..., :cut], log_scale[:cut]
        ctx.saved = saved
        ctx.cuts = cuts
        ctx.sizes = [f.shape[-1] for f in finished_x]
        ctx.length = a.shape[-1]
        products = torch.cat(finished_x[::-1], dim=-1) if finished_x else a.new_zeros((k, k, 0))
        scales = torch.cat(finished_scale[::-1]) if finished_scale else a.new_zeros(0)
        ctx.mark_non_differentiable(scales)
        return products, scales

    @staticmethod
    def backward(ctx, grad_products, grad_scales):
        sizes = ctx.sizes
        pieces = list(torch.split(grad_products, sizes[::-1], dim=-1))[::-1]  # per level, ascending
        g_up = None  # gradient of what went up from the current level
        for level in range(len(sizes) - 1, -1, -1):
            g_level = pieces[level] if g_up is None else torch.cat([g_up, pieces[level]], dim=-1)
            if level == 0:
                return g_level, None, None
            later, earlier, peak = ctx.saved[level - 1]
            g_raw = g_level / peak
            g_later = (g_raw[:, None, :, :] * earlier[None, :, :, :]).sum(2)  # ∂C Yᵀ
            g_earlier = (later[:, :, None, :] * g_raw[:, None, :, :]).sum(0)  # Xᵀ ∂C
            g_up = torch.stack([g_earlier, g_later], dim=-1).reshape(g_raw.shape[0], g_raw.shape[1], -1)
        return grad_products.new_zeros((grad_products.shape[0], grad_products.shape[1], ctx.length)), None, None


# =============================================================================== model
def belief_model(structure: ModelStructure, chains: list[Chains], confusion: bool = False,
                 dtype=torch.float32) -> None:
    """The generative story (module docstring): global latents, then each question's evidence.

    The answer process is marginalised exactly (the forward algorithm), so the only
    latents are global and plate subsampling over questions gives an unbiased ELBO.
    """
    latents = sample_latents(structure, confusion, dtype)
    derived = derive(structure, latents)
    for group in chains:
        with pyro.plate(group.name, group.n_questions, subsample_size=group.subsample) as idx:
            part = group if group.subsample is None else group.take(idx)
            log_marginal = chain_log_marginal(part, derived)
            if part.soft_and_settled:
                log_marginal = log_marginal + _temperature_from_settlements(part, derived)
            pyro.factor(f"evidence_{group.name}", log_marginal)


def _temperature_from_settlements(chains: Chains, derived: Derived) -> torch.Tensor:
    """Zero in value; moves the reader temperature by log P(settlements | readings) alone.

    The normaliser of a soft reading, ``Σ_j b_j Σ_c r̃_c C[j, c]``, is linear in ``r̃`` and so
    rewards sharpening it whatever the truth (an improper score): fitted through it, a
    reader's temperature comes out too low. Taking τ's gradient from
    ``log P(all) - log P(readings)`` instead scores the reader on how well its tempered
    readings predict the settled facts, a proper log score. Every other parameter keeps
    the gradient of the full marginal likelihood.
    """
    frozen = Derived(trust_logit=derived.trust_logit.detach(),
                     confusion={k: v.detach() for k, v in derived.confusion.items()},
                     prior_table={k: v.detach() for k, v in derived.prior_table.items()},
                     rate=derived.rate.detach(), inv_temperature=derived.inv_temperature)
    readings = chain_log_marginal(chains, frozen, readings_only=True)
    return readings.detach() - readings


# =============================================================================== filtering
@dataclass
class FilterResult:
    belief: np.ndarray  # (Q, K_max) at the requested time, before rejections and calibration
    log_marginal: np.ndarray  # (Q,)
    predictive: np.ndarray  # (E, K_max) belief just before each event (after decay to its time)
    last_t: np.ndarray  # (Q,)


def question_inputs(structure: ModelStructure, derived: Derived, dtype=torch.float64):
    """π (Q, K_max) and λ (Q,) per question."""
    n_q, k_max = len(structure.question_k), max(int(structure.question_k.max(initial=2)), 2)
    prior = torch.zeros((n_q, k_max), dtype=dtype)
    kinds = structure.question_kind
    for k in np.unique(structure.question_k).tolist():
        rows = np.flatnonzero(structure.question_k == k)
        if k < 1:
            continue
        table = derived.prior_table.get(k)
        if table is None:
            prior[rows, :k] = 1.0 / k
            continue
        slot = np.where(structure.question_canonical[rows] & (structure.kind_k[kinds[rows]] == k),
                        structure.kind_slot[kinds[rows]], table.shape[0] - 1)
        prior[torch.as_tensor(rows), :k] = table.to(dtype)[torch.as_tensor(slot)]
    rate = derived.rate.to(dtype)[torch.as_tensor(kinds)] if n_q else torch.zeros(0, dtype=dtype)
    return prior, rate


def stream_likelihood(stream: EventStream, structure: ModelStructure, derived: Derived,
                      dtype=torch.float64) -> torch.Tensor:
    """(E, K_max) likelihood of every event; settlements exactly one-hot (as in the scorer)."""
    k_max = stream.logr.shape[1]
    like = torch.zeros((len(stream), k_max), dtype=dtype)
    k_event = structure.question_k[stream.q]
    trust_logit = derived.trust_logit.to(dtype)
    for k in np.unique(k_event).tolist():
        rows = np.flatnonzero((k_event == k) & ~stream.is_settlement)
        if len(rows) == 0 or k < 1:
            continue
        leaf = torch.as_tensor(stream.leaf[rows])
        conf = None
        table = derived.confusion.get(k)
        if table is not None:
            kinds = structure.question_kind[stream.q[rows]]
            ok = structure.question_canonical[stream.q[rows]] & (structure.kind_k[kinds] == k)
            pair = np.where(ok, structure.pairs[k].lookup(stream.leaf[rows], kinds, structure.n_kinds), -1)
            pair_t = torch.as_tensor(pair)
            own = trust_confusion_logits(trust_logit[leaf], k).exp()
            conf = torch.where((pair_t >= 0)[:, None, None], table.to(dtype)[pair_t.clamp_min(0)], own)
        like[torch.as_tensor(rows), :k] = reading_likelihood(
            torch.as_tensor(stream.logr[rows, :k], dtype=dtype),
            torch.as_tensor(stream.mix[rows], dtype=dtype),
            torch.as_tensor(stream.weight[rows], dtype=dtype),
            derived.inv_temperature.to(dtype)[torch.as_tensor(stream.reader[rows])],
            torch.sigmoid(trust_logit[leaf]), conf)
    settle = np.flatnonzero(stream.is_settlement)
    like[torch.as_tensor(settle), torch.as_tensor(stream.answer[settle])] = 1.0
    return like


def tempered_readings(stream: EventStream, structure: ModelStructure, derived: Derived) -> np.ndarray:
    """(E, K_max) r̃ of every reading (what the message states, after the reader's temperature); 0 for settlements."""
    k_event = structure.question_k[stream.q]
    valid = (np.arange(stream.logr.shape[1])[None, :] < k_event[:, None]) & ~stream.is_settlement[:, None]
    inv_tau = derived.inv_temperature.detach().double().numpy()[stream.reader]
    scaled = np.where(valid, stream.logr * inv_tau[:, None], -np.inf)
    peak = np.where(valid.any(axis=1), scaled.max(axis=1), 0.0)
    r_t = np.where(valid, np.exp(scaled - peak[:, None]), 0.0)
    total = r_t.sum(axis=1, keepdims=True)
    return np.where(total > 0, r_t / np.where(total > 0, total, 1.0), 0.0)


def forward_filter(prior: torch.Tensor, rate: torch.Tensor, stream: EventStream, like: torch.Tensor,
                   at: float | np.ndarray = float("inf")) -> FilterResult:
    """The sequential filter, all questions at once, one rank (n-th event of each question) per step.

    Mirrors :func:`doxa.inference.read.scorer.forward_filter`, and also returns the
    prediction before each event (what the scorer would have said just before it).
    """
    n_q = prior.shape[0]
    belief = prior.clone()
    log_marginal = torch.zeros(n_q, dtype=prior.dtype)
    predictive = torch.zeros_like(like)
    last_t = torch.full((n_q,), float("nan"), dtype=prior.dtype)
    t_all = torch.as_tensor(stream.t, dtype=prior.dtype)
    q_all = torch.as_tensor(stream.q)
    if len(stream):
        order = np.argsort(stream.rank, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(stream.rank))]
        for n in range(len(bounds) - 1):
            idx = torch.as_tensor(order[bounds[n]:bounds[n + 1]])
            qs, t = q_all[idx], t_all[idx]
            b = belief[qs]
            if n > 0:
                rho = torch.exp(-rate[qs] * (t - last_t[qs]).clamp_min(0.0))[:, None]
                b = rho * b + (1 - rho) * prior[qs]
            predictive[idx] = b
            ev = like[idx]
            b = b * ev
            z = b.sum(1)
            dead = z <= 1e-300
            if bool(dead.any()):  # impossible evidence: restart from it alone (as the scorer does)
                b = torch.where(dead[:, None], ev, b)
                z = b.sum(1)
            belief[qs] = b / z[:, None]
            log_marginal[qs] += z.clamp_min(1e-300).log()
            last_t[qs] = t
    has = ~torch.isnan(last_t)
    at_t = torch.as_tensor(np.broadcast_to(np.asarray(at, dtype=np.float64), (n_q,)).copy(), dtype=prior.dtype)
    gap = torch.where(has & torch.isfinite(at_t), (at_t - torch.nan_to_num(last_t)).clamp_min(0.0),
                      torch.zeros((), dtype=prior.dtype))
    rho = torch.exp(-rate * gap)[:, None]
    belief = torch.where(has[:, None], rho * belief + (1 - rho) * prior, belief)
    return FilterResult(belief=belief.numpy(), log_marginal=log_marginal.numpy(), predictive=predictive.numpy(),
                        last_t=last_t.numpy())


def filter_evidence(evidence: Evidence, structure: ModelStructure, derived: Derived,
                    at: float | None = None, settlement_mask: np.ndarray | None = None
                    ) -> tuple[FilterResult, EventStream]:
    """Beliefs under one set of parameter values (float64), for comparison with the scorer."""
    stream = EventStream.from_evidence(evidence, structure, settlement_mask)
    with torch.no_grad():
        prior, rate = question_inputs(structure, derived)
        like = stream_likelihood(stream, structure, derived)
        result = forward_filter(prior, rate, stream, like, evidence.at if at is None else at)
    return result, stream


def encode_trust(structure: ModelStructure, trust_logit: torch.Tensor, root: torch.Tensor,
                 scale: torch.Tensor) -> dict[str, torch.Tensor]:
    """The ``trust_level_*`` latents that give ``trust_logit`` (inverse of :func:`trust_logits`)."""
    trust_logit = torch.as_tensor(trust_logit)
    out: dict[str, torch.Tensor] = {}

    def level_value(name, loc, sigma, centred):
        idx = torch.as_tensor(structure.tree.levels()[int(name.rsplit("_", 1)[1]) - 1])
        x = trust_logit[idx].to(loc.dtype)
        out[name] = torch.where(centred, x, (x - loc) / sigma)
        return out[name]

    trust_logits(structure, root, scale, level_value)
    return out


def point_latents(structure: ModelStructure, values: dict[str, Any] | None = None, confusion: bool = False,
                  dtype=torch.float64) -> dict[str, torch.Tensor]:
    """Latents at their prior means, overridden by ``values`` (for tests and oracle runs).

    ``values["trust_logit"]`` (V,) sets every node's trust logit directly.
    """
    with pyro.poutine.block(), pyro.poutine.mask(mask=False):
        trace = pyro.poutine.trace(sample_latents).get_trace(structure, confusion, dtype)
    out = {}
    for name, site in trace.nodes.items():
        if site["type"] != "sample":
            continue
        fn = site["fn"]
        try:
            out[name] = fn.mean.detach().clone()
        except NotImplementedError:
            out[name] = site["value"].detach().clone()
    values = dict(values or {})
    wanted = values.pop("trust_logit", None)
    for name, value in values.items():
        out[name] = torch.as_tensor(value, dtype=dtype)
    if wanted is not None:
        out.update(encode_trust(structure, torch.as_tensor(wanted, dtype=dtype), out["trust_root"],
                                out["trust_scale"]))
        return out
    levels: dict[str, torch.Tensor] = {}

    def at_prior_mean(name, loc, sigma, centred):  # each node at its parent's value (or stated trust)
        levels[name] = torch.where(centred, loc, torch.zeros_like(loc))
        return levels[name]

    trust_logits(structure, out["trust_root"], out["trust_scale"], at_prior_mean)
    out.update(levels)
    return out
