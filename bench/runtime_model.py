"""A model step built from the example kernels, run with ``tuned.runtime.load`` vs the originals.

    python bench/runtime_model.py [--state-dir ktuned-state/bench] [--tokens 4096]
                                  [--dim 4096] [--hidden 14336] [--norm rms_norm]
    python bench/runtime_model.py --smoke        # CPU, Triton interpreter, tiny shapes (CI)

The step is the MLP half of a transformer block, in float16::

    h = norm(x)                      rms_norm (or layer_norm)     (T, D)
    u = matmul(h, W_up)              gate and up projections      (T, 2H)
    a = swiglu(u)                    silu(gate) * up              (T, H)
    y = matmul(a, W_down)            down projection              (T, D)
    out = vector_add(x, y)           residual

Once with the example modules' launchers at their declared knobs (the originals), once with
each kernel loaded by ``tuned.runtime.load(name, store=STATE_DIR)``: the state directory
``bench/tune_examples.py`` wrote (default ``ktuned-state/bench``, read-only here). A kernel the
store does not know runs its original (shown as ``absent``). The outputs of both steps are
compared; times are medians of CUDA-event timings (L2 flushed) interleaved over ``--rounds``
rounds, per kernel call and for the whole step, printed as a markdown table. With
``--smoke`` everything runs in Triton's interpreter on the CPU and the times are interpreter
timings, labelled as such: the smoke run checks that the script works, nothing more.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import logging
import math
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT

EXAMPLES = ROOT / "examples" / "registry"
KERNELS = ("rms_norm", "layer_norm", "matmul", "swiglu", "vector_add")


def original_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"bench_orig_{name}", EXAMPLES / name / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launchers(state_dir: Path, norm: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """(originals, loaded, status per kernel) for the kernels of the step."""
    from tuned.runtime import RuntimeLoadError, load

    names = (norm, "matmul", "swiglu", "vector_add")
    originals: dict[str, Any] = {n: getattr(original_module(n), n) for n in names}
    loaded: dict[str, Any] = {}
    status: dict[str, str] = {}
    for n in names:
        try:
            kernel = load(n, store=state_dir)
        except RuntimeLoadError as exc:
            logging.getLogger("bench").warning("%s: %s; running the original", n, exc)
            loaded[n], status[n] = originals[n], "absent"
            continue
        loaded[n] = kernel
        speedup = kernel.info.get("speedup")
        shapes = len({b.variant for b in kernel.buckets})
        status[n] = kernel.status + (f", {speedup:.2f}x stored" if speedup else "")
        status[n] += f", {shapes} variants by shape" if shapes > 1 else ""
    return originals, loaded, status


def make_step(k: dict[str, Any], norm: str, params: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """The step's calls, each a closure over the previous one's output (run in order)."""
    state: dict[str, Any] = {}
    x = params["x"]

    def norm_call() -> Any:
        if norm == "rms_norm":
            state["h"] = k["rms_norm"](x, params["w_norm"], 1e-6)
        else:
            state["h"] = k["layer_norm"](x, params["w_norm"], params["b_norm"], 1e-5)
        return state["h"]

    def up() -> Any:
        state["u"] = k["matmul"](state["h"], params["w_up"])
        return state["u"]

    def act() -> Any:
        state["a"] = k["swiglu"](state["u"])
        return state["a"]

    def down() -> Any:
        state["y"] = k["matmul"](state["a"], params["w_down"])
        return state["y"]

    def residual() -> Any:
        return k["vector_add"](x.reshape(-1), state["y"].reshape(-1)).reshape(x.shape)

    return {
        norm: norm_call,
        "matmul (up)": up,
        "swiglu": act,
        "matmul (down)": down,
        "vector_add": residual,
    }


def run_step(calls: dict[str, Callable[[], Any]]) -> Any:
    out = None
    for fn in calls.values():
        out = fn()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=ROOT / "ktuned-state" / "bench")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=14336)
    parser.add_argument("--norm", choices=("rms_norm", "layer_norm"), default="rms_norm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        args.tokens, args.dim, args.hidden, args.rounds = 8, 32, 48, 1
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

    import torch

    from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds
    from tuned.runtime import current_fingerprint

    fp = current_fingerprint()
    gpu = fp["mode"] == "gpu"
    if not gpu and not args.smoke:
        print("no GPU: this benchmark is for a GPU; use --smoke to check it runs", file=sys.stderr)
        return 2
    device = "cuda" if gpu else "cpu"
    gen = torch.Generator().manual_seed(0)
    T, D, H = args.tokens, args.dim, args.hidden

    def randn(*shape: int, scale: float = 1.0) -> Any:
        return (scale * torch.randn(*shape, generator=gen)).to(torch.float16).to(device)

    params = {
        "x": randn(T, D),
        "w_norm": 1.0 + randn(D, scale=0.1),
        "b_norm": randn(D, scale=0.1),
        "w_up": randn(D, 2 * H, scale=1 / math.sqrt(D)),
        "w_down": randn(H, D, scale=1 / math.sqrt(H)),
    }
    originals, loaded, status = launchers(args.state_dir, args.norm)
    base = make_step(originals, args.norm, params)
    tuned = make_step(loaded, args.norm, params)
    expected, got = run_step(base), run_step(tuned)
    close = bool(torch.allclose(got.float(), expected.float(), atol=5e-2, rtol=5e-2))

    settings = TimingSettings(target_ms=200.0) if gpu else TimingSettings(interpreter_reps=1)

    def median_s(fn: Callable[[], Any]) -> float:
        if gpu:
            return gpu_median_seconds(fn, settings)[0]
        return wall_median_seconds(fn, settings)[0]

    rows: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in [*base, "step"]}
    for _ in range(args.rounds):
        run_step(base), run_step(tuned)  # every intermediate of both, fresh
        for name in base:
            rows[name][0].append(median_s(base[name]))
            rows[name][1].append(median_s(tuned[name]))
        rows["step"][0].append(median_s(lambda: run_step(base)))
        rows["step"][1].append(median_s(lambda: run_step(tuned)))

    kind = "GPU timings (CUDA events, L2 flushed)" if gpu else "interpreter timings (CPU), smoke"
    device_name = fp["gpu_model"] if gpu else f"CPU {fp.get('cpu')}"
    print(
        f"\n{datetime.date.today()} · {device_name} · driver {fp.get('driver', '-')} · "
        f"CUDA {fp.get('cuda', '-')} · triton {fp['triton']} · torch {fp['torch']} · {kind}"
    )
    print(
        f"step: {args.norm} -> matmul -> swiglu -> matmul -> residual add, float16, "
        f"T={T} D={D} H={H}; store {args.state_dir}; outputs match: {close}\n"
    )
    print("| call | loaded as | original | tuned.runtime.load | speedup |")
    print("|---|---|---|---|---|")
    for name, (orig, mine) in rows.items():
        o, m = statistics.median(orig), statistics.median(mine)
        kernel = name.split(" ")[0]
        how = status.get(kernel, "") if name != "step" else "end to end"
        label = f"**{name}**" if name == "step" else name
        print(f"| {label} | {how} | {o * 1e3:.3f} ms | {m * 1e3:.3f} ms | {o / m:.2f}x |")
    return 0 if close else 1


if __name__ == "__main__":
    sys.exit(main())
