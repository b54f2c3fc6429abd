"""A long run of hostile input against the command line: counts of what went wrong, by class.

    python bench/hostile.py [--variants 2000] [--fast-share 0.1] [--seed 0] [--out DIR] [--json]

The generators are tests/hostile.py's, the ones the suite samples (tests/test_hostile.py);
here every one of them runs, round after round with fresh ids and new random draws, until
``--variants`` records have gone in. A tenth of them (``--fast-share``) ride in a file of
5,000 lines or more, so the columnar fast path decides them. The record variants run
in-process (typer's test runner); the command-line cases (bytes that are not UTF-8 in
argv, a strict locale on standard input, directories, symlink loops and foreign files as
``--db``) run as real processes. It prints one line a class:

- wrong accepts (the contract refuses it and it was stored, or the reverse),
- internal errors (a traceback or "internal error"),
- raw escapes (a control or bidi character reached the terminal),
- partial writes (a refused file changed the store, or a command changed a foreign file),

and every variant that went wrong, by name. Exit code 1 when any count is not zero.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import hostile  # noqa: E402  (tests/hostile.py, the generators)

CLASSES = ("wrong_accept", "internal_error", "raw_escape", "partial_write")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", type=int, default=2000, help="record variants to run (at least)")
    parser.add_argument("--fast-share", type=float, default=0.1, help="share of variants sent by the fast path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write results.json here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--skip-commands", action="store_true", help="record variants only")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="doxa-hostile-"))
    started = time.perf_counter()
    try:
        db = str(work / "hostile.duckdb")
        hostile.demo_store(db)
        pad = hostile.padding(db, work)
        counts: Counter = Counter()
        failures: list[dict] = []
        by_path = Counter()
        generator = hostile.Generator(seed=args.seed)
        n = 0
        round_ = 0
        while n < args.variants:
            variants = generator.all()
            for i, variant in enumerate(variants):
                if n >= args.variants:
                    break
                fast = generator.rng.random() < args.fast_share
                as_json = generator.rng.random() < 0.25
                outcome = hostile.run_variant(hostile.cli_runner_invoke, db, work, variant,
                                              pad=pad if fast else (), as_json=as_json)
                by_path["fast" if fast else "per-line"] += 1
                for name in outcome.problems:
                    counts[name] += 1
                if outcome.problems:
                    failures.append({"variant": variant.name, "fast": fast, "json": as_json, **outcome.problems})
                n += 1
                if not args.json and n % 100 == 0:
                    print(f"  {n} variants, {sum(counts.values())} problems, {time.perf_counter() - started:.0f} s",
                          file=sys.stderr)
            round_ += 1
        command_runs = 0
        if not args.skip_commands:
            doxa_command = [str(Path(sys.executable).with_name("doxa"))]
            for case in hostile.command_cases(work, db):
                problems = hostile.run_command_case(case, doxa_command)
                command_runs += 1
                for name in problems:
                    counts[name] += 1
                if problems:
                    failures.append({"variant": "argv:" + case.name, **problems})
        result = {"variants": n, "rounds": round_, "paths": dict(by_path), "command_cases": command_runs,
                  "counts": {name: counts[name] for name in CLASSES}, "failures": failures,
                  "seconds": round(time.perf_counter() - started, 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(f"{result['variants']} record variants ({by_path['per-line']} per-line, {by_path['fast']} fast path), "
              f"{command_runs} command lines, {result['seconds']} s")
        for name in CLASSES:
            print(f"  {name.replace('_', ' ')}s: {counts[name]}")
        for failure in failures[:40]:
            print("  ✗ " + json.dumps(failure, ensure_ascii=True)[:400])
        if len(failures) > 40:
            print(f"  … and {len(failures) - 40} more")
    return 1 if any(counts[name] for name in CLASSES) else 0


if __name__ == "__main__":
    raise SystemExit(main())
