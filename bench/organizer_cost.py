"""The organizer's cost per user turn on real conversations, one message at a time against a window of
turns per call, on the same turns and the same model (issue 37's goals: at most 0.2 organizer calls and
1.5 s of model time per user turn, with no loss in what the organizer finds).

For each LongMemEval record (``--data``: a folder of its records or its JSON list, read as
bench/conversations.py reads them; the dev data lives outside the repository; ``--limit`` takes
records in turn from each category) and each mode, a fresh ``:memory:`` store takes the record's
haystack and the organizer alone (no reader) organizes its user turns:

- ``per-message``: every user turn through ``remember`` (doxa before conversations: one organizer
  call per turn, no turn skipped);
- ``window``: the whole haystack through ``remember_conversation`` with ``--window`` user turns per
  call and the cheap check that skips turns with nothing to track.

Both modes give every turn the same message id (``turn_message_id``), so what the organizer found is
compared turn by turn (the user is a subject, ``me``, in both). A reply the organizer could not make
usable after its retry is counted in ``failures`` (per-message: that turn links nothing; window: the
rest of that record's windows are not organized). Reported per mode: organizer calls, prompt and completion tokens (the server's
``usage``) and seconds of model time, each per user turn; and what it found: of the turns LongMemEval
marks ``has_answer`` (the turns that hold the evidence), the share linked to at least one question
(a turn the cheap check skipped counts as not linked), and the questions created per record.

    scripts/llm_server.sh 8765      # LLM_CTX=4096 for windows of 8 turns
    python bench/organizer_cost.py --data PATH --url http://127.0.0.1:8765/v1 --limit 6 --window 8 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conversations  # noqa: E402  (bench/conversations.py: the records and their sessions, read one way)

MODES = ("per-message", "window")


def evidence_turns(record) -> set[str]:
    """Message ids of the user turns LongMemEval marks ``has_answer`` (``record``: bench/conversations.py's)."""
    from doxa.inference.agent.conversation import turn_message_id

    return {turn_message_id(t.session, t.index) for t in record.user_turns if t.has_answer}


def linked_turns(memory) -> dict[str, list[str]]:
    """Each remembered message's questions (what the organizer linked or created for it)."""
    return {m: list(q) for m, q in memory.store.execute("SELECT message, questions FROM remembered").fetchall()}


def run_mode(mode: str, record, organizer, window: int) -> dict[str, Any]:
    import doxa
    from doxa.inference.agent.conversation import USER_SOURCE, remember_conversation, turn_message_id
    from doxa.inference.agent.answer import USER_SUBJECT
    from doxa.inference.agent.remember import RememberError, remember

    sessions = conversations.conversation_sessions(record)
    calls0, prompt0, completion0 = organizer.requests, organizer.prompt_tokens, organizer.completion_tokens
    user_turns = sum(role == "user" for s in sessions for role, _ in s.turns)
    failures = 0
    with doxa.open(":memory:") as memory:
        started = time.perf_counter()
        if mode == "window":
            try:
                remember_conversation(memory, sessions, organizer=organizer, reader=None, window=window,
                                      use_env=False)
            except RememberError:
                failures += 1  # a window's reply was unusable twice: the windows before it are kept
        else:
            # the user as a subject, as remember_conversation adds it: the organizer may file turns under "me"
            memory.ingest([dict(USER_SUBJECT)])
            for s in sorted(sessions, key=lambda s: s.date):
                for i, (role, text) in enumerate(s.turns):
                    if role != "user":
                        continue
                    # the turn as remember_conversation keeps it: its id, source and time
                    try:
                        remember(memory, text, source=USER_SOURCE, sent_at=s.date + timedelta(seconds=i),
                                 organizer=organizer, reader=None, use_env=False,
                                 message_id=turn_message_id(s.id, i), reuse_decisions=False)
                    except RememberError:
                        failures += 1  # the organizer's reply was unusable twice: the turn links nothing
        seconds = time.perf_counter() - started
        links = linked_turns(memory)
        created = memory.store.execute("SELECT count(*) FROM questions").fetchone()[0]
    evidence = evidence_turns(record)
    return {"mode": mode, "record": record.id, "user_turns": user_turns,
            "calls": organizer.requests - calls0, "prompt_tokens": organizer.prompt_tokens - prompt0,
            "completion_tokens": organizer.completion_tokens - completion0, "seconds": seconds,
            "evidence_turns": len(evidence), "evidence_linked": sum(bool(links.get(m)) for m in evidence),
            "questions": int(created), "failures": failures}


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue
        turns = sum(r["user_turns"] for r in mine)
        evidence = sum(r["evidence_turns"] for r in mine)
        out.append({"mode": mode, "records": len(mine), "user_turns": turns,
                    "calls_per_turn": round(sum(r["calls"] for r in mine) / turns, 3),
                    "prompt_tokens_per_turn": round(sum(r["prompt_tokens"] for r in mine) / turns, 1),
                    "completion_tokens_per_turn": round(sum(r["completion_tokens"] for r in mine) / turns, 1),
                    "seconds_per_turn": round(sum(r["seconds"] for r in mine) / turns, 2),
                    "evidence_turns_linked": f"{sum(r['evidence_linked'] for r in mine)}/{evidence}",
                    "questions_per_record": round(sum(r["questions"] for r in mine) / len(mine), 1),
                    "failures": sum(r["failures"] for r in mine)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--url", required=True, help="the OpenAI-compatible server's base URL (…/v1)")
    parser.add_argument("--model", default=None)
    parser.add_argument("--limit", type=int, default=None, help="at most this many records")
    parser.add_argument("--window", type=int, default=8, help="user turns per organizer call in window mode")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from doxa.inference.agent.organizer_client import OpenAIChatOrganizer

    organizer = OpenAIChatOrganizer(url=args.url, model=args.model)
    rows = []
    modes = [m for m in args.modes.split(",") if m]
    for record in conversations.spread(conversations.load_records(args.data), args.limit):
        for mode in modes:
            rows.append(run_mode(mode, record, organizer, args.window))
            if not args.json:
                print(json.dumps(rows[-1]), file=sys.stderr)
    result = {"model": organizer.name, "window": args.window, "summary": summary(rows), "rows": rows}
    if args.json:
        print(json.dumps(result))
    else:
        for line in result["summary"]:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
