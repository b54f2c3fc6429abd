"""How the nightly fit scales: wall time and peak memory at 10k / 100k / 1M readings.

Each size runs in a fresh process (so peak RSS is its own): evidence is drawn from
the generative story (:mod:`doxa.inference.evaluation.simulate`, skewed question lengths, four
source layers), then ``BeliefFit`` (defaults: confusion auto, subsampling above
50k events per step) and the in-sample settlement predictions the calibration map
is fitted on (what ``doxa train`` does above 20,000 settlements; below, it also
refits three held-out folds, warm-started). Prints Markdown tables.

Convergence check (``--check``, on by default; after the peak RSS is taken): is the
fit's "converged" honest, given that a subsampled step sees a few percent of the
questions and its loss is noisy? The fit is continued by a warm-started refit with
the same settings and its own convergence test, and the *full-data* ELBO (every
question, no subsampling; mean over ``--particles`` guide draws with common random
numbers) is compared before and after, as is how far the posterior means moved in
units of their posterior standard deviation. A fit stopped early would gain ELBO
and move its parameters by more than their uncertainty. Recovery of the simulated
truth (leaf trust, change rates, reader temperature) is reported alongside.

    python bench/fit_scale.py [--sizes 10000,100000,1000000] [--threads 1] [--no-check]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time


def _full_elbo(fit, particles: int, seed: int) -> tuple[float, float]:
    """ELBO of every question under ``fit``'s guide (mean, standard error over particles)."""
    import dataclasses

    import numpy as np
    import pyro
    import torch
    from pyro.infer import Trace_ELBO

    from doxa.inference.learn.fit import _fast_pyro
    from doxa.model.belief_model import belief_model

    chains = [dataclasses.replace(c, subsample=None) for c in fit.chains_]

    def model():
        belief_model(fit.structure_, chains, confusion=fit.confusion_)

    pyro.set_rng_seed(seed)  # the same guide noise for every fit compared (common random numbers)
    elbo = Trace_ELBO()  # the fit's own objective (inference/learn/fit.py)
    with torch.no_grad(), _fast_pyro():
        values = np.array([-elbo.loss(model, fit.guide_) for _ in range(particles)])
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(particles)) if particles > 1 else 0.0


def _posterior_moves(before: dict, after: dict, structure, min_messages: int = 20) -> dict:
    """|Δ posterior mean| / posterior sd (of ``before``) on the logit / log scale."""
    import numpy as np

    def logit(p):
        p = np.clip(p, 1e-9, 1 - 1e-9)
        return np.log(p) - np.log1p(-p)

    out = {}
    observed = structure.node_messages >= min_messages
    for name, transform, mask in (("trust", logit, observed), ("rate", np.log, None), ("temperature", np.log, None)):
        a, b = transform(before[name]), transform(after[name])
        if mask is not None:
            a, b = a[:, mask], b[:, mask]
        z = np.abs(a.mean(0) - b.mean(0)) / np.maximum(a.std(0), 1e-12)
        out[name] = {"median": round(float(np.median(z)), 2), "max": round(float(z.max()), 2)}
    return out


def _recovery(fit, document: dict, truth) -> dict:
    import numpy as np

    paths = fit.structure_.tree.paths.tolist()
    leaves = [p for p in paths if p.count("/") == 2 and p in truth.trust]
    fitted = np.array([document["trust"][p]["mean"] for p in leaves])
    true = np.array([truth.trust[p] for p in leaves])
    lt = lambda p: np.log(p) - np.log1p(-p)  # noqa: E731
    rate_ratio = [document["kinds"][k]["change_rate"] / truth.change_rate[k] for k in truth.change_rate]
    tau = {r: document["readers"][r]["temperature"] for r in truth.reader_temperature}
    return {
        "leaf_trust_r": round(float(np.corrcoef(lt(fitted), lt(true))[0, 1]), 3),
        "leaf_trust_rmse_logit": round(float(np.sqrt(np.mean((lt(fitted) - lt(true)) ** 2))), 3),
        "rate_ratio": [round(x, 2) for x in rate_ratio],
        "temperature": {r: round(v, 3) for r, v in tau.items()},
        "true_temperature": truth.reader_temperature,
    }


def one(readings: int, threads: int, seed: int, events_per_step: int | None, check: bool, particles: int) -> dict:
    import resource

    import numpy as np

    from doxa.inference.learn.fit import BeliefFit
    from doxa.inference.learn.train import predict_settlements
    from doxa.inference.evaluation.simulate import SimulationConfig, simulate_evidence

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    per_question = 20.0
    config = SimulationConfig(n_questions=max(50, int(readings / per_question)), readings_per_question=per_question,
                              length_skew=1.0, sources_per_sublayer=max(6, readings // 20_000), seed=seed)
    evidence, truth = simulate_evidence(config)
    simulated = time.perf_counter() - started
    options = {} if events_per_step is None else {"events_per_step": events_per_step}
    fit = BeliefFit(progress=False, num_threads=threads, seed=seed, **options).fit(evidence)
    fitted = time.perf_counter() - started - simulated
    document = fit.params_document()
    predictions = predict_settlements(evidence, fit.structure_, document)
    total = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    diag = fit.diagnostics()
    row = {
        "readings": int(evidence.n_readings),
        "questions": int(len(evidence.questions.ids)),
        "max_per_question": int(np.bincount(evidence.q).max()),
        "settlements": int(len(evidence.settle_q)),
        "nodes": int(fit.structure_.n_nodes),
        "slots": int(sum(c.n_slots for c in fit.chains_)),
        "slots_per_step": int(sum(c.n_slots * (c.subsample or c.n_questions) / c.n_questions for c in fit.chains_)),
        "steps": int(fit.steps_),
        "subsampled": bool(diag["subsampled"]),
        "converged": bool(fit.converged_),
        "bias_z": None if fit.bias_ is None else round(float(fit.bias_["z"]), 1),
        "confusion_tried": "confusion" in fit.elbo_by_form_,
        "confusion_kept": bool(fit.confusion_),
        "fit_seconds": round(fitted, 1),
        "seconds_per_step": round(fit.seconds_ / max(fit.steps_, 1), 4),
        "predict_seconds": round(total - simulated - fitted, 1),
        "total_seconds": round(total - simulated, 1),
        "peak_rss_mib": round(peak_mib, 0),
        "n_predictions": int(len(predictions.answer)),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "recovery": _recovery(fit, document, truth),
    }
    if check:
        check_started = time.perf_counter()
        elbo, elbo_se = _full_elbo(fit, particles, seed + 1)
        refit = BeliefFit(**fit.get_params()).fit(evidence, init_from=fit)
        elbo_after, elbo_after_se = _full_elbo(refit, particles, seed + 1)
        row["check"] = {
            "refit_steps": int(refit.steps_),
            "refit_converged": bool(refit.converged_),
            "full_elbo": round(elbo, 1),
            "full_elbo_se": round(elbo_se, 1),
            "elbo_gain": round(elbo_after - elbo, 1),
            "elbo_gain_se": round(math.hypot(elbo_se, elbo_after_se), 1),
            "elbo_gain_per_1k_readings": round(1000 * (elbo_after - elbo) / max(evidence.n_readings, 1), 3),
            "moved_sd": _posterior_moves(fit.draws_, refit.draws_, fit.structure_),
            "seconds": round(time.perf_counter() - check_started, 1),
        }
    return row


def _per_decade(rows: list[dict], key: str) -> list[str]:
    """Growth of ``key`` per 10× readings between consecutive sizes: (y2/y1)^(1/log10(n2/n1))."""
    out = ["–"]
    for a, b in zip(rows, rows[1:]):
        decades = math.log10(b["readings"] / a["readings"])
        out.append(f"{(b[key] / a[key]) ** (1 / decades):.2f}×" if decades > 0 and a[key] > 0 else "–")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--events-per-step", type=int, default=None, help="default: BeliefFit's")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="convergence check: warm-started refit, full-data ELBO before and after")
    parser.add_argument("--particles", type=int, default=8, help="guide draws per full-data ELBO")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.threads, args.seed, args.events_per_step, args.check, args.particles)))
        return 0
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        extra = [] if args.events_per_step is None else ["--events-per-step", str(args.events_per_step)]
        extra += ["--check" if args.check else "--no-check", "--particles", str(args.particles)]
        out = subprocess.run([sys.executable, __file__, "--one", str(size), "--threads", str(args.threads),
                              "--seed", str(args.seed), *extra], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return out.returncode
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    growth_time, growth_rss = _per_decade(rows, "fit_seconds"), _per_decade(rows, "peak_rss_mib")
    print("| readings | questions (max per q) | settlements | steps | converged | bias z → confusion | fit s "
          "| s/step | predict s | peak RSS MiB | fit s per 10× | RSS per 10× | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r, g_t, g_m in zip(rows, growth_time, growth_rss):
        verdict = "kept" if r["confusion_kept"] else "tried, not kept" if r["confusion_tried"] else "no"
        form = "–" if r["bias_z"] is None else f"{r['bias_z']} → {verdict}"
        print(f"| {r['readings']:,} | {r['questions']:,} ({r['max_per_question']}) | {r['settlements']:,} "
              f"| {r['steps']}{' (sub)' if r['subsampled'] else ''} | {'yes' if r['converged'] else 'no (cap)'} "
              f"| {form} | {r['fit_seconds']} | {r['seconds_per_step']} | {r['predict_seconds']} "
              f"| {r['peak_rss_mib']:.0f} | {g_t} | {g_m} | {r['load_before']} → {r['load_after']} |")
    if any("check" in r for r in rows):
        print()
        print("| readings | refit steps (converged) | full ELBO | ELBO gain by refit (± se) | gain per 1k readings "
              "| moved (posterior sd): trust median/max, rate max, τ max | leaf trust r (RMSE logit) "
              "| λ fitted/true | τ fitted (true) | check s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            c, rec = r.get("check"), r["recovery"]
            if c is None:
                continue
            mv = c["moved_sd"]
            tau = ", ".join(f"{v}" for v in rec["temperature"].values())
            true_tau = ", ".join(f"{v}" for v in rec["true_temperature"].values())
            print(f"| {r['readings']:,} | {c['refit_steps']} ({'yes' if c['refit_converged'] else 'no'}) "
                  f"| {c['full_elbo']:,.1f} | {c['elbo_gain']:+.1f} ± {c['elbo_gain_se']} "
                  f"| {c['elbo_gain_per_1k_readings']:+.3f} "
                  f"| {mv['trust']['median']}/{mv['trust']['max']}, {mv['rate']['max']}, {mv['temperature']['max']} "
                  f"| {rec['leaf_trust_r']} ({rec['leaf_trust_rmse_logit']}) "
                  f"| {', '.join(str(x) for x in rec['rate_ratio'])} | {tau} ({true_tau}) | {c['seconds']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
