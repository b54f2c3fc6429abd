"""How the nightly fit scales: wall time and peak memory at 10k / 100k / 1M readings.

Each size runs in a fresh process (so peak RSS is its own): evidence is drawn from
the generative story (:mod:`doxa.model.simulate`, skewed question lengths, four
source layers), then ``BeliefFit`` (defaults: confusion auto, subsampling above
200k events per step) and the in-sample settlement predictions the calibration map
is fitted on. Prints a Markdown table.

    python bench/fit_scale.py [--sizes 10000,100000,1000000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def one(readings: int, threads: int, seed: int, events_per_step: int | None) -> dict:
    import resource

    import numpy as np

    from doxa.inference.fit import BeliefFit
    from doxa.inference.train import predict_settlements
    from doxa.model.simulate import SimulationConfig, simulate_evidence

    started = time.perf_counter()
    per_question = 20.0
    config = SimulationConfig(n_questions=max(50, int(readings / per_question)), readings_per_question=per_question,
                              length_skew=1.0, sources_per_sublayer=max(6, readings // 20_000), seed=seed)
    evidence, _ = simulate_evidence(config)
    simulated = time.perf_counter() - started
    options = {} if events_per_step is None else {"events_per_step": events_per_step}
    fit = BeliefFit(progress=False, num_threads=threads, seed=seed, **options).fit(evidence)
    fitted = time.perf_counter() - started - simulated
    document = fit.params_document()
    predictions = predict_settlements(evidence, fit.structure_, document)
    total = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "readings": int(evidence.n_readings),
        "questions": int(len(evidence.questions.ids)),
        "max_per_question": int(np.bincount(evidence.q).max()),
        "settlements": int(len(evidence.settle_q)),
        "nodes": int(fit.structure_.n_nodes),
        "steps": int(fit.steps_),
        "subsampled": bool(fit.diagnostics()["subsampled"]),
        "converged": bool(fit.converged_),
        "fit_seconds": round(fitted, 1),
        "seconds_per_step": round(fit.seconds_ / max(fit.steps_, 1), 4),
        "predict_seconds": round(total - simulated - fitted, 1),
        "total_seconds": round(total - simulated, 1),
        "peak_rss_mib": round(peak_mib, 0),
        "n_predictions": int(len(predictions.answer)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--events-per-step", type=int, default=None, help="default: BeliefFit's")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.threads, args.seed, args.events_per_step)))
        return 0
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        extra = [] if args.events_per_step is None else ["--events-per-step", str(args.events_per_step)]
        out = subprocess.run([sys.executable, __file__, "--one", str(size), "--threads", str(args.threads),
                              "--seed", str(args.seed), *extra], capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            return out.returncode
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print("| readings | questions (max per q) | steps | fit s | s/step | predict s | total s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['readings']:,} | {r['questions']:,} ({r['max_per_question']}) | {r['steps']}"
              f"{'' if r['converged'] else ' (cap)'}{' sub' if r['subsampled'] else ''} | {r['fit_seconds']} "
              f"| {r['seconds_per_step']} | {r['predict_seconds']} | {r['total_seconds']} | {r['peak_rss_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
