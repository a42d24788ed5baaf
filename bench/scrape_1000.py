"""How long a Prometheus scrape of ktuned takes with 1,000 registered kernels.

    python bench/scrape_1000.py [--kernels 1000] [--evaluations 6] [--scrapes 30]
    python bench/scrape_1000.py --smoke      # 5 kernels, 3 scrapes: runs, no result

Builds a store with N kernels (each: a baseline, E-1 candidates with a mix of outcomes and
phase timings, an accepted best), serves it with the daemon's own collector and HTTP server
(plus the process collector, as `ktuned run` does), and times real HTTP GETs of /metrics: the
first scrape (which reads every evaluation once) and the steady state (median, p95, max). The
target is a steady-state scrape under 100 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from prometheus_client import CollectorRegistry, ProcessCollector

from bench.harness import bench_parser, state_dir
from tests.conftest import ADD_SOURCE, ADD_YAML
from tuned.metrics import GpuLabels, LiveStatus, MetricsServer, StoreCollector
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.registry import load_entry
from tuned.store.sqlite import SqliteStore

OUTCOMES = (Outcome.OK, Outcome.OK, Outcome.OK, Outcome.COMPILE_ERROR, Outcome.INCORRECT)


def build(path: Path, kernels: int, evaluations: int) -> SqliteStore:
    entry = path.parent / "entry"
    entry.mkdir()
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="k"))
    template = load_entry(entry)
    store = SqliteStore(path)
    fid = store.record_fingerprint({"gpu_model": "none", "mode": "interpreter"})
    blocks = template.knobs["BLOCK"]
    warps = template.knobs["num_warps"]
    for i in range(kernels):
        spec = dataclasses.replace(template, name=f"kernel_{i:04d}", generation=f"{i:064x}")
        store.sync_kernel(spec)
        for j in range(evaluations):
            original = j == 0
            knobs = (
                dict(spec.baseline_knobs)
                if original
                else {
                    "BLOCK": blocks[j % len(blocks)],
                    "num_warps": warps[(j // len(blocks)) % len(warps)],
                }
            )
            c = Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=spec.module_source,
                knobs=knobs,
                provenance=Provenance.ORIGINAL if original else Provenance.PARAMETRIC,
                strategy="original" if original else "config",
            )
            store.add_candidate(c)
            outcome = Outcome.OK if original else OUTCOMES[(i + j) % len(OUTCOMES)]
            t = 1e-3 * (1.0 - 0.05 * j) if outcome is Outcome.OK else None
            result = EvalResult(
                outcome,
                time_s=t,
                timing_kind="interpreter",
                phase_seconds={
                    "load": 0.3,
                    "compile": 1.5 + j,
                    "correctness": 2.0,
                    "benchmark": 4.0,
                },
            )
            store.record_evaluation(c, fid, result, started_at=time.time(), wall_s=8.0)
            if j == 2 and outcome is Outcome.OK:
                store.record_acceptance(
                    c, fid, incumbent_id="baseline", status="accepted", first={}, second=None
                )
    return store


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--kernels", type=int, default=1000)
    parser.add_argument("--evaluations", type=int, default=6, help="per kernel, baseline included")
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args(argv)
    if args.smoke:  # 5 kernels, a few scrapes
        args.kernels, args.scrapes = 5, 3
    with state_dir(None, prefix="ktuned-scrape-") as work:
        return _measure(args, work)


def _measure(args: argparse.Namespace, work: Path) -> int:
    t0 = time.perf_counter()
    store = build(work / "ktuned.sqlite", args.kernels, args.evaluations)
    built = time.perf_counter() - t0
    live = LiveStatus()
    live.update(
        daemon_state="tuning",
        kernel_states={f"kernel_{i:04d}": "tuning" for i in range(args.kernels)},
        gpus=(GpuLabels("interpreter", "", "none", "interpreter"),),
    )
    registry = CollectorRegistry()
    collector = StoreCollector(store.path, live)
    registry.register(collector)
    ProcessCollector(registry=registry)
    server = MetricsServer(host="127.0.0.1", port=0, registry=registry)
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"

    cpu: list[float] = []

    def scrape() -> tuple[float, int]:
        t, c = time.perf_counter(), time.process_time()
        with urllib.request.urlopen(url, timeout=30) as r:
            body = r.read()
        cpu.append((time.process_time() - c) * 1000)  # server and client: one process
        return (time.perf_counter() - t) * 1000, len(body)

    first, size = scrape()
    times = sorted(scrape()[0] for _ in range(args.scrapes))
    cpu_static = sorted(cpu[1:])
    # As under a running daemon: a new evaluation (and acceptance) lands between scrapes.
    busy = []
    fid = store.record_fingerprint({"gpu_model": "none", "mode": "interpreter"})
    for n in range(args.scrapes):
        kernel = store.kernel(f"kernel_{(n * 37) % args.kernels:04d}")
        assert kernel is not None
        c = Candidate(
            kernel=kernel.name,
            generation=kernel.generation,
            source=ADD_SOURCE,
            knobs={"BLOCK": 1024, "num_warps": 1 + n % 3},
            provenance=Provenance.PARAMETRIC,
            strategy="config",
        )
        store.add_candidate(c)
        result = EvalResult(Outcome.OK, time_s=5e-4, timing_kind="interpreter")
        store.record_evaluation(c, fid, result, started_at=time.time(), wall_s=1.0)
        store.record_acceptance(
            c, fid, incumbent_id="baseline", status="accepted", first={}, second=None
        )
        busy.append(scrape()[0])
    busy.sort()
    cpu_busy = sorted(cpu[-args.scrapes :])
    server.stop()
    collector.close()
    store.close()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    median = statistics.median(times)
    print(
        f"store: {args.kernels} kernels x {args.evaluations} evaluations "
        f"({args.kernels * args.evaluations} rows), built in {built:.1f} s"
    )
    print(f"/metrics body: {size / 1024:.0f} KiB")
    print(f"first scrape (reads every evaluation once): {first:.1f} ms")
    print(
        f"steady-state scrape over {args.scrapes}: median {median:.1f} ms, p95 {p95:.1f} ms, "
        f"max {times[-1]:.1f} ms (target < 100 ms)"
    )
    print(
        f"scrape with a new evaluation + acceptance before each, over {args.scrapes}: median "
        f"{statistics.median(busy):.1f} ms, max {busy[-1]:.1f} ms"
    )
    print(
        f"CPU time per scrape (server + client, this process): median "
        f"{statistics.median(cpu_static):.1f} ms steady, {statistics.median(cpu_busy):.1f} ms "
        "with a new evaluation before each"
    )
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(load)}")
    return 0 if median < 100 else 1


if __name__ == "__main__":
    sys.exit(main())
