"""A/A on short kernels while the CPU is busy: does host load move the figures or the verdicts?

    python bench/aa_busy.py [--comparisons 20] [--busy 15] [--out aa_busy.json]
    python bench/aa_busy.py --smoke          # CPU, Triton's interpreter: exercises the code only

Two launch-bound Triton kernels (a 4096-element add and a 32x1024 row softmax, both well
under 10 us on an H100) are each compared with themselves, exactly as the campaign compares a
candidate with its incumbent: :func:`profilers.timing.interleaved_timing` (L2 flushed,
screening on), then the acceptance rule (:func:`tuned.acceptance.decide`) on the bootstrap
interval, with the confirming second measurement when the first clears the bar. Every
acceptance is a false accept.

Four conditions: {idle, ``--busy`` CPU-spinning processes (the compile pool's size)} x
{CUDA graphs on, off (eager events)}; and a fifth, ``neighbour`` (CUDA graphs on, the CPU
idle): another process on the same GPU makes and reduces 16384x8192 float32 tensors in
bursts, as a spare preparing a kernel's cases does while the running worker times (``ktuned
tune`` has its spares prepare the next kernel while one is tuned). Per condition and kernel
it prints the comparisons, the
false accepts, the median time of the kernel (median over comparisons of each measurement's
median) and its ratio to the idle figure of the same mode and to the idle eager figure (the
referee's way of timing), and the wall of a comparison. JSON with every figure to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from profilers.timing import TimingSettings, interleaved_timing
from tuned.acceptance import AcceptanceSettings, decide, speedup_interval
from tuned.evaluation.settings import JUDGE_TIMING


def _spin(stop: Any) -> None:  # a busy process: pure Python work, like a compile
    x = 0
    while not stop.is_set():
        for i in range(10000):
            x = (x * 31 + i) % 1000003


@contextmanager
def busy_cpu(processes: int) -> Iterator[None]:
    """``processes`` processes spinning on the CPU for the duration."""
    if processes <= 0:
        yield
        return
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let them reach their loops
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=10)


def _neighbour(stop: Any, device: str) -> None:  # a spare making cases on the same GPU
    import torch

    rows = 16384 if device == "cuda" else 64
    gen = torch.Generator(device=device).manual_seed(1)
    while not stop.is_set():
        x = torch.randn(rows, 8192, generator=gen, device=device)
        y = (x * 2.0 + 1.0).sum(dim=1)  # a reference: read and reduce, as layer_norm's does
        if device == "cuda":
            torch.cuda.synchronize()
        del x, y
        time.sleep(0.02)


@contextmanager
def gpu_neighbour(on: bool, device: str) -> Iterator[None]:
    """Another process doing case-making work on the same device for the duration."""
    if not on:
        yield
        return
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    proc = ctx.Process(target=_neighbour, args=(stop, device), daemon=True)
    proc.start()
    time.sleep(5.0 if device == "cuda" else 2.0)  # its CUDA context up, its loop going
    try:
        yield
    finally:
        stop.set()
        proc.join(timeout=30)


def kernels(device: str) -> dict[str, Callable[[], Any]]:
    """The short kernels, each as a launch closure on its own inputs."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask)

    @triton.jit
    def softmax_kernel(x, out, cols, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < cols
        v = tl.load(x + row * cols + offs, mask=mask, other=-float("inf"))
        e = tl.exp(v - tl.max(v, 0))
        tl.store(out + row * cols + offs, e / tl.sum(e, 0), mask=mask)

    gen = torch.Generator(device="cpu").manual_seed(0)
    n = 4096
    x, y = (torch.rand(n, generator=gen).to(device) for _ in range(2))
    add_out = torch.empty_like(x)
    rows, cols = 32, 1024
    s = torch.rand(rows, cols, generator=gen).to(device)
    soft_out = torch.empty_like(s)

    def add() -> Any:
        add_kernel[(triton.cdiv(n, 1024),)](x, y, add_out, n, BLOCK=1024)
        return add_out

    def softmax() -> Any:
        softmax_kernel[(rows,)](s, soft_out, cols, BLOCK=1024)
        return soft_out

    return {"add_4096": add, "softmax_32x1024": softmax}


def compare(fn: Callable[[], Any], gpu: bool, timing: TimingSettings, seed: int) -> dict[str, Any]:
    """One A/A comparison as the campaign makes it: first interval, and the confirming one."""
    settings = AcceptanceSettings()
    t0 = time.perf_counter()
    timed = interleaved_timing([fn, fn], gpu=gpu, settings=timing, screen=True)
    a, b = timed.samples
    first = speedup_interval({"c": a}, {"c": b}, np.random.default_rng(seed), settings)
    status = decide(first, settings)
    second = None
    if status == "remeasure":
        again = interleaved_timing([fn, fn], gpu=gpu, settings=timing, screen=True).samples
        second = speedup_interval(
            {"c": again[0]}, {"c": again[1]}, np.random.default_rng(seed + 1), settings
        )
        status = decide(first, settings, second)
    return {
        "status": status,
        "median_s": statistics.median(a + b),
        "first": first.to_dict(),
        "second": None if second is None else second.to_dict(),
        "wall_s": time.perf_counter() - t0,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = "cpu" if args.smoke else "cuda"
    gpu = device == "cuda"
    fns = kernels(device)
    conditions = [(busy, graphs, False) for busy in (0, args.busy) for graphs in (True, False)]
    conditions.append((0, True, True))
    out: dict[str, Any] = {
        "busy_processes": args.busy,
        "target_ms": args.target_ms,
        "conditions": [],
    }
    for busy, graphs, neighbour in conditions:
        timing = TimingSettings(cuda_graphs=graphs, target_ms=args.target_ms)
        with busy_cpu(busy), gpu_neighbour(neighbour, device):
            for name, fn in fns.items():
                rows = [compare(fn, gpu, timing, seed) for seed in range(args.comparisons)]
                out["conditions"].append(
                    {
                        "kernel": name,
                        "busy": busy,
                        "graphs": graphs,
                        "neighbour": neighbour,
                        "comparisons": len(rows),
                        "false_accepts": sum(r["status"] == "accepted" for r in rows),
                        "first_stage_passes": sum(r["second"] is not None for r in rows),
                        "median_s": statistics.median(r["median_s"] for r in rows),
                        "wall_per_comparison_s": statistics.median(r["wall_s"] for r in rows),
                        "rows": rows,
                    }
                )
    idle = {
        (c["kernel"], c["graphs"]): c["median_s"]
        for c in out["conditions"]
        if not c["busy"] and not c["neighbour"]
    }
    for c in out["conditions"]:
        c["vs_idle_same_mode"] = c["median_s"] / idle[(c["kernel"], c["graphs"])]
        c["vs_idle_eager"] = c["median_s"] / idle[(c["kernel"], False)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--busy", type=int, default=15, help="CPU-spinning processes")
    parser.add_argument("--out", type=Path, default=Path("aa_busy.json"))
    parser.add_argument(
        "--target-ms",
        type=float,
        default=JUDGE_TIMING.target_ms,
        help="timed milliseconds per function and comparison (default: the judge's)",
    )
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, few comparisons")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        args.comparisons, args.busy = min(args.comparisons, 1), min(args.busy, 1)
    result = run(args)
    args.out.write_text(json.dumps(result, indent=1))
    unit = 1e3 if args.smoke else 1e6
    print(
        f"A/A, {args.comparisons} comparisons per row; busy = {args.busy} spinning processes; "
        f"times in {'ms (interpreter)' if args.smoke else 'us'}"
    )
    print(
        f"{'kernel':<18} {'busy':>4} {'graphs':>6} {'gpu nbr':>7} {'false acc':>9} {'1st pass':>8} "
        f"{'median':>9} {'/idle same':>10} {'/idle eager':>11} {'wall/cmp':>9}"
    )
    for c in result["conditions"]:
        print(
            f"{c['kernel']:<18} {c['busy']:>4} {c['graphs']!s:>6} {c['neighbour']!s:>7} "
            f"{c['false_accepts']:>9} {c['first_stage_passes']:>8} "
            f"{c['median_s'] * unit:>9.3f} {c['vs_idle_same_mode']:>10.3f} "
            f"{c['vs_idle_eager']:>11.3f} {c['wall_per_comparison_s']:>8.2f}s"
        )
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
