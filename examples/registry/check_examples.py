#!/usr/bin/env python
"""Check every example kernel of the registry against its reference, outside the daemon.

For each entry directory (one holding ``kernel.yaml``) this script

* checks the contract statically: the module parses, holds only imports of torch, triton,
  triton.language and math, ``@triton.jit`` kernels and function definitions at top level;
  the launcher, reference and inputs functions exist; every knob is a keyword parameter of
  the launcher with a literal default that is one of the knob's values; there are at least
  two shapes small enough for the interpreter;
* for every shape whose product of dimensions is at most 2**22 (all shapes with ``--all``),
  every dtype and seeds 0 and 1: builds the inputs, runs the launcher with the default
  knobs and with a few random knob configurations (seeded), and compares each output with
  the reference (``torch.testing.assert_close`` with the entry's tolerance); it also checks
  that outputs hold no NaN, that the inputs were not modified and that ``make_inputs`` is
  deterministic.

A random configuration that raises Triton's ``OutOfResources`` (too much shared memory on a
GPU) is reported and allowed, as the tuner records it as a failed candidate; any other
exception is a failure. On CPU the kernels run in Triton's interpreter
(``TRITON_INTERPRET=1`` is set before triton is imported).

Usage::

    TRITON_INTERPRET=1 python examples/registry/check_examples.py [--device cpu|cuda]
        [--all] [--configs 5] [--only NAME ...] [-v]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import itertools
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
INTERPRETER_MAX_SIZE = 2**22
ALLOWED_IMPORTS = {"torch", "triton", "triton.language", "math"}
SEEDS = (0, 1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--all", action="store_true", help="check every shape, not only small ones")
    p.add_argument("--configs", type=int, default=5, help="random knob configurations per case")
    p.add_argument("--only", nargs="*", default=None, help="check only these entries")
    p.add_argument("-v", "--verbose", action="store_true", help="print one line per case")
    return p.parse_args(argv)


def static_problems(entry: Path, cfg: dict[str, Any]) -> list[str]:
    """Contract checks that need no import of the module."""
    problems = []
    if cfg.get("name") != entry.name:
        problems.append(f"name {cfg.get('name')!r} differs from the directory {entry.name!r}")
    module_path = entry / str(cfg.get("module"))
    if not module_path.is_file():
        return [*problems, f"module file {module_path} not found"]
    tree = ast.parse(module_path.read_text(), filename=str(module_path))
    funcs: dict[str, ast.FunctionDef] = {}
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Import):
            names = {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names = {node.module or ""}
        elif isinstance(node, ast.FunctionDef):
            funcs[node.name] = node
            continue
        elif i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # module docstring
        else:
            problems.append(f"line {node.lineno}: top-level {type(node).__name__} not allowed")
            continue
        if not names <= ALLOWED_IMPORTS:
            problems.append(f"line {node.lineno}: import of {sorted(names - ALLOWED_IMPORTS)}")
    for key in ("launcher", "reference", "inputs"):
        if cfg.get(key) not in funcs:
            problems.append(f"{key}: no top-level def {cfg.get(key)!r}")
    knobs = cfg.get("knobs") or {}
    launcher = funcs.get(str(cfg.get("launcher")))
    if launcher is not None:
        a = launcher.args
        positional = a.posonlyargs + a.args
        defaults: dict[str, ast.expr] = dict(
            zip(
                [x.arg for x in positional[len(positional) - len(a.defaults) :]],
                a.defaults,
                strict=True,
            )
        )
        defaults.update(
            {x.arg: d for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None}
        )
        for knob, values in knobs.items():
            node = defaults.get(knob)
            if not isinstance(node, ast.Constant):
                problems.append(f"knob {knob}: launcher has no literal default for it")
            elif node.value not in values:
                problems.append(f"knob {knob}: default {node.value!r} not in {values}")
    small = [s for s in cfg["shapes"] if shape_size(s) <= INTERPRETER_MAX_SIZE]
    if len(small) < 2:
        problems.append(f"only {len(small)} shape(s) small enough for the interpreter")
    return problems


def shape_dims(shape: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in shape.items() if k != "perf"}


def shape_size(shape: dict[str, Any]) -> int:
    return math.prod(shape_dims(shape).values())


def launcher_defaults(fn: Any, knobs: dict[str, list[Any]]) -> dict[str, Any]:
    import inspect

    params = inspect.signature(fn).parameters
    return {k: params[k].default for k in knobs}


def load_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"registry_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def random_configs(knobs: dict[str, list[Any]], n: int, seed: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    space = [dict(zip(knobs, combo, strict=True)) for combo in itertools.product(*knobs.values())]
    return rng.sample(space, min(n, len(space)))


def check_entry(entry: Path, args: argparse.Namespace, device: str) -> tuple[bool, str]:
    import torch

    cfg = yaml.safe_load((entry / "kernel.yaml").read_text())
    problems = static_problems(entry, cfg)
    if problems:
        return False, "; ".join(problems)
    module = load_module(entry / cfg["module"])
    launcher = getattr(module, cfg["launcher"])
    reference = getattr(module, cfg["reference"])
    make_inputs = getattr(module, cfg["inputs"])
    knobs: dict[str, list[Any]] = cfg["knobs"]
    defaults = launcher_defaults(launcher, knobs)

    runs = raised = 0
    shapes = [s for s in cfg["shapes"] if args.all or shape_size(s) <= INTERPRETER_MAX_SIZE]
    for shape_idx, shape in enumerate(shapes):
        dims = shape_dims(shape)
        for dtype_name in cfg["dtypes"]:
            dtype = getattr(torch, dtype_name)
            tol = cfg["tolerance"][dtype_name]
            configs = [defaults] + [
                c
                for c in random_configs(knobs, args.configs, f"{entry.name}/{shape_idx}/{dtype}")
                if c != defaults
            ]
            for seed in SEEDS:
                case = f"{dims} {dtype_name} seed={seed}"
                inputs = make_inputs(dict(dims), dtype, device, seed)
                if seed == SEEDS[0]:
                    again = make_inputs(dict(dims), dtype, device, seed)
                    if len(again) != len(inputs) or not all(
                        same(a, b) for a, b in zip(inputs, again, strict=True)
                    ):
                        return False, f"{case}: make_inputs is not deterministic"
                saved = [x.clone() if torch.is_tensor(x) else x for x in inputs]
                expected = as_tuple(reference(*inputs))
                for knob_cfg in configs:
                    label = f"{case} knobs={knob_cfg}"
                    t0 = time.perf_counter()
                    try:
                        got = as_tuple(launcher(*inputs, **knob_cfg))
                        if device == "cuda":
                            torch.cuda.synchronize()
                    except Exception as exc:  # noqa: BLE001 - reported, not hidden
                        if knob_cfg is not defaults and "OutOfResources" in type(exc).__name__:
                            raised += 1
                            if args.verbose:
                                print(f"    raised {type(exc).__name__}: {label}")
                            continue
                        return False, f"{label}: {type(exc).__name__}: {exc}"
                    runs += 1
                    err = compare(got, expected, tol)
                    if err is None and not all(
                        same(a, b) for a, b in zip(inputs, saved, strict=True)
                    ):
                        err = "the launcher modified its inputs"
                    if err is not None:
                        return False, f"{label}: {err}"
                    if args.verbose:
                        print(f"    ok {time.perf_counter() - t0:6.2f}s {label}")
    note = f", {raised} raised OutOfResources" if raised else ""
    return True, f"{len(shapes)} shapes x {len(cfg['dtypes'])} dtypes, {runs} runs{note}"


def same(a: Any, b: Any) -> bool:
    import torch

    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    return bool(a == b)


def compare(got: tuple[Any, ...], expected: tuple[Any, ...], tol: dict[str, float]) -> str | None:
    import torch

    if len(got) != len(expected):
        return f"{len(got)} outputs, the reference gives {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if g.dtype != e.dtype or g.shape != e.shape:
            return f"output {i} is {g.dtype} {tuple(g.shape)}, expected {e.dtype} {tuple(e.shape)}"
        if torch.isnan(g).any():
            return f"output {i} holds NaN"
        try:
            torch.testing.assert_close(g, e, atol=tol["atol"], rtol=tol["rtol"])
        except AssertionError as exc:
            return f"output {i} mismatch: " + " ".join(str(exc).split())
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = args.device
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch  # does not import triton

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        if "triton" in sys.modules:
            print("warning: triton was imported before TRITON_INTERPRET was set", file=sys.stderr)

    entries = sorted(p.parent for p in HERE.glob("*/kernel.yaml"))
    if args.only:
        entries = [e for e in entries if e.name in args.only]
    print(f"checking {len(entries)} entries on {device}")
    failed = 0
    start = time.perf_counter()
    for entry in entries:
        t0 = time.perf_counter()
        try:
            ok, msg = check_entry(entry, args, device)
        except Exception as exc:  # noqa: BLE001 - one broken entry must not hide the others
            ok, msg = False, f"{type(exc).__name__}: {exc}"
        failed += not ok
        status = "PASS" if ok else "FAIL"
        print(f"{status} {entry.name:<12} {time.perf_counter() - t0:6.1f}s  {msg}", flush=True)
    print(f"{len(entries) - failed}/{len(entries)} passed in {time.perf_counter() - start:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
