"""Draw :class:`~doxa.data.evidence.Evidence` straight from the generative story (vectorised).

For tests of the fit and for the fit-scale benchmark: the truth is known and nothing goes
through DuckDB (how fast: docs/measurements/2026-12-bench.md). The story itself (answers
over time, what a message states, what the reader reports) is :mod:`.story`, the same
code the generated world draws with; what is particular here is the plain world around it:
a three-level tree of sources with Normal logit offsets, readings spread uniformly (or
log-normally) over questions and uniformly over time, one reader, and settlements of the
then-true answer.

The generated world (:mod:`doxa.inference.evaluation.world`) is the richer, end-to-end
version: people, texts, copies, campaigns, records through the real ingest path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from doxa.data.evidence import OPEN_KEY_MARK, UNLISTED, Evidence, QuestionTable, SourceTable, options_key
from doxa.model.logistic import sigmoid

from .story import SECONDS_PER_DAY, AnswerTimelines, report, soft_reading, state

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
    reader_beta: float = 0.2  # Dirichlet noise of the soft reading: r̃ ~ Dirichlet(β·1 + e_c)
    unclear_mean: float = 0.1
    one_off_mean: float = 0.08
    settled_fraction: float = 0.5
    settlements_per_question: float = 2.0
    #: kinds (indices into kind_options) whose questions are open: ``K - 1`` values and
    #: ``unlisted``; each value but the first is listed at a random time, and a message read before
    #: then that states it is read as stating an unlisted value. Their answers are drawn event by
    #: event: a change redraws from the base rates the readings so far have grown, with
    #: ``new_value_weight`` (θ) (docs/design.md §2, open questions; doxa.model.named_values)
    open_kinds: tuple[int, ...] = ()
    new_value_weight: float = 1.0
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
    theta = cfg.new_value_weight
    for i in cfg.open_kinds:
        n_named = cfg.kind_options[i] - 1
        priors[i] = np.r_[np.full(n_named, 1.0 / (n_named + theta)), theta / (n_named + theta)]
    rates = np.log(2.0) / np.asarray(cfg.half_life_days, dtype=np.float64)
    n_q = cfg.n_questions
    q_kind = rng.integers(0, n_kinds, n_q)
    q_k = np.asarray(cfg.kind_options)[q_kind]
    k_max = int(max(cfg.kind_options))
    horizon = cfg.horizon_days

    # ---- the answer process, in seconds
    prior_table = np.zeros((n_kinds, k_max))
    for i, p in enumerate(priors):
        prior_table[i, : len(p)] = p
    horizon_s = int(round(horizon * SECONDS_PER_DAY))
    answers = AnswerTimelines.draw(rng, prior_table, rates, q_kind, horizon, horizon_s)
    real_change = answers.real_changes()
    n_real_changes = np.bincount(q_kind[answers.change_q[real_change]], minlength=n_kinds)

    # ---- readings
    if cfg.length_skew > 0:
        mean_log = math.log(cfg.readings_per_question) - cfg.length_skew ** 2 / 2
        lengths = np.maximum(1, np.round(rng.lognormal(mean_log, cfg.length_skew, n_q))).astype(np.int64)
    else:
        lengths = 1 + rng.poisson(max(cfg.readings_per_question - 1, 0), n_q)
    n = int(lengths.sum())
    r_q = np.repeat(np.arange(n_q), lengths)
    r_t = rng.integers(0, horizon_s, n)
    if cfg.source_weights == "zipf":
        w = 1.0 / np.arange(1, len(leaf_logit) + 1)
        w = rng.permutation(w / w.sum())
        r_src = rng.choice(len(leaf_logit), n, p=w)
    else:
        r_src = rng.integers(0, len(leaf_logit), n)
    k_r = q_k[r_q]
    u = rng.beta(1.0, (1 - cfg.unclear_mean) / cfg.unclear_mean, n) if cfg.unclear_mean > 0 else np.zeros(n)
    o = rng.beta(1.0, (1 - cfg.one_off_mean) / cfg.one_off_mean, n) if cfg.one_off_mean > 0 else np.zeros(n)
    stated, _ = state(rng, answers.answer(r_q, r_t), k_r, alpha_leaf[r_src], u, o)
    q_open = np.isin(q_kind, np.asarray(cfg.open_kinds, dtype=np.int64))
    unnamed = None
    if q_open.any():
        # when each value of an open question is listed (its first value from the start); a message read
        # before then that states it is read as stating an unlisted value, and leaves it unnamed
        listed_at = np.where(np.arange(k_max)[None, :] == 0, 0, rng.integers(0, horizon_s, (n_q, k_max)))
        listed_at[~q_open] = 0
        column = np.arange(k_max)[None, :]
        unnamed = (column < (k_r - 1)[:, None]) & (r_t[:, None] < listed_at[r_q])
        stated = np.where(unnamed[np.arange(n), stated], k_r - 1, stated)
    calibrated = soft_reading(rng, stated, k_r, np.full(n, cfg.reader_beta), k_max)
    probs, unclear, unrelated = report(calibrated, np.full(n, cfg.reader_temperature), u, np.full(n, 0.5), k_r)
    if unnamed is not None:
        # a reader shown only the values listed then: its mass on an unnamed value is on unlisted
        last = k_r - 1
        rows = np.arange(n)
        probs[rows, last] += np.where(unnamed, probs, 0.0).sum(axis=1)
        probs = np.where(unnamed, np.repeat(probs[rows, last][:, None], k_max, axis=1), probs)

    order = np.lexsort((r_t, r_q))
    # ---- settlements
    settled = rng.random(n_q) < cfg.settled_fraction
    n_settle = np.where(settled, 1 + rng.poisson(max(cfg.settlements_per_question - 1, 0), n_q), 0)
    s_q = np.repeat(np.arange(n_q), n_settle)
    s_t = rng.integers(0, horizon_s, len(s_q))
    s_order = np.lexsort((s_t, s_q))
    s_q, s_t = s_q[s_order], s_t[s_order]
    s_answer = answers.answer(s_q, s_t)
    current = answers.answer(np.arange(n_q), np.full(n_q, horizon_s))
    if q_open.any():  # open questions' answers depend on what their readings named: drawn event by event
        grown = _open_questions(np.random.default_rng([cfg.seed, 1]), cfg, q_open, q_kind, q_k, rates, horizon_s,
                                r_q, r_t, alpha_leaf[r_src], u, o, listed_at, s_q, s_t)
        for name, rows, values in grown["readings"]:
            {"probs": probs, "unclear": unclear, "unrelated": unrelated}[name][rows] = values
        s_answer[grown["settled_rows"]] = grown["settled"]
        current[q_open] = grown["current"]
        for kind, changes in grown["changes"].items():
            n_real_changes[kind] = changes

    options = [[f"o{j}" for j in range(k - 1)] + [UNLISTED if q_open[i] else f"o{k - 1}"]
               for i, k in enumerate(q_k.tolist())]
    ids = np.asarray([f"q{i:06d}" for i in range(n_q)], dtype=object)
    kinds = kind_names[q_kind]
    keys = [(OPEN_KEY_MARK if q_open[i] else "") + options_key(kd, op) for i, (kd, op) in enumerate(zip(kinds, options))]
    evidence = Evidence(
        questions=QuestionTable(
            ids=ids, subjects=np.full(n_q, None, dtype=object), kinds=kinds,
            texts=ids.copy(), shapes=np.full(n_q, "choice", dtype=object), options=options,
            n_options=q_k.astype(np.int64), options_key=np.asarray(keys, dtype=object), is_open=q_open,
        ),
        unnamed=None if unnamed is None else unnamed[order],
        q=r_q[order], t=T0_DAYS + r_t[order] / SECONDS_PER_DAY, source_index=r_src[order].astype(np.int64),
        reader_index=np.zeros(n, dtype=np.int64), probs=probs[order],
        unclear=unclear[order], unrelated=unrelated[order], one_off=o[order],
        settle_q=s_q.astype(np.int64), settle_t=T0_DAYS + s_t / SECONDS_PER_DAY, settle_answer=s_answer.astype(np.int64),
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
        current=current,
        config=cfg,
    )
    return evidence, truth_out


def _open_questions(rng: np.random.Generator, cfg: SimulationConfig, q_open: np.ndarray, q_kind: np.ndarray,
                    q_k: np.ndarray, rates: np.ndarray, horizon_s: int, r_q: np.ndarray, r_t: np.ndarray,
                    alpha: np.ndarray, u: np.ndarray, o: np.ndarray, listed_at: np.ndarray, s_q: np.ndarray,
                    s_t: np.ndarray) -> dict:
    """The answers, readings and settlements of the open questions, drawn event by event in time: a
    change (rate λ of the kind) redraws the answer from the base rates of doxa.model.named_values
    with ``m`` as the question's readings so far have made it (the largest ``r_j (1-u)(1-o)`` of a
    reading naming value ``j``, 1 once settled on it), so the truth follows the story the model
    tells. Returns the readings' new probs/unclear/unrelated rows, the settlements' answers, each
    open question's answer at the horizon and the real changes per kind."""
    from doxa.model.named_values import base_rates

    k_max = int(max(cfg.kind_options))
    theta = cfg.new_value_weight
    out_probs, out_unclear, out_unrelated, rows_done = [], [], [], []
    settled_rows, settled_values = [], []
    current = []
    changes: dict[int, int] = {}
    by_q = np.argsort(r_q, kind="stable")
    r_bounds = np.r_[0, np.cumsum(np.bincount(r_q, minlength=len(q_k)))]
    s_bounds = np.r_[0, np.cumsum(np.bincount(s_q, minlength=len(q_k)))]
    for q in np.flatnonzero(q_open).tolist():
        k, lam = int(q_k[q]), rates[q_kind[q]] / SECONDS_PER_DAY
        rows = by_q[r_bounds[q]:r_bounds[q + 1]]
        events = sorted([(int(r_t[i]), 0, int(i)) for i in rows] +
                        [(int(s_t[j]), 1, int(j)) for j in range(s_bounds[q], s_bounds[q + 1])])
        m = np.zeros(k_max)
        z = int(rng.choice(k, p=base_rates(np.float64(theta), m, k)[:k]))
        last, real = 0, 0
        for t, is_settlement, i in events + [(horizon_s, 2, -1)]:
            for _ in range(rng.poisson(lam * (t - last))):
                new = int(rng.choice(k, p=base_rates(np.float64(theta), m, k)[:k]))
                real += new != z
                z = new
            last = t
            if is_settlement == 1:
                settled_rows.append(i)
                settled_values.append(z)
                if z < k - 1:
                    m[z] = 1.0
            elif is_settlement == 0:
                unnamed = (np.arange(k_max) < k - 1) & (t < listed_at[q])
                stated, _ = state(rng, np.array([z]), np.array([k]), alpha[i:i + 1], u[i:i + 1], o[i:i + 1])
                if unnamed[stated[0]]:
                    stated = np.array([k - 1])
                calibrated = soft_reading(rng, stated, np.array([k]), np.array([cfg.reader_beta]), k_max)
                probs, unclear, unrelated = report(calibrated, np.array([cfg.reader_temperature]), u[i:i + 1],
                                                   np.array([0.5]), np.array([k]))
                probs = probs[0]
                probs[k - 1] += np.where(unnamed, probs, 0.0).sum()
                probs = np.where(unnamed, probs[k - 1], probs)
                covered = (np.arange(k_max) < k) & ~unnamed
                total = np.where(covered, probs, 0.0).sum()
                clear = (1 - min(1.0, unclear[0] + unrelated[0])) * (1 - o[i])
                if total > 0:
                    said = np.where(covered & (np.arange(k_max) < k - 1), probs / total * clear, 0.0)
                    m = np.maximum(m, said)
                out_probs.append(probs)
                out_unclear.append(unclear[0])
                out_unrelated.append(unrelated[0])
                rows_done.append(i)
        current.append(z)
        changes[int(q_kind[q])] = changes.get(int(q_kind[q]), 0) + real
    rows_done = np.asarray(rows_done, dtype=np.int64)
    return {"readings": [("probs", rows_done, np.asarray(out_probs).reshape(len(rows_done), k_max)),
                         ("unclear", rows_done, np.asarray(out_unclear)),
                         ("unrelated", rows_done, np.asarray(out_unrelated))],
            "settled_rows": np.asarray(settled_rows, dtype=np.int64), "settled": np.asarray(settled_values, np.int64),
            "current": np.asarray(current, dtype=np.int64), "changes": changes}
