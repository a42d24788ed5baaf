"""Tune every Liger-Kernel entry of examples/liger and show what ktuned gets from code as shipped.

    python bench/liger_bench.py [--budget 3] [--ops rms-norm,softmax] [--state-dir DIR]
    python bench/liger_bench.py --smoke      # CPU: interpreter, tiny shapes, two ops (CI)

1. Scans the registry: each entry is registered unchanged, or the reason it is not.
2. Tunes the selected entries with exactly what ``ktuned tune`` runs (``--budget`` evaluated
   candidates per entry besides the shipped baseline).
3. In a fresh process (``--remeasure``, never the tuning workers), per entry and timed shape:
   the shipped configuration and the best one found, timed interleaved (CUDA events, L2
   flushed); PyTorch eager (the entry's ``eager``); the bytes the call must move (its tensor
   inputs and outputs, gradients included, plus the incoming gradients for fwd+bwd entries)
   over time, as a share of the device's copy bandwidth measured here (``dst.copy_(src)`` of
   512 MiB: 2 x 512 MiB moved) — the copy ceiling — and of a copy that moves as many bytes
   as the call (at 64 MiB a copy's launch and tail are a larger share of its time). The fresh
   copies each call makes of the arguments it writes and of the inputs it differentiates
   (read + write) count as moved. "tuned" is, per shape, the variant ``tuned.runtime.load``
   dispatches there.

Prints one markdown row per entry and shape, then the totals: the share of entries
registered unchanged, the share with a non-empty space, the geomean tuned speedup, the budget
and the wall time used. ``--smoke`` runs all of it in Triton's interpreter on the entries'
CPU-size shapes: its times are interpreter times, never GPU results.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, state_dir
from profilers.timing import (
    TimingSettings,
    gpu_median_seconds,
    interleaved_timing,
    wall_median_seconds,
)
from tuned.evaluation.client import EvaluationSettings, kernel_payload
from tuned.outcomes import Provenance
from tuned.pipeline import compile_workers_for
from tuned.registry import scan_registry
from tuned.runtime.loader import current_fingerprint
from tuned.runtime.plan import plan_for
from tuned.search import TuneSettings
from tuned.store.sqlite import SqliteStore
from tuned.tuning import tune_registry

REGISTRY = ROOT / "examples" / "liger"


def interrupt_after(seconds: float) -> threading.Timer:
    """A started timer that sends this process SIGINT after ``seconds`` (``cancel()`` it to
    stop it): Python's handler raises ``KeyboardInterrupt`` in the main thread, in a blocking
    wait too (a signal interrupts the system call; ``_thread.interrupt_main`` would wait for
    it to return). Python's handler is installed first: a process started in the background
    by a shell (``command &``) begins with SIGINT ignored, and the signal would do nothing."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.daemon = True
    timer.start()
    return timer


class _WallLimitReached(Exception):
    """--wall-limit seconds of tuning have passed: the entries not reached are skipped."""


SMOKE_OPS = ("liger-softmax", "liger-rope-fwd-bwd")
SMOKE_CAP = 1024  # elements: the entries' CPU-size shapes


def _select(
    registry: Path, ops: str | None, smoke: bool, subset: Path
) -> tuple[list[str], list[str], Path]:
    """(registered rows, selected entry names, a registry of the selected entries, made
    at ``subset``)."""
    scan = scan_registry(registry)
    rows = [f"| {s.name} | yes | {s.space_size() if s.knobs else 0} |" for s in scan.entries]
    for directory, problems in scan.invalid.items():
        reason = str(problems[0]).replace("|", "/")[:160] if problems else "?"
        rows.append(f"| {Path(directory).name} | no: {reason} | - |")
    wanted = set(SMOKE_OPS) if smoke and not ops else None
    if ops:
        wanted = {o if o.startswith("liger-") else f"liger-{o}" for o in ops.split(",")}
    chosen = [s for s in scan.entries if wanted is None or s.name in wanted]
    subset.mkdir(parents=True)
    for spec in chosen:
        shutil.copytree(spec.directory, subset / spec.directory.name)
        if smoke:  # Triton's interpreter emulates bfloat16 with stray NaNs: float32 on the CPU
            yaml = subset / spec.directory.name / "kernel.yaml"
            yaml.write_text(yaml.read_text().replace("[bfloat16]", "[float32]"))
    return rows, [s.name for s in chosen], subset


def _bytes(values: Any) -> int:
    import torch

    items = values if isinstance(values, (list, tuple)) else (values,)
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor))


def _copy_bandwidth(gpu: bool, moved: int | None = None) -> float:
    """Bytes per second of a device copy (read + write), the ceiling of a memory-bound op:
    of 512 MiB, or one that moves ``moved`` bytes (a call's own size: a 64 MiB op's launch
    and tail are a larger share of its time than a 1 GiB one's)."""
    import torch

    n = moved // 2 if moved else (512 << 20) if gpu else (16 << 20)
    device = "cuda" if gpu else "cpu"
    src = torch.ones(max(1, n // 4), dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)
    fn()
    median, _ = gpu_median_seconds(fn) if gpu else wall_median_seconds(fn)
    return 2 * src.numel() * 4 / median


def _run(fn: Any, knobs: dict[str, Any], inputs: Any) -> Any:
    return fn(*inputs, **knobs)


def _copied_bytes(
    outputs: tuple[int | str, ...], backward: tuple[int | str, ...], names: list[str], inputs: Any
) -> int:
    """Bytes of the inputs every call copies (written arguments, inputs whose gradients are
    taken: tuned.evaluation.invoke makes them fresh for each call, inside the timed call)."""
    import torch

    if tuple(backward) == ("*",):
        chosen = {
            i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()
        }
    else:
        chosen = {names.index(n) if isinstance(n, str) else n for n in backward}
    chosen |= {names.index(n) if isinstance(n, str) else n for n in outputs}
    return sum(_bytes(inputs[i]) for i in chosen if i < len(inputs))


def _measure_case(
    calls: dict[str, Any], inputs: Any, backward: bool, gpu: bool, settings: TimingSettings
) -> dict[str, Any]:
    """Shipped and tuned timed interleaved, eager alone, and the bytes one call moves."""
    moved = _bytes(inputs) + _bytes(calls["shipped"](inputs))
    if backward:  # the incoming gradient of each forward output: copied fresh, then read
        moved += 3 * _bytes(calls["forward"](inputs))
    calls["tuned"](inputs)
    timed = interleaved_timing(
        [lambda: calls["tuned"](inputs), lambda: calls["shipped"](inputs)],
        gpu=gpu,
        settings=settings,
    )
    tuned_s, shipped_s = (sorted(s)[len(s) // 2] for s in timed.samples)
    calls["eager"](inputs)
    median = gpu_median_seconds if gpu else wall_median_seconds
    eager_s = median(lambda: calls["eager"](inputs), settings)[0]
    return {"shipped_s": shipped_s, "tuned_s": tuned_s, "eager_s": eager_s, "bytes": moved}


def _runnable(
    payload: dict[str, Any], source: str, knobs: Any
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """The kernel payload, candidate source and knobs as the worker runs them: where knob
    injection (issue 19 item 1) is present, injected knobs are written into the source the
    way the worker does before it calls the launcher."""
    request = {"kernel": payload, "candidate": {"source": source, "knobs": dict(knobs)}}
    try:
        from tuned.registry.injection import runnable_request  # type: ignore[import-not-found]
    except ImportError:
        return payload, source, dict(knobs)
    done = runnable_request(request)
    candidate = done["candidate"]
    if candidate.get("injection_error"):
        raise RuntimeError(f"{payload['name']}: {candidate['injection_error']}")
    return dict(done["kernel"]), str(candidate["source"]), dict(candidate["knobs"])


def remeasure(registry: Path, state: Path, smoke: bool) -> None:
    """Interleaved re-measurement of shipped vs best, with eager and the copy ceiling (JSON
    lines on stdout). Runs in its own process, after tuning."""
    import torch

    from tuned.evaluation.invoke import CallFields, EntryCall, entry_call, resolve
    from tuned.evaluation.worker import ModuleLoader, entry_key

    gpu = not smoke
    device = "cuda" if gpu else "cpu"
    settings = TimingSettings(interpreter_reps=3)
    bandwidth = _copy_bandwidth(gpu)
    print(json.dumps({"copy_bandwidth": bandwidth}), flush=True)
    store = SqliteStore(state / "ktuned.sqlite")
    here = current_fingerprint()
    with tempfile.TemporaryDirectory(prefix="liger-remeasure-") as modules:
        loader = ModuleLoader(Path(modules))
        for spec in scan_registry(registry).entries:
            best = store.best(spec.name)
            if best is None:
                print(json.dumps({"entry": spec.name, "error": "no successful evaluation"}))
                continue
            # Per timed shape, the variant `tuned.runtime.load` dispatches there (a shape whose
            # best has not won a side-by-side comparison runs the original): the overall best
            # can be slower than shipped on another shape (on the H200, Liger's GeGLU forward
            # and backward at 16384x8192, 0.98x).
            plan = plan_for(store, spec.name, here)
            dispatched = (
                {s.label: plan.variants[v] for s, v in zip(plan.shapes, plan.shape_variant)}
                if plan.status in ("tuned", "original")
                else {}
            )
            source = store.source(best.source_hash) or spec.module_source
            payload, _, _ = _runnable(kernel_payload(spec), source, best.knobs)
            key, extra = entry_key(payload), payload["extra_files"]
            package = str(payload.get("package") or "")  # a copy of Liger's own module

            def variant(
                source: str, knobs: Any, spec: Any = spec, key: str = key, package: str = package
            ) -> tuple[EntryCall, dict[str, Any]]:
                """The launcher of ``source`` and its knobs, as the worker runs them."""
                request, runnable, knobs = _runnable(kernel_payload(spec), source, knobs)
                module = loader.load(
                    runnable, directory_key=key, extra_files=request["extra_files"], package=package
                )
                return entry_call(module, request, role="launcher"), knobs

            original = loader.load(
                spec.module_source, directory_key=key, extra_files=extra, package=package
            )
            entry = loader.load(  # the entry's module: inputs and eager
                spec.entry_source or spec.module_source, directory_key=key, extra_files=extra
            )
            shipped = entry_call(original, payload, role="launcher")
            forward_only = CallFields(outputs=spec.outputs)
            names = shipped.parameters()
            eager = EntryCall(
                target=resolve(entry, "eager", "eager"),
                fields=CallFields(backward=spec.backward),
                role="reference",
                names=names,
            )
            forward = EntryCall(target=shipped.target, fields=forward_only, role="launcher")
            make_inputs = resolve(entry, spec.inputs, "inputs")
            shapes = spec.perf_shapes if gpu else (min(spec.shapes, key=lambda s: s.size()),)
            base_knobs = dict(payload["baseline_knobs"])
            for shape in shapes:
                for dtype_name in spec.dtypes:
                    dims = dict(shape.dims)
                    ref = dispatched.get(f"{shape.label()}/{dtype_name}")
                    if ref is not None:
                        chosen = store.source(ref.source_hash) or spec.module_source
                        knobs: Any = ref.knobs
                        original_best = ref.provenance == Provenance.ORIGINAL.value
                    else:  # not a timed case of the store's (a smoke run's CPU shape)
                        chosen, knobs = source, best.knobs
                        original_best = best.provenance is Provenance.ORIGINAL
                    tuned, best_knobs = variant(chosen, knobs)
                    # As the store records them; none where the original runs (its own knobs
                    # re-measured against themselves would show noise as a gain or a loss).
                    shown = {} if original_best else dict(knobs)
                    inputs = make_inputs(dims, getattr(torch, dtype_name), device, 0)
                    calls = {
                        "tuned": functools.partial(_run, tuned.at(dims), best_knobs),
                        "shipped": functools.partial(_run, shipped.at(dims), base_knobs),
                        "eager": functools.partial(_run, eager.at(dims), {}),
                        "forward": functools.partial(_run, forward.at(dims), base_knobs),
                    }
                    found = _measure_case(calls, inputs, bool(spec.backward), gpu, settings)
                    if original_best:  # one configuration: its own time on both sides
                        found["tuned_s"] = found["shipped_s"]
                    found["bytes"] += 2 * _copied_bytes(spec.outputs, spec.backward, names, inputs)
                    del inputs
                    found["same_size_copy_bandwidth"] = _copy_bandwidth(gpu, found["bytes"])
                    found.update(
                        entry=spec.name, shape=shape.label(), dtype=dtype_name, best_knobs=shown
                    )
                    print(json.dumps(found), flush=True)
                    if gpu:
                        torch.cuda.empty_cache()
    store.close()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, default=REGISTRY)
    parser.add_argument("--budget", type=int, default=3, help="candidates per entry")
    parser.add_argument("--ops", default=None, help="comma-separated entry names (liger-...)")
    parser.add_argument(
        "--policy", default="hierarchical", help="the tuning policy (ktuned's default)"
    )
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes")
    parser.add_argument(
        "--wall-limit",
        type=float,
        default=420.0,
        help="seconds of tuning after which the remaining entries are skipped (listed)",
    )
    parser.add_argument(
        "--wall-grace",
        type=float,
        default=60.0,
        help="seconds past --wall-limit after which an evaluation still running is interrupted",
    )
    parser.add_argument("--remeasure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.remeasure:
        remeasure(args.registry, args.state_dir, args.smoke)
        return 0

    with state_dir(None, prefix="liger-bench-") as scratch:  # removed at the end
        return _bench(args, scratch)


def _bench(args: argparse.Namespace, scratch: Path) -> int:
    started = time.monotonic()
    rows, chosen, subset = _select(args.registry, args.ops, args.smoke, scratch / "registry")
    state = args.state_dir or scratch / "state"
    store = SqliteStore(state / "ktuned.sqlite")
    evaluation = EvaluationSettings(
        interpreter=args.smoke,
        interpreter_max_size=SMOKE_CAP
        if args.smoke
        else EvaluationSettings(interpreter=False).interpreter_max_size,
    )
    summaries: list[Any] = []
    fp: dict[str, str] = {}
    skipped: list[str] = []
    reached: set[str] = set()
    counts: dict[str, int] = {}

    def on_start(total: int) -> Any:
        print(f"tuning {len(chosen)} entries, up to {total} evaluations", file=sys.stderr)

        def on_result(spec: Any, candidate: Any, result: Any, summary: Any) -> None:
            reached.add(spec.directory.name)
            counts[spec.name] = counts.get(spec.name, 0) + 1
            # A failure's phase and reason too: the state directory may not outlive the run
            # (the H100 run's cross-entropy-fwd-bwd original failed, and nothing said why).
            detail = (
                _ms(result.time_s)
                if result.time_s is not None
                else f"({result.phase}) {' '.join(str(result.reason).split())[:400]}"
            )
            print(
                f"{time.monotonic() - started:7.1f}s {spec.name} #{counts[spec.name]} "
                f"{candidate.provenance.value} {result.outcome.value} {detail}",
                file=sys.stderr,
            )
            if time.monotonic() - started > args.wall_limit:
                raise _WallLimitReached  # what was evaluated is in the store

        return on_result

    # One tuning run over every selected entry, as `ktuned tune` runs a registry: one GPU
    # worker and its spares, and the compile pool (the CLI's default size), for all entries.
    # The limit is checked as each result comes in; one evaluation may run for its phases'
    # deadlines (on the H100 an entry's first evaluation ran for minutes, past the device
    # call, and nothing was re-measured): past the limit and a grace, interrupt the run.
    watchdog = interrupt_after(args.wall_limit + args.wall_grace)
    try:
        report = tune_registry(
            subset,
            store=store,
            state_dir=state,
            settings=TuneSettings(budget=args.budget, policy=args.policy),
            evaluation=evaluation,
            on_start=on_start,
            compile_workers=compile_workers_for(None, interpreter=args.smoke),
        )
        summaries, fp = report.summaries, report.fingerprint or fp
    except (_WallLimitReached, KeyboardInterrupt):
        fp = next(iter(store.known_fingerprints().values()), fp)
        for entry in sorted(p for p in subset.iterdir() if p.is_dir()):
            if entry.name not in reached:  # never started: out of the re-measurement
                skipped.append(entry.name)
                shutil.rmtree(entry)
    finally:
        watchdog.cancel()
    store.close()
    tuned_wall = time.monotonic() - started
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    if args.smoke:
        env["TRITON_INTERPRET"] = "1"
    command = [sys.executable, __file__, "--remeasure", "--registry", str(subset)]
    command += ["--state-dir", str(state)] + (["--smoke"] if args.smoke else [])
    fresh = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if fresh.returncode != 0:
        print(fresh.stderr[-4000:], file=sys.stderr)
        return 1
    lines = [json.loads(line) for line in fresh.stdout.splitlines() if line.startswith("{")]
    bandwidth = float(lines[0]["copy_bandwidth"])
    spaces = {r.split("|")[1].strip(): r for r in rows}
    kind = "interpreter times (CPU), not GPU results" if args.smoke else "GPU times"
    print(
        f"# Liger-Kernel registry · {fp.get('gpu_model')} · triton {fp.get('triton')} · "
        f"torch {fp.get('torch')} · {kind}"
    )
    print(f"copy ceiling: {bandwidth / 1e9:.0f} GB/s (dst.copy_(src), read + write)\n")
    print(
        "| entry | shape | registered unchanged | space | shipped | tuned | speedup | "
        "ceiling before | ceiling after | same-size copy before / after | eager | best knobs |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    logs: list[float] = []
    for item in lines[1:]:
        name = item["entry"]
        registered = spaces.get(name, f"| {name} | yes | ? |").split("|")
        if "error" in item:
            print(
                f"| {name} | - | {registered[2].strip()} | {registered[3].strip()} | "
                f"{item['error']} | | | | | | | |"
            )
            continue
        speedup = item["shipped_s"] / item["tuned_s"]
        logs.append(math.log(speedup))
        before = item["bytes"] / item["shipped_s"] / bandwidth
        after = item["bytes"] / item["tuned_s"] / bandwidth
        same = float(item["same_size_copy_bandwidth"])
        own = " / ".join(f"{item['bytes'] / item[k] / same:.0%}" for k in ("shipped_s", "tuned_s"))
        print(
            f"| {name} | {item['shape']}/{item['dtype']} | {registered[2].strip()} | "
            f"{registered[3].strip()} | {_ms(item['shipped_s'])} | {_ms(item['tuned_s'])} | "
            f"{speedup:.2f}x | {before:.0%} | {after:.0%} | {own} | {_ms(item['eager_s'])} | "
            f"{item['best_knobs'] or 'shipped'} |"
        )
    total = len(rows)
    unchanged = sum(1 for r in rows if "| yes |" in r)
    spaced = sum(1 for r in rows if "| yes |" in r and r.split("|")[3].strip() not in ("0", "1"))
    geomean = f"{math.exp(sum(logs) / len(logs)):.3f}x" if logs else "none measured"
    print(
        f"\nregistered unchanged: {unchanged}/{total} ({unchanged / total:.0%}); non-empty "
        f"space: {spaced}/{total} ({spaced / total:.0%}); geomean tuned speedup over shipped "
        f"({len(logs)} entry x shape): {geomean}"
    )
    print(
        f"budget: {args.budget} candidates per entry x {len(chosen) - len(skipped)} entries "
        f"tuned; wall: {tuned_wall:.0f} s tuning, {time.monotonic() - started:.0f} s in all"
    )
    if skipped:
        print(f"not tuned (--wall-limit {args.wall_limit:.0f} s reached): {', '.join(skipped)}")
    for summary in summaries:
        if summary.failures:
            print(f"- {summary.kernel}: failures {dict(summary.failures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
