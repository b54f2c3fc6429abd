"""The generative story of docs/design.md §2 in Pyro, and the same forward filter in torch.

One small hidden-Markov network per question ``q`` (``K`` options, kind ``k``):

- the answer ``z_t`` changes at rate ``λ_k`` per day; over a gap ``Δ`` it persists with
  ``ρ = exp(-λ_k Δ)``, else it is redrawn from the base rates ``π_k``:
  ``P(z_{t+Δ}=i | z_t=j) = ρ [i=j] + (1-ρ) π_k[i]``;
- a reading of a message from source ``s`` (reader output ``r`` over the options,
  ``u = unclear + unrelated``, ``o = one_off``) has the emission

      L(j) = (1 - c w) / K + c w Σ_c' r̃_c' C_s[j, c'],   w = (1-u)(1-o),   r̃ ∝ r^(1/τ_reader)

  (``c`` the reading's independent share, 1 unless it belongs to a campaign of fresh
  sources or repeats its own source: :mod:`doxa.model.independence`)

  with ``C_s[j, c] = α_s [j=c] + (1-α_s)[j≠c]/(K-1)`` (one number of trust) or a full
  confusion matrix for biased sources; for a reading stated with certainty ``L(j)`` is
  exactly ``P(message states c | z=j)``, i.e. the Dawid–Skene emission (Dawid & Skene 1979);
- a settlement observes ``z`` at its time (``L`` = one-hot).

Priors::

    logit α_root ~ Normal(logit 0.7, 1.5)          σ_d ~ Gamma(2, 1)   (one per depth d; not 0 at the mode)
    logit α_node ~ Normal(logit α_parent, σ_depth)  (non-centred where few readings fall under
                                                     the node, centred where many: trust_logits)
    (a user-stated trust on a source replaces logit α_parent for its leaf)
    π_k ~ Dirichlet(a 1),  log a ~ N(0, 1)          log λ_k = μ + s η_k,  μ ~ N(log(ln2/365), 2), s ~ HalfNormal(1)
    (``a`` is shared by every kind: how far base rates stray from even is pooled like σ and s)
    open questions (n named values, then ``unlisted``): π = (1/(n+θ_k), …, θ_k/(n+θ_k)),  log θ_k ~ N(0, 1)
    log τ_reader ~ Normal(0, 0.5)
    confusion (optional): logit C_node[j, ·] = log C^trust(α_node)[j, ·] + Σ_{a ∈ ancestors(node)} σc_depth(a) η_a[j, ·]

The marginal likelihood of a question is ``1ᵀ A_N ⋯ A_1 π`` with ``A_n = diag(L_n) M_n``
(``M_n`` the change matrix over the gap before event ``n``). :func:`doxa.model.chains.chain_log_marginal`
evaluates that product as a balanced binary tree (the associative-scan view of
filtering, Särkkä & García-Fernández 2021, "Temporal parallelization of Bayesian
smoothers"): each question's events are padded to a power of two and questions are
laid out longest first (:class:`doxa.model.chains.Chains`), so padding at most doubles the work, the
sequential depth is ``log2`` of the longest question, and the cost of one SVI step is
linear in the number of readings. :func:`doxa.model.filter.forward_filter` is the plain sequential
filter (rank by rank, like the numpy scorer) used for beliefs and predictions.

This file is the story: priors, the deterministic map from latents to the parameters
the likelihood uses (:func:`derive`), and the Pyro model. Its machinery lives beside it:
:mod:`~doxa.model.structure` (what the latents are indexed by), :mod:`~doxa.model.events`
(readings and settlements as one sorted stream), :mod:`~doxa.model.likelihood` (the
emission ``L(j)``), :mod:`~doxa.model.chains` (the tree-product layout, its cost model and
its hand-written backward), :mod:`~doxa.model.filter` (the torch forward filter) and
:mod:`~doxa.model.latents` (latent values for given parameters).
"""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import torch

from .chains import Chains, chain_log_marginal
from .likelihood import Derived, trust_confusion_logits
from .logistic import logit
from .structure import ModelStructure

DEFAULT_ROOT_TRUST = 0.7
ROOT_TRUST_SCALE = 1.5
#: σ_d ~ Gamma(2, 1): a boundary-avoiding prior (density 0 at σ = 0; Chung, Rabe-Hesketh, Dorie,
#: Gelman & Liu 2013, "A nondegenerate penalized likelihood estimator for variance parameters
#: in multilevel models"). Under HalfNormal(1) the mean-field fit put the top depth's σ at 0.26
#: on the campaign world's first fit (8 layers whose true logits spread ~1), shrinking
#: `user` (α 0.95) and `web` (0.45) alike to 0.70–0.73; see docs/design.md §2
TRUST_SCALE_SHAPE = 2.0
TRUST_SCALE_RATE = 1.0
CONFUSION_SCALE_PRIOR = 1.5
RATE_LOC_PRIOR = math.log(math.log(2.0) / 365.0)
RATE_LOC_SCALE = 2.0
RATE_SCALE_PRIOR = 1.0
READER_LOG_TEMPERATURE_SCALE = 0.5
BASE_RATE_CONCENTRATION = 1.0
BASE_RATE_CONCENTRATION_SCALE = 1.0
#: θ_k ~ LogNormal(log 1, 1): a priori an open question with n named values holds back about 1/(n+1)
#: for a value not yet named, and the data may move that by a factor of e either way per σ.
NEW_VALUE_WEIGHT = 1.0
NEW_VALUE_WEIGHT_SCALE = 1.0


# =============================================================================== latents
def sample_latents(structure: ModelStructure, confusion: bool, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Every global latent of the story, under its prior (see module docstring)."""
    zeros = lambda *shape: torch.zeros(shape, dtype=dtype)  # noqa: E731
    ones = lambda *shape: torch.ones(shape, dtype=dtype)  # noqa: E731
    d = max(structure.max_depth, 1)
    latents = {
        "trust_root": pyro.sample("trust_root", dist.Normal(torch.tensor(logit(DEFAULT_ROOT_TRUST), dtype=dtype),
                                                            torch.tensor(ROOT_TRUST_SCALE, dtype=dtype))),
        "trust_scale": pyro.sample("trust_scale", dist.Gamma(TRUST_SCALE_SHAPE * ones(d),
                                                             TRUST_SCALE_RATE * ones(d)).to_event(1)),
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
    latents["base_rate_concentration"] = pyro.sample(
        "base_rate_concentration", dist.LogNormal(torch.tensor(math.log(BASE_RATE_CONCENTRATION), dtype=dtype),
                                                  torch.tensor(BASE_RATE_CONCENTRATION_SCALE, dtype=dtype)))
    for k in structure.group_ks:
        n_k = len(structure.kinds_with_k(k))
        latents[f"base_rates_{k}"] = pyro.sample(
            f"base_rates_{k}", dist.Dirichlet(latents["base_rate_concentration"] * ones(n_k, k)).to_event(1))
    if structure.question_open.any():  # only then: a store of closed questions keeps its fit exactly
        latents["new_value_weight"] = pyro.sample(
            "new_value_weight", dist.LogNormal(torch.tensor(math.log(NEW_VALUE_WEIGHT), dtype=dtype),
                                               NEW_VALUE_WEIGHT_SCALE * ones(structure.n_kinds)).to_event(1))
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
                   inv_temperature=torch.exp(-latents["reader_log_temperature"]),
                   new_value_weight=latents.get("new_value_weight"))


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
    frozen = derived.detached(keep_temperature=True)
    readings = chain_log_marginal(chains, frozen, readings_only=True)
    return readings.detach() - readings
