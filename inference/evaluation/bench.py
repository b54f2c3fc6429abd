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
- cost: microseconds per question read, measured on each checkpoint's batch;
- open questions (a world with an open kind, docs/world.md): the metrics above on open and
  closed questions apart. An open question's states at a checkpoint are the values the store
  listed by then and ``unlisted``; the truth is its current value where listed, else
  ``unlisted`` (no evidence has named it yet: that is the answer a memory can give). So a
  belief whose top is ``unlisted`` while the true value is listed is wrong, and a system that
  cannot name a value added after the question's creation (``fixed-options``) scores it as
  wrong. The store is read at each checkpoint for these worlds (the options it had listed
  then), once otherwise.

Nothing here imports torch, pandas or matplotlib at module level; the trainer and the
plots load them when they run.

This module is the run: the evidence cut, the settings, the trainer and the
:class:`BenchResult`. The planted-claim attack is :mod:`.planted`, the report
(results.json, report.md, the plots) :mod:`.bench_report`, the metrics
inference/learn/metrics.py, the systems baselines.py.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from doxa.data.evidence import Evidence
from doxa.data.store import Store
from doxa.data.times import from_days

from . import baselines
from .planted import planted_resistance, trusted_layer
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


# ============================================================================ settings
@dataclass
class BenchSettings:
    """Knobs of one bench run (``quick()`` fits the 60-second budget)."""

    checkpoints: int = 10
    # checkpoint indices where doxa-learned is refitted: every one. The nightly job runs every
    # night, so a checkpoint (73 days apart on the default world) scored with the fit of an
    # earlier one measures parameters months stale, which the product never serves: with fits
    # at 10 %, 40 % and 70 % of the run only, half of the default world's gap to the oracle was
    # that staleness (docs/measurements/2026-12-bench.md). A fresh store's cold start is what
    # doxa-equal shows.
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
                          "planted_p10", "resistance", "fit_seconds", "status", "note", "open", "closed"):
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


# ============================================================================ open questions
#: :func:`question_cases` codes: a closed question; an open one whose true value was listed when it
#: was created, listed since (a later value), or not listed yet (the truth is ``unlisted``).
CLOSED, OPEN_FIRST, OPEN_LATER, OPEN_UNLISTED = 0, 1, 2, 3


def has_open_questions(world) -> bool:
    return any(kind.open for kind in world.config.kinds)


def created_options(world) -> dict[str, int]:
    """Question id → the number of options its record was created with (an open question: its first value)."""
    return {r["id"]: len(r["options"]) for r in world.records[:world.n_definitions] if r["type"] == "question"}


def checkpoint_truth(world, questions, idx: np.ndarray, day: float) -> np.ndarray:
    """Index of each question's true current answer (questions ``idx``, world day ``day``) among its
    states: a closed question's option; an open question's value where the store lists it, else its
    last state, ``unlisted`` (no evidence has named the value yet)."""
    out = np.empty(len(idx), dtype=np.int64)
    for n, j in enumerate(idx.tolist()):
        qid = str(questions.ids[j])
        if questions.is_open[j]:
            states = questions.options[j]
            value = world.truth.answer_at(qid, day)
            out[n] = states.index(value) if value in states[:-1] else len(states) - 1
        else:
            out[n] = world.truth.answer_index_at(qid, day)
    return out


def question_cases(questions, idx: np.ndarray, truth: np.ndarray, created: dict[str, int]) -> np.ndarray:
    """Per evaluated question, which case its truth is (:data:`CLOSED`, :data:`OPEN_FIRST`, …)."""
    is_open = questions.is_open[idx]
    n0 = np.array([created.get(str(q), 0) for q in questions.ids[idx].tolist()], dtype=np.int64)
    unlisted = truth == questions.n_options[idx] - 1
    return np.where(~is_open, CLOSED, np.where(unlisted, OPEN_UNLISTED, np.where(truth < n0, OPEN_FIRST,
                                                                                   OPEN_LATER)))


def open_question_metrics(probs: np.ndarray, truth: np.ndarray, cases: np.ndarray,
                          settings: BenchSettings) -> dict[str, Any]:
    """The headline metrics on open and on closed questions apart (``open``, ``closed``), and the
    open questions' accuracy where the truth is a value listed after creation (``accuracy_later_value``)
    or not listed yet (``accuracy_not_yet_named``: the right top answer is ``unlisted``)."""
    out: dict[str, Any] = {}
    for name, rows in (("open", cases != CLOSED), ("closed", cases == CLOSED)):
        metrics = prediction_metrics(probs[rows], truth[rows], n_bins=settings.ece_bins,
                                     coverages=settings.coverages) if rows.any() else {}
        out[name] = {**metrics, "n_evaluated": int(rows.sum())}
    for name, case in (("later_value", OPEN_LATER), ("not_yet_named", OPEN_UNLISTED), ("first_value", OPEN_FIRST)):
        rows = cases == case
        out["open"][f"accuracy_{name}"] = accuracy(probs[rows], truth[rows])
        out["open"][f"n_{name}"] = int(rows.sum())
    return out


def _stack(blocks: list[np.ndarray]) -> np.ndarray:
    """Rows of several checkpoints, zero-padded to the widest (open questions' option lists grow)."""
    width = max(b.shape[1] for b in blocks)
    return np.vstack([np.pad(b, ((0, 0), (0, width - b.shape[1]))) for b in blocks])


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
        **({"open_questions": sum(1 for q in t.questions.values() if q.get("open")),
            "values_added": int(sum(1 for r in world.records if r["type"] == "option_added"))}
           if has_open_questions(world) else {}),
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
    for node in sorted(parents):  # by name first, so nodes with equal counts keep one order from run to run
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
    # open questions' option lists grow with the stream: each checkpoint reads the store as it was then
    snapshots: list[Evidence] | None = [] if has_open_questions(world) else None
    load_s = 0.0
    for day in days.tolist():
        added = store.ingest_records(world.records_until(day, since=previous))
        for table, n in added.items():
            counts[table] = counts.get(table, 0) + n
        previous = day
        if snapshots is not None:
            t1 = time.perf_counter()
            snapshots.append(store.load_evidence(None))
            load_s += time.perf_counter() - t1
        tick("replaying the stream into the store", 1)
    timings["ingest_s"] = time.perf_counter() - t0 - load_s
    t0 = time.perf_counter()
    evidence = snapshots[-1] if snapshots else store.load_evidence(None)
    timings["load_s"] = time.perf_counter() - t0 + load_s
    try:
        return _evaluate(world, settings, store, evidence, counts, trainer, tick, timings, started,
                         snapshots=snapshots)
    finally:
        store.close()


def _evaluate(world, settings: BenchSettings, store, evidence: Evidence, counts: dict[str, int], trainer,
              tick: Progress, timings: dict[str, Any], started: float,
              snapshots: list[Evidence] | None = None) -> BenchResult:
    notes: dict[str, str] = {}
    n_cp = settings.checkpoints
    days = np.linspace(world.end_day / n_cp, world.end_day, n_cp)

    qt = evidence.questions
    qids = qt.ids.tolist()
    epoch_days = np.array([world.epoch_day(d) for d in days.tolist()])

    # ------------------------------------------------------------- systems
    wanted = tuple(settings.systems)
    if snapshots is not None and wanted == baselines.SYSTEM_NAMES:  # the default line-up, on open questions
        wanted += baselines.OPEN_SYSTEM_NAMES
    if trainer is None and "doxa-learned" in wanted:
        why = trainer_available()
        if why is None:
            trainer = nightly_trainer(store, settings)
        else:
            notes["doxa-learned"] = why
    created = created_options(world)
    systems = [s for s in baselines.lineup(world.oracle_params(), trainer, wanted, created=created)
               if s.name not in notes]
    learned = next((s for s in systems if isinstance(s, baselines.LearnedDoxa)), None)

    per_system: dict[str, dict[str, list]] = {s.name: {"probs": [], "truth": [], "unsettled": [], "seconds": 0.0,
                                                       "reads": 0, "kinds": []} for s in systems}
    checkpoint_rows: list[dict[str, Any]] = []
    learning: list[dict[str, Any]] = []
    final_probs: dict[str, np.ndarray] = {}
    final_truth = final_eval = None
    for i, (day, at) in enumerate(zip(days.tolist(), epoch_days.tolist())):
        ev = evidence_until(evidence if snapshots is None else snapshots[i], at)
        has = np.bincount(ev.q, minlength=len(qids)) > 0
        idx = np.flatnonzero(has)
        truth = checkpoint_truth(world, ev.questions, idx, day)
        kinds_of = question_cases(ev.questions, idx, truth, created)
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
            acc["kinds"].append(kinds_of)
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
    # planted claims name a value of the question's: an open question's may not be listed, so only
    # closed questions are attacked (all of them on a world without open questions)
    attacked = ~evidence.questions.is_open[final_eval]
    planted = planted_resistance(world, evidence_until(evidence, epoch_days[-1]), systems, final_probs,
                                 final_eval[attacked], final_truth[attacked], days[-1], cap=settings.planted_cap,
                                 questions=settings.planted_questions, seed=settings.seed, tick=tick)
    timings["planted_s"] = time.perf_counter() - t0

    # ------------------------------------------------------------- pool
    rows, reliability, risk = [], {}, {}
    for name in wanted:
        if name in notes and name not in per_system:
            rows.append({"system": name, "status": "missing", "note": notes[name],
                         **{k: None for k in METRIC_KEYS}})
            continue
        acc = per_system[name]
        probs = _stack(acc["probs"])
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
        if snapshots is not None:
            row.update(open_question_metrics(probs, truth, np.concatenate(acc["kinds"]), settings))
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
