"""Draw :class:`~doxa.data.evidence.Evidence` straight from the generative story (vectorised).

For tests of the fit and for the scale benchmark: the truth is known, nothing goes
through DuckDB, and a million readings take a couple of seconds. The readings follow
the story of :mod:`doxa.model.belief_model` exactly:

- the answer of a question changes at its kind's rate ``λ_k``, redrawn from ``π_k``;
- a message states the truth with probability ``α_s`` (else another option uniformly),
  or, with probability ``m = u + (1-u) o`` (unclear/unrelated, one-off), a uniformly
  random option;
- the reader is calibrated after tempering: with confidence ``κ`` its top option is the
  stated one (so ``P(states c | r̃) = r̃_c``), and it reports ``r ∝ r̃^τ``.

The generated-world benchmark (``doxa.inference.evaluation.world``) is the richer, end-to-end version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from doxa.data.evidence import Evidence, QuestionTable, SourceTable, options_key
from doxa.model.logistic import sigmoid

T0_DAYS = 20000.0  # 2024-10-04: keeps times realistic without meaning anything


@dataclass
class SimulationConfig:
    n_questions: int = 400
    readings_per_question: float = 12.0
    length_skew: float = 0.0  # σ of a log-normal spread of readings per question (0: Poisson)
    horizon_days: float = 730.0
    kind_options: tuple[int, ...] = (2, 3, 4)
    half_life_days: tuple[float, ...] = (60.0, 365.0, 3000.0)
    base_rate_concentration: float = 3.0
    top_layers: tuple[str, ...] = ("person", "business", "web")
    sublayers_per_top: int = 3
    sources_per_sublayer: int = 6
    root_trust_logit: float = 1.0
    trust_scale: tuple[float, ...] = (1.0, 0.6, 0.5)  # per depth: top layer, sublayer, source
    source_weights: str = "uniform"  # or "zipf": a few sources say most
    reader_temperature: float = 1.5
    unclear_mean: float = 0.1
    one_off_mean: float = 0.08
    settled_fraction: float = 0.5
    settlements_per_question: float = 2.0
    seed: int = 0


@dataclass
class SimulatedTruth:
    trust: dict[str, float]  # node path → α
    node_messages: dict[str, int]
    prior: dict[str, list[float]]
    change_rate: dict[str, float]
    half_life_days: dict[str, float]
    n_changes: dict[str, int]
    reader_temperature: dict[str, float]
    current: np.ndarray  # (Q,) true answer at the end of the horizon
    config: SimulationConfig = field(repr=False, default=None)


def simulate_evidence(config: SimulationConfig | None = None) -> tuple[Evidence, SimulatedTruth]:
    cfg = config or SimulationConfig()
    rng = np.random.default_rng(cfg.seed)

    # ---- source tree: top / sub / source
    n_top, n_sub, n_src = len(cfg.top_layers), cfg.sublayers_per_top, cfg.sources_per_sublayer
    s1, s2, s3 = cfg.trust_scale
    top_logit = cfg.root_trust_logit + s1 * rng.standard_normal(n_top)
    sub_logit = np.repeat(top_logit, n_sub) + s2 * rng.standard_normal(n_top * n_sub)
    leaf_logit = np.repeat(sub_logit, n_src) + s3 * rng.standard_normal(n_top * n_sub * n_src)
    top_names = np.asarray(cfg.top_layers, dtype=object)
    sub_names = np.asarray([f"{t}/sub{j}" for t in cfg.top_layers for j in range(n_sub)], dtype=object)
    leaf_ids = np.asarray([f"src{i}" for i in range(len(leaf_logit))], dtype=object)
    leaf_paths = np.asarray([f"{sub_names[i // n_src]}/{leaf_ids[i]}" for i in range(len(leaf_logit))],
                            dtype=object)
    alpha_leaf = sigmoid(leaf_logit)

    # ---- kinds and questions
    n_kinds = len(cfg.kind_options)
    kind_names = np.asarray([f"kind{k}" for k in range(n_kinds)], dtype=object)
    priors = [rng.dirichlet(np.full(k, cfg.base_rate_concentration)) for k in cfg.kind_options]
    rates = np.log(2.0) / np.asarray(cfg.half_life_days, dtype=np.float64)
    n_q = cfg.n_questions
    q_kind = rng.integers(0, n_kinds, n_q)
    q_k = np.asarray(cfg.kind_options)[q_kind]
    k_max = int(max(cfg.kind_options))
    horizon = cfg.horizon_days

    # ---- answer process: initial value plus Poisson change points (value redrawn from π)
    cum_priors = np.zeros((n_kinds, k_max))
    for i, p in enumerate(priors):
        cum_priors[i, : len(p)] = np.cumsum(p)
        cum_priors[i, len(p):] = 1.0

    def draw(kinds: np.ndarray) -> np.ndarray:
        u = rng.random(len(kinds))
        return (u[:, None] > cum_priors[kinds]).sum(axis=1)

    n_change = rng.poisson(rates[q_kind] * horizon)
    change_q = np.repeat(np.arange(n_q), n_change + 1)
    first = np.r_[True, change_q[1:] != change_q[:-1]]
    change_t = np.where(first, -np.inf, rng.random(len(change_q)) * horizon)  # first: the initial state
    order = np.lexsort((change_t, change_q))
    change_q, change_t = change_q[order], change_t[order]
    change_v = draw(q_kind[change_q])
    real_change = ~first & np.r_[False, change_v[1:] != change_v[:-1]]
    n_real_changes = np.bincount(q_kind[change_q[real_change]], minlength=n_kinds)

    def truth_at(q: np.ndarray, t: np.ndarray) -> np.ndarray:
        key_changes = change_q * (horizon * 4) + np.where(np.isinf(change_t), -1.0, change_t)
        key = q * (horizon * 4) + t
        pos = np.searchsorted(key_changes, key, side="right") - 1
        return change_v[pos]

    # ---- readings
    if cfg.length_skew > 0:
        mean_log = math.log(cfg.readings_per_question) - cfg.length_skew ** 2 / 2
        lengths = np.maximum(1, np.round(rng.lognormal(mean_log, cfg.length_skew, n_q))).astype(np.int64)
    else:
        lengths = 1 + rng.poisson(max(cfg.readings_per_question - 1, 0), n_q)
    n = int(lengths.sum())
    r_q = np.repeat(np.arange(n_q), lengths)
    r_t = rng.random(n) * horizon
    if cfg.source_weights == "zipf":
        w = 1.0 / np.arange(1, len(leaf_logit) + 1)
        w = rng.permutation(w / w.sum())
        r_src = rng.choice(len(leaf_logit), n, p=w)
    else:
        r_src = rng.integers(0, len(leaf_logit), n)
    k_r = q_k[r_q]
    truth = truth_at(r_q, r_t)

    def other_than(x: np.ndarray, k: np.ndarray) -> np.ndarray:
        return (x + 1 + (rng.random(len(x)) * (k - 1)).astype(np.int64)) % k

    stated = np.where(rng.random(n) < alpha_leaf[r_src], truth, other_than(truth, k_r))
    u = rng.beta(1.0, (1 - cfg.unclear_mean) / cfg.unclear_mean, n) if cfg.unclear_mean > 0 else np.zeros(n)
    o = rng.beta(1.0, (1 - cfg.one_off_mean) / cfg.one_off_mean, n) if cfg.one_off_mean > 0 else np.zeros(n)
    says_nothing = rng.random(n) < u + (1 - u) * o
    stated = np.where(says_nothing, (rng.random(n) * k_r).astype(np.int64), stated)
    kappa = 1.0 / k_r + (0.995 - 1.0 / k_r) * rng.beta(2.0, 1.0, n)
    top = np.where(rng.random(n) < kappa, stated, other_than(stated, k_r))
    valid = np.arange(k_max)[None, :] < k_r[:, None]
    calibrated = np.where(valid, ((1 - kappa) / (k_r - 1))[:, None], 0.0)
    calibrated[np.arange(n), top] = kappa
    reported = np.where(valid, calibrated ** cfg.reader_temperature, 0.0)
    reported /= reported.sum(axis=1, keepdims=True)
    probs = reported * (1 - u)[:, None]

    order = np.lexsort((r_t, r_q))
    # ---- settlements
    settled = rng.random(n_q) < cfg.settled_fraction
    n_settle = np.where(settled, 1 + rng.poisson(max(cfg.settlements_per_question - 1, 0), n_q), 0)
    s_q = np.repeat(np.arange(n_q), n_settle)
    s_t = rng.random(len(s_q)) * horizon
    s_order = np.lexsort((s_t, s_q))
    s_q, s_t = s_q[s_order], s_t[s_order]
    s_answer = truth_at(s_q, s_t)

    options = [[f"o{j}" for j in range(k)] for k in q_k.tolist()]
    ids = np.asarray([f"q{i:06d}" for i in range(n_q)], dtype=object)
    kinds = kind_names[q_kind]
    evidence = Evidence(
        questions=QuestionTable(
            ids=ids, subjects=np.full(n_q, None, dtype=object), kinds=kinds,
            texts=ids.copy(), shapes=np.full(n_q, "choice", dtype=object), options=options,
            n_options=q_k.astype(np.int64),
            options_key=np.asarray([options_key(kd, op) for kd, op in zip(kinds, options)], dtype=object),
        ),
        q=r_q[order], t=T0_DAYS + r_t[order], source_index=r_src[order].astype(np.int64),
        reader_index=np.zeros(n, dtype=np.int64), probs=probs[order],
        unclear=(u / 2)[order], unrelated=(u / 2)[order], one_off=o[order],
        settle_q=s_q.astype(np.int64), settle_t=T0_DAYS + s_t, settle_answer=s_answer.astype(np.int64),
        settle_how=np.full(len(s_q), "outcome", dtype=object),
        reject_q=np.zeros(0, np.int64), reject_t=np.zeros(0), reject_answer=np.zeros(0, np.int64),
        sources=SourceTable(ids=leaf_ids, paths=leaf_paths, trust=np.full(len(leaf_ids), np.nan)),
        readers=np.asarray(["sim-reader"], dtype=object),
        at=T0_DAYS + horizon,
    )

    per_leaf = np.bincount(r_src, minlength=len(leaf_logit))
    per_sub = per_leaf.reshape(n_top * n_sub, n_src).sum(1)
    per_top = per_sub.reshape(n_top, n_sub).sum(1)
    trust = {**{p: float(a) for p, a in zip(top_names, sigmoid(top_logit))},
             **{p: float(a) for p, a in zip(sub_names, sigmoid(sub_logit))},
             **{p: float(a) for p, a in zip(leaf_paths, alpha_leaf)}}
    counts = {**dict(zip(top_names.tolist(), per_top.tolist())), **dict(zip(sub_names.tolist(), per_sub.tolist())),
              **dict(zip(leaf_paths.tolist(), per_leaf.tolist()))}
    truth_out = SimulatedTruth(
        trust=trust, node_messages=counts,
        prior={kind_names[i]: priors[i].tolist() for i in range(n_kinds)},
        change_rate={kind_names[i]: float(rates[i]) for i in range(n_kinds)},
        half_life_days={kind_names[i]: float(cfg.half_life_days[i]) for i in range(n_kinds)},
        n_changes={kind_names[i]: int(n_real_changes[i]) for i in range(n_kinds)},
        reader_temperature={"sim-reader": cfg.reader_temperature},
        current=truth_at(np.arange(n_q), np.full(n_q, horizon)),
        config=cfg,
    )
    return evidence, truth_out
