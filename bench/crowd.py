"""doxa on real crowd-labelled data (Bluebirds, RTE, TEMP, Adult): learned trust against known truth.

Protocol (the data folder's README.md): each item is a question, each worker a source
(layers ``crowd/<set>``, leaf = worker), each label a message read with certainty
(texts unique per label, so none is deduplicated as a copy). The gold answers of a
random 20% of items are revealed as settlements; ``doxa train`` runs on the store
(fit, held-out calibration, publish); the other 80% are scored with doxa's scorer
and compared with majority vote and Dawid–Skene (crowd-kit, unsupervised on all
labels). Accuracy, log-loss (nats) and ECE (15 equal-mass bins) on the 80%, mean ±
standard deviation over seeds. Prints a Markdown table.

    python bench/crowd.py [--data DIR] [--seeds 5] [--sets bluebirds,rte,temp,adult] [--json out.json]

The data are not part of the repository: ``--data`` (or ``$DOXA_CROWD_DATA``) names the folder,
laid out as its README says
(``bluebirds/``, ``snow2008/<set>.standardized.tsv``, ``adult/``).

Adult is sparse (gold for 333 of 11,040 items): every item is a question, 20% of the gold
items are revealed and the other 80% of them scored.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

SENT_AT = "2026-01-05T12:00:00Z"


def crowd_data(path: str | Path | None = None) -> Path:
    """The crowd data folder: ``path``, else ``$DOXA_CROWD_DATA``. Raises ``FileNotFoundError`` saying how
    to point at it."""
    import os

    chosen = path or os.environ.get("DOXA_CROWD_DATA")
    if not chosen or not Path(chosen).is_dir():
        where = f"no crowd data at {chosen}" if chosen else "no crowd data folder given"
        raise FileNotFoundError(f"{where}: pass --data DIR (or set DOXA_CROWD_DATA) to the folder holding "
                                "bluebirds/, snow2008/ and adult/")
    return Path(chosen)


def load_set(name: str, data: str | Path | None = None) -> tuple[list[tuple[str, str, str]], dict[str, str], list[str]]:
    """(worker, item, label) triples, gold labels, and the label set, as strings."""
    folder = crowd_data(data)
    if name == "bluebirds":
        import yaml

        labels = yaml.safe_load((folder / "bluebirds" / "labels.yaml").read_text())
        gold = yaml.safe_load((folder / "bluebirds" / "gt.yaml").read_text())
        word = {True: "yes", False: "no"}
        triples = [(str(w), str(i), word[bool(v)]) for w, items in labels.items() for i, v in items.items()]
        return triples, {str(i): word[bool(v)] for i, v in gold.items()}, ["yes", "no"]
    if name == "adult":  # sparse: gold for 333 of 11,040 items; the other items are questions all the same
        import csv

        with open(folder / "adult" / "labels.csv", newline="") as f:
            triples = [(r["worker"], r["item"], r["label"]) for r in csv.DictReader(f)]
        with open(folder / "adult" / "truth.csv", newline="") as f:
            gold = {r["item"]: r["truth"] for r in csv.DictReader(f)}
        return triples, gold, sorted({t[2] for t in triples} | set(gold.values()))
    path = folder / "snow2008" / f"{name}.standardized.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines()[1:] if line.strip()]
    triples = [(r[1], r[2], r[3].strip()) for r in rows]
    gold = {r[2]: r[4].strip() for r in rows}
    return triples, gold, sorted({r[3].strip() for r in rows} | set(gold.values()))


def records(name: str, triples, gold, options, revealed: set[str]) -> list[dict]:
    out: list[dict] = [{"type": "subject", "id": name, "name": name}]
    workers = sorted({w for w, _, _ in triples})
    out += [{"type": "source", "id": f"{name}-{w}", "layers": ["crowd", name]} for w in workers]
    items = sorted({i for _, i, _ in triples} | set(gold))
    out += [{"type": "question", "id": f"{name}.{i}", "subject": name, "kind": name, "text": f"{name} item {i}",
             "shape": "choice", "options": options} for i in items]
    for n, (w, i, label) in enumerate(triples):
        mid = f"{name}-m{n}"
        out.append({"type": "message", "id": mid, "source": f"{name}-{w}", "sent_at": SENT_AT,
                    "text": f"worker {w} says item {i}: {label} (label {n})"})
        out.append({"type": "reading", "message": mid, "question": f"{name}.{i}", "reader": "label",
                    "probs": {o: float(o == label) for o in options}, "unclear": 0.0, "unrelated": 0.0,
                    "one_off": 0.0})
    out += [{"type": "settlement", "question": f"{name}.{i}", "answer": gold[i], "at": SENT_AT, "how": "outcome"}
            for i in sorted(revealed)]
    return out


def scores(probs: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    from doxa.inference.learn.metrics import accuracy, expected_calibration_error, log_loss, top_answer

    return {"accuracy": accuracy(probs, truth), "log_loss": log_loss(probs, truth),
            "ece": expected_calibration_error(*top_answer(probs, truth))}


def ece_noise_floor(probs: np.ndarray, draws: int = 200, seed: int = 0) -> float:
    """Mean ECE of a perfectly calibrated predictor with these very beliefs (answers drawn from
    them): on a few dozen items, binning noise alone gives this much."""
    from doxa.inference.learn.metrics import expected_calibration_error, top_answer

    rng = np.random.default_rng(seed)
    cum = probs.cumsum(1)
    values = [expected_calibration_error(*top_answer(probs, (rng.random((len(probs), 1)) > cum).sum(1)
                                                     .clip(max=probs.shape[1] - 1)))
              for _ in range(draws)]
    return float(np.mean(values))


def baselines(triples, options, items, truth) -> tuple[dict[str, dict[str, float]], np.ndarray]:
    import pandas as pd
    from crowdkit.aggregation import DawidSkene

    df = pd.DataFrame(triples, columns=["worker", "task", "label"])
    counts = pd.crosstab(df["task"], df["label"]).reindex(index=items, columns=options, fill_value=0).to_numpy(float)
    mv = counts / counts.sum(1, keepdims=True)
    ds = DawidSkene(n_iter=100).fit_predict_proba(df).reindex(index=items, columns=options).fillna(0.0).to_numpy()
    return {"majority vote": scores(mv, truth), "Dawid–Skene": scores(ds, truth)}, ds


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test: items one method gets right and the other wrong, split
    ``only_a`` / ``only_b``; under "equally accurate" each discordant item is a fair coin."""
    n, low = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def run_one(name: str, seed: int, fit_options: dict, data: str | Path | None = None) -> dict:
    from doxa.data.store import Store
    from doxa.inference.read import scorer
    from doxa.inference.learn.calibrate import apply_calibration
    from doxa.inference.learn.train import train

    triples, gold, options = load_set(name, data)
    items = sorted(gold)
    rng = np.random.default_rng(seed)
    revealed = set(rng.choice(items, size=int(round(0.2 * len(items))), replace=False).tolist())
    hidden = [i for i in items if i not in revealed]
    store = Store.memory()
    store.ingest_records(records(name, triples, gold, options, revealed))
    started = time.perf_counter()
    result = train(store, fit_options={**fit_options, "seed": seed}, seed=seed, progress=False,
                   calibration_options={"allow_floor": True})
    seconds = time.perf_counter() - started
    evidence = store.load_evidence()
    document = store.latest_params()[1]
    beliefs = scorer.score(evidence, document, calibrate=False)
    calibrated = apply_calibration(document["calibration"], beliefs.raw)  # the scorer's map (+ floor)
    index = evidence.questions.index()
    rows = np.asarray([index[f"{name}.{i}"] for i in hidden])
    truth = np.asarray([options.index(gold[i]) for i in hidden])
    held = calibrated[rows][:, : len(options)]
    out = {"doxa": scores(held, truth),
           "doxa (no map)": scores(beliefs.raw[rows][:, : len(options)], truth)}
    baseline_scores, ds_probs = baselines(triples, options, hidden, truth)
    out.update(baseline_scores)
    doxa_right, ds_right = held.argmax(1) == truth, ds_probs.argmax(1) == truth
    diag = result.document["diagnostics"]
    out["_info"] = {"ece_floor": ece_noise_floor(held / held.sum(1, keepdims=True)), "seconds": seconds, "steps": diag["steps"], "confusion": diag["confusion"],
                    "calibration": result.document["calibration"]["method"], "bias_z": (diag.get("bias_check") or {}).get("z"),
                    "only_doxa_right": int((doxa_right & ~ds_right).sum()), "only_ds_right": int((ds_right & ~doxa_right).sum()),
                    "predictions": len(hidden)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="the crowd data folder (default $DOXA_CROWD_DATA)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sets", default="bluebirds,rte,temp", help="comma-separated: bluebirds, rte, temp, adult")
    parser.add_argument("--confusion", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--json", default=None, help="also write every run's numbers here")
    args = parser.parse_args(argv)
    try:
        crowd_data(args.data)
    except FileNotFoundError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    fit_options = {"confusion": args.confusion}
    results: dict[str, list[dict]] = {}
    for name in args.sets.split(","):
        for seed in range(args.seeds):
            run = run_one(name, seed, fit_options, args.data)
            results.setdefault(name, []).append(run)
            info = run["_info"]
            print(f"{name} seed {seed}: doxa acc {run['doxa']['accuracy']:.3f} ll {run['doxa']['log_loss']:.3f} "
                  f"ece {run['doxa']['ece']:.3f} | DS acc {run['Dawid–Skene']['accuracy']:.3f} "
                  f"ll {run['Dawid–Skene']['log_loss']:.3f} ece {run['Dawid–Skene']['ece']:.3f} | "
                  f"{info['seconds']:.0f}s {info['steps']} steps confusion={info['confusion']} "
                  f"map={info['calibration']} bias_z={info['bias_z']}", file=sys.stderr, flush=True)
    print(markdown(results, args.seeds))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def markdown(results: dict[str, list[dict]], n_seeds: int) -> str:
    lines = [f"Held-out 80% of items, 20% gold revealed, {n_seeds} seeds (mean ± sd).", "",
             "| set | method | accuracy | log-loss | ECE |", "|---|---|---|---|---|"]
    for name, runs in results.items():
        for method in ("doxa", "doxa (no map)", "Dawid–Skene", "majority vote"):
            cells = []
            for metric in ("accuracy", "log_loss", "ece"):
                vals = np.asarray([r[method][metric] for r in runs], dtype=float)
                cells.append(f"{vals.mean():.3f} ± {vals.std():.3f}" if np.all(np.isfinite(vals))
                             else f"{np.nanmean(vals):.3f} (∞ in {int((~np.isfinite(vals)).sum())})")
            lines.append(f"| {name} | {method} | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy, item by item (McNemar, all seeds pooled): items only doxa gets right / only "
                  "Dawid–Skene gets right, and the exact two-sided p of that split if both were equally accurate."]
    for name, runs in results.items():
        a = sum(r["_info"]["only_doxa_right"] for r in runs)
        b = sum(r["_info"]["only_ds_right"] for r in runs)
        n_pred = sum(r["_info"]["predictions"] for r in runs)
        lines.append(f"- {name}: {a} / {b} of {n_pred} predictions, p = {mcnemar_p(a, b):.2f}")
    seconds = [r["_info"]["seconds"] for runs in results.values() for r in runs]
    floors = ", ".join(f"{name} {np.mean([r['_info']['ece_floor'] for r in runs]):.3f}"
                       for name, runs in results.items())
    lines += ["", f"ECE a perfectly calibrated predictor with doxa's confidences would show, from binning noise "
                  f"alone (answers drawn from the beliefs): {floors}.",
              f"`doxa train` per run: {np.mean(seconds):.0f} s mean (fit, 3 held-out refits, calibration)."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["load_set", "records", "run_one", "mcnemar_p", "main"]
