#!/usr/bin/env bash
# Start llama-cpp-python's OpenAI-compatible server on loopback with the model that
# scripts/setup_llm.sh prepared, and wait until it answers.
#
# Usage: scripts/llm_server.sh [PORT]        (default 8765)
#   Environment: DOXA_LLM_CACHE (default ~/.cache/doxa-llm), LLM_THREADS (default 2),
#   LLM_CTX (default 2048), LLM_NICE (default 10: the machine is shared),
#   LLM_WAIT_S (default 300: how long to wait for the first answer),
#   LLM_PROMPT_CACHE (default 0: llama-cpp-python keeps only the last prompt's state; 1 keeps
#   the states of recent prompts in memory, so a fixed prompt head shared by calls that
#   alternate — organizer, reader, answer — is read once, not once per call: 15 s → 2 s for an
#   800-token head; but each call then saves its state, logits included, which cost 3–11 s a
#   call in a run of the organizer alone: docs/measurements/2026-12-conversations.md),
#   LLM_PROMPT_CACHE_MB (default 60: the cache's budget as llama-cpp-python counts it, the
#   attention state alone, about 28 kB a token here; with --logits_all each kept prompt also
#   holds the logits of the whole context, n_ctx × 151,936 floats = 2.5 GB at 4096, which it
#   does not count: 60 keeps two to four prompts, at most about 10 GB, where its own default of
#   2 GB filled 23 GB and was killed for memory).
# Leaves the server running in the background; prints its pid and how to stop it.
# Its log goes to $CACHE/logs/server-PORT.log, its pid to $CACHE/server-PORT.pid.
set -euo pipefail

PORT="${1:-8765}"
CACHE="${DOXA_LLM_CACHE:-$HOME/.cache/doxa-llm}"
VPY="$CACHE/venv/bin/python"
MODEL_FILE="$CACHE/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
LOG="$CACHE/logs/server-$PORT.log"
PIDFILE="$CACHE/server-$PORT.pid"
WAIT_S="${LLM_WAIT_S:-300}"
URL="http://127.0.0.1:$PORT/v1"

die() { printf 'llm_server: %s\n' "$*" >&2; exit 1; }

case "$PORT" in ''|*[!0-9]*) die "port must be a number, got '$PORT'";; esac
[ -x "$VPY" ] || die "no venv at $CACHE/venv: run scripts/setup_llm.sh first"
[ -f "$MODEL_FILE" ] || die "no model at $MODEL_FILE: run scripts/setup_llm.sh first"

answers() { "$VPY" -c "import urllib.request,sys; urllib.request.urlopen('$URL/models', timeout=2)" 2>/dev/null; }

if answers; then
    echo "llm_server: something already answers at $URL (pid file: $PIDFILE); not starting another"
    exit 0
fi

mkdir -p "$(dirname "$LOG")"
# --logits_all True: /v1/completions only returns logprobs with it
CACHE_ARGS=()
[ "${LLM_PROMPT_CACHE:-0}" = 1 ] && CACHE_ARGS=(--cache True --cache_type ram
                                          --cache_size $(( ${LLM_PROMPT_CACHE_MB:-60} * 1000000 )))
nice -n "${LLM_NICE:-10}" "$VPY" -m llama_cpp.server \
    --model "$MODEL_FILE" --host 127.0.0.1 --port "$PORT" \
    --n_threads "${LLM_THREADS:-2}" --n_ctx "${LLM_CTX:-2048}" \
    --logits_all True "${CACHE_ARGS[@]}" --model_alias reader >"$LOG" 2>&1 &
PID=$!
echo "$PID" >"$PIDFILE"
echo "llm_server: started pid $PID on $URL (log: $LOG); waiting for it to answer (up to ${WAIT_S} s)"

start=$(date +%s)
until answers; do
    if ! kill -0 "$PID" 2>/dev/null; then
        tail -n 20 "$LOG" >&2
        rm -f "$PIDFILE"
        die "the server exited before answering (log: $LOG)"
    fi
    if [ $(( $(date +%s) - start )) -ge "$WAIT_S" ]; then
        kill "$PID" 2>/dev/null || true
        rm -f "$PIDFILE"
        die "no answer from $URL within $WAIT_S s; stopped it (log: $LOG). A busy machine loads slowly: raise LLM_WAIT_S"
    fi
    sleep 2
done
echo "llm_server: answering at $URL after $(( $(date +%s) - start )) s"
echo "  export DOXA_READER_URL=$URL DOXA_READER_MODEL=reader"
echo "  stop it with: kill \$(cat $PIDFILE)"
