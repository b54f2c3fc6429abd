"""The tree-product layout: each question's events padded to a power of two, multiplied as a balanced tree.

:func:`chain_log_marginal` evaluates ``log 1ᵀ A_N ⋯ A_1 π`` of every question (the
marginal likelihood of the story, :mod:`doxa.model.belief_model`) level by level;
:class:`Chains` lays the questions out for it, :func:`make_chains` groups option counts
by a measured cost model, and :class:`_TreeProduct` is its one autograd node with a
hand-written backward. How much each reading may move trust (settled facts first) is
:mod:`doxa.model.settled_first`; the layout carries its weights per slot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .changes import step_factors
from .events import LOG_ZERO, EventStream
from .likelihood import Derived, named_base_rates, noise_floor
from .settled_first import UNSETTLED_CAP, cut_gradient, settled_first_weights
from .structure import ModelStructure

#: A settlement is an observation; this leak keeps two contradicting settlements at one
#: instant from making the likelihood exactly zero (and the gradient NaN).
SETTLEMENT_LEAK = 1e-6


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
    open_named: torch.Tensor  # (B,) an open question's count of named values; -1 for a closed question
    size_log2: np.ndarray  # (B,) non-increasing
    offset: np.ndarray  # (B,) first slot
    # per slot (L,)
    dt: torch.Tensor  # days since the previous event (0 for a first event and padding)
    is_reading: torch.Tensor  # bool
    n_options: torch.Tensor  # the question's own option count
    fixed_like_by_option: torch.Tensor  # (k, L): one-hot settlements (with a tiny leak), ones for padding
    valid_by_option: torch.Tensor  # (k, L) bool: option exists for the slot's question
    leaf: torch.Tensor
    reader: torch.Tensor
    logr_by_option: torch.Tensor  # (k, L) log reader probabilities, options first (LOG_ZERO beyond K)
    named_by_option: torch.Tensor  # (k, L) bool: states the reading's probabilities cover (EventStream.named)
    named_before_by_option: torch.Tensor  # (k, L) how surely earlier events named each value (EventStream)
    mix: torch.Tensor
    weight: torch.Tensor
    pair: torch.Tensor  # row in the group's confusion table, -1: one-number form
    trust_weight: torch.Tensor  # weight of the slot in the trust gradient (settled first, see settled_first_weights)
    confusion_weight: torch.Tensor  # the same in the gradient of a confusion matrix (every layer capped)
    change: torch.Tensor  # k of the slot's reported change (EventStream.change; 0: none, padding, first events)
    n_events: int
    subsample: int | None = None

    SLOT_FIELDS = ("dt", "is_reading", "n_options", "leaf", "reader", "mix", "weight", "pair", "trust_weight",
                   "confusion_weight", "change")
    OPTION_FIELDS = ("fixed_like_by_option", "valid_by_option", "logr_by_option", "named_by_option",
                     "named_before_by_option")

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
            settled = bool((~self.is_reading & (self.fixed_like_by_option.amax(0) < 1.0)).any())
            certain = (self.logr_by_option >= 0).any(0) | ~self.is_reading  # one option at log 1 = 0
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
        slot_index = torch.as_tensor(slots)
        rows = torch.as_tensor(chosen)
        fields = {name: getattr(self, name).index_select(0, slot_index) for name in self.SLOT_FIELDS}
        fields.update({name: getattr(self, name).index_select(1, slot_index) for name in self.OPTION_FIELDS})
        return Chains(k=self.k, ks=self.ks, question=self.question[rows], kind=self.kind[rows],
                      prior_row=self.prior_row[rows], open_named=self.open_named[rows],
                      size_log2=self.size_log2[chosen],
                      offset=np.r_[0, np.cumsum(sizes)[:-1]], n_events=len(slots), **fields)


def _fit(rows: np.ndarray, width: int) -> np.ndarray:
    """``rows`` (N, K) cut or padded with zeros to ``width`` columns."""
    return rows[:, :width] if rows.shape[1] >= width else np.pad(rows, ((0, 0), (0, width - rows.shape[1])))


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


def question_prior(chains: "Chains", derived: "Derived", dtype) -> torch.Tensor:
    """(K, B) base rates of each question in the layout before its first event: its row of the
    group's table, or uniform for an open question (nothing named yet: doxa.model.named_values)."""
    prior = group_prior_table(derived, chains.ks, chains.k, dtype)[chains.prior_row]
    is_open = chains.open_named >= 0
    if bool(is_open.any()):
        k_q = (chains.open_named + 1).clamp_min(1).to(dtype)[:, None]
        uniform = torch.where(torch.arange(chains.k)[None, :] < k_q, 1.0 / k_q, torch.zeros((), dtype=dtype))
        prior = torch.where(is_open[:, None], uniform, prior)
    return prior.T


def slot_prior(chains: "Chains", derived: "Derived", prior: torch.Tensor) -> torch.Tensor:
    """(K, L) the base rates of each slot's step: its question's (``prior``, (K, B)), or for an open
    question those its earlier events left (:func:`doxa.model.likelihood.named_base_rates`)."""
    per_slot = prior[:, chains.slot_question]
    is_open = (chains.open_named >= 0)[chains.slot_question]
    if derived.new_value_weight is None or not bool(is_open.any()):
        return per_slot
    theta = derived.new_value_weight.to(prior.dtype)[chains.kind][chains.slot_question]
    # a closed question's slots are computed too and then not taken: give them a harmless count, as a
    # division by zero there would still send NaN through torch.where's gradient
    k_q = (chains.open_named + 1)[chains.slot_question].clamp_min(2)
    grown = named_base_rates(theta, chains.named_before_by_option.T, k_q, chains.k).T
    return torch.where(is_open[None, :], grown, per_slot)


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
                events_per_step: int | None = None, merge: bool = True,
                unsettled_cap: float | None = UNSETTLED_CAP) -> list[Chains]:
    """Lay out every question for the tree product, in option-count groups.

    ``events_per_step`` sets plate subsampling: each group draws its share of that many
    padded slots per step. ``merge=False`` keeps one group per option count.
    ``unsettled_cap``: see :func:`settled_first_weights`.
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

    trust_weight_all, confusion_weight_all = settled_first_weights(stream, structure, unsettled_cap)
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
        named = np.zeros((len(ev), kg), dtype=bool)
        named[:, :width] = valid_event[:, :width] & stream.named[ev, :width]
        open_named = np.where(structure.question_open[qs], kq - 1, -1) if len(structure.question_open) else \
            np.full(len(qs), -1)
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
            open_named=torch.as_tensor(open_named, dtype=torch.long),
            size_log2=size_log2[members],
            offset=offset,
            dt=torch.as_tensor(grid(dt_all[ev], 0.0, np.float64), dtype=dtype),
            is_reading=torch.as_tensor(grid(reading, False, bool)),
            n_options=torch.as_tensor(grid(k_event.astype(np.float64), float(kg), np.float64), dtype=dtype),
            fixed_like_by_option=torch.as_tensor(grid(fixed, 1.0, np.float64).T.copy(), dtype=dtype),
            valid_by_option=torch.as_tensor(valid_grid.T.copy()),
            leaf=torch.as_tensor(grid(stream.leaf[ev], 0, np.int64)),
            reader=torch.as_tensor(grid(stream.reader[ev], 0, np.int64)),
            logr_by_option=torch.as_tensor(grid(logr, 0.0, np.float64).T.copy(), dtype=dtype),
            named_by_option=torch.as_tensor(grid(named, True, bool).T.copy()),
            named_before_by_option=torch.as_tensor(grid(_fit(stream.named_before[ev], kg), 0.0, np.float64).T.copy(),
                                                   dtype=dtype),
            mix=torch.as_tensor(grid(stream.mix[ev], 0.0, np.float64), dtype=dtype),
            weight=torch.as_tensor(grid(stream.weight[ev], 0.0, np.float64), dtype=dtype),
            pair=torch.as_tensor(grid(pair, -1, np.int64)),
            trust_weight=torch.as_tensor(grid(trust_weight_all[ev], 1.0, np.float64), dtype=dtype),
            confusion_weight=torch.as_tensor(grid(confusion_weight_all[ev], 1.0, np.float64), dtype=dtype),
            change=torch.as_tensor(grid(stream.change[ev], 0.0, np.float64), dtype=dtype),
            n_events=len(ev),
            subsample=subsample,
        ))
    return out


def chains_likelihood(chains: Chains, derived: Derived, readings_only: bool = False) -> torch.Tensor:
    """(K, L) likelihood of every slot, options first: readings under ``derived``, fixed rows for the rest.

    Options-first (batch-last) layout: the K×K products of :func:`chain_log_marginal`
    run as broadcasts over long contiguous rows, several times faster than batched
    tiny matrix multiplies on a CPU.
    """
    k = chains.k
    leaf = chains.leaf
    kq = chains.n_options
    scaled = chains.logr_by_option * derived.inv_temperature[chains.reader]
    tempered = (scaled - scaled.detach().amax(dim=0, keepdim=True)).exp()
    tempered = tempered / (tempered * chains.named_by_option).sum(dim=0, keepdim=True)
    table = group_confusion_table(derived, chains.ks, k) if chains.has_pairs else None
    a = derived.trust[leaf] if derived.trust.numel() else torch.ones_like(chains.mix)
    a = cut_gradient(noise_floor(a, kq), chains.trust_weight)
    bracket = a * tempered + (1 - a) * (1 - tempered) / (kq - 1).clamp_min(1.0)
    if table is not None:
        with_pair = chains.pair >= 0
        conf = cut_gradient(table[chains.pair.clamp_min(0)], chains.confusion_weight[:, None, None])  # (L, K, K)
        by_matrix = (conf * tempered.T[:, None, :]).sum(-1).T  # Σ_c C[j, c] r̃_c
        bracket = torch.where(with_pair, by_matrix, bracket)
    like = (chains.mix / kq + chains.weight * bracket) * chains.valid_by_option
    # without settlements, their slots are plain decay steps (L = 1)
    return torch.where(chains.is_reading, like, torch.ones_like(like) if readings_only else chains.fixed_like_by_option)


def chain_log_marginal(chains: Chains, derived: Derived, readings_only: bool = False) -> torch.Tensor:
    """log P(all events of each question), (B,) in layout order, by a binary tree of K×K products.

    ``readings_only``: log P(readings), the settlements left out.
    """
    k = chains.k
    like = chains_likelihood(chains, derived, readings_only)  # (K, L)
    prior = question_prior(chains, derived, like.dtype)  # (K, B)
    steps = slot_prior(chains, derived, prior)  # (K, L)
    rate = derived.rate[chains.kind][chains.slot_question]
    rho = torch.exp(-rate * chains.dt)  # padding has dt = 0 → identity
    eye = torch.eye(k, dtype=like.dtype)[:, :, None]
    moved = like * (1 - rho) * steps
    if bool((chains.change > 0).any()):
        # a reported change weighs the two ways of the step (doxa.model.changes): M[i, j] =
        # g(same) (ρ + (1-ρ) π_i) for i = j, g(differ) (1-ρ) π_i otherwise
        trust = derived.trust[chains.leaf] if derived.trust.numel() else torch.ones_like(chains.mix)
        same, differ = step_factors(chains.change, cut_gradient(trust, chains.trust_weight))
        a = (moved * differ)[:, None, :] + eye * (moved * (same - differ) + like * rho * same)[:, None, :]
    else:
        # A_n = diag(L_n) M_n with M[i, j] = ρ[i=j] + (1-ρ) π_i; stored (K, K, L)
        a = moved[:, None, :] + eye * (like * rho)[:, None, :]
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
