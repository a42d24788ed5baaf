#!/usr/bin/env bash
# Set up ktuned in ./.venv (idempotent). Usage: bash scripts/setup.sh [--dev]
#   GPU box (python3 already has a CUDA PyTorch and Triton): a venv that sees those packages,
#     ktuned installed into it without downloading anything.
#   CPU machine: torch==2.13.0 (CPU build) and Triton from PyPI; kernels then run in Triton's
#     interpreter.
#   --dev adds the test and lint tools (pytest, ruff, mypy, hypothesis), the fleet store and
#     the peer tuners of bench/peers.py (the `bench` extra: Optuna, Kernel Tuner).
# ktuned is installed with its `daemon` extra (the tuner's and the daemon's dependencies);
# `pip install ktuned` alone is the runtime's (tuned.runtime.load, docs/runtime.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=0
[ "${1:-}" = "--dev" ] && DEV=1
EXTRAS=daemon
[ "$DEV" = 1 ] && EXTRAS=daemon,dev,fleet,bench  # fleet: PostgreSQL store tests; bench: peers

"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' || {
    echo "setup: ktuned needs Python >= 3.10; set PYTHON=/path/to/python3.10+" >&2; exit 2; }

if "$PY" -c 'import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    MODE=gpu
else
    MODE=cpu
fi
STAMP=".venv/.ktuned-setup"
WANT="$MODE dev=$DEV $(sha256sum pyproject.toml | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x .venv/bin/ktuned ]; then
    exit 0
fi

echo "setup: preparing .venv for a $MODE machine (this takes a minute the first time)" >&2
if [ "$MODE" = gpu ]; then
    "$PY" -m venv --system-site-packages .venv
    # python3 may itself be a virtual environment (its packages are then not "system" ones):
    # make every site-packages directory of the host interpreter visible in .venv.
    SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$SITE/ktuned-host-site.pth"
    # Everything ktuned needs is already there; install ktuned itself without touching the network.
    .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
    # Nothing is downloaded when the extras are there already.
    .venv/bin/python -m pip install -q --no-build-isolation -e ".[$EXTRAS]" \
        || echo "setup: ktuned[$EXTRAS] could not be installed here (offline?)" >&2
else
    "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q torch==2.13.0
    .venv/bin/python -m pip install -q "triton>=3.6,<4"
    .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
fi
echo "$WANT" > "$STAMP"
