"""What capturing a CUDA graph of a timed round costs, beside replaying it (GPU only).

The judge's runner captures each target's graph of its timed length once per case
(tuned/evaluation/runner.py); ``benchmark.capture`` in an evaluation's
``metadata.benchmark_parts`` is that call. This times, in one process, the example
registry's layer_norm at two of its perf shapes: capture plus one replay with a fresh
memory pool (then as the runner leaves it: ``release_unused``, or ``empty_cache``), with one
pool shared by the graphs, eager calls, and a replay alone. Figures: bench/RESULTS.md,
twenty-first session.

    python bench/graph_capture_cost.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def kernel_seconds(fn: Any, n: int = 50) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / n / 1e3


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args()
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "registry" / "layer_norm"))
    from layer_norm import layer_norm, make_inputs  # type: ignore[import-not-found]

    for m, n, dtype in ((16384, 8192, torch.float32), (4096, 4096, torch.float16)):
        inputs = make_inputs({"M": m, "N": n}, dtype, "cuda", 0)
        measure(f"{m}x{n} {dtype}", lambda inputs=inputs: layer_norm(*inputs))
        del inputs
        torch.cuda.empty_cache()


def measure(label: str, fn: Any) -> None:
    import torch

    from tuned.evaluation.modules import release_unused

    k = kernel_seconds(fn)
    reps = max(10, min(1000, int(5e-3 / k)))
    print(f"== {label}: kernel {k * 1e6:.1f} us, {reps} calls per graph")
    for mode in ("fresh", "fresh+release", "fresh+empty", "shared", "eager"):
        pool = torch.cuda.graph_pool_handle() if mode == "shared" else None
        keep: list[Any] = []
        times = []
        for _ in range(6):
            torch.cuda.synchronize()
            t = time.perf_counter()
            if mode == "eager":
                for _ in range(reps):
                    out = fn()
            else:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    for _ in range(reps):
                        out = fn()
                g.replay()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            if mode == "shared":
                keep = [*keep[-2:], (g, out)]
            del out
            if mode != "eager":
                del g
            if mode == "fresh+release":
                release_unused("cuda")
            if mode == "fresh+empty":
                torch.cuda.empty_cache()
        shown = " ".join(f"{s * 1e3:.1f}" for s in times)
        print(f"  {mode:14} capture+replay ms: {shown}  (the calls ~{reps * k * 1e3:.1f} ms)")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    replays = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        replays.append(time.perf_counter() - t)
    print("  replay alone ms: " + " ".join(f"{s * 1e3:.2f}" for s in replays))


if __name__ == "__main__":
    main()
