"""Per-call overhead of ``tuned.runtime.load`` against calling the launcher directly.

    python bench/runtime_overhead.py [--state-dir DIR] [--calls 20000]
    python bench/runtime_overhead.py --smoke     # CPU, interpreter, a few calls: runs, no result

Three figures, each the median over ``--repeats`` runs of ``--calls`` calls, interleaved so that
drift hits both sides alike:

1. **wrapper**: a ``TunedKernel`` around a no-op launcher vs the no-op itself: the pure cost
   of the call path (knob merge, one attribute read) with one variant.
2. **routed wrapper**: the same with two variants over two timed shapes (per-shape
   dispatch): routing key from the arguments' shapes and dtype, one dict lookup.
3. **end to end**: vector_add loaded from a store vs its launcher called with the same knobs
   (Triton launch included). On a CPU this runs in Triton's interpreter, where one launch
   costs milliseconds and the difference is within noise; on a GPU it is the figure to read.

Without ``--state-dir``, vector_add is first tuned (baseline + 2 candidates) into a temporary
state directory. Figures are labelled with the device they were measured on.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, bench_parser, interpreter_for_smoke
from tuned.runtime import current_fingerprint, load
from tuned.runtime.standalone import Bucket, ShapeModel, TunedKernel, Variant


def per_call(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def compare(
    a: Callable[[], Any], b: Callable[[], Any], calls: int, repeats: int, sync: Callable[[], None]
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and of ``b``, measured interleaved."""
    xs, ys = [], []
    for _ in range(repeats):
        xs.append(per_call(a, calls))
        sync()
        ys.append(per_call(b, calls))
        sync()
    return statistics.median(xs), statistics.median(ys)


def tune_vector_add(state: Path, interpreter: bool) -> None:
    from tuned.evaluation.client import EvaluationSettings
    from tuned.search import TuneSettings
    from tuned.store.sqlite import SqliteStore
    from tuned.tuning import tune_registry

    store = SqliteStore(state / "ktuned.sqlite")
    try:
        tune_registry(
            ROOT / "examples" / "registry" / "vector_add",
            store=store,
            state_dir=state,
            settings=TuneSettings(budget=2),
            evaluation=EvaluationSettings(interpreter=interpreter, interpreter_max_size=1 << 17),
        )
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=20000, help="calls per run (wrappers)")
    parser.add_argument("--launch-calls", type=int, default=0, help="calls per run (e2e)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--n", type=int, default=1 << 20, help="vector_add size (GPU)")
    args = parser.parse_args(argv)
    interpreter_for_smoke(args.smoke)
    if args.smoke:  # a few calls of each
        args.calls, args.launch_calls, args.repeats = 200, min(args.launch_calls, 2), 2

    import torch

    fp = current_fingerprint()
    gpu = fp["mode"] == "gpu"
    device = "cuda" if gpu else "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    label = (
        f"{fp['gpu_model']}, driver {fp.get('driver')}, CUDA {fp.get('cuda')}"
        if gpu
        else f"CPU {fp.get('cpu')} (Triton interpreter: end-to-end = interpreter launches)"
    )

    rows = []
    noop = lambda *a, **k: None
    x = torch.empty(1024, device=device)
    single = TunedKernel("noop", "tuned", "", [Variant(noop, {"BLOCK_SIZE": 1024}, "a")])
    rows.append(
        (
            "wrapper, 1 variant",
            *compare(
                lambda: single(x, x),
                lambda: noop(x, x, BLOCK_SIZE=1024),
                args.calls,
                args.repeats,
                lambda: None,
            ),
        )
    )
    model = ShapeModel(axes=(("N", 0, 0, 1),), dtype_arg=0)
    routed = TunedKernel(
        "noop",
        "tuned",
        "",
        [Variant(noop, {"BLOCK_SIZE": 1024}, "a"), Variant(noop, {"BLOCK_SIZE": 4096}, "b")],
        buckets=[
            Bucket("N=1024/float32", {"N": 1024}, "float32", 0),
            Bucket("N=1048576/float32", {"N": 1 << 20}, "float32", 1),
        ],
        model=model,
    )
    rows.append(
        (
            "wrapper, per-shape routing",
            *compare(
                lambda: routed(x, x),
                lambda: noop(x, x, BLOCK_SIZE=1024),
                args.calls,
                args.repeats,
                lambda: None,
            ),
        )
    )

    with tempfile.TemporaryDirectory() as tmp:
        state = args.state_dir
        if state is None:
            state = Path(tmp)
            tune_vector_add(state, interpreter=not gpu)
        kernel = load("vector_add", store=state)
        variant = kernel.variants[kernel.default]
        n = args.n if gpu else 1024
        a, b = torch.randn(n, device=device), torch.randn(n, device=device)
        launches = args.launch_calls or (2000 if gpu else 20)
        kernel(a, b)
        variant.launcher(a, b, **variant.knobs)
        sync()
        rows.append(
            (
                f"vector_add N={n} ({kernel.status})",
                *compare(
                    lambda: kernel(a, b),
                    lambda: variant.launcher(a, b, **variant.knobs),
                    launches,
                    args.repeats,
                    sync,
                ),
            )
        )

    print(f"\n{label}; torch {fp['torch']}, triton {fp['triton']}")
    print("| call | loaded per call | direct per call | overhead per call |")
    print("|---|---|---|---|")
    for name, loaded, direct in rows:
        print(
            f"| {name} | {loaded * 1e6:.3f} us | {direct * 1e6:.3f} us | "
            f"{(loaded - direct) * 1e9:+.0f} ns |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
