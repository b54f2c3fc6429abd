"""What `doxa forget` costs as a store grows: the erasure itself and the rewrite of the store file.

Builds a store of ``--messages`` messages (ten sources, a question per hundred messages, one
reading per message, through the fast ingest path), then forgets ``--repeat`` messages one by
one as `doxa forget message ID` does, timing per forget: the plan and deletes (one
transaction), the rewrite of the file (``COPY FROM DATABASE`` into a fresh file and the
rename), and the whole verb. Printed beside them: the store file's size and a `doxa belief`
read on the same store, for scale; and a check that the forgotten texts are absent from every
file in the store's folder.

    python bench/erasure.py --messages 100000 --repeat 3 [--out DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build(path: Path, n_messages: int) -> None:
    import doxa

    n_questions = max(1, n_messages // 100)
    records = [{"type": "subject", "id": "p", "name": "P"}]
    records += [{"type": "source", "id": f"s{i}", "layers": ["person", "about-other", "chat"]} for i in range(10)]
    records += [{"type": "question", "id": f"q{j}", "subject": "p", "kind": "k", "text": f"Question {j}?",
                 "options": ["a", "b", "c"]} for j in range(n_questions)]
    for i in range(n_messages):
        records.append({"type": "message", "id": f"m{i}", "source": f"s{i % 10}",
                        "sent_at": f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}",
                        "text": f"message {i} says the answer to {i % n_questions} is a, mark{i}x"})
        records.append({"type": "reading", "message": f"m{i}", "question": f"q{i % n_questions}", "reader": "r",
                        "probs": {"a": 0.7, "b": 0.2, "c": 0.1}})
    lines = path.with_suffix(".jsonl")
    lines.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    with doxa.open(str(path)) as mem:
        mem.ingest_file(str(lines))
    lines.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="folder for the store (default: a temporary one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import doxa
    from doxa.data import erasure

    folder = args.out or Path(tempfile.mkdtemp(prefix="doxa-erasure-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "erasure.duckdb"
    for leftover in folder.glob("erasure.duckdb*"):
        leftover.unlink() if leftover.is_file() else None
    started = time.perf_counter()
    build(db, args.messages)
    built_s = time.perf_counter() - started

    # time the two halves of the verb where they run, and the verb as a whole
    halves: dict[str, list[float]] = {"erase": [], "rewrite": []}
    real_erase, real_rewrite = erasure.erase, erasure.rewrite

    def timed(name, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                halves[name].append(time.perf_counter() - t)
        return run

    erasure.erase, erasure.rewrite = timed("erase", real_erase), timed("rewrite", real_rewrite)
    whole, reads = [], []
    try:
        for k in range(args.repeat):
            target = f"m{(k * 7919) % args.messages}"
            with doxa.open(str(db)) as mem:
                t = time.perf_counter()
                mem.forget("message", target, reason="benchmark")
                whole.append(time.perf_counter() - t)
                t = time.perf_counter()
                mem.belief("q0")
                reads.append(time.perf_counter() - t)
    finally:
        erasure.erase, erasure.rewrite = real_erase, real_rewrite
    forgotten = [f"mark{(k * 7919) % args.messages}x".encode() for k in range(args.repeat)]
    holding = sorted(str(p.name) for p in folder.rglob("*") if p.is_file()
                     and any(m in p.read_bytes() for m in forgotten))
    result = {"messages": args.messages, "store_bytes": db.stat().st_size, "build_s": round(built_s, 2),
              "forgets": args.repeat,
              "erase_s_median": round(statistics.median(halves["erase"]), 3),
              "rewrite_s_median": round(statistics.median(halves["rewrite"]), 3),
              "forget_s_median": round(statistics.median(whole), 3),
              "belief_read_s_median": round(statistics.median(reads), 4),
              "files_still_holding_a_forgotten_text": holding}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:40s} {value}")
    return 1 if holding else 0


if __name__ == "__main__":
    sys.exit(main())
