"""The emission of a reading, ``L(j)`` of the story, and the parameters it is computed from.

:class:`Derived` is what the likelihood uses, as deterministic functions of the latents
(:func:`doxa.model.belief_model.derive` builds it): the tree product, the torch filter and
the fit all speak through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass
class Derived:
    """The parameters the likelihood uses, as deterministic functions of the latents."""

    trust_logit: torch.Tensor  # (V,)
    confusion: dict[int, torch.Tensor]  # K → (pairs, K, K) rows sum to 1; empty when off
    prior_table: dict[int, torch.Tensor]  # K → (kinds with K + 1, K); last row uniform
    rate: torch.Tensor  # (n_kinds,) λ per day
    inv_temperature: torch.Tensor  # (R,)
    #: (n_kinds,) θ of open questions (None: the store has none): base rates 1/(n+θ) per named value,
    #: θ/(n+θ) for ``unlisted`` once every value is named (:func:`named_base_rates`)
    new_value_weight: torch.Tensor | None = None

    def detached(self, keep_temperature: bool = False) -> "Derived":
        """The same values cut from the graph (the reader temperature kept live if asked)."""
        return Derived(trust_logit=self.trust_logit.detach(),
                       confusion={k: v.detach() for k, v in self.confusion.items()},
                       prior_table={k: v.detach() for k, v in self.prior_table.items()},
                       rate=self.rate.detach(),
                       inv_temperature=self.inv_temperature if keep_temperature else self.inv_temperature.detach(),
                       new_value_weight=None if self.new_value_weight is None else self.new_value_weight.detach())

    @property
    def trust(self) -> torch.Tensor:
        return torch.sigmoid(self.trust_logit)


def trust_confusion_logits(trust_logit: torch.Tensor, k: int) -> torch.Tensor:
    """log of the one-number confusion matrix ᾱ[j=c] + (1-ᾱ)[j≠c]/(K-1), ᾱ = max(α, 1/K), shape (..., K, K)."""
    at_floor = trust_logit < -math.log(max(k - 1, 1))  # α < 1/K: noise, read as chance
    on = torch.where(at_floor, torch.full_like(trust_logit, -math.log(k)),
                     torch.nn.functional.logsigmoid(trust_logit))[..., None, None]
    off = torch.where(at_floor, torch.full_like(trust_logit, -math.log(k)),
                      torch.nn.functional.logsigmoid(-trust_logit) - math.log(max(k - 1, 1)))[..., None, None]
    eye = torch.eye(k, dtype=trust_logit.dtype)
    return eye * on + (1 - eye) * off


def noise_floor(trust: torch.Tensor, k) -> torch.Tensor:
    """``ᾱ = max(α, 1/K)``: the part of a one-number trust below chance is noise, not contrarian."""
    return torch.maximum(trust, 1.0 / torch.as_tensor(k, dtype=trust.dtype))


def named_base_rates(theta: torch.Tensor, named: torch.Tensor, k: torch.Tensor, width: int) -> torch.Tensor:
    """(…, width) the base rates of open questions of ``k`` states (…,) whose values the evidence has
    named with masses ``named`` (…, width), new-value weight ``theta`` (…,): the formula of
    :func:`doxa.model.named_values.base_rates` in torch, differentiable in ``θ``."""
    k = k.to(theta.dtype)[..., None]
    columns = torch.arange(width, dtype=theta.dtype)
    value = columns < k - 1
    m = torch.where(value, named.to(theta.dtype).clamp(0.0, 1.0), torch.zeros((), dtype=theta.dtype))
    total = m.sum(-1, keepdim=True)
    fresh = theta[..., None] / (total + theta[..., None]) / (k - total)
    return torch.where(value, m / (total + theta[..., None]) + fresh * (1 - m),
                       torch.where(columns == k - 1, fresh, torch.zeros((), dtype=theta.dtype)))


# =============================================================================== likelihood
def reading_likelihood(logr: torch.Tensor, mix: torch.Tensor, weight: torch.Tensor, inv_tau: torch.Tensor,
                       trust: torch.Tensor, confusion: torch.Tensor | None = None,
                       named: torch.Tensor | None = None) -> torch.Tensor:
    """L(j) of docs/design.md §2 for readings over ``K = logr.shape[-1]`` options (any leading shape).

    ``confusion`` (…, K, K), where given, replaces the one-number bracket by ``Σ_c r̃_c C[j, c]``.
    ``named`` (…, K) bool, where given: the states the reading's probabilities cover (an open
    question's unnamed values copy ``unlisted`` and are left out of the total).
    """
    k = logr.shape[-1]
    scaled = logr * inv_tau[..., None]
    # by hand: torch's softmax kernel is several times slower over a last axis of 2–5
    tempered = (scaled - scaled.detach().amax(dim=-1, keepdim=True)).exp()
    total = tempered.sum(dim=-1, keepdim=True) if named is None else (tempered * named).sum(dim=-1, keepdim=True)
    tempered = tempered / total
    if confusion is None:
        a = noise_floor(trust, max(k, 1))[..., None]
        bracket = a * tempered + (1 - a) * (1 - tempered) / max(k - 1, 1)
    else:
        bracket = (confusion @ tempered[..., None]).squeeze(-1)
    return mix[..., None] / k + weight[..., None] * bracket
