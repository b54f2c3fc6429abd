"""Latent values for given parameters: encode node trust logits, or every latent at its prior mean."""

from __future__ import annotations

from typing import Any

import pyro
import torch

from .belief_model import sample_latents, trust_logits
from .structure import ModelStructure


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
