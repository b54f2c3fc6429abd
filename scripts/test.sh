#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. pytest's exit code 5 ("no tests
# collected") is a failure here, never a silent pass.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# one worker per core (pytest-xdist); a file's tests stay on one worker, so each module's
# fitted fixture is computed once
.venv/bin/python -m pytest -q -p no:cacheprovider -n auto --dist loadfile "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$status"
