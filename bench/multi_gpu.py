"""Several GPUs in one box: one worker per GPU, fed by one compile pool.

    python bench/multi_gpu.py [--gpus 2] [--budget 40] [--entry examples/registry/matmul]
        [--out multi_gpu.json]

Tunes the example matmul (every declared shape, the default policy, a fresh state and a
cold Triton cache each time) through :class:`tuned.pipeline.MultiGpuPipeline` with 1, then
``--gpus`` lanes, each lane's worker pinned to its GPU by ``CUDA_VISIBLE_DEVICES``, and
prints evaluations per minute for each, the speed-up, how many evaluations each lane
measured, and which GPU each lane's worker process ran on as NVML saw it (sampled every
0.2 s: the proof that the pinning holds). Walls exclude start-up (worker and pool start).
Needs as many NVIDIA GPUs of one model as ``--gpus``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, write_json
from tuned.evaluation.client import GPU_SPARES, EvaluationSettings, WorkerClient
from tuned.evaluation.compile_pool import default_compile_workers
from tuned.pipeline import pipeline_for
from tuned.registry import load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore


class GpuProcesses:
    """NVML's compute processes per GPU index, sampled in the background."""

    def __init__(self, count: int) -> None:
        import pynvml

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.uuids = [str(pynvml.nvmlDeviceGetUUID(h)) for h in self.handles]
        self.seen: dict[int, set[int]] = {i: set() for i in range(count)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GpuProcesses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for i, h in enumerate(self.handles):
                try:
                    procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
                except self.nvml.NVMLError:
                    continue
                self.seen[i].update(int(p.pid) for p in procs)


class RecordingClient(WorkerClient):
    """A lane's worker client that records when each of its evaluations ran."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[float, float, str]] = []

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        result = super().evaluate(*args, **kwargs)
        self.calls.append((t0, time.perf_counter(), result.outcome.value))
        return result


def _overlap_s(calls: list[list[tuple[float, float, str]]]) -> float:
    """Seconds during which at least two lanes were measuring at once."""
    edges = sorted((t, d) for lane in calls for a, b, _ in lane for t, d in ((a, 1), (b, -1)))
    total, depth, last = 0.0, 0, 0.0
    for t, d in edges:
        if depth >= 2:
            total += t - last
        depth, last = depth + d, t
    return total


def run(entry: Path, lanes_n: int, budget: int, gpus: GpuProcesses) -> dict[str, Any]:
    spec = load_entry(entry)
    with tempfile.TemporaryDirectory(prefix=f"multi-gpu-{lanes_n}-") as tmp:
        work = Path(tmp)
        store = SqliteStore(work / "ktuned.sqlite")
        store.sync_kernel(spec)
        settings = EvaluationSettings(interpreter=False)
        cache = work / "workers" / "0" / "triton-cache"
        lanes = [
            RecordingClient(
                workdir=work / "workers" / str(i),
                settings=settings,
                spares=GPU_SPARES,
                env={"CUDA_VISIBLE_DEVICES": gpus.uuids[i]},
                cache_dir=cache,
            )
            for i in range(lanes_n)
        ]
        pids: dict[int, set[int]] = {}
        try:
            fid = store.record_fingerprint(lanes[0].start())
            for lane in lanes[1:]:
                lane.start()
            campaign = Campaign(
                spec=spec,
                store=store,
                client=lanes[0],
                fingerprint=fid,
                settings=TuneSettings(budget=budget),
            )
            pipeline = pipeline_for(lanes[0], workers=default_compile_workers(), lanes=lanes)
            pipeline.pool.wait_ready(120)
            started = time.perf_counter()
            try:
                while True:
                    for i, lane in enumerate(lanes):
                        pids.setdefault(i, set()).update(lane.pids())
                    if pipeline.step(campaign) is None:
                        break
            finally:
                measured = list(getattr(pipeline, "measured", [budget]))
                pipeline.close()
            wall = time.perf_counter() - started
            summary = campaign.summary()
            calls = [[c for c in lane.calls if c[0] >= started] for lane in lanes]
        finally:
            for lane in lanes:
                lane.close()
            store.close()
    on_gpu = {
        i: sorted(g for g, seen in gpus.seen.items() if seen & lane_pids)
        for i, lane_pids in pids.items()
    }
    return {
        "lanes": lanes_n,
        "evaluations": summary.evaluations,
        "wall_s": wall,
        "per_minute": 60.0 * summary.evaluations / wall,
        "measured_per_lane": measured,
        "worker_calls_per_lane": [len(c) for c in calls],
        "worker_busy_s_per_lane": [round(sum(b - a for a, b, _ in c), 2) for c in calls],
        "two_lanes_busy_s": round(_overlap_s(calls), 2),
        "lane_worker_seen_on_gpus": on_gpu,
        "baseline_s": summary.baseline_s,
        "best_s": summary.best_s,
        "best_knobs": summary.best_knobs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--budget", type=int, default=40)
    parser.add_argument("--entry", type=Path, default=ROOT / "examples" / "registry" / "matmul")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--order", default="", help="lane counts to run, e.g. 2,1,2 (default: 1, then --gpus)"
    )
    args = parser.parse_args(argv)
    results = []
    with GpuProcesses(args.gpus) as gpus:
        order = [int(n) for n in args.order.split(",")] if args.order else [1, args.gpus]
        for n in order:
            r = run(args.entry, n, args.budget, gpus)
            results.append(r)
            print(
                f"{n} GPU(s): {r['evaluations']} evaluations in {r['wall_s']:.1f} s = "
                f"{r['per_minute']:.1f} / min; best {r['best_s']} s; "
                f"per lane {r['measured_per_lane']} (worker calls "
                f"{r['worker_calls_per_lane']}, busy {r['worker_busy_s_per_lane']} s, "
                f"two at once {r['two_lanes_busy_s']} s); "
                f"lane workers seen on GPUs {r['lane_worker_seen_on_gpus']}",
                flush=True,
            )
    one = [r["per_minute"] for r in results if r["lanes"] == 1]
    many = [r["per_minute"] for r in results if r["lanes"] == args.gpus]
    if one and many and args.gpus > 1:
        mean = sum(many) / len(many) / (sum(one) / len(one))
        print(f"speed-up ({args.gpus} GPUs over 1, mean of runs): {mean:.2f}x")
    write_json(args.out, results, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
