"""The nightly job (docs/design.md §4): load → fit → calibrate → publish, atomically.

1. Load the counted evidence (:meth:`Store.load_evidence`, vectorised).
2. Fit the hierarchical model by SVI (:class:`doxa.inference.learn.fit.BeliefFit`); with
   ``confusion="auto"`` both forms (one number of trust, confusion matrices), keeping the
   one that predicts held-out settlements better (:mod:`doxa.inference.learn.choice`).
3. Out-of-sample predictions for calibration: settled questions are split into folds;
   each fold's settlements are hidden, the fit is warm-started without them, and for
   each hidden settlement the filter gives the belief the scorer would have shown just
   before it (evidence up to then, the question's earlier settlements included).
   Fit the output map on those (:class:`doxa.inference.learn.calibrate.OutputCalibration`).
4. Publish one parameter version (one transaction); a diverged fit raises
   :class:`~doxa.inference.learn.fit.FitDiverged` before anything is written.
5. Export the posterior draws as ArviZ InferenceData to ``<db>.posterior/v<N>.nc`` (with
   ``--posterior-dir DIR``: ``DIR/<stem>-<store id>/v<N>.nc``, :func:`posterior_folder`), put in
   place inside the publishing transaction (:func:`publish_with_posterior`).

The store is held only while step 1 reads it and while step 4 writes (docs/concurrency.md).
"""

from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from doxa.data.connection import remove_dead_writers_files
from doxa.data.durable import beside_store, fsync_path
from doxa.data.evidence import Evidence
from doxa.inference.learn.calibrate import OutputCalibration
from doxa.inference.learn.choice import choose_form
from doxa.inference.read import states
from doxa.inference.learn.fit import BeliefFit, FitDiverged, NothingToFit
from doxa.inference.learn.predictions import SettlementPredictions, predict_settlements
from doxa.model import logistic

#: Above this many settlements, one more settlement moves the global parameters so
#: little that in-sample predictions are as good as held-out ones: skip the refits.
IN_SAMPLE_ABOVE = 20_000


@dataclass
class TrainResult:
    version: int | None
    document: dict[str, Any]
    calibration: OutputCalibration
    moved: list[dict[str, Any]]
    posterior_path: str | None
    seconds: float
    fit: BeliefFit = field(repr=False)
    #: kept filter states the publish wrote (``written``) and recomputed for evidence ingested
    #: during the fit (``refreshed``); None when nothing was kept (a dry run, a fit cut at --at)
    kept_states: dict[str, int] | None = None

    def summary(self) -> dict[str, Any]:
        diag = self.document.get("diagnostics", {})
        return {
            "version": self.version,
            "steps": diag.get("steps"),
            "seconds": round(self.seconds, 2),
            "fit_seconds": diag.get("seconds"),
            "converged": diag.get("converged"),
            "refit": diag.get("refit"),
            "confusion": diag.get("confusion"),
            "model_choice": diag.get("model_choice"),
            "n_readings": diag.get("n_readings"),
            "n_settlements": diag.get("n_settlements"),
            "calibration": {k: self.calibration.report()[k] for k in ("method", "before", "after")},
            "moved": self.moved,
            "posterior": self.posterior_path,
            "kept_states": self.kept_states,
        }


def settlement_predictions(fit: BeliefFit, evidence: Evidence, *, folds: int | None = 3, seed: int = 0,
                           progress: bool = False) -> SettlementPredictions:
    """Out-of-sample predictions for every settlement, by question folds (see module docstring).

    ``folds=0`` (or more than ``IN_SAMPLE_ABOVE`` settlements with ``folds=None``) uses
    the full fit's own parameters: cheaper, slightly optimistic.
    """
    n_settle = len(evidence.settle_q)
    structure = fit.structure_
    main_doc = fit.params_document()
    if folds is None:
        folds = 0 if n_settle > IN_SAMPLE_ABOVE else 3
    settled_questions = np.unique(evidence.settle_q)
    if folds < 2 or len(settled_questions) < 2 * folds:
        return predict_settlements(evidence, structure, main_doc)
    rng = np.random.default_rng(seed)
    fold_of_question = np.full(len(structure.question_k), -1)
    fold_of_question[settled_questions] = rng.permutation(len(settled_questions)) % folds
    fold_of_settlement = fold_of_question[evidence.settle_q]
    parts = []
    for f in range(folds):
        held_out = fold_of_settlement == f
        # warm from the full fit: it starts near its answer, so smaller steps from the start
        refit = BeliefFit(**{**fit.get_params(), "progress": progress, "min_steps": 2 * fit.window,
                             "max_steps": max(4 * fit.window, fit.steps_ // 2), "seed": seed + 1 + f,
                             "learning_rate": fit.learning_rate * fit.lr_drop})
        refit.fit(evidence, settlement_mask=~held_out, init_from=fit)
        parts.append(predict_settlements(evidence, structure, refit.params_document(),
                                         rows=np.flatnonzero(held_out)))
    return SettlementPredictions(
        probs=np.vstack([p.probs for p in parts]),
        answer=np.concatenate([p.answer for p in parts]),
        question=np.concatenate([p.question for p in parts]),
        t=np.concatenate([p.t for p in parts]),
        out_of_sample=True,
    )


def what_moved(previous: dict[str, Any] | None, current: dict[str, Any], top: int = 8) -> list[dict[str, Any]]:
    """The parameters that changed most since the previous version (trust on the logit scale)."""
    if not previous:
        return []
    moved: list[dict[str, Any]] = []

    def logit(p: float) -> float:
        return float(logistic.logit(min(max(p, 1e-6), 1 - 1e-6)))

    before_trust = previous.get("trust", {})
    for node, entry in current.get("trust", {}).items():
        old = before_trust.get(node)
        if old is not None:
            moved.append({"what": "trust", "name": node, "before": old["mean"], "after": entry["mean"],
                          "size": abs(logit(entry["mean"]) - logit(old["mean"]))})
    for kind, entry in current.get("kinds", {}).items():
        old = previous.get("kinds", {}).get(kind)
        if old and old.get("half_life_days") and entry.get("half_life_days"):
            moved.append({"what": "half_life_days", "name": kind, "before": old["half_life_days"],
                          "after": entry["half_life_days"],
                          "size": abs(math.log(entry["half_life_days"] / old["half_life_days"]))})
    for reader, entry in current.get("readers", {}).items():
        old = previous.get("readers", {}).get(reader)
        if old:
            moved.append({"what": "reader_temperature", "name": reader, "before": old["temperature"],
                          "after": entry["temperature"],
                          "size": abs(math.log(entry["temperature"] / old["temperature"]))})
    moved.sort(key=lambda m: -m["size"])
    # a change below display precision is the fit's noise, not news
    return [dict(m, size=round(m["size"], 4)) for m in moved[:top] if m["size"] >= 1e-3]


def posterior_dir_for(db_path: str) -> Path | None:
    """The store's own posterior folder, ``<store file>.posterior/`` (None for a store in memory)."""
    if not db_path or db_path == ":memory:":
        return None
    return beside_store(db_path, ".posterior")


def posterior_folder(store, posterior_dir: str | os.PathLike | None) -> Path | None:
    """Where ``store``'s posterior files go: its own folder (:func:`posterior_dir_for`), or, in a
    folder given with ``--posterior-dir`` (which several stores may share), the subfolder
    ``<store file's stem>-<first 8 characters of its store id>`` so no store overwrites another's ``v<N>.nc``."""
    if posterior_dir is None:
        return posterior_dir_for(store.path)
    stem = "memory" if store.in_memory else Path(store.file).stem
    return Path(posterior_dir) / f"{stem}-{store.store_id()[:8]}"


def inference_data(fit: BeliefFit):
    """Posterior draws as ArviZ InferenceData (one chain; draws from the variational guide)."""
    import arviz as az  # lazy: arviz and xarray load only to write posterior draws

    s, d = fit.structure_, fit.draws_
    posterior = {
        "trust": d["trust"][None],
        "trust_root": d["trust_root"][None],
        "trust_scale": d["trust_scale"][None],
        "change_rate": d["rate"][None],
        "half_life_days": (np.log(2.0) / d["rate"])[None],
        "rate_loc": d["rate_loc"][None],
        "rate_scale": d["rate_scale"][None],
        "base_rate_concentration": d["base_rate_concentration"][None],
        "reader_temperature": d["temperature"][None],
    }
    k_max = int(max(s.group_ks)) if s.group_ks else 2
    prior = np.full((1, d["trust"].shape[0], s.n_kinds, k_max), np.nan)
    for k in s.group_ks:
        kinds = s.kinds_with_k(k)
        prior[0, :, kinds, :k] = np.moveaxis(d[f"prior_{k}"], 0, 1)
    posterior["base_rates"] = prior
    coords = {
        "node": s.tree.paths.astype(str).tolist(),
        "kind": s.kinds.astype(str).tolist(),
        "reader": s.readers.astype(str).tolist() or ["none"],
        "option": list(range(k_max)),
        "depth": list(range(1, max(s.max_depth, 1) + 1)),
    }
    dims = {"trust": ["node"], "trust_scale": ["depth"], "change_rate": ["kind"], "half_life_days": ["kind"],
            "reader_temperature": ["reader"], "base_rates": ["kind", "option"]}
    for k in s.pairs:
        if f"confusion_{k}" in d:
            name = f"confusion_k{k}"
            posterior[name] = d[f"confusion_{k}"][None]
            coords[f"pair_k{k}"] = [f"{s.tree.paths[n]}|{s.kinds[c]}" for n, c in zip(s.pairs[k].node, s.pairs[k].kind)]
            coords[f"truth_k{k}"] = list(range(k))
            coords[f"stated_k{k}"] = list(range(k))
            dims[name] = [f"pair_k{k}", f"truth_k{k}", f"stated_k{k}"]
    elbo = -np.asarray(fit.losses_, dtype=np.float64)
    idata = az.from_dict(posterior=posterior, coords=coords, dims=dims,
                         sample_stats={"elbo_trace_last": np.full((1, d["trust"].shape[0]), elbo[-1])},
                         attrs={"inference": "SVI (variational draws)", "steps": int(fit.steps_),
                                "confusion": int(fit.confusion_), "guide": fit.guide})
    import xarray as xr

    idata.add_groups({"fit": xr.Dataset({"elbo": ("step", elbo)}, coords={"step": np.arange(len(elbo))})})
    return idata


#: A fit that diverges is run once more from the start at this fraction of its learning rate.
REFIT_LEARNING_RATE_FACTOR = 0.4


def fit_or_refit(evidence, options: dict[str, Any]) -> tuple[BeliefFit, dict[str, Any] | None]:
    """The fit, run again once at a smaller learning rate if it diverges.

    Adam's steps can carry a variational scale far enough out that a draw underflows (seen
    on a 12-person world at 0.05; 0.02 converged). The second run starts from scratch, so a
    fit that converges the first time is exactly what it was. Returns the fit and, when it
    was refitted, where and why the first diverged; a second divergence raises.
    """
    try:
        return BeliefFit(**options).fit(evidence), None
    except FitDiverged as first:
        rate = options.get("learning_rate", BeliefFit().learning_rate) * REFIT_LEARNING_RATE_FACTOR
        try:
            fit = BeliefFit(**dict(options, learning_rate=rate)).fit(evidence)
        except FitDiverged as second:
            raise FitDiverged(f"{second.reason} (also at learning rate {rate:.3g}, after diverging at step "
                              f"{first.step} at the first rate: {first.reason})", second.step) from first
        return fit, {"diverged_at_step": first.step, "reason": first.reason, "learning_rate": rate}


def train(store, *, at=None, fit_options: dict[str, Any] | None = None, folds: int | None = None,
          posterior_dir: str | os.PathLike | None = None, publish: bool = True, seed: int = 0,
          progress: bool = True, calibration_options: dict[str, Any] | None = None,
          on_loaded: Callable[[Evidence], None] | None = None) -> TrainResult:
    """Run the nightly job on a :class:`~doxa.data.store.Store`; returns what was published.

    The store is held twice, briefly: read-only while the evidence is loaded, read-write
    while the version is published. It is free while the model fits (``on_loaded(evidence)``
    runs when it has been let go), so reads and ingests carry on meanwhile; evidence that
    arrives during the fit is trained on the next night. See docs/concurrency.md.
    """
    started = time.perf_counter()
    with store.reading():
        evidence = store.load_evidence(at)
        previous_version, previous = store.latest_params()
        epoch = store.evidence_epoch()
    if on_loaded is not None:
        on_loaded(evidence)
    if len(evidence.settle_q) == 0:
        # unsupervised agreement alone would move every trust toward the pooled mean and away from
        # the documented defaults; the nightly job learns from settled facts, so it waits for one
        raise NothingToFit("no settlement to learn from: trust, base rates and change rates are learned from "
                           "settled facts, so the defaults stay in use. Record what the user or the world says "
                           "with `doxa correct`, `doxa approve` or `doxa outcome`, then train again")
    options = {"seed": seed, "progress": progress, **(fit_options or {})}
    choosing = options.get("confusion", "auto") == "auto"
    fit, refit = fit_or_refit(evidence, {**options, "keep_forms": choosing})
    choice = choose_form(fit, evidence, seed=seed, progress=progress) if choosing else None
    document = fit.params_document()
    document["diagnostics"]["refit"] = refit
    if choice is not None:
        document["diagnostics"]["model_choice"] = choice

    predictions = settlement_predictions(fit, evidence, folds=folds, seed=seed, progress=progress)
    calibration = OutputCalibration(seed=seed, **(calibration_options or {})).fit(predictions.probs, predictions.answer, predictions.question)
    document["calibration"] = calibration.map_
    report = calibration.report()
    report["out_of_sample"] = predictions.out_of_sample
    document["diagnostics"]["calibration"] = report

    moved = what_moved(previous, document)
    document["diagnostics"]["moved"] = moved
    document["diagnostics"]["previous_version"] = previous_version
    document["diagnostics"]["trained_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document = _finite(document)

    folder = posterior_folder(store, posterior_dir)
    if not publish:
        draft = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            draft = folder / f"draft-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.nc"
            inference_data(fit).to_netcdf(str(draft), engine="h5netcdf")
        return TrainResult(version=None, document=document, calibration=calibration, moved=moved,
                           posterior_path=str(draft) if draft else None, seconds=time.perf_counter() - started,
                           fit=fit)
    staged = None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f".staged-{os.getpid()}-{secrets.token_hex(4)}.nc"
        inference_data(fit).to_netcdf(str(staged), engine="h5netcdf")
    # every question's filter state under the new version, kept with it (inference/states.py):
    # computed here, outside the store, from the evidence the fit saw; a question whose
    # evidence changed since then is refreshed in the publishing write. A fit cut at
    # --at has not seen the latest evidence: it keeps none.
    kept = states.compute(evidence, document) if at is None else None
    kept_report: dict[str, int] = {}
    version, posterior_path = publish_with_posterior(store, document, staged, folder, kept_states=kept,
                                                     epoch=epoch, kept_report=kept_report)
    return TrainResult(version=version, document=document, calibration=calibration, moved=moved,
                       posterior_path=posterior_path, seconds=time.perf_counter() - started, fit=fit,
                       kept_states=kept_report or None)


def publish_with_posterior(store, document: dict[str, Any], staged: Path | None, folder: Path | None, *,
                           kept_states: "states.States | None" = None, epoch: int = 0,
                           kept_report: dict[str, int] | None = None) -> tuple[int, str | None]:
    """Publish ``document`` as the next version with its posterior file ``v<N>.nc``, or nothing.

    The staged file takes its final name inside the publishing transaction, before the
    commit: a version is never visible without its file. A run killed before the commit
    leaves a ``v<N>.nc`` no version owns, or a staged file; both are removed here by the
    next run (staged files only once the process that wrote them is gone), while it holds
    the store read-write, so no other publisher is between its rename and its commit.
    ``kept_report``, when given, receives how many kept states were written from the fit's
    snapshot (``written``) and how many of them recomputed for evidence that came in during
    the fit (``refreshed``).
    """
    final: list[Path] = []

    def put_in_place(version: int, con) -> None:
        if kept_states is not None:
            states.write(store, kept_states, {"version": version}, epoch, replace_all=True)
            refreshed = states.refresh_changed_since(store, dict(document, version=version), epoch)
            if kept_report is not None:
                kept_report.update(written=len(kept_states.questions.ids), refreshed=refreshed)
        if folder is None:
            return
        published = {int(v) for (v,) in con.execute("SELECT version FROM params").fetchall()}
        # version files of no version are removed only from the store's own folder: a folder
        # given with --posterior-dir may hold other stores' files
        owned = folder == posterior_dir_for(store.path)
        remove_leftovers(folder, published - {version} if owned else None)
        if staged is not None:
            target = folder / f"v{version}.nc"
            os.replace(staged, target)
            final.append(target)
            fsync_path(folder)

    try:
        version = store.publish_params(document, before_commit=put_in_place)
    except BaseException:
        for path in final:  # rolled back: the file belongs to no version
            path.unlink(missing_ok=True)
        if staged is not None:
            staged.unlink(missing_ok=True)
        raise
    return version, str(final[0]) if final else None


def remove_leftovers(folder: Path, published: set[int] | None) -> list[Path]:
    """Delete what killed runs left in ``folder``: staged files of dead processes, and (unless
    ``published`` is None) version files ``v<N>.nc`` of no published version."""
    removed = [p for p in remove_dead_writers_files(folder, ".staged-") if p.suffix == ".nc"]
    for path in folder.glob("v*.nc") if published is not None else ():
        number = path.stem[1:]
        if number.isdigit() and int(number) not in published:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _finite(value):
    """JSON has no inf/NaN: an infinite half-life (no change) is written as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


__all__ = ["train", "TrainResult", "publish_with_posterior", "remove_leftovers", "settlement_predictions", "predict_settlements", "what_moved",
           "inference_data", "posterior_dir_for", "posterior_folder"]
