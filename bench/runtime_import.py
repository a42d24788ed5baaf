"""What ``import tuned.runtime; tuned.runtime.load(...)`` costs a user's process: modules
imported, seconds, and whether any of the tuner's heavy modules came along.

    python bench/runtime_import.py [--state-dir DIR]

Without ``--state-dir``, vector_add is first tuned (baseline + 2 candidates) into a
temporary state directory (bench/runtime_overhead.py's ``tune_vector_add``). The load is
measured in a fresh interpreter, so nothing this script imported counts. For the import
profile itself: ``python -X importtime -c "import tuned.runtime; tuned.runtime.load(...)"``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT

#: Modules a user's ``load`` must not import (docs/architecture.md, the runtime's layer).
FORBIDDEN = (
    "sklearn",
    "scipy",
    "policies",
    "clustering",
    "tuned.search",
    "tuned.pipeline",
    "tuned.tuning",
    "tuned.llm",
    "openai",
    "matplotlib",
    "tuned.daemon",
    "tuned.metrics",
    "prometheus_client",
)

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import tuned.runtime
t1 = time.perf_counter()
kernel = tuned.runtime.load("vector_add", store=sys.argv[1])
t2 = time.perf_counter()
forbidden = sorted({m for m in sys.modules for f in FORBIDDEN if m == f or m.startswith(f + ".")})
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "modules": len(sys.modules),
                  "forbidden": forbidden}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ktuned-import-") as tmp:
        state = args.state_dir
        if state is None:
            from bench.runtime_overhead import tune_vector_add

            state = Path(tmp)
            tune_vector_add(state, interpreter=os.environ.get("TRITON_INTERPRET") == "1")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        code = f"FORBIDDEN = {FORBIDDEN!r}\n" + CHILD
        out = subprocess.run(
            [sys.executable, "-c", code, str(state)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
        ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    print(
        f"import tuned.runtime: {figures['import_s']:.3f} s; load('vector_add'): "
        f"{figures['load_s']:.3f} s; modules in sys.modules: {figures['modules']}"
    )
    print("heavy modules imported:", ", ".join(figures["forbidden"]) or "none")
    return 1 if figures["forbidden"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
