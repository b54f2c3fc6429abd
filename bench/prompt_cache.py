"""Does the model server reuse a prompt head after another prompt came between? Seconds per call.

Sends two long system prompts in turn (A, B, A, B), each with a short user turn of its own, to an
OpenAI-compatible server, and prints each call's prompt tokens and seconds. A server that keeps
only its last prompt's state (llama-cpp-python's default) reads each head again; one with a
prompt cache (``LLM_PROMPT_CACHE=1 scripts/llm_server.sh``) answers the repeats from it.
Figures: docs/measurements/2026-12-conversations.md ("The server's prompt cache").

    python bench/prompt_cache.py --url http://127.0.0.1:8765/v1 [--model reader] [--rules 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request


def call(url: str, model: str, system: str, user: str) -> tuple[float, int]:
    body = {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 8, "temperature": 0}
    request = urllib.request.Request(url.rstrip("/") + "/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.load(reply)
    return time.perf_counter() - started, int(answer["usage"]["prompt_tokens"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the server's base URL (…/v1)")
    parser.add_argument("--model", default="reader")
    parser.add_argument("--rules", type=int, default=60, help="sentences in each system prompt (60: about 800 tokens)")
    parser.add_argument("--json", action="store_true", help="print the calls as one JSON list")
    args = parser.parse_args(argv)
    calls = []
    heads = {"A": " ".join(f"rule {i}: keep the questions short and the subjects plain." for i in range(args.rules)),
             "B": " ".join(f"note {i}: a reader says what a message states." for i in range(args.rules))}
    for label, user in (("A", "first turn"), ("B", "second"), ("A", "third turn here"), ("B", "fourth")):
        seconds, tokens = call(args.url, args.model, heads[label], user)
        calls.append({"prompt": label, "prompt_tokens": tokens, "seconds": round(seconds, 2)})
        if not args.json:
            print(f"{label}: {tokens} prompt tokens, {seconds:.1f} s")
    if args.json:
        print(json.dumps(calls))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
