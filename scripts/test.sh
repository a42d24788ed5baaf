#!/usr/bin/env bash
# Set up (with the dev tools) and run every check CI runs: ruff, mypy (strict), pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k store`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" >&2
ruff check .
ruff format --check .
echo "== mypy --strict" >&2
mypy
echo "== pytest" >&2
# GPU tests skip themselves when no GPU is present; slow tests run too (CI has the time).
python -m pytest -q "$@"
