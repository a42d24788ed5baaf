"""Exhaustive sweep of an entry's knob space on a GPU: the ground truth a search is judged by.

    python bench/sweep.py --entry examples/registry/matmul --out sweep.json [--jobs N]
    python bench/sweep.py --compare STATE_DIR --sweep sweep.json [--kernel matmul]

Sweep: every configuration is first compiled in a pool of ``--jobs`` processes (each
launches it once on the perf shapes, filling a shared Triton cache), then timed one after
another in this process on every perf shape x first dtype with the worker's timing function
(:func:`profilers.timing.gpu_median_seconds`: CUDA events, L2 flushed, median). The objective
is the geometric mean over the perf cases, as in ktuned. The ``--top`` fastest are timed
again with ktuned's full timing settings, and the sweep's best is the fastest of those.

Compare: reads a ktuned state directory (a ``ktuned tune`` run of the same entry) and says
after how many evaluations ktuned's incumbent (its accepted best) was within 1 % of the
sweep's best, judged by the sweep's own table, so both sides are measured the same way.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import itertools
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, write_json

_STATE: dict[str, Any] = {}


def _load(entry: Path) -> tuple[Any, Any, list[tuple[str, list[Any]]]]:
    import torch

    from tuned.registry import load_entry

    spec = load_entry(entry)
    mod_spec = importlib.util.spec_from_file_location(
        f"sweep_{spec.name}", spec.directory / spec.module
    )
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, str(spec.directory))
    mod_spec.loader.exec_module(module)
    dtype = getattr(torch, spec.dtypes[0])
    cases = []
    for shape in spec.shapes:
        if shape.perf:
            label = "x".join(f"{k}={v}" for k, v in shape.dims.items()) + f"/{spec.dtypes[0]}"
            inputs = list(getattr(module, spec.inputs)(dict(shape.dims), dtype, "cuda", 0))
            cases.append((label, inputs))
    return spec, getattr(module, spec.launcher), cases


def _init(entry: str) -> None:
    _STATE["spec"], _STATE["launcher"], _STATE["cases"] = _load(Path(entry))


def _compile(knobs: dict[str, Any]) -> str | None:
    """Launch once per perf case (compiles into the shared cache); the error, if any."""
    import torch

    try:
        for _, inputs in _STATE["cases"]:
            _STATE["launcher"](*inputs, **knobs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - out of resources, PTXAS errors: a failed config
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def sweep(args: argparse.Namespace) -> int:
    cache = tempfile.mkdtemp(prefix="ktuned-sweep-cache-")
    os.environ["TRITON_CACHE_DIR"] = cache
    import multiprocessing

    import torch

    from profilers.timing import TimingSettings, gpu_median_seconds
    from tuned.registry import load_entry

    spec = load_entry(args.entry)
    names = list(spec.knobs)
    configs = [dict(zip(names, values)) for values in itertools.product(*spec.knobs.values())]
    if args.limit:
        configs = configs[: args.limit]
    print(f"{spec.name}: {len(configs)} configurations, compiling with {args.jobs} processes")
    t0 = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        args.jobs, mp_context=context, initializer=_init, initargs=(str(args.entry),)
    ) as pool:
        errors = list(pool.map(_compile, configs, chunksize=4))
    compile_s = time.monotonic() - t0
    print(f"compiled in {compile_s:.1f} s ({sum(e is not None for e in errors)} failed)")

    spec, launcher, cases = _load(args.entry)
    quick = TimingSettings(target_ms=args.target_ms, warmup_ms=5.0)
    rows = []
    t1 = time.monotonic()
    for i, (knobs, error) in enumerate(zip(configs, errors)):
        row: dict[str, Any] = {"knobs": knobs, "error": error, "times": {}, "objective": None}
        if error is None:
            try:
                for label, inputs in cases:
                    median, _ = gpu_median_seconds(
                        functools.partial(launcher, *inputs, **knobs), quick
                    )
                    row["times"][label] = median
                row["objective"] = math.exp(
                    sum(math.log(t) for t in row["times"].values()) / len(row["times"])
                )
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        rows.append(row)
        if (i + 1) % 100 == 0:
            print(f"  timed {i + 1}/{len(configs)} ({time.monotonic() - t1:.0f} s)", flush=True)
    timing_s = time.monotonic() - t1
    ok = sorted((r for r in rows if r["objective"] is not None), key=lambda r: r["objective"])
    full = TimingSettings()
    for r in ok[: args.top]:
        times = {}
        for label, inputs in cases:
            median, _ = gpu_median_seconds(functools.partial(launcher, *inputs, **r["knobs"]), full)
            times[label] = median
        r["retimed"] = math.exp(sum(math.log(t) for t in times.values()) / len(times))
    best = min(ok[: args.top], key=lambda r: r["retimed"])
    result = {
        "kernel": spec.name,
        "generation": spec.generation,
        "device": torch.cuda.get_device_name(),
        "date": str(datetime.date.today()),
        "configs": len(configs),
        "valid": len(ok),
        "compile_s": compile_s,
        "timing_s": timing_s,
        "jobs": args.jobs,
        "best": best,
        "rows": rows,
    }
    write_json(args.out, result)
    print(
        f"best {best['knobs']}: {best['retimed'] * 1e6:.1f} us "
        f"(quick timing {best['objective'] * 1e6:.1f} us); "
        f"{len(ok)}/{len(configs)} valid; compile {compile_s:.0f} s, timing {timing_s:.0f} s"
    )
    return 0


def compare(args: argparse.Namespace) -> int:
    from tuned.outcomes import Provenance
    from tuned.store.sqlite import SqliteStore

    data = json.loads(args.sweep.read_text())
    table = {
        json.dumps(r["knobs"], sort_keys=True): r["objective"]
        for r in data["rows"]
        if r["objective"] is not None
    }
    best = min(table.values())
    store = SqliteStore.open_reader(args.compare / "ktuned.sqlite")
    kernel = args.kernel or data["kernel"]
    row = store.kernel(kernel)
    assert row is not None, f"no kernel {kernel} in {args.compare}"
    fingerprint = store.best(kernel).fingerprint  # type: ignore[union-attr]
    trials = store.trials(kernel, row.generation, fingerprint)
    accepted = {a["candidate_id"] for a in store.acceptances(kernel) if a["status"] == "accepted"}
    incumbent = next(t for t in trials if t.provenance is Provenance.ORIGINAL)
    reached = None
    n = 0
    for t in trials:
        if t.provenance is Provenance.ORIGINAL:
            continue
        n += 1
        if t.candidate_id in accepted:
            incumbent = t
        value = table.get(json.dumps(dict(incumbent.knobs), sort_keys=True))
        if reached is None and value is not None and best / value >= 0.99:
            reached = n
    final = table.get(json.dumps(dict(incumbent.knobs), sort_keys=True))
    final_text = "?" if final is None else f"{final * 1e6:.1f} us ({100 * best / final:.1f} %"
    share = "-" if reached is None else f"{100 * reached / data['configs']:.1f} %"
    print(
        f"sweep: {data['configs']} configurations, best {best * 1e6:.1f} us (quick timing); "
        f"ktuned: {n} evaluations, final incumbent {dict(incumbent.knobs)} at {final_text} "
        f"of the sweep's best); within 1 % after {reached} evaluations ({share} of the sweep)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", type=Path, default=ROOT / "examples" / "registry" / "matmul")
    parser.add_argument("--out", type=Path, default=Path("sweep.json"))
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--target-ms", type=float, default=20.0)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--limit", type=int, default=0, help="only the first N configurations")
    parser.add_argument("--compare", type=Path, help="a ktuned state directory")
    parser.add_argument("--sweep", type=Path, help="the sweep JSON to compare with")
    parser.add_argument("--kernel", default="")
    args = parser.parse_args()
    if args.compare is not None:
        return compare(args)
    return sweep(args)


if __name__ == "__main__":
    sys.exit(main())
