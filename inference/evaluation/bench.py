"""`doxa bench`: every system of inference/evaluation/baselines.py on one generated world (docs/design.md §6).

The harness

1. draws the world (inference/evaluation/world.py) and replays its stream into a doxa store through
   :meth:`Store.ingest_records`, one chunk per checkpoint; the evidence is then loaded
   once (``at=None``) and cut by time in numpy: the readings, settlements and
   rejections at or before a checkpoint are exactly what ``load_evidence(at=checkpoint)``
   returns (a copy's earliest message is before any later one, so the evidence-unit rule
   commutes with the cut);
2. at each of ``checkpoints`` evenly spaced times, asks every system for beliefs on all
   questions in one call and scores the questions that have at least one counted
   reading by then against the world's true current answer
   (:meth:`WorldTruth.answer_index_at`); doxa-learned is retrained on the evidence up to
   the checkpoint (so only on what was settled by then) at the checkpoints in
   ``retrain_at``;
3. pools the (checkpoint, question) predictions per system into the metrics below,
   then attacks each system's confident beliefs with planted claims.

Metrics (each a small function of inference/learn/metrics.py, tested in tests/test_metrics.py):

- accuracy of the top answer on the current true answer;
- log-loss ``−log p(truth)`` (p clipped at ``metrics.LOG_LOSS_FLOOR``, 1e-6);
- ECE over 15 equal-mass bins of the top probability, with a reliability diagram;
- accuracy when allowed to ask: the least certain 10/20/30 % go to a person, accuracy
  on the rest (ties in confidence are split evenly, i.e. the expectation over random
  tie-breaking); the area under the risk–coverage curve (AURC, lower is better);
- planted claims to flip: on beliefs held at ≥ 0.9 on the true answer at the last
  checkpoint, ``n`` planted claims for one wrong option (``World.planted_records``,
  each from a new throwaway source) are added for ``n = 1 … cap``; reported: the median
  ``n`` that makes the wrong option top (``cap + 1`` when it never does);
- learning speed (doxa-learned): accuracy and trust error ``|α_used − α_true|`` over the
  source tree's nodes against the number of settlements seen;
- cost: microseconds per question read, measured on each checkpoint's batch.

Nothing here imports torch, pandas or matplotlib at module level; the trainer and the
plots load them when they run.

Why one file of ~800 lines: the harness is one pipeline (evidence helpers, settings, the
trainer, the run, the planted-claim attack, the report) whose parts share the run's
arrays and its :class:`BenchResult`; the metrics it reports live apart in
inference/learn/metrics.py, the systems in baselines.py.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from doxa.data.evidence import Evidence, QuestionTable, SourceTable
from doxa.data.store import Store, from_days

from . import baselines
from doxa.inference.read.params import trust_for_source, with_defaults
from doxa.inference.learn.metrics import accuracy, prediction_metrics, reliability_bins, risk_coverage_curve

METRIC_KEYS = ("accuracy", "log_loss", "ece", "acc_at_80_coverage", "aurc", "planted_to_flip", "us_per_read")


# ============================================================================ evidence helpers
def evidence_until(evidence: Evidence, at: float) -> Evidence:
    """The evidence at or before ``at`` (days since epoch): what ``load_evidence(at)`` returns."""
    keep = evidence.t <= at
    s_keep = evidence.settle_t <= at
    r_keep = evidence.reject_t <= at
    return replace(
        evidence,
        q=evidence.q[keep], t=evidence.t[keep], source_index=evidence.source_index[keep],
        reader_index=evidence.reader_index[keep], probs=evidence.probs[keep], unclear=evidence.unclear[keep],
        unrelated=evidence.unrelated[keep], one_off=evidence.one_off[keep],
        settle_q=evidence.settle_q[s_keep], settle_t=evidence.settle_t[s_keep],
        settle_answer=evidence.settle_answer[s_keep], settle_how=evidence.settle_how[s_keep],
        reject_q=evidence.reject_q[r_keep], reject_t=evidence.reject_t[r_keep],
        reject_answer=evidence.reject_answer[r_keep],
        message=evidence.message[keep] if evidence.message is not None else None,
        # a source's history as of ``at`` (the bench loads every question, so its rows are all of it)
        sources=replace(evidence.sources, readings=np.bincount(evidence.source_index[keep],
                                                               minlength=len(evidence.sources.ids))),
        at=float(at),
    )


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
    s_rows, s_pseudo = _copy_rows(evidence.settle_q, base_q)
    r_rows, r_pseudo = _copy_rows(evidence.reject_q, base_q)

    questions = QuestionTable(
        ids=np.array([f"{qt.ids[b]}#{n}" for b, n in zip(base_q.tolist(), level.tolist())], dtype=object),
        subjects=qt.subjects[base_q], kinds=qt.kinds[base_q], texts=qt.texts[base_q], shapes=qt.shapes[base_q],
        options=[qt.options[b] for b in base_q.tolist()], n_options=qt.n_options[base_q],
        options_key=qt.options_key[base_q],
    )
    aug = Evidence(
        questions=questions,
        q=q[order], t=t[order],
        source_index=np.r_[evidence.source_index[rows], p_source][order].astype(np.int64),
        reader_index=np.r_[evidence.reader_index[rows], np.full(len(p_pseudo), reader_index)][order].astype(np.int64),
        probs=np.vstack([evidence.probs[rows], batch.probs[p_m, p_claim]])[order][:, :questions.k_max],
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


def _copy_rows(row_q: np.ndarray, base_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


# ============================================================================ settings
@dataclass
class BenchSettings:
    """Knobs of one bench run (``quick()`` fits the 60-second budget)."""

    checkpoints: int = 10
    # checkpoint indices where doxa-learned is refitted: every one. The nightly job runs every
    # night, so a checkpoint (73 days apart on the default world) scored with the fit of an
    # earlier one measures parameters months stale, which the product never serves: with fits
    # at 10 %, 40 % and 70 % of the run only, half of the default world's gap to the oracle was
    # that staleness (docs/bench.md). A fresh store's cold start is what doxa-equal shows.
    # None: every checkpoint (filled in by __post_init__).
    retrain_at: tuple[int, ...] | None = None
    train_steps: int = 1000  # the first fit of the default world converges in ~600 steps, later ones in 300-400
    train_confusion: str = "off"
    train_events_per_step: int | None = 20_000  # SVI subsamples questions beyond this many events a step
    # posterior draws behind each published mean: 40 cost 0.5 points of the default world's log-loss gap
    # against 200 (Monte Carlo noise in ~1,400 sources' trust)
    train_draws: int = 200
    # held-out folds for each retraining's calibration map, as `doxa train --folds`: None is the
    # nightly job's own rule (3 folds, in-sample above 20,000 settlements). In-sample maps (0)
    # halve a retraining's cost but are fitted on predictions the fit has seen: on the campaign
    # world the first fit's in-sample map sharpened (T 0.86) where held-out ones do not
    train_folds: int | None = None
    planted_cap: int = 20
    planted_questions: int = 150
    ece_bins: int = 15
    coverages: tuple[float, ...] = (0.9, 0.8, 0.7)
    systems: tuple[str, ...] = baselines.SYSTEM_NAMES
    seed: int = 0

    def __post_init__(self) -> None:
        if self.retrain_at is None:
            self.retrain_at = tuple(range(self.checkpoints))

    def set_checkpoints(self, checkpoints: int) -> None:
        """Change the number of checkpoints, keeping the schedule's shape: refits at every
        checkpoint stay at every one; otherwise as many, spread as :func:`default_retrain_at` does."""
        every = self.retrain_at == tuple(range(self.checkpoints))
        self.checkpoints = checkpoints
        self.retrain_at = (tuple(range(checkpoints)) if every
                           else default_retrain_at(checkpoints, len(self.retrain_at)))

    @classmethod
    def quick(cls) -> "BenchSettings":
        return cls(checkpoints=6, retrain_at=(2,), train_steps=60, planted_questions=60, train_draws=40,
                   train_folds=0)


def _calibration_folds_words(folds: int | None) -> str:
    if folds is None:
        return "held-out folds, the nightly job's rule"
    return "in-sample predictions" if folds < 2 else f"{folds} held-out folds"


def default_retrain_at(checkpoints: int, times: int) -> tuple[int, ...]:
    """Checkpoint indices for ``times`` retrainings, spread over the first 70 % of the run.

    Checkpoint ``i`` is at the fraction ``(i + 1) / checkpoints`` of the run.
    """
    if times <= 0:
        return ()
    spots = np.linspace(0.1, 0.7, times) if times > 1 else np.array([0.4])
    return tuple(sorted({min(max(int(round(x * checkpoints)) - 1, 0), checkpoints - 1) for x in spots.tolist()}))


# ============================================================================ the trainer
def nightly_trainer(store, settings: BenchSettings) -> Callable[[Evidence, float], dict]:
    """The nightly job as a function of the checkpoint: :func:`doxa.inference.learn.train.train` on
    ``store`` with evidence up to ``at`` (so only what was settled by then), publishing a
    version into the bench's store. torch and pyro load on the first call.

    ``settings.train_folds`` is passed on as ``folds``: None (the full schedule) calibrates on
    held-out folds exactly as the nightly job does; 0 (``--quick``) fits the map on the fit's own
    in-sample predictions of each settlement, which saves three fits per retraining.
    """
    options = {"max_steps": settings.train_steps, "min_steps": min(150, settings.train_steps),
               "confusion": settings.train_confusion, "events_per_step": settings.train_events_per_step,
               "n_draws": settings.train_draws}

    def train_at(evidence: Evidence, at: float) -> dict[str, Any]:
        from doxa.inference.learn.train import train  # lazy: torch and pyro load only when doxa-learned retrains

        result = train(store, at=from_days(at), fit_options=options, folds=settings.train_folds,
                       progress=False, seed=settings.seed)
        return result.document

    return train_at


def trainer_available() -> str | None:
    """None when the nightly fit can run here, else why not."""
    try:
        import doxa.inference.learn.train  # noqa: F401 - lazy on purpose: is the fit installed here?
    except ModuleNotFoundError as err:
        return f"the nightly fit is not installed ({err.name} missing)"
    return None


# ============================================================================ results
@dataclass
class BenchResult:
    world: dict[str, Any]
    settings: dict[str, Any]
    systems: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    reliability: dict[str, dict[str, list[float]]]
    risk_coverage: dict[str, dict[str, list[float]]]
    learning: list[dict[str, Any]]
    planted: dict[str, dict[str, Any]]
    timings: dict[str, float]
    trust_nodes: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _clean(asdict(self))

    def summary(self) -> dict[str, Any]:
        """The `--json` answer: one row per system with the headline metrics, and the world."""
        rows = []
        for row in self.systems:
            item = {"system": row["system"]}
            item.update({k: row.get(k) for k in METRIC_KEYS})
            for extra in ("acc_at_90_coverage", "acc_at_70_coverage", "accuracy_unsettled", "planted_held_share",
                          "planted_p10", "resistance", "fit_seconds", "status", "note"):
                if extra in row:
                    item[extra] = row[extra]
            rows.append(item)
        return _clean({"systems": rows, "world": self.world, "files": self.files, "convergence": self.convergence()})

    def convergence(self) -> dict[str, Any] | None:
        """Did doxa-learned's fits converge by the fit's own plateau rule? None without doxa-learned.

        ``first_converged`` is the one the issue asks about: the first fit starts from the
        priors on the least data, so it is the slowest; later fits are listed too.
        """
        fits = next((r.get("fits") for r in self.systems if r["system"] == "doxa-learned" and r.get("fits")), None)
        if not fits:
            return None
        return {"first_converged": bool(fits[0].get("converged")), "first_steps": fits[0].get("steps"),
                "max_steps": self.settings.get("train_steps"),
                "fits": [{"fit": i, "steps": f.get("steps"), "converged": bool(f.get("converged"))}
                         for i, f in enumerate(fits)],
                "not_converged": sum(1 for f in fits if not f.get("converged"))}

    def convergence_line(self) -> str | None:
        """One sentence on the fits' convergence (the report and the command's footer)."""
        c = self.convergence()
        if c is None:
            return None
        steps = ", ".join(f"{f['steps']}{'' if f['converged'] else ' (cap)'}" for f in c["fits"])
        if c["not_converged"] == 0:
            return f"doxa-learned: all {len(c['fits'])} fits converged (steps: {steps})."
        first = "the first fit did NOT converge" if not c["first_converged"] else "the first fit converged"
        return (f"doxa-learned: {c['not_converged']} of {len(c['fits'])} fits stopped at the {c['max_steps']}-step "
                f"cap without converging; {first} (steps: {steps}). Raise --train-steps.")


def _clean(value):
    """JSON-safe: numpy → Python, NaN/inf → None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, (np.floating, float)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ============================================================================ the run
Progress = Callable[[str, float], None]


def _no_progress(description: str, advance: float) -> None:
    return None


def world_summary(world, evidence: Evidence, ingest_counts: dict[str, int]) -> dict[str, Any]:
    t = world.truth
    cfg = world.config
    return {
        "name": cfg.name,
        "seed": cfg.seed,
        "days": float(t.days),
        "start": world.start.date().isoformat(),
        "people": cfg.people.count,
        "questions": len(t.questions),
        "sources": int(sum(1 for r in world.records if r["type"] == "source")),
        "messages": int(ingest_counts.get("messages", 0)),
        "readings": int(ingest_counts.get("readings", 0)),
        "counted_readings": int(evidence.n_readings),
        "settlements": int(len(evidence.settle_q)),
        "planted_campaigns": len(t.campaigns),
        "trusted_layer": trusted_layer(world),
        "kinds": len(t.prior),
        "reader_temperature": dict(t.reader_temperature),
        "half_life_days": {k: round(math.log(2) / r, 1) for k, r in t.change_rate.items()},
    }


def trust_error(params: dict[str, Any], world) -> dict[str, float]:
    """``|α_used − α_true|`` over the world's source tree, as the scorer would use ``params``.

    ``nodes``: mean over internal nodes (layers); ``leaves``: mean over sources weighted
    by their messages. Assistant and planted nodes are left out (never evidence / new).
    """
    params = with_defaults(params)
    t = world.truth
    parents = {node.rsplit("/", 1)[0] for node in t.node_trust if "/" in node}
    internal, leaves, weights = [], [], []
    for node, alpha in t.node_trust.items():
        if node.startswith("assistant") or node.rsplit("/", 1)[-1] in t.planted_sources:
            continue
        used, _ = trust_for_source(params, node, None)
        if node in parents:
            internal.append(abs(used - alpha))
        else:
            leaves.append(abs(used - alpha))
            weights.append(t.node_messages.get(node, 0))
    w = np.asarray(weights, dtype=np.float64)
    return {
        "nodes": float(np.mean(internal)) if internal else float("nan"),
        "leaves": float(np.average(leaves, weights=w)) if len(leaves) and w.sum() > 0 else float("nan"),
    }


def run(world, settings: BenchSettings | None = None, *, db: str = ":memory:",
        trainer: Callable[[Evidence, float], dict] | None = None, progress: Progress | None = None) -> BenchResult:
    """Replay ``world`` into a store at ``db`` and benchmark every system on it.

    ``trainer`` replaces the nightly job for doxa-learned (default: :func:`nightly_trainer`).
    """
    return _run(world, settings or BenchSettings(), db, trainer, progress)


def trust_table(params: dict[str, Any], world, limit: int = 25) -> list[dict[str, Any]]:
    """The source tree's layers (internal nodes), busiest first: true α, the α ``params`` gives, messages."""
    params = with_defaults(params)
    t = world.truth
    parents = {node.rsplit("/", 1)[0] for node in t.node_trust if "/" in node}
    rows = []
    for node in parents:
        if node.startswith("assistant") or node not in t.node_trust:
            continue
        used, where = trust_for_source(params, node, None)
        rows.append({"node": node, "depth": t.node_depth[node], "messages": int(t.node_messages.get(node, 0)),
                     "true": t.node_trust[node], "used": used, "from": where})
    rows.sort(key=lambda r: -r["messages"])
    return rows[:limit]


def _run(world, settings: BenchSettings, db: str, trainer, progress: Progress | None) -> BenchResult:
    tick = progress or _no_progress
    timings: dict[str, Any] = {}
    started = time.perf_counter()

    # ------------------------------------------------------------- replay into the store
    n_cp = settings.checkpoints
    days = np.linspace(world.end_day / n_cp, world.end_day, n_cp)
    store = Store.open(db)
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    previous = None
    for day in days.tolist():
        added = store.ingest_records(world.records_until(day, since=previous))
        for table, n in added.items():
            counts[table] = counts.get(table, 0) + n
        previous = day
        tick("replaying the stream into the store", 1)
    timings["ingest_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    evidence = store.load_evidence(None)
    timings["load_s"] = time.perf_counter() - t0
    try:
        return _evaluate(world, settings, store, evidence, counts, trainer, tick, timings, started)
    finally:
        store.close()


def _evaluate(world, settings: BenchSettings, store, evidence: Evidence, counts: dict[str, int], trainer,
              tick: Progress, timings: dict[str, Any], started: float) -> BenchResult:
    notes: dict[str, str] = {}
    n_cp = settings.checkpoints
    days = np.linspace(world.end_day / n_cp, world.end_day, n_cp)

    qt = evidence.questions
    qids = qt.ids.tolist()
    epoch_days = np.array([world.epoch_day(d) for d in days.tolist()])

    # ------------------------------------------------------------- systems
    wanted = tuple(settings.systems)
    if trainer is None and "doxa-learned" in wanted:
        why = trainer_available()
        if why is None:
            trainer = nightly_trainer(store, settings)
        else:
            notes["doxa-learned"] = why
    systems = [s for s in baselines.lineup(world.oracle_params(), trainer, wanted) if s.name not in notes]
    learned = next((s for s in systems if isinstance(s, baselines.LearnedDoxa)), None)

    per_system: dict[str, dict[str, list]] = {s.name: {"probs": [], "truth": [], "unsettled": [], "seconds": 0.0,
                                                       "reads": 0} for s in systems}
    checkpoint_rows: list[dict[str, Any]] = []
    learning: list[dict[str, Any]] = []
    final_probs: dict[str, np.ndarray] = {}
    final_truth = final_eval = None
    for i, (day, at) in enumerate(zip(days.tolist(), epoch_days.tolist())):
        ev = evidence_until(evidence, at)
        has = np.bincount(ev.q, minlength=len(qids)) > 0
        idx = np.flatnonzero(has)
        truth = np.array([world.truth.answer_index_at(qids[j], day) for j in idx.tolist()], dtype=np.int64)
        unsettled = (np.bincount(ev.settle_q, minlength=len(qids)) == 0)[idx]
        row = {"checkpoint": i, "day": day, "evaluated": int(len(idx)), "settlements": int(len(ev.settle_q)),
               "readings": int(ev.n_readings), "accuracy": {}}
        if learned is not None and i in settings.retrain_at:
            tick(f"training doxa-learned at day {day:.0f}", 0)
            t0 = time.perf_counter()
            try:
                learned.fit(ev, at)
            except Exception as err:  # a failed fit publishes nothing: keep the previous params
                notes.setdefault("doxa-learned", f"fit at day {day:.0f} failed: {err}")
            timings["train_s"] = timings.get("train_s", 0.0) + time.perf_counter() - t0
        for system in systems:
            tick(f"day {day:.0f}: {system.name}", 0)
            t0 = time.perf_counter()
            probs = system.predict(ev, at)
            elapsed = time.perf_counter() - t0
            acc = per_system[system.name]
            acc["seconds"] += elapsed
            acc["reads"] += len(qids)
            acc["probs"].append(probs[idx])
            acc["truth"].append(truth)
            acc["unsettled"].append(unsettled)
            row["accuracy"][system.name] = accuracy(probs[idx], truth)
            if i == n_cp - 1:
                final_probs[system.name] = probs
        if learned is not None:
            learning.append({"checkpoint": i, "day": day, "settlements": int(len(ev.settle_q)),
                             "accuracy": row["accuracy"].get("doxa-learned"),
                             "trained": i in settings.retrain_at,
                             "trust_error": trust_error(learned.params_, world)})
        checkpoint_rows.append(row)
        final_truth, final_eval = truth, idx
        tick("checkpoints", 1)
    timings["systems_s"] = {s.name: per_system[s.name]["seconds"] for s in systems}

    # ------------------------------------------------------------- planted claims
    t0 = time.perf_counter()
    planted = planted_resistance(world, evidence_until(evidence, epoch_days[-1]), systems, final_probs,
                                 final_eval, final_truth, days[-1], settings, tick)
    timings["planted_s"] = time.perf_counter() - t0

    # ------------------------------------------------------------- pool
    rows, reliability, risk = [], {}, {}
    for name in wanted:
        if name in notes and name not in per_system:
            rows.append({"system": name, "status": "missing", "note": notes[name],
                         **{k: None for k in METRIC_KEYS}})
            continue
        acc = per_system[name]
        probs = np.vstack(acc["probs"])
        truth = np.concatenate(acc["truth"])
        metrics = prediction_metrics(probs, truth, n_bins=settings.ece_bins, coverages=settings.coverages)
        never_settled = np.concatenate(acc["unsettled"])
        metrics["accuracy_unsettled"] = accuracy(probs[never_settled], truth[never_settled])
        metrics["share_unsettled"] = float(never_settled.mean())
        confidence = probs.max(axis=1)
        correct = np.argmax(probs, axis=1) == truth
        bins = reliability_bins(confidence, correct.astype(np.float64), settings.ece_bins)
        reliability[name] = {k: v.tolist() for k, v in bins.items()}
        cov, rsk = risk_coverage_curve(confidence, correct)
        risk[name] = {"coverage": cov.tolist(), "risk": rsk.tolist()}
        flips = planted.get(name, {})
        row = {"system": name, "status": "ok", **metrics,
               "planted_to_flip": flips.get("median"), "planted_held_share": flips.get("held_share"),
               "planted_tested": flips.get("tested", 0), "planted_p10": flips.get("p10"),
               "resistance": {k: {m: v.get(m) for m in ("tested", "median", "p10", "held_share")}
                              for k, v in flips.get("scenarios", {}).items()},
               "us_per_read": 1e6 * acc["seconds"] / max(acc["reads"], 1),
               "n_evaluated": int(len(truth))}
        if name in notes:
            row["note"] = notes[name]
        if name == "doxa-learned" and learned is not None:
            row["fits"] = learned.fits_
            row["fit_seconds"] = sum(f["seconds"] for f in learned.fits_)
        rows.append(row)
    timings["total_s"] = time.perf_counter() - started
    return BenchResult(
        world=world_summary(world, evidence, counts),
        settings=asdict(settings),
        systems=rows,
        checkpoints=checkpoint_rows,
        reliability=reliability,
        risk_coverage=risk,
        learning=learning,
        planted=planted,
        timings=timings,
        trust_nodes=trust_table(learned.params_, world) if learned is not None else [],
    )


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
                       evaluated: np.ndarray, truth: np.ndarray, day: float, settings: BenchSettings,
                       tick: Progress) -> dict[str, dict[str, Any]]:
    """For each system: claims needed to flip its confident, correct beliefs, per scenario (module doc).

    The top-level ``median`` / ``p10`` / ``held_share`` / ``tested`` are those of
    ``new_sources``; each scenario has its own under ``scenarios``.
    """
    cap = settings.planted_cap
    rng = np.random.default_rng(settings.seed)
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
        pick = np.sort(np.random.default_rng([settings.seed, 1]).permutation(confident)[:settings.planted_questions])
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


# ============================================================================ the report
def write_report(result: BenchResult, out_dir: str | Path) -> list[str]:
    """results.json, report.md and the plots into ``out_dir``; returns the paths written."""
    import matplotlib  # lazy: only the report's plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    ok = [r for r in result.systems if r.get("status") == "ok"]
    names = [r["system"] for r in ok]
    colours = {n: plt.cm.tab10(i % 10) for i, n in enumerate(baselines.SYSTEM_NAMES)}

    # reliability diagram, one panel per system
    cols = 3
    rows_n = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 3.2 * rows_n), squeeze=False)
    for ax, name in zip(axes.flat, names):
        rel = result.reliability[name]
        ax.plot([0, 1], [0, 1], color="0.7", lw=1)
        ax.plot(rel["confidence"], rel["accuracy"], "o-", color=colours[name], ms=3)
        ece = next(r["ece"] for r in ok if r["system"] == name)
        ax.set_title(f"{name} (ECE {ece:.3f})", fontsize=9)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.supxlabel("stated probability of the top answer (15 equal-mass bins)", fontsize=9)
    fig.supylabel("share correct", fontsize=9)
    fig.tight_layout()
    written.append(out / "reliability.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # risk–coverage
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in names:
        rc = result.risk_coverage[name]
        ax.plot(rc["coverage"], rc["risk"], label=name, color=colours[name], lw=1.4)
    ax.set_xlabel("coverage (share answered without asking)")
    ax.set_ylabel("error rate on the answered")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    written.append(out / "risk_coverage.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # accuracy over time
    fig, ax = plt.subplots(figsize=(6, 4))
    days = [c["day"] for c in result.checkpoints]
    for name in names:
        ax.plot(days, [c["accuracy"].get(name) for c in result.checkpoints], "o-", ms=3, label=name,
                color=colours[name], lw=1.2)
    ax.set_xlabel("world day")
    ax.set_ylabel("accuracy on the current true answer")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    written.append(out / "accuracy_over_time.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    # learning speed
    if result.learning:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
        xs = [p["settlements"] for p in result.learning]
        a1.plot(xs, [p["accuracy"] for p in result.learning], "o-", color=colours["doxa-learned"], label="doxa-learned")
        oracle_acc = [c["accuracy"].get("oracle") for c in result.checkpoints]
        if any(v is not None for v in oracle_acc):
            a1.plot(xs, oracle_acc, "--", color=colours["oracle"], label="oracle")
        a1.set_xlabel("settlements seen")
        a1.set_ylabel("accuracy")
        a1.legend(fontsize=7)
        a2.plot(xs, [p["trust_error"]["nodes"] for p in result.learning], "o-", label="layers (mean)")
        a2.plot(xs, [p["trust_error"]["leaves"] for p in result.learning], "s-", label="sources (message-weighted)")
        a2.set_xlabel("settlements seen")
        a2.set_ylabel("|α used − α true|")
        a2.set_ylim(bottom=0)
        a2.legend(fontsize=7)
        fig.tight_layout()
        written.append(out / "learning.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    result.files = [str(p) for p in written] + [str(out / "report.md"), str(out / "results.json")]
    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=1))
    (out / "report.md").write_text(render_markdown(result, [p.name for p in written]))
    return result.files


def _fmt(value, spec: str = ".3f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def table_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the headline table (shared by the terminal and Markdown)."""
    cap = result.settings.get("planted_cap", 20)
    header = ["system", "accuracy", "log-loss", "ECE", "acc@80%", "AURC", "planted", "µs/read"]
    rows = []
    for r in result.systems:
        if r.get("status") != "ok":
            rows.append([r["system"], "missing", "", "", "", "", "", r.get("note", "")])
            continue
        flip = r.get("planted_to_flip")
        flip_s = "—" if flip is None else (f">{cap}" if flip > cap else f"{flip:g}")
        rows.append([r["system"], _fmt(r["accuracy"]), _fmt(r["log_loss"]), _fmt(r["ece"]),
                     _fmt(r["acc_at_80_coverage"]), _fmt(r["aurc"]), flip_s, _fmt(r["us_per_read"], ".2f")])
    return header, rows


def resistance_markdown(result: BenchResult) -> list[str]:
    """The resistance table: claims to flip per attack (median / 10th percentile), and the honest change."""
    cap = result.settings.get("planted_cap", 20)
    ok = [r for r in result.systems if r.get("status") == "ok" and r.get("resistance")]
    if not ok:
        return []

    def cell(value):
        return "—" if value is None else (f">{cap}" if value > cap else f"{value:g}")

    oracle = next((r["resistance"].get("honest_change", {}) for r in ok if r["system"] == "oracle"), {})
    lines = ["", "## Resistance", "",
             f"Claims to flip a belief held at ≥ 0.9 (median / 10th percentile; >{cap}: held against all "
             f"{cap}): one new source per claim; one new source repeating itself; new sources inside the "
             f"trusted layer `{'/'.join(result.world.get('trusted_layer', []))}`. Honest change: messages from "
             "sources that already spoke about the question, an hour apart, until the system follows (lower is "
             "better; × the oracle's median).", "",
             "| system | new sources | one source repeating | trusted-layer campaign | honest change followed | × oracle |",
             "|---|---|---|---|---|---|"]
    for r in ok:
        res = r["resistance"]
        cells = [f"{cell(res.get(k, {}).get('median'))} / {cell(res.get(k, {}).get('p10'))}"
                 for k in ("new_sources", "one_source", "trusted_layer")]
        honest = res.get("honest_change", {}).get("median")
        ratio = (honest / oracle["median"]) if honest is not None and oracle.get("median") else None
        lines.append(f"| {r['system']} | " + " | ".join(cells) + f" | {cell(honest)} | {_fmt(ratio, '.2f')} |")
    return lines


def render_markdown(result: BenchResult, images: list[str]) -> str:
    w = result.world
    s = result.settings
    header, rows = table_rows(result)
    lines = [f"# doxa bench — world `{w['name']}` (seed {w['seed']})", ""]
    lines.append(f"{w['people']} people, {w['questions']} questions, {w['messages']} messages, "
                 f"{w['readings']} readings ({w['counted_readings']} counted), {w['settlements']} settlements, "
                 f"{w['planted_campaigns']} planted campaigns over {w['days']:.0f} days. "
                 f"{s['checkpoints']} checkpoints; doxa-learned retrained at checkpoints "
                 f"{list(s['retrain_at'])} ({s['train_steps']} SVI steps max; calibration map on "
                 f"{_calibration_folds_words(s.get('train_folds'))}).")
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Metrics pool every (checkpoint, question with evidence) pair. `acc @80%`: accuracy on the "
              "80 % most confident answers (the other 20 % handed to a person). AURC: area under the "
              "risk–coverage curve (lower is better). Planted to flip: median number of planted claims "
              f"(new throwaway sources) that turn a belief held at ≥ 0.9 to the planted answer; >{s['planted_cap']} "
              "means most held. µs/read: time to score one question within the batch."]
    more = [r for r in result.systems if r.get("status") == "ok"]
    if more:
        lines += ["", "| system | acc @90% | acc @70% | accuracy, never-settled questions | mean confidence | "
                  f"planted: beliefs tested | held all {s['planted_cap']} |", "|---|---|---|---|---|---|---|"]
        for r in more:
            lines.append(f"| {r['system']} | {_fmt(r.get('acc_at_90_coverage'))} | {_fmt(r.get('acc_at_70_coverage'))}"
                         f" | {_fmt(r.get('accuracy_unsettled'))} | {_fmt(r.get('mean_confidence'))}"
                         f" | {r.get('planted_tested', 0)} | {_fmt(r.get('planted_held_share'), '.2f')} |")
    notes = [r for r in result.systems if r.get("note")]
    if notes:
        lines += [""] + [f"- **{r['system']}**: {r['note']}" for r in notes]
    lines += resistance_markdown(result)
    converged = result.convergence_line()
    if converged:
        lines += ["", "## Convergence", "", converged]
    if result.learning:
        lines += ["", "## Learning speed (doxa-learned)", "",
                  "| checkpoint | day | settlements seen | retrained | accuracy | trust error, layers | "
                  "trust error, sources |", "|---|---|---|---|---|---|---|"]
        for p in result.learning:
            lines.append(f"| {p['checkpoint']} | {p['day']:.0f} | {p['settlements']} | {'yes' if p['trained'] else ''}"
                         f" | {_fmt(p['accuracy'])} | {_fmt(p['trust_error']['nodes'])} | "
                         f"{_fmt(p['trust_error']['leaves'])} |")
    if result.trust_nodes:
        lines += ["", "Layers of the source tree after the last retraining (busiest first): true reliability "
                  "against the one doxa-learned reads.", "",
                  "| layer | messages | true α | learned α | from |", "|---|---|---|---|---|"]
        for r in result.trust_nodes:
            lines.append(f"| `{r['node']}` | {r['messages']} | {r['true']:.3f} | {r['used']:.3f} | {r['from']} |")
    lines += ["", "## Accuracy at each checkpoint", ""]
    names = [r["system"] for r in more]
    lines += ["| day | evaluated | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for c in result.checkpoints:
        lines.append(f"| {c['day']:.0f} | {c['evaluated']} | "
                     + " | ".join(_fmt(c["accuracy"].get(n)) for n in names) + " |")
    lines += ["", "## Plots", ""] + [f"![{img}]({img})" for img in images]
    t = result.timings
    lines += ["", "## Time", "", f"total {t.get('total_s', 0):.1f} s: ingest {t.get('ingest_s', 0):.1f} s, "
              f"load {t.get('load_s', 0):.1f} s, training {t.get('train_s', 0):.1f} s, "
              f"planted claims {t.get('planted_s', 0):.1f} s."]
    return "\n".join(lines) + "\n"
