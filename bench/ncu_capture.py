"""Capture raw Nsight Compute CSVs of every example kernel (test fixtures for the parser).

    python bench/ncu_capture.py --out DIR [--registry examples/registry] [--ncu ncu]

For each entry it runs, under ``ncu``, this same script in ``--target`` mode, which builds the
entry's first perf-shape inputs and launches the original with its baseline knobs four times
(the first two are skipped as warm-up). Two captures per kernel:

- ``<kernel>.metrics.csv``: ``--csv --page raw`` with the explicit metric list ktuned's
  profiler asks for (the production invocation);
- ``<kernel>.full.csv``: ``--csv --page raw --set full`` for one launch (every metric, for
  parser development).

``--clock-control none`` leaves the GPU's clocks as they are. Each file is ncu's stdout as
is; ``<kernel>.*.stderr`` and ``commands.txt`` record how it was made.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT
from profilers.ncu import DEFAULT_METRICS

#: ktuned's profiler's own list (the production invocation).
METRICS = DEFAULT_METRICS


def jit_names(source: str) -> list[str]:
    """Names of the ``@triton.jit`` functions of a module (the kernels ncu should select)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                text = ast.unparse(dec)
                if "jit" in text or "autotune" in text or "heuristics" in text:
                    names.append(node.name)
                    break
    return names


def target(entry: Path) -> int:
    import importlib.util

    import torch

    from tuned.registry import load_entry

    spec = load_entry(entry)
    module_path = entry / spec.module
    mod_spec = importlib.util.spec_from_file_location(f"ncu_target_{spec.name}", module_path)
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, str(entry))
    mod_spec.loader.exec_module(module)
    shape = next(s for s in spec.shapes if s.perf)
    dtype = getattr(torch, spec.dtypes[0])
    inputs = getattr(module, spec.inputs)(dict(shape.dims), dtype, "cuda", 0)
    launcher = getattr(module, spec.launcher)
    for _ in range(4):
        launcher(*inputs, **dict(spec.baseline_knobs))
    torch.cuda.synchronize()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--registry", type=Path, default=ROOT / "examples" / "registry")
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--target", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.target is not None:
        return target(args.target)
    if args.out is None:
        parser.error("--out is required")

    from tuned.registry import scan_registry

    args.out.mkdir(parents=True, exist_ok=True)
    commands = []
    for spec in scan_registry(args.registry).entries:
        entry = spec.directory
        names = jit_names(spec.module_source)
        regex = "regex:^(" + "|".join(names) + ")$"
        base = [
            args.ncu,
            "--csv",
            "--page",
            "raw",
            "--clock-control",
            "none",
            "--kernel-name",
            regex,
            "--launch-skip",
            "2",
        ]
        runs = {
            "metrics": [*base, "--launch-count", "2", "--metrics", ",".join(METRICS)],
            "full": [*base, "--launch-count", "1", "--set", "full"],
        }
        for kind, cmd in runs.items():
            full = [*cmd, sys.executable, str(Path(__file__).resolve()), "--target", str(entry)]
            commands.append(" ".join(full))
            t0 = time.monotonic()
            proc = subprocess.run(
                full,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            took = time.monotonic() - t0
            (args.out / f"{spec.name}.{kind}.csv").write_text(proc.stdout)
            (args.out / f"{spec.name}.{kind}.stderr").write_text(proc.stderr)
            print(f"{spec.name} {kind}: exit {proc.returncode}, {took:.1f} s", flush=True)
    (args.out / "commands.txt").write_text("\n".join(commands) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
