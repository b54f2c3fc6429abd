"""Measure doxa's current reader prompt against the proposed one on hand-written cases.

    python prompt_study.py --url http://127.0.0.1:8765/v1 [--prompts current,proposed,gate,first]
                           [--kinds other_person,unrelated] [--out results.json]

For each case (reader_cases.json: message, subject, question, options, correct answer —
an option, "unclear" or "unrelated" — and whether it is a one-off) each reader reads it
once, with as many calls as that reader makes for one reading. Reported per prompt and
per case kind: accuracy of the top answer over options + unclear + unrelated, mean
probability on the correct answer, one-off accuracy (one_off > 0.5 vs the case's flag),
and seconds per reading.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from doxa.inference.agent.readers import OpenAIChatReader  # noqa: E402
from reader_prompt import ProposedReader  # noqa: E402
from gate_prompt import GateReader  # noqa: E402
from first_prompt import FirstReader  # noqa: E402


def make_reader(kind: str, url: str):
    cls = {"current": OpenAIChatReader, "proposed": ProposedReader, "gate": GateReader, "first": FirstReader}[kind]
    return cls(url=url, model="reader", timeout_s=120, retries=1)


def run(prompts: list[str], url: str, cases: list[dict]) -> list[dict]:
    rows = []
    for prompt in prompts:
        reader = make_reader(prompt, url)
        for case in cases:
            start = time.perf_counter()
            r = reader.read(case["message"], case["question"], case["options"], subject=case["subject"])
            seconds = time.perf_counter() - start
            dist = {**r.probs, "unclear": r.unclear, "unrelated": r.unrelated}
            top = max(dist, key=dist.__getitem__)
            rows.append({"prompt": prompt, "id": case["id"], "kind": case["kind"], "answer": case["answer"],
                         "top": top, "p_top": dist[top], "p_correct": dist[case["answer"]],
                         "one_off": r.one_off, "one_off_expected": case["one_off"],
                         "seconds_per_reading": seconds, "dist": dist})
            print(f"{prompt:8} #{case['id']:2} {case['kind']:12} want {case['answer']:12} got {top:12} "
                  f"p={dist[case['answer']]:.2f} one_off={r.one_off:.2f} {seconds:.1f}s/reading",
                  file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["prompt"], row["kind"])].append(row)
        groups[(row["prompt"], "ALL")].append(row)
    kinds = sorted({k for _, k in groups if k != "ALL"}) + ["ALL"]
    out = ["| prompt | cases | n | accuracy | mean p(correct) | one-off acc | s/reading |", "|---|---|---|---|---|---|---|"]
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        for kind in kinds:
            g = groups.get((prompt, kind))
            if not g:
                continue
            acc = sum(r["top"] == r["answer"] for r in g) / len(g)
            p = sum(r["p_correct"] for r in g) / len(g)
            oo = sum((r["one_off"] > 0.5) == r["one_off_expected"] for r in g) / len(g)
            s = sum(r["seconds_per_reading"] for r in g) / len(g)
            out.append(f"| {prompt} | {kind} | {len(g)} | {acc:.2f} | {p:.2f} | {oo:.2f} | {s:.1f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8765/v1")
    parser.add_argument("--prompts", default="current,proposed")
    parser.add_argument("--cases", default=str(HERE / "reader_cases.json"))
    parser.add_argument("--out", default=str(HERE / "prompt_study_results.json"))
    parser.add_argument("--kinds", default="", help="only these case kinds, comma-separated (default all)")
    args = parser.parse_args()
    cases = json.loads(Path(args.cases).read_text())
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    if kinds:
        unknown = kinds - {c["kind"] for c in cases}
        if unknown:
            parser.error(f"no cases of kind {sorted(unknown)}; kinds here: {sorted({c['kind'] for c in cases})}")
        cases = [c for c in cases if c["kind"] in kinds]
    rows = run([p.strip() for p in args.prompts.split(",") if p.strip()], args.url, cases)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
