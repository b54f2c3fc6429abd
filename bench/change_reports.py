"""How well a model tells a reported change from a plain statement: the reader's change question on LongMemEval.

The open reader asks a reading that states an answer whether the message says the answer
changed (docs/readers.md; docs/design.md §2, reported changes). On LongMemEval's
knowledge-update questions the later evidence turn states the updated value — a change by
construction — and the earlier one the first value; a single-session question's evidence turn
states a fact once. For each, the question is asked of the turn as the reader asks it, and the
probability of "yes, it changed" is kept. Printed: its mean on the later turns and on the others,
the AUC of telling them apart (the probability that a later turn gets the higher number), and
the model's calls and seconds.

``--wording cues`` asks a second wording instead, one that names the words that mark a change;
``--category`` keeps the records of one LongMemEval category (before ``--limit``).

    python bench/change_reports.py --data PATH --url URL [--model M] [--category C] [--limit N]
        [--wording present|cues] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conversations as bench  # noqa: E402 - the benchmark's records


def cases(records: list[bench.Record]) -> list[tuple[bench.Record, bench.Turn, bool]]:
    """(record, turn, whether it is a later evidence turn of a knowledge update) for every answerable
    record: a knowledge update's first and last evidence turns, a single-session question's first."""
    out = []
    for record in records:
        if record.abstain:
            continue
        evidence = sorted((t for t in record.user_turns if t.has_answer), key=lambda t: t.at)
        if not evidence:
            continue
        if record.category == "knowledge-update" and len(evidence) > 1 and evidence[-1].at > evidence[0].at:
            out += [(record, evidence[0], False), (record, evidence[-1], True)]
        else:
            out.append((record, evidence[0], False))
    return out


def cues_text(message_text: str, question_text: str) -> str:
    """The second wording: the change question with the words that mark a change named."""
    from doxa.inference.agent import reader_prompts as rp

    return "\n".join([
        f"Message: {rp._quoted(message_text)}", f"Topic: {rp._one_line(question_text)}",
        "Does the message say that something is different now than it was before? Look for words such as: now, "
        "new, no longer, not anymore, switched, changed, moved, upgraded, went up, increased, started, stopped, "
        "finally.",
        "A. Yes, it says it is different now", "B. No, it just says how things are", "Answer:"])


def cues_messages(message_text: str, question_text: str, subject: str | None) -> list[dict[str, str]]:
    from doxa.inference.agent import reader_prompts as rp

    examples = (
        (cues_text("Ines left Acme in May, she works for Globex now.", "Where does Ines work?"), "A"),
        (cues_text("I've been doing yoga twice a week for a couple of years.", "How often do I do yoga?"), "B"),
        (cues_text("We finally got a second car, so there are two in the driveway now.", "How many cars do we have?"),
         "A"),
        (cues_text("Maya runs five kilometres before work every morning.", "How far does Maya run?"), "B"),
    )
    return rp._conversation(rp.ONE_OFF_SYSTEM_PROMPT, examples, cues_text(message_text, question_text))


def auc(positive: list[float], negative: list[float]) -> float | None:
    """P(a positive scores above a negative), ties counted half (the Mann–Whitney form)."""
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="a folder of LongMemEval records, or its single JSON list")
    parser.add_argument("--url", required=True, help="an OpenAI-compatible base URL (scripts/llm_server.sh)")
    parser.add_argument("--model", default="reader")
    parser.add_argument("--limit", type=int, default=None, help="at most this many records")
    parser.add_argument("--category", default=None, help="only the records of this LongMemEval question_type")
    parser.add_argument("--wording", choices=("present", "cues"), default="present",
                        help="the reader's change question (present) or the second wording that names the cues")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from doxa.inference.agent.openai_reader import OpenAIChatReader
    from doxa.inference.agent.reader_prompts import change_messages

    reader = OpenAIChatReader(url=args.url, model=args.model, timeout_s=args.timeout)
    records = [r for r in bench.load_records(args.data) if args.category in (None, r.category)][: args.limit]
    ask = change_messages if args.wording == "present" else cues_messages
    rows, started = [], time.perf_counter()
    for record, turn, later in cases(records):
        p = reader._letters(reader._ask(ask(turn.content, record.question, "the user"), 1)[0], "AB")["A"]
        rows.append({"id": record.id, "category": record.category, "later": later, "p_changed": p})
        if not args.json:
            print(f"{record.id:<14} {record.category:<20} {'later' if later else 'first':<6} {p:.3f}", flush=True)
    seconds = time.perf_counter() - started
    later = [r["p_changed"] for r in rows if r["later"]]
    others = [r["p_changed"] for r in rows if not r["later"]]
    single = [r["p_changed"] for r in rows if r["category"] == "single-session-user"]
    first = [r["p_changed"] for r in rows if r["category"] == "knowledge-update" and not r["later"]]
    summary = {"model": args.model, "wording": args.wording, "turns": len(rows), "calls": reader.requests, "seconds": seconds,
               "mean_later": sum(later) / len(later) if later else None,
               "mean_first_update": sum(first) / len(first) if first else None,
               "mean_single_session": sum(single) / len(single) if single else None,
               "auc_later_vs_others": auc(later, others), "auc_later_vs_first": auc(later, first), "rows": rows}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"\n{len(rows)} turns, {reader.requests} calls, {seconds:.0f} s ({args.model})")
    for name in ("mean_later", "mean_first_update", "mean_single_session", "auc_later_vs_others",
                 "auc_later_vs_first"):
        value = summary[name]
        print(f"  {name:<22} {'–' if value is None else format(value, '.3f')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
