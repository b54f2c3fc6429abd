"""The sequential forward filter of the story in torch: beliefs and the prediction before every event."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from doxa.data.evidence import Evidence

from .changes import step_factors
from .events import EventStream
from .likelihood import Derived, named_base_rates, reading_likelihood, trust_confusion_logits
from .structure import ModelStructure


@dataclass
class FilterResult:
    belief: np.ndarray  # (Q, K_max) at the requested time, before rejections and calibration
    log_marginal: np.ndarray  # (Q,)
    predictive: np.ndarray  # (E, K_max) belief just before each event (after decay to its time)
    last_t: np.ndarray  # (Q,)


def question_inputs(structure: ModelStructure, derived: Derived, dtype=torch.float64):
    """π (Q, K_max) and λ (Q,) per question; an open question's π before any event (uniform:
    :func:`open_steps` gives those its evidence grows)."""
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
    open_rows = np.flatnonzero(structure.question_open)
    if len(open_rows):
        k_open = torch.as_tensor(structure.question_k[open_rows], dtype=dtype)
        prior[torch.as_tensor(open_rows)] = torch.where(torch.arange(k_max)[None, :] < k_open[:, None],
                                                        1.0 / k_open[:, None], torch.zeros((), dtype=dtype))
    return prior, rate


def open_steps(prior: torch.Tensor, stream: EventStream, structure: ModelStructure, derived: Derived
               ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The base rates of each event's step (E, K_max; None: ``prior``'s throughout) and after each
    question's last event (Q, K_max): an open question's grow as its evidence names values
    (:mod:`doxa.model.named_values`)."""
    is_open = torch.as_tensor(structure.question_open if len(structure.question_open)
                              else np.zeros(len(structure.question_k), dtype=bool))
    if not bool(is_open.any()) or derived.new_value_weight is None:
        return None, prior
    k_max = prior.shape[1]
    theta = derived.new_value_weight.to(prior.dtype)[torch.as_tensor(structure.question_kind)]
    k = torch.as_tensor(structure.question_k)
    after = torch.where(is_open[:, None], named_base_rates(theta, torch.as_tensor(stream.named_after[:, :k_max]),
                                                           k, k_max), prior)
    q = torch.as_tensor(stream.q)
    steps = torch.where(is_open[q][:, None],
                        named_base_rates(theta[q], torch.as_tensor(stream.named_before[:, :k_max]), k[q], k_max),
                        prior[q])
    return steps, after


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
            pair_index = torch.as_tensor(pair)
            own = trust_confusion_logits(trust_logit[leaf], k).exp()
            conf = torch.where((pair_index >= 0)[:, None, None], table.to(dtype)[pair_index.clamp_min(0)], own)
        like[torch.as_tensor(rows), :k] = reading_likelihood(
            torch.as_tensor(stream.logr[rows, :k], dtype=dtype),
            torch.as_tensor(stream.mix[rows], dtype=dtype),
            torch.as_tensor(stream.weight[rows], dtype=dtype),
            derived.inv_temperature.to(dtype)[torch.as_tensor(stream.reader[rows])],
            torch.sigmoid(trust_logit[leaf]), conf, torch.as_tensor(stream.named[rows, :k]))
    settle = np.flatnonzero(stream.is_settlement)
    like[torch.as_tensor(settle), torch.as_tensor(stream.answer[settle])] = 1.0
    return like


def change_factors(stream: EventStream, derived: Derived, dtype=torch.float64) -> torch.Tensor | None:
    """(E, 2) ``g(same), g(differ)`` of every event's reported change under ``derived``'s trust
    (:mod:`doxa.model.changes`); None where none is reported."""
    if not (stream.change > 0).any():
        return None
    trust = torch.sigmoid(derived.trust_logit.to(dtype)[torch.as_tensor(stream.leaf)])
    return torch.stack(step_factors(torch.as_tensor(stream.change, dtype=dtype), trust), dim=1)


def tempered_readings(stream: EventStream, structure: ModelStructure, derived: Derived) -> np.ndarray:
    """(E, K_max) r̃ of every reading (what the message states, after the reader's temperature); 0 for settlements."""
    k_event = structure.question_k[stream.q]
    valid = (np.arange(stream.logr.shape[1])[None, :] < k_event[:, None]) & ~stream.is_settlement[:, None]
    inv_tau = derived.inv_temperature.detach().double().numpy()[stream.reader]
    scaled = np.where(valid, stream.logr * inv_tau[:, None], -np.inf)
    peak = np.where(valid.any(axis=1), scaled.max(axis=1), 0.0)
    tempered = np.where(valid, np.exp(scaled - peak[:, None]), 0.0)
    total = np.where(stream.named, tempered, 0.0).sum(axis=1, keepdims=True)
    return np.where(total > 0, tempered / np.where(total > 0, total, 1.0), 0.0)


def forward_filter(prior: torch.Tensor, rate: torch.Tensor, stream: EventStream, like: torch.Tensor,
                   at: float | np.ndarray = float("inf"), change: torch.Tensor | None = None,
                   steps: torch.Tensor | None = None, after: torch.Tensor | None = None) -> FilterResult:
    """The sequential filter, all questions at once, one rank (n-th event of each question) per step.

    Mirrors :func:`doxa.inference.read.scorer.forward_filter`, and also returns the
    prediction before each event (what the scorer would have said just before it).
    ``change`` (E, 2): ``g(same), g(differ)`` of each event's reported change (:func:`change_factors`);
    ``steps`` (E, K) and ``after`` (Q, K): the base rates of each step and after the last event where
    they are not ``prior`` (:func:`open_steps`).
    """
    after = prior if after is None else after
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
            base = prior[qs] if steps is None else steps[idx]
            if n > 0:
                rho = torch.exp(-rate[qs] * (t - last_t[qs]).clamp_min(0.0))[:, None]
                if change is None:
                    b = rho * b + (1 - rho) * base
                else:  # doxa.model.changes
                    g, moved = change[idx], (1 - rho) * base
                    b = g[:, :1] * b * (rho + moved) + g[:, 1:] * moved * (1 - b)
            elif steps is not None:
                b = base
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
    belief = torch.where(has[:, None], rho * belief + (1 - rho) * after, belief)
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
        steps, after = open_steps(prior, stream, structure, derived)
        result = forward_filter(prior, rate, stream, like, evidence.at if at is None else at,
                                change_factors(stream, derived), steps, after)
    return result, stream
