"""How well the fit recovers change rates and reader temperatures, over several generated worlds.

For each seed: generate the world (the `quick` preset unless ``--world``), ingest it,
fit with the default settings, and print one row per kind with at least
``--min-changes`` changes in the truth: the changes, the readings, the true and
fitted half-lives and their ratio, whether the 90% interval holds the truth, and
``sd*``, the standard deviation of ``log λ`` that an ideal observer would reach if
every informative observation were exact (a lower bound on what any fit can do; see
:func:`doxa.inference.evaluation.information.rate_information`). Then each reader's true and
fitted temperature. Ends with how many (kind, seed) pairs are within ×1.5, split by
whether ``sd*`` allows it.

    python bench/rate_recovery.py [--seeds 7,8,9] [--scale 2.6] [--rate gift_budget=0.03] [--world FILE]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

def world_config(base, seed: int, rates: dict[str, float], scale: float | None = None, people: int | None = None):
    from doxa.inference.evaluation.world_config import WorldConfig

    config = base.model_dump(mode="json")
    config["seed"] = seed
    if people is not None:
        config["people"]["count"] = people
    if scale is not None:
        config["message_rate_scale"] = scale
    for kind in config["kinds"]:
        if kind["name"] in rates:
            kind["message_rate"] = rates[kind["name"]]
    return WorldConfig.from_dict(config)


def run_seed(config, min_changes: int) -> tuple[list[dict], list[dict]]:
    from doxa.data.store import Store
    from doxa.inference.evaluation.information import rate_information
    from doxa.inference.evaluation.world import generate_world
    from doxa.inference.learn.fit import BeliefFit

    world = generate_world(config)
    store = Store.memory()
    store.ingest_records(world.records)
    evidence = store.load_evidence()
    started = time.perf_counter()
    fit = BeliefFit(progress=False, n_draws=100).fit(evidence)
    seconds = time.perf_counter() - started
    doc = fit.params_document()
    truth = world.truth
    kinds = evidence.questions.kinds
    print(f"\nseed {config.seed}: {evidence.n_readings} readings, fit {seconds:.0f} s, {fit.steps_} steps, "
          f"converged {fit.converged_}")
    print(f"{'kind':18s} {'changes':>7s} {'readings':>8s} {'true hl':>8s} {'fit hl':>8s} {'ratio':>6s} "
          f"{'in 90%':>6s} {'sd*':>6s}")
    rows = []
    for kind, lam in truth.change_rate.items():
        changes = sum(len(truth.timeline(q)) - 1 for q, info in truth.questions.items() if info["kind"] == kind)
        if changes < min_changes:
            continue
        members = np.flatnonzero(kinds == kind)
        true_hl = math.log(2) / lam
        fitted = doc["kinds"][kind]["half_life_days"]
        lo, hi = doc["kinds"][kind]["change_rate_interval"]
        sd = 1 / math.sqrt(max(rate_information(evidence, members, lam, truth.prior[kind]), 1e-12))
        row = {"seed": config.seed, "kind": kind, "changes": changes, "readings": int(np.isin(evidence.q, members).sum()),
               "true": true_hl, "fitted": fitted, "ratio": fitted / true_hl, "covered": lo <= lam <= hi, "sd": sd}
        rows.append(row)
        print(f"{kind:18s} {changes:7d} {row['readings']:8d} {true_hl:8.1f} {fitted:8.1f} {row['ratio']:6.2f} "
              f"{'yes' if row['covered'] else 'no':>6s} {sd:6.3f}")
    readers = []
    for reader, tau in truth.reader_temperature.items():
        entry = doc["readers"][reader]
        readers.append({"seed": config.seed, "reader": reader, "ratio": entry["temperature"] / tau,
                        "covered": entry["lo"] <= tau <= entry["hi"]})
        print(f"reader {reader}: temperature {entry['temperature']:.2f} (90% {entry['lo']:.2f}–{entry['hi']:.2f}), "
              f"truth {tau:.2f}, ×{entry['temperature'] / tau:.2f}")
    return rows, readers


def main(argv: list[str] | None = None) -> int:
    from doxa.inference.evaluation.world_config import WorldConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="7,8,9", help="comma-separated world seeds")
    parser.add_argument("--world", default="quick", help="a preset name or a world JSON file")
    parser.add_argument("--rate", action="append", default=[], metavar="KIND=RATE",
                        help="override a kind's messages per question per day (repeatable)")
    parser.add_argument("--scale", type=float, default=None, help="override message_rate_scale (the world's: 1.3)")
    parser.add_argument("--people", type=int, default=None, help="override the number of people (quick: 80)")
    parser.add_argument("--min-changes", type=int, default=50)
    args = parser.parse_args(argv)
    rates = {}
    for item in args.rate:
        kind, _, value = item.partition("=")
        try:
            rates[kind] = float(value)
        except ValueError:
            parser.error(f"--rate {item!r}: expected KIND=RATE, e.g. gift_budget=0.03")
    base = WorldConfig.load(args.world) if args.world.endswith(".json") else WorldConfig.preset(args.world)
    rows, readers = [], []
    for seed in (int(s) for s in args.seeds.split(",")):
        kind_rows, reader_rows = run_seed(world_config(base, seed, rates, args.scale, args.people), args.min_changes)
        rows += kind_rows
        readers += reader_rows
    within = [abs(math.log(r["ratio"])) <= math.log(1.5) for r in rows]
    from doxa.inference.evaluation.information import PINNED_SDS

    pinned = [r["sd"] <= math.log(1.5) / PINNED_SDS for r in rows]
    print(f"\nkinds with ≥ {args.min_changes} changes: {sum(within)}/{len(rows)} within ×1.5, "
          f"{sum(r['covered'] for r in rows)}/{len(rows)} with the truth in the 90% interval")
    for label, flag in (("pinned by the data (sd* ≤ log 1.5 / 2.5)", True), ("not pinned", False)):
        group = [w for w, p in zip(within, pinned) if p == flag]
        print(f"  {label}: {sum(group)}/{len(group)} within ×1.5")
    close = sum(abs(r["ratio"] - 1) <= 0.2 for r in readers)
    print(f"reader temperatures: {close}/{len(readers)} within 20%, "
          f"{sum(r['covered'] for r in readers)}/{len(readers)} with the truth in the 90% interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
