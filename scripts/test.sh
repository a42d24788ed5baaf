#!/usr/bin/env bash
# Set up (with the dev tools) and run every check CI runs: ruff, mypy (strict), pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k store`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
# System tools the daemon's tests use: a real Prometheus (prometheus, promtool) and
# systemd-analyze. Installed with apt-get when missing and possible; the tests that need them
# skip with the reason otherwise.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
    || ! command -v systemd-analyze >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        echo "== apt-get install prometheus systemd (for the daemon's tests)" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq && apt-get install -y -qq prometheus systemd >/dev/null \
            || echo "test: could not install prometheus/systemd; their tests will skip" >&2
    else
        echo "test: prometheus/promtool/systemd-analyze missing and apt-get unavailable" \
            "(or not root); their tests will skip" >&2
    fi
fi
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff" >&2
ruff check .
ruff format --check .
echo "== mypy --strict" >&2
mypy
echo "== pytest" >&2
# GPU tests skip themselves when no GPU is present; slow tests run too (CI has the time).
python -m pytest -q "$@"
