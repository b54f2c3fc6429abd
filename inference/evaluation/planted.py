"""The planted-claim attack of `doxa bench`: how many false claims flip a confident belief.

On each belief a system holds at ≥ 0.9 on the true answer at the last checkpoint, ``n``
planted claims for one wrong option (:meth:`World.planted_records`) are added for
``n = 1 … cap``. :func:`with_planted` lays every ``(question m, n)`` out as one
pseudo-question (the question's own evidence plus its first ``n`` claims), so each
system reads all of them in one call; :func:`flips_needed` is the smallest ``n`` whose top
answer is the planted one (``cap + 1`` when none is).

Scenarios (:data:`SCENARIOS`, :func:`scenario_batch`): the same claims, texts, times and
readings, attributed differently — ``new_sources`` (each from a new throwaway source),
``one_source`` (all from the first claim's one source), ``trusted_layer`` (new sources
under the most trusted pooled layer) — three attacks to resist; and ``honest_change``
(from sources that already spoke about the question, an hour apart), a real change a
system must follow rather than resist.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from doxa.data.evidence import Evidence, SourceTable

from . import baselines


@dataclass
class PlantedBatch:
    """Readings of planted claims for a few questions: ``cap`` claims each, in claim order."""

    question: np.ndarray  # (M,) question index
    wrong: np.ndarray  # (M,) option index claimed
    t: np.ndarray  # (M, cap) days since epoch
    probs: np.ndarray  # (M, cap, K_max)
    unclear: np.ndarray  # (M, cap)
    unrelated: np.ndarray
    one_off: np.ndarray
    source_ids: np.ndarray  # (M, cap) object
    source_paths: np.ndarray  # (M, cap) object
    reader: str


def planted_batch(world, evidence: Evidence, questions: np.ndarray, wrong: np.ndarray, cap: int,
                  day: float) -> PlantedBatch:
    """Parse :meth:`World.planted_records` for each (question, wrong option) into arrays."""
    qt = evidence.questions
    m = len(questions)
    k_max = qt.k_max
    out = PlantedBatch(question=np.asarray(questions, dtype=np.int64), wrong=np.asarray(wrong, dtype=np.int64),
                       t=np.zeros((m, cap)), probs=np.zeros((m, cap, k_max)), unclear=np.zeros((m, cap)),
                       unrelated=np.zeros((m, cap)), one_off=np.zeros((m, cap)),
                       source_ids=np.empty((m, cap), dtype=object), source_paths=np.empty((m, cap), dtype=object),
                       reader=world.primary_reader)
    for i, (qi, w) in enumerate(zip(out.question.tolist(), out.wrong.tolist())):
        qid = str(qt.ids[qi])
        options = qt.options[qi]
        records = world.planted_records(qid, options[w], cap, day)
        layers = {r["id"]: "/".join(r["layers"]) + "/" + r["id"] for r in records if r["type"] == "source"}
        sent = {r["id"]: (r["source"], r["sent_at"]) for r in records if r["type"] == "message"}
        readings = [r for r in records if r["type"] == "reading"]
        for n, r in enumerate(readings):
            source, sent_at = sent[r["message"]]
            out.t[i, n] = world.epoch_day(world.day_of(sent_at))
            out.probs[i, n, :len(options)] = [r["probs"][o] for o in options]
            out.unclear[i, n], out.unrelated[i, n] = r["unclear"], r["unrelated"]
            out.one_off[i, n] = r.get("one_off", 0.0)
            out.source_ids[i, n], out.source_paths[i, n] = source, layers[source]
            out.reader = r["reader"]
    return out


def with_planted(evidence: Evidence, batch: PlantedBatch) -> tuple[Evidence, np.ndarray]:
    """Pseudo-questions ``(m, n)``: question ``batch.question[m]`` plus its first ``n`` planted claims.

    Returns the evidence of all ``M × (cap + 1)`` pseudo-questions (every system scores
    them in one call) and their indices ``(M, cap + 1)``.
    """
    qt = evidence.questions
    m, cap = batch.t.shape
    levels = cap + 1
    base_q = np.repeat(batch.question, levels)  # pseudo p → original question
    level = np.tile(np.arange(levels), m)
    n_pseudo = len(base_q)

    starts = np.searchsorted(evidence.q, np.arange(len(qt.ids)), side="left")
    ends = np.searchsorted(evidence.q, np.arange(len(qt.ids)), side="right")
    base_rows = [np.arange(starts[q], ends[q]) for q in base_q.tolist()]
    row_pseudo = np.repeat(np.arange(n_pseudo), [len(r) for r in base_rows])
    rows = np.concatenate(base_rows) if base_rows else np.zeros(0, dtype=np.int64)

    # planted rows: pseudo (m, n) holds claims 0..n-1 of m
    plant_m = np.repeat(np.arange(m), levels)
    n_claims = level
    p_pseudo = np.repeat(np.arange(n_pseudo), n_claims)
    p_claim = np.concatenate([np.arange(n) for n in n_claims.tolist()]) if n_pseudo else np.zeros(0, dtype=np.int64)
    p_m = plant_m[p_pseudo]

    n_src = len(evidence.sources.ids)
    # one row per distinct planted source: a source repeating itself is one source to every system
    planted_ids, first, claim_source = np.unique(batch.source_ids.reshape(-1).astype(str), return_index=True,
                                                 return_inverse=True)
    planted_ids = planted_ids.astype(object)
    planted_paths = batch.source_paths.reshape(-1)[first]
    p_source = n_src + claim_source.reshape(-1)[p_m * cap + p_claim]
    readers = evidence.readers
    if batch.reader in set(readers.tolist()):
        reader_index = int(np.flatnonzero(readers == batch.reader)[0])
    else:
        readers = np.r_[readers, np.array([batch.reader], dtype=object)]
        reader_index = len(readers) - 1

    q = np.r_[row_pseudo, p_pseudo].astype(np.int64)
    t = np.r_[evidence.t[rows], batch.t[p_m, p_claim]]
    order = np.lexsort((t, q))
    s_rows, s_pseudo = copy_rows(evidence.settle_q, base_q)
    r_rows, r_pseudo = copy_rows(evidence.reject_q, base_q)

    questions = qt.take(base_q, [f"{qt.ids[b]}#{n}" for b, n in zip(base_q.tolist(), level.tolist())])
    # a claim names every state (one value at 1, the rest at 0); a kept reading keeps what it left unnamed
    unnamed = None if evidence.unnamed is None else np.vstack(
        [evidence.unnamed[rows], np.zeros((len(p_pseudo), evidence.unnamed.shape[1]), dtype=bool)]
    )[order][:, :questions.k_max]
    aug = Evidence(
        questions=questions,
        q=q[order], t=t[order],
        source_index=np.r_[evidence.source_index[rows], p_source][order].astype(np.int64),
        reader_index=np.r_[evidence.reader_index[rows], np.full(len(p_pseudo), reader_index)][order].astype(np.int64),
        probs=np.vstack([evidence.probs[rows], batch.probs[p_m, p_claim]])[order][:, :questions.k_max],
        unnamed=unnamed,
        unclear=np.r_[evidence.unclear[rows], batch.unclear[p_m, p_claim]][order],
        unrelated=np.r_[evidence.unrelated[rows], batch.unrelated[p_m, p_claim]][order],
        one_off=np.r_[evidence.one_off[rows], batch.one_off[p_m, p_claim]][order],
        settle_q=s_pseudo.astype(np.int64), settle_t=evidence.settle_t[s_rows],
        settle_answer=evidence.settle_answer[s_rows], settle_how=evidence.settle_how[s_rows],
        reject_q=r_pseudo.astype(np.int64), reject_t=evidence.reject_t[r_rows],
        reject_answer=evidence.reject_answer[r_rows],
        sources=SourceTable(ids=np.r_[evidence.sources.ids, planted_ids].astype(object),
                            paths=np.r_[evidence.sources.paths, planted_paths].astype(object),
                            trust=np.r_[evidence.sources.trust, np.full(len(planted_ids), np.nan)],
                            readings=np.r_[_source_readings(evidence),
                                           np.bincount(claim_source.reshape(-1), minlength=len(planted_ids))]),
        readers=readers,
        at=float(batch.t.max()) if batch.t.size else evidence.at,
    )
    return aug, np.arange(n_pseudo).reshape(m, levels)


def _source_readings(evidence: Evidence) -> np.ndarray:
    src = evidence.sources
    if src.readings is not None:
        return np.asarray(src.readings, dtype=np.int64)
    return np.bincount(evidence.source_index, minlength=len(src.ids)).astype(np.int64)


def copy_rows(row_q: np.ndarray, base_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``row_q`` (sorted or not) repeated for every pseudo-question of their question."""
    order = np.argsort(row_q, kind="stable")
    lo = np.searchsorted(row_q[order], base_q, side="left")
    hi = np.searchsorted(row_q[order], base_q, side="right")
    pseudo = np.repeat(np.arange(len(base_q)), hi - lo)
    rows = np.concatenate([order[a:b] for a, b in zip(lo.tolist(), hi.tolist())]) if len(base_q) else order[:0]
    return rows.astype(np.int64), pseudo.astype(np.int64)


def flips_needed(probs: np.ndarray, pseudo: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """Smallest n ≥ 1 whose top answer is the planted one; ``cap + 1`` where none is."""
    top = np.argmax(probs, axis=1)[pseudo]  # (M, cap + 1)
    flipped = top[:, 1:] == wrong[:, None]
    cap = pseudo.shape[1] - 1
    return np.where(flipped.any(axis=1), flipped.argmax(axis=1) + 1, cap + 1)


#: What the resistance test plants on each confident belief (module docstring): three
#: attacks, and an honest change that a system must follow rather than resist.
SCENARIOS = ("new_sources", "one_source", "trusted_layer", "honest_change")


def trusted_layer(world) -> list[str]:
    """Layers of the most trusted pooled source group (not the user, not per-subject, not assistant)."""
    t = world.truth
    groups = [g for g in world.config.sources.groups
              if g.layers[0] not in ("assistant", "user") and g.leaves != "per_subject" and g.share > 0]
    best = max(groups, key=lambda g: t.node_trust.get("/".join(g.layers), 0.0))
    return list(best.layers)


def scenario_batch(world, evidence: Evidence, base: PlantedBatch, scenario: str) -> PlantedBatch | None:
    """The planted claims of ``base`` re-attributed for ``scenario`` (same texts, times and readings).

    ``one_source``: every claim about a question from the first claim's one new source;
    ``trusted_layer``: the new sources sit under :func:`trusted_layer`; ``honest_change``:
    the claims come from sources that already spoke about the question (most active
    first, in turn), at one-hour spacing, as when the truth really changes. Questions
    heard only from planted or assistant sources get no honest change (``None`` rows
    are dropped by the caller through ``keep``).
    """
    if scenario == "new_sources":
        return base
    ids, paths = base.source_ids.copy(), base.source_paths.copy()
    t = base.t.copy()
    if scenario == "one_source":
        ids[:] = ids[:, :1]
        paths[:] = paths[:, :1]
    elif scenario == "trusted_layer":
        prefix = "/".join(trusted_layer(world))
        paths = np.array([[f"{prefix}/{i}" for i in row] for row in ids.tolist()], dtype=object).reshape(ids.shape)
    elif scenario == "honest_change":
        src = evidence.sources
        excluded = np.array([p.startswith("assistant") or p.rsplit("/", 1)[-1] in world.truth.planted_sources
                             for p in src.paths.tolist()], dtype=bool)
        keep = np.ones(len(base.question), dtype=bool)
        cap = t.shape[1]
        for i, q in enumerate(base.question.tolist()):
            rows = evidence.source_index[evidence.q == q]
            rows = rows[~excluded[rows]]
            if not len(rows):
                keep[i] = False
                continue
            speakers, counts = np.unique(rows, return_counts=True)
            speakers = speakers[np.argsort(-counts, kind="stable")]
            turn = speakers[np.arange(cap) % len(speakers)]
            ids[i] = src.ids[turn]
            paths[i] = src.paths[turn]
        t = t[:, :1] + np.arange(cap)[None, :] / 24.0
        if not keep.any():
            return None
        return replace(base, question=base.question[keep], wrong=base.wrong[keep], t=t[keep],
                       probs=base.probs[keep], unclear=base.unclear[keep], unrelated=base.unrelated[keep],
                       one_off=base.one_off[keep], source_ids=ids[keep], source_paths=paths[keep])
    else:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {SCENARIOS}")
    return replace(base, source_ids=ids, source_paths=paths, t=t)


def flip_summary(flips: np.ndarray, cap: int) -> dict[str, Any]:
    """Median and 10th percentile of claims needed (``cap + 1``: held against all), share that held."""
    return {
        "tested": int(len(flips)),
        "median": float(np.median(flips)) if len(flips) else None,
        "p10": float(np.percentile(flips, 10, method="lower")) if len(flips) else None,
        "held_share": float(np.mean(flips > cap)) if len(flips) else None,
        "histogram": np.bincount(flips, minlength=cap + 2).tolist(),
    }


def planted_resistance(world, evidence: Evidence, systems: list[baselines.System], final_probs: dict[str, np.ndarray],
                       evaluated: np.ndarray, truth: np.ndarray, day: float, *, cap: int, questions: int,
                       seed: int, tick: Callable[[str, float], None]) -> dict[str, dict[str, Any]]:
    """For each system: claims needed to flip its confident, correct beliefs, per scenario (module doc).

    Up to ``questions`` confident beliefs each (drawn with ``seed``), ``cap`` claims on each.
    The top-level ``median`` / ``p10`` / ``held_share`` / ``tested`` are those of
    ``new_sources``; each scenario has its own under ``scenarios``.
    """
    rng = np.random.default_rng(seed)
    qt = evidence.questions
    # one wrong option per question, the same for every system
    wrong_all = np.zeros(len(qt.ids), dtype=np.int64)
    truth_all = np.full(len(qt.ids), -1, dtype=np.int64)
    truth_all[evaluated] = truth
    offset = rng.integers(1, np.maximum(qt.n_options, 2))
    wrong_all[evaluated] = (truth + offset[evaluated]) % qt.n_options[evaluated]
    batches: dict[int, PlantedBatch] = {}
    out: dict[str, dict[str, Any]] = {}
    for system in systems:
        probs = final_probs[system.name]
        top = np.argmax(probs[evaluated], axis=1)
        confident = evaluated[(probs[evaluated].max(axis=1) >= 0.9) & (top == truth)]
        if not len(confident):
            out[system.name] = {"tested": 0, "median": None, "p10": None, "held_share": None, "scenarios": {}}
            tick("planted claims", 1)
            continue
        pick = np.sort(np.random.default_rng([seed, 1]).permutation(confident)[:questions])
        missing = [int(q) for q in pick.tolist() if q not in batches]
        if missing:
            fresh = planted_batch(world, evidence, np.array(missing), wrong_all[missing], cap, day)
            for i, q in enumerate(missing):
                batches[q] = PlantedBatch(
                    question=fresh.question[i:i + 1], wrong=fresh.wrong[i:i + 1], t=fresh.t[i:i + 1],
                    probs=fresh.probs[i:i + 1], unclear=fresh.unclear[i:i + 1], unrelated=fresh.unrelated[i:i + 1],
                    one_off=fresh.one_off[i:i + 1], source_ids=fresh.source_ids[i:i + 1],
                    source_paths=fresh.source_paths[i:i + 1], reader=fresh.reader)
        parts = [batches[int(q)] for q in pick.tolist()]
        batch = PlantedBatch(
            question=np.concatenate([b.question for b in parts]), wrong=np.concatenate([b.wrong for b in parts]),
            t=np.vstack([b.t for b in parts]), probs=np.vstack([b.probs for b in parts]),
            unclear=np.vstack([b.unclear for b in parts]), unrelated=np.vstack([b.unrelated for b in parts]),
            one_off=np.vstack([b.one_off for b in parts]), source_ids=np.vstack([b.source_ids for b in parts]),
            source_paths=np.vstack([b.source_paths for b in parts]), reader=parts[0].reader)
        tick(f"planted claims: {system.name}", 0)
        found: dict[str, Any] = {}
        for scenario in SCENARIOS:
            variant = scenario_batch(world, evidence, batch, scenario)
            if variant is None:
                continue
            aug, pseudo = with_planted(evidence, variant)
            aug_probs = system.predict(aug, float(variant.t.max()) + 1.0 / 1440.0)
            found[scenario] = flip_summary(flips_needed(aug_probs, pseudo, variant.wrong), cap)
        out[system.name] = {**{k: found["new_sources"][k] for k in ("tested", "median", "p10", "held_share",
                                                                      "histogram")}, "scenarios": found}
        tick("planted claims", 1)
    return out
