#!/usr/bin/env bash
# Set up a virtual environment in .venv with the CPU build of torch first
# (a plain `torch` requirement would otherwise pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # torch 2.13.0 CPU: on this project's machines pip finds it on local disk; elsewhere
  # add: --index-url https://download.pytorch.org/whl/cpu
  .venv/bin/pip install -q "torch==2.13.0" ${DOXA_TORCH_INDEX:+--index-url "$DOXA_TORCH_INDEX"}
fi
.venv/bin/pip install -q -e ".[test]"
