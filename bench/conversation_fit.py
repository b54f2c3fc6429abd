"""What the nightly fit learns from LongMemEval's settled answers, and how well it predicts them.

The oracle reader's stores of ``bench/conversations.py`` (each evidence turn a value of an open
question of the user, read from the annotation) for every question of ``--data``, in one store,
each question settled with its gold answer at the time asked (``oracle_settlement``). The
nightly job fits it; printed: the fitted half-life, new-value weight and trust of the user's
chat, and the mean log-likelihood the read path gives the settled answers (the belief at the
time asked, before the settlement) under the fitted parameters and under the same parameters
with other half-lives (``--half-lives``), the calibration map left out of all of them. A fit
whose own half-life predicts the answers worse than another is learning from something else:
docs/measurements/2026-12-conversations.md.

With ``--grid THETAS``, also the log-probability of *all* the evidence (every reading and
settlement: what the fit maximises, its priors left out) under the fitted trust and each
pair of half-life (``--half-lives``) and new-value weight θ: where that surface peaks is
where any fit lands, whatever it starts from.

    python bench/conversation_fit.py --data PATH [--half-lives 1,30,300] [--grid 0.03,1,10] [--steps 300] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversations as bench  # noqa: E402 - the benchmark's own records and oracle stores


def settled_log_likelihood(records: list[bench.Record], params: dict[str, Any]) -> dict[str, float]:
    """Mean log P(settled answer) at the time asked, by category and over all, under ``params``."""
    import doxa

    by: dict[str, list[float]] = {}
    for record in records:
        kept, option, qid = bench.oracle_records(record)
        settled = bench.oracle_settlement(record, option, qid)
        if settled is None:
            continue
        memory = doxa.open(":memory:", log_reads=False)
        try:
            memory.ingest(kept)
            memory.store.publish_params(params)
            p = memory.belief(qid, record.asked_at).answers.get(settled["answer"], 0.0)
        finally:
            memory.close()
        by.setdefault(record.category, []).append(math.log(max(p, 1e-12)))
    out = {category: sum(v) / len(v) for category, v in sorted(by.items())}
    out["all"] = sum(sum(v) for v in by.values()) / max(sum(len(v) for v in by.values()), 1)
    return out


def oracle_evidence(records: list[bench.Record]):
    """The evidence of the oracle stores of ``records``, settled, in one store (as the fit sees it)."""
    import doxa

    kept = []
    for n, record in enumerate(records):
        records_n, option, qid = bench.oracle_records(record, tag=f"-{n}")
        settled = bench.oracle_settlement(record, option, qid)
        kept += records_n + ([settled] if settled else [])
    memory = doxa.open(":memory:", log_reads=False)
    try:
        memory.ingest(kept)
        return memory.store.load_evidence(None, None)
    finally:
        memory.close()


def evidence_log_probability(evidence, params: dict[str, Any]) -> float:
    """log P(every reading and settlement of ``evidence``) under ``params``: the forward filter's
    marginal likelihood, summed over the questions."""
    from doxa.inference.read import scorer

    inputs = scorer.model_inputs(evidence, params)
    q, t, like = scorer.events(evidence, inputs.likelihood)
    _, log_marginal, _ = scorer.forward_filter(inputs.prior, inputs.rate, q, t, like, float("inf"),
                                               scorer.event_change(evidence, inputs.change), inputs.event_prior)
    return float(log_marginal.sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a folder of LongMemEval records, or its single JSON list")
    parser.add_argument("--half-lives", default="1,30,300", help="days to compare the fitted half-life with")
    parser.add_argument("--steps", type=int, default=300, help="fitting steps (default 300)")
    parser.add_argument("--grid", default=None,
                        help="new-value weights θ: also the log-probability of all the evidence for each "
                             "(half-life, θ) under the fitted trust (comma-separated, e.g. 0.03,1,10)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    records = bench.load_records(args.data)
    learned = bench.OracleLearned(records)
    learned.FIT = {**learned.FIT, "max_steps": args.steps, "min_steps": min(150, args.steps)}
    learned.FOLDS = 0  # the calibration map is left out of every comparison below
    fitted = learned.fit(records)
    if fitted is None:
        parser.error("no question of --data has a settled answer to learn from")
    kind = fitted["kinds"]["asked"]
    fitted["calibration"] = {"method": "none"}
    rows = [{"half_life_days": kind["half_life_days"], "fitted": True,
             "log_likelihood": settled_log_likelihood(records, fitted)}]
    for days in (float(d) for d in args.half_lives.split(",") if d.strip()):
        other = copy.deepcopy(fitted)
        other["kinds"]["asked"].update(change_rate=math.log(2.0) / days, half_life_days=days)
        rows.append({"half_life_days": days, "fitted": False, "log_likelihood": settled_log_likelihood(records, other)})
    grid = []
    evidence = oracle_evidence(records) if args.grid else None  # built once for every point of the grid
    for theta in (float(x) for x in (args.grid or "").split(",") if x.strip()):
        for days in [kind["half_life_days"]] + [float(d) for d in args.half_lives.split(",") if d.strip()]:
            other = copy.deepcopy(fitted)
            other["kinds"]["asked"].update(change_rate=math.log(2.0) / days, half_life_days=days,
                                           new_value_weight=theta)
            grid.append({"half_life_days": days, "new_value_weight": theta,
                         "log_probability": evidence_log_probability(evidence, other)})
    result = {"questions": len(records), "half_life_days": kind["half_life_days"],
              "half_life_interval_days": [math.log(2.0) / r for r in kind["change_rate_interval"][::-1]],
              "new_value_weight": kind["new_value_weight"],
              "trust_person_self_chat": fitted["trust"]["person/self/chat"]["mean"], "rows": rows, "grid": grid}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{len(records)} questions; fitted half-life {result['half_life_days']:.2f} days "
          f"(90%: {result['half_life_interval_days'][0]:.2f}–{result['half_life_interval_days'][1]:.1f}), "
          f"new-value weight {result['new_value_weight']:.3f}, trust of person/self/chat "
          f"{result['trust_person_self_chat']:.3f}")
    categories = [c for c in rows[0]["log_likelihood"] if c != "all"] + ["all"]
    print(f"{'half-life (days)':>18s} " + " ".join(f"{c:>20s}" for c in categories))
    for row in rows:
        label = f"{row['half_life_days']:.2f}" + (" fitted" if row["fitted"] else "")
        print(f"{label:>18s} " + " ".join(f"{row['log_likelihood'][c]:20.3f}" for c in categories))
    if grid:
        thetas = sorted({g["new_value_weight"] for g in grid})
        days = list(dict.fromkeys(g["half_life_days"] for g in grid))
        value = {(g["half_life_days"], g["new_value_weight"]): g["log_probability"] for g in grid}
        print("\nlog P(all readings and settlements) under the fitted trust, by half-life (rows) and θ (columns)")
        print(f"{'half-life (days)':>18s} " + " ".join(f"{'θ ' + format(th, 'g'):>12s}" for th in thetas))
        for d in days:
            print(f"{d:18.2f} " + " ".join(f"{value[(d, th)]:12.1f}" for th in thetas))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
