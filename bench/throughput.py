"""Evaluation throughput: a serial autotuner-style sweep against ktuned's pipelined sweep.

On a GPU (the figures of bench/RESULTS.md), with the example matmul at one timed shape
(fp16, 4096^3) and a knob space of 216 configurations:

(a) **serial sweep** in the style of Triton's autotuner: one process, a fresh Triton cache,
    each configuration compiled (its first launch) then timed like ``do_bench``
    (``profilers.timing.gpu_median_seconds``: L2 flushed, median), one after another;
(b) **ktuned's pipelined sweep** of the same configurations: the compile pool (default: the
    cores minus one) compiles ahead into the GPU worker's Triton cache (fresh too) while the
    worker checks and times them one at a time (``tuned.pipeline.evaluate_ahead``; every
    correctness check runs, timing with the same settings as (a));
(c) **ktuned's default policy** (hierarchical bandit, through the pipeline, from a fresh
    state and a cold cache): wall time until it has evaluated (outcome ok) a configuration
    within 1 % of the sweep's best *by the referee*, as a fraction of (a)'s wall time.

The referee (``bench/referee.py``, whose docstring says how and why), run after (a) and (b)
and before (c), decides what "the sweep's best" is: it re-times the union of (a)'s and
(b)'s fastest configurations in a fresh process, in rounds, because (a)'s single timings are
noisy. A configuration outside the referee set never counts for (c). Also printed, same loop:

- the old criterion, a configuration within 1 % of (a)'s best in (a)'s table (comparable with
  the earlier figures of bench/RESULTS.md); the loop runs until both criteria are met (or (a)'s
  wall, the cap);
- when the store's incumbent (``store.best``, the configuration the campaign *holds*) was
  first within 1 % of the referee's best by the referee, if that came before the loop ended.

Printed: configurations per minute of (a) and (b), their best configurations (and (b)'s best
timed by (a)), the GPU's busy fraction during (b) (benchmark-phase seconds / wall, and NVML
utilization sampled every 0.1 s when pynvml is there), the referee's table (each
configuration's referee time, its ratio to the referee's best and in (a)'s and (b)'s tables,
the spread of its rounds) and (c)'s three times. ``--out`` gets a JSON with every
configuration's times in (a) and (b) (the exhaustive table), the referee's per-round times,
the policy's steps and the summary. On a CPU (``--smoke``) every timing is the interpreter's
wall clock: the run only shows that the benchmark works.

    python bench/throughput.py --out throughput.json          # GPU, about 7 minutes on an H100
    python bench/throughput.py --smoke --out /tmp/t.json      # CPU interpreter, seconds: CI

Walls exclude process start-up (PyTorch imports, CUDA context) on both sides: a tuner runs
inside a process that is already up, as the daemon's worker and pool are.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.harness import ROOT, Stopwatch, require_gpu
from bench.referee import (
    key,
    referee_child,
    referee_set,
    referee_times,
    run_referee,
)
from bench.stack_sampler import StackSampler
from bench.throughput_report import CRITERIA, print_table, summarize
from profilers.timing import TimingSettings
from tuned.acceptance import speedup_interval
from tuned.evaluation.client import GPU_SPARES, EvaluationSettings, WorkerClient
from tuned.evaluation.compile_pool import (
    CompilePool,
    CompileTarget,
    default_compile_workers,
)
from tuned.evaluation.sandbox import SandboxSettings
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.pipeline import PipelineSettings, evaluate_ahead, pipeline_for
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore

MATMUL = ROOT / "examples" / "registry" / "matmul"

GPU_KNOBS: dict[str, list[int]] = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [8],
    "num_warps": [4, 8],
    "num_stages": [2, 3, 4, 5],
}
SMOKE_KNOBS: dict[str, list[int]] = {
    "BLOCK_M": [16, 32],
    "BLOCK_N": [16, 32],
    "BLOCK_K": [16],
    "GROUP_M": [8],
    "num_warps": [4],
    "num_stages": [2],
}
GPU_SHAPE = {"M": 4096, "N": 4096, "K": 4096}
SMOKE_SHAPE = {"M": 32, "N": 32, "K": 32}
WITHIN = 1.01  # (c): within 1 % of the best


def write_entry(directory: Path, *, smoke: bool) -> Path:
    """The example matmul with one timed shape and the benchmark's knob space."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(MATMUL / "matmul.py", directory / "matmul.py")
    shape = SMOKE_SHAPE if smoke else GPU_SHAPE
    knobs = SMOKE_KNOBS if smoke else GPU_KNOBS
    dims = ", ".join(f"{k}: {v}" for k, v in shape.items())
    knob_lines = "\n".join(f"  {k}: {v}" for k, v in knobs.items())
    (directory / "kernel.yaml").write_text(
        f"name: matmul\nmodule: matmul.py\nlauncher: matmul\nreference: reference\n"
        f"inputs: make_inputs\nshapes:\n  - {{{dims}, perf: true}}\ndtypes: [float16]\n"
        f"tolerance: {{float16: {{atol: 1.0e-2, rtol: 1.0e-2}}}}\nknobs:\n{knob_lines}\n"
    )
    return directory


def configurations(knobs: dict[str, list[int]], limit: int | None) -> list[dict[str, int]]:
    names = list(knobs)
    out = [dict(zip(names, values)) for values in itertools.product(*knobs.values())]
    return out[:limit] if limit else out


# ----------------------------------------------------------------------------- (a) serial


def load_kernel(entry: Path, work: Path) -> tuple[Any, Any, Any, bool]:
    """In a child process: the matmul module, (a)'s inputs (seed 0) and whether on a GPU."""
    import torch

    gpu = os.environ.get("TRITON_INTERPRET") != "1"
    spec = importlib.util.spec_from_file_location("bench_matmul", entry / "matmul.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shape = json.loads((work / "shape.json").read_text())
    a, b = module.make_inputs(shape, torch.float16, "cuda" if gpu else "cpu", 0)
    return module, a, b, gpu


def serial_child(entry: Path, configs_path: Path, out_path: Path) -> None:
    """Runs in its own process with a fresh TRITON_CACHE_DIR: compile then time each config."""
    import torch

    from profilers.timing import gpu_median_seconds, wall_median_seconds

    module, a, b, gpu = load_kernel(entry, configs_path.parent)
    configs = json.loads(configs_path.read_text())
    timing = TimingSettings(interpreter_reps=1) if not gpu else TimingSettings()
    rows = []
    started = time.perf_counter()
    for config in configs:
        t0 = time.perf_counter()
        row: dict[str, Any] = {"knobs": config}
        try:
            module.matmul(a, b, **config)  # compiles (first launch), as the autotuner's first call
            if gpu:
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            fn = lambda c=config: module.matmul(a, b, **c)
            median, _ = (gpu_median_seconds if gpu else wall_median_seconds)(fn, timing)
            t2 = time.perf_counter()
            row.update(compile_s=t1 - t0, bench_s=t2 - t1, time_s=median)
        except Exception as exc:  # noqa: BLE001 - recorded per configuration, like the autotuner
            row.update(
                compile_s=time.perf_counter() - t0,
                bench_s=0.0,
                time_s=None,
                error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
            )
        rows.append(row)
    wall = time.perf_counter() - started
    out_path.write_text(json.dumps({"wall_s": wall, "rows": rows}))


def run_serial(
    entry: Path, configs: list[dict[str, int]], work: Path, *, smoke: bool
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    (work / "configs.json").write_text(json.dumps(configs))
    shape = SMOKE_SHAPE if smoke else GPU_SHAPE
    (work / "shape.json").write_text(json.dumps(shape))
    run_child("--serial-child", entry, work / "configs.json", work / "serial.json", smoke=smoke)
    data: dict[str, Any] = json.loads((work / "serial.json").read_text())
    return data


def run_child(flag: str, entry: Path, request: Path, out: Path, *, smoke: bool) -> None:
    """This script in a fresh process on the Triton cache of ``request``'s directory."""
    work = request.parent
    env = dict(os.environ, TRITON_CACHE_DIR=str(work / "triton-cache"), PYTHONPATH=str(ROOT))
    if smoke:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    subprocess.run(
        [sys.executable, __file__, flag, str(entry), str(request), str(out)], env=env, check=True
    )


# ----------------------------------------------------------------------------- (b) pipelined


class UtilizationSampler:
    """NVML GPU utilization every 0.1 s while running (nothing when pynvml is missing)."""

    def __init__(self, index: int = 0) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._handle: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml: Any = pynvml
        except Exception:  # noqa: BLE001 - no NVML: the benchmark-phase fraction stands alone
            self._handle = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> UtilizationSampler:
        if self._handle is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._handle is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.samples.append(float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) / 100.0 if self.samples else None


#: The workers' sandbox (docs/security.md): ``--sandbox none`` measures the cost of ``bwrap``.
SANDBOX = {"mode": "bwrap"}


def evaluation_settings(smoke: bool) -> EvaluationSettings:
    timing = TimingSettings(interpreter_reps=1) if smoke else TimingSettings()
    sandbox = SandboxSettings(mode=SANDBOX["mode"])
    return EvaluationSettings(interpreter=smoke, timing=timing, seeds=(0, 1), sandbox=sandbox)


def candidates_of(spec: KernelSpec, configs: list[dict[str, int]]) -> list[Candidate]:
    return [
        Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs=config,
            provenance=Provenance.PARAMETRIC,
            strategy="sweep",
        )
        for config in configs
    ]


def run_pipelined(
    spec: KernelSpec, configs: list[dict[str, int]], work: Path, *, workers: int, smoke: bool
) -> dict[str, Any]:
    settings = evaluation_settings(smoke)
    with WorkerClient(workdir=work / "worker", settings=settings) as client:
        t_start = time.perf_counter()
        client.start()
        target = CompileTarget.from_dict(client.target) if client.target else None
        with CompilePool(
            workdir=work / "compile",
            cache_dir=work / "worker" / "triton-cache",
            settings=settings,
            workers=workers,
            target=target,
        ) as pool:
            ready = pool.wait_ready(settings.startup_timeout_s)
            startup = time.perf_counter() - t_start
            rows = []
            with UtilizationSampler() as nvml:
                started = time.perf_counter()
                for candidate, result in evaluate_ahead(
                    spec, candidates_of(spec, configs), client=client, pool=pool
                ):
                    rows.append(
                        {
                            "knobs": dict(candidate.knobs),
                            "outcome": result.outcome.value,
                            "time_s": result.time_s,
                            "reason": result.reason[:300],
                            "phases": dict(result.phase_seconds),
                            "precompiled": bool(result.metadata.get("precompiled", False)),
                        }
                    )
                wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "startup_s": startup,
        "workers": workers,
        "workers_ready": ready,
        "target": None if target is None else target.to_dict(),
        "nvml_utilization": nvml.mean,
        "rows": rows,
    }


# ----------------------------------------------------------------------------- (c) policy


class RecordingClient(WorkerClient):
    """The worker client, recording each evaluation's wall and whether it was the first in
    a new worker process (the acceptance rule's re-measurements, restarts)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[dict[str, Any]] = []

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        starts, t0 = self.starts, time.perf_counter()
        result = super().evaluate(*args, **kwargs)
        self.calls.append(
            {
                "wall_s": round(time.perf_counter() - t0, 4),
                "new_process": self.starts != starts,
                "phases": {k: round(v, 4) for k, v in result.phase_seconds.items()},
            }
        )
        return result


def within(times: dict[str, float], knobs: dict[str, Any]) -> bool:
    """Whether ``knobs`` has a time in ``times`` within 1 % of the fastest there."""
    t = times.get(key(knobs))
    return t is not None and t <= WITHIN * min(times.values())


def first_interval(result: EvalResult) -> list[float] | None:
    """The acceptance rule's first interval of this evaluation against the incumbent it was
    timed with: [speedup, low, high] (``None``: not timed against one)."""
    mine = result.metadata.get("samples") or {}
    theirs = result.metadata.get("incumbent_samples") or {}
    if result.outcome is not Outcome.OK or not set(mine) & set(theirs):
        return None
    interval = speedup_interval(mine, theirs, np.random.default_rng(0))
    return [round(interval.speedup, 4), round(interval.low, 4), round(interval.high, 4)]


def run_policy(
    spec: KernelSpec,
    serial_times: dict[str, float],
    referee: dict[str, float],
    work: Path,
    *,
    workers: int,
    smoke: bool,
    cap_s: float,
) -> dict[str, Any]:
    """The default policy through the pipeline, recording when each of (c)'s criteria was
    first met: ``referee``: an evaluated (ok) configuration within 1 % of the referee's best by
    the referee; ``serial_table``: one within 1 % of (a)'s best in (a)'s table (the old
    criterion); ``incumbent``: the store's incumbent within 1 % of the referee's best by the
    referee (what the issue's "holds" means: the best a user would load). Runs until all
    three are met (or ``cap_s``, or the space is exhausted)."""
    store = SqliteStore(work / "state" / "ktuned.sqlite")
    store.sync_kernel(spec)
    settings = evaluation_settings(smoke)
    client = RecordingClient(
        workdir=work / "state" / "workers" / "0",
        settings=settings,
        spares=0 if smoke else GPU_SPARES,
    )
    with client:
        t_start = time.perf_counter()
        fid = store.record_fingerprint(client.start())
        campaign = Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
        )
        pipeline = pipeline_for(client, workers=workers, settings=PipelineSettings())
        pipeline.pool.wait_ready(settings.startup_timeout_s)
        startup = time.perf_counter() - t_start
        started = time.perf_counter()
        reached: dict[str, dict[str, Any] | None] = dict.fromkeys(CRITERIA)
        evaluations = 0
        steps: list[dict[str, Any]] = []
        try:
            while time.perf_counter() - started < cap_s:
                row = pipeline.step(campaign)
                if row is None:
                    break
                at = time.perf_counter() - started
                evaluations += 1
                knobs = dict(row.knobs)
                ok = row.result.outcome is Outcome.OK
                incumbent = store.best(spec.name, fid)  # two small queries: cheap per step
                held = None if incumbent is None else dict(incumbent.knobs)
                met = {
                    "referee": ok and within(referee, knobs),
                    "serial_table": ok and within(serial_times, knobs),
                    "incumbent": held is not None and within(referee, held),
                }
                for name in CRITERIA:
                    if met[name] and reached[name] is None:
                        which = held if name == "incumbent" else knobs
                        reached[name] = {"s": at, "evaluations": evaluations, "knobs": which}
                steps.append(
                    {
                        "at_s": round(at, 3),
                        "knobs": knobs,
                        "outcome": row.result.outcome.value,
                        "speculative_hit": bool(row.result.metadata.get("speculative")),
                        "phases": {k: round(v, 4) for k, v in row.result.phase_seconds.items()},
                        "incumbent_knobs": held,
                        "incumbent_within_1pct": met["incumbent"],
                        "speedup": row.result,  # its interval after the loop (not timed)
                        "screened": list(row.result.metadata.get("screened", [])),
                    }
                )
                if all(reached.values()):
                    break
        finally:
            for step in steps:
                step["speedup"] = first_interval(step["speedup"])
            pool_stats = {
                "speculated": pipeline.pool.speculated,
                "speculation_hits": pipeline.pool.speculation_hits,
            }
            pipeline.close()
        spare_takeovers, worker_starts = client.spare_takeovers, client.starts
        incumbent = store.best(spec.name, fid)
    store.close()
    held_knobs = None if incumbent is None else dict(incumbent.knobs)
    held_a = None if held_knobs is None else serial_times.get(key(held_knobs))
    held_r = None if held_knobs is None else referee.get(key(held_knobs))
    return {
        "reached": reached,
        "evaluations": evaluations,
        "cap_s": cap_s,
        "startup_s": startup,
        "incumbent_knobs": held_knobs,
        "incumbent_serial_ratio": None if held_a is None else held_a / min(serial_times.values()),
        "incumbent_referee_ratio": None if held_r is None else held_r / min(referee.values()),
        "lookahead": PipelineSettings().lookahead,
        "compiling": PipelineSettings().compiling,
        "worker_starts": worker_starts,
        "spare_takeovers": spare_takeovers,
        **pool_stats,
        "steps": steps,
        "worker_calls": client.calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON of every configuration")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny: for CI")
    parser.add_argument("--workers", type=int, default=None, help="compile processes (cores-1)")
    parser.add_argument("--configs", type=int, default=None, help="use only the first N")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    parser.add_argument(
        "--referee-rounds", type=int, default=10, help="rounds of the referee's timing (10)"
    )
    parser.add_argument(
        "--sample-stacks",
        type=Path,
        metavar="TXT",
        help="write where (c)'s main thread spent its time (bench/stack_sampler.py) to TXT",
    )
    parser.add_argument(
        "--sandbox", choices=("bwrap", "none"), default="bwrap", help="the workers' sandbox"
    )
    args = parser.parse_args(argv)
    SANDBOX["mode"] = args.sandbox
    if args.referee_rounds < 1:
        parser.error("--referee-rounds must be at least 1")
    workers = args.workers or (1 if args.smoke else default_compile_workers())
    knobs = SMOKE_KNOBS if args.smoke else GPU_KNOBS
    configs = configurations(knobs, args.configs)
    if not args.smoke:
        device = require_gpu(parser, what="throughput.py")
    else:
        device = "CPU (Triton interpreter; smoke run, not a result)"
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ktuned-throughput-"))
    entry = write_entry(work / "entry", smoke=args.smoke)
    spec = load_entry(entry)
    print(
        f"{len(configs)} configurations, {workers} compile processes, work dir {work}", flush=True
    )

    watch = Stopwatch()
    serial = run_serial(entry, configs, work / "serial", smoke=args.smoke)
    print(f"(a) serial sweep done in {watch.lap():.0f} s", flush=True)
    piped = run_pipelined(spec, configs, work / "pipelined", workers=workers, smoke=args.smoke)
    print(f"(b) pipelined sweep done in {watch.lap():.0f} s", flush=True)
    referee = run_referee(
        referee_set(serial, piped),
        work / "serial",
        rounds=args.referee_rounds,
        launch=lambda request, out: run_child(
            "--referee-child", entry, request, out, smoke=args.smoke
        ),
    )
    print(f"referee done in {watch.lap():.0f} s", flush=True)
    serial_times = {key(r["knobs"]): r["time_s"] for r in serial["rows"] if r["time_s"] is not None}
    if not serial_times or not referee_times(referee):
        sys.exit(
            f"nothing was timed (see {work}): (a) or the referee failed on every configuration"
        )
    watch.lap()
    with StackSampler() if args.sample_stacks else contextlib.nullcontext() as sampler:
        policy = run_policy(
            spec,
            serial_times,
            referee_times(referee),
            work / "policy",
            workers=workers,
            smoke=args.smoke,
            # On a GPU the target is 10 % of (a)'s wall: later than half of it is "not
            # reached", a result in itself. A smoke run (interpreter, seconds) just has to
            # get there.
            cap_s=600.0 if args.smoke else 0.5 * serial["wall_s"],
        )
    if sampler is not None:
        args.sample_stacks.write_text(sampler.report(top=60) + "\n")
    print(f"(c) default policy done in {watch.lap():.0f} s", flush=True)

    summary = summarize(serial, piped, referee, policy)
    print_table(summary, device)
    by_key = {key(r["knobs"]): r for r in piped["rows"]}
    table = [
        {
            "knobs": r["knobs"],
            "serial": {k: r.get(k) for k in ("compile_s", "bench_s", "time_s", "error")},
            "pipelined": by_key.get(key(r["knobs"])),
        }
        for r in serial["rows"]
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "device": device,
                "smoke": args.smoke,
                "shape": SMOKE_SHAPE if args.smoke else GPU_SHAPE,
                "workers": workers,
                "summary": summary,
                "pipelined": {k: v for k, v in piped.items() if k != "rows"},
                "referee": referee,
                "policy": policy,
                "configurations": table,
            },
            indent=1,
        )
    )
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serial-child":
        serial_child(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        sys.exit(0)
    if len(sys.argv) > 1 and sys.argv[1] == "--referee-child":
        request = Path(sys.argv[3])
        referee_child(load_kernel(Path(sys.argv[2]), request.parent), request, Path(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
