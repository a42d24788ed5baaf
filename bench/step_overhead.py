"""Main-process seconds per pipelined evaluation, with the GPU worker's time taken out.

    python bench/step_overhead.py [--evaluations 60] [--seed 0] [--workers 15]
        [--speculate 4] [--space bench/data/matmul_H100.json.gz] [--top 25] [--shm]
    python bench/step_overhead.py --smoke    # 6 evaluations per case: runs, no result

On the H100 (``bench/throughput.py`` (c)), consecutive evaluations of the default policy
through :class:`~tuned.pipeline.CampaignPipeline` are 0.40-0.50 s apart while the worker
call takes 0.31-0.37 s: the rest is the daemon's main process (proposals, the speculative
guess, store reads and writes, pipeline bookkeeping). This measures that rest on this
machine: the real pipeline and :class:`~tuned.search.Campaign` with the default policy,
a SQLite store in a temporary directory (on disk: every write is a ``synchronous=FULL``
commit, as in the daemon; ``--shm``: in ``/dev/shm``), a replay of the recorded H100
matmul space (:class:`~tuned.evaluation.replay.ReplayClient`) standing in for the GPU
worker, and a compile pool that answers at once (:class:`SteadyPool`): ``--workers``
processes (15, as on the 16-core H100 box), of which speculative compiles finish
``--speculate`` per evaluation (about what 15 processes compile while the GPU measures one
candidate on the H100: 188 speculative compiles in 58 steps in the recorded run).

Per step, the wall time of :meth:`CampaignPipeline.step` minus the time spent inside the
client's ``evaluate`` (the lookup that stands in for the GPU) is the main-process overhead.
Printed for ``PipelineSettings()`` (speculation on, the default) and with speculation off:
the median, p90 and mean overhead over the steps after the baseline (the first step
measures the baseline and loads the policy: shown apart), then a second, identical run
under cProfile: the top functions by cumulative time, in ms per step. The candidates
evaluated are the same in both runs and for a given seed, and so are the speculative
compiles (their digests are printed: compare them before and after a change to check that
no decision, and no speculation, changed).
"""

from __future__ import annotations

import cProfile
import hashlib
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fleet_replay import compiled_at_once, replay_campaign
from bench.harness import ROOT, bench_parser
from bench.harness.spaces import MATMUL_H100
from policies import DEFAULT_POLICY
from tuned.evaluation.client import EvaluationSettings
from tuned.evaluation.compile_pool import Precompiled
from tuned.evaluation.replay import ReplayClient
from tuned.outcomes import Candidate, EvalResult
from tuned.pipeline import CampaignPipeline, PipelineSettings
from tuned.registry import KernelSpec

DEFAULT_SPACE = MATMUL_H100


class SteadyPool:
    """Stands in for :class:`~tuned.evaluation.compile_pool.CompilePool` in its steady
    state: a proposed candidate is compiled at once (its future is done: the GPU never
    waits), a speculative one occupies a process until :meth:`tick` (called once per
    evaluation: the time the GPU measures) finishes the ``per_tick`` oldest ones. So
    :meth:`pending` and the pipeline's room to speculate behave as with a real pool whose
    processes compile ``per_tick`` candidates per evaluation."""

    def __init__(self, workers: int, per_tick: int) -> None:
        self.workers = workers
        self.per_tick = per_tick
        self.settings = EvaluationSettings(interpreter=True)
        self.speculated: list[str] = []  # in the order submitted
        self._compiling: list[str] = []

    def tick(self) -> None:
        del self._compiling[: self.per_tick]

    def pending(self) -> int:
        return len(self._compiling)

    def submit(
        self, spec: KernelSpec, candidate: Candidate, *, speculative: bool = False
    ) -> Future[Precompiled]:
        if speculative:
            self.speculated.append(candidate.id)
            self._compiling.append(candidate.id)
        elif candidate.id in self._compiling:  # taken over: compiles first now, then done
            self._compiling.remove(candidate.id)
        return compiled_at_once(candidate)

    def close(self) -> None:
        pass


class TimedReplayClient(ReplayClient):
    """The replay client, with the seconds spent in :meth:`evaluate` (the simulated GPU
    worker's share of a step, taken out of the overhead) added up."""

    def __init__(self, spec: KernelSpec) -> None:
        super().__init__(spec)
        self.inside_s = 0.0

    def evaluate(
        self, spec: KernelSpec, candidate: Candidate, incumbent: Candidate | None = None, **kw: Any
    ) -> EvalResult:
        t0 = time.perf_counter()
        try:
            return super().evaluate(spec, candidate, incumbent, **kw)
        finally:
            self.inside_s += time.perf_counter() - t0


@dataclass
class Run:
    overheads_s: list[float] = field(default_factory=list)  # per step, the first included
    ids: list[str] = field(default_factory=list)  # evaluated candidates, in order
    speculated: list[str] = field(default_factory=list)  # speculative compiles, in order

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.ids).encode()).hexdigest()[:16]

    @property
    def speculated_digest(self) -> str:
        return hashlib.sha256("\n".join(self.speculated).encode()).hexdigest()[:16]


def run(
    space: Path,
    settings: PipelineSettings,
    *,
    evaluations: int,
    seed: int,
    workers: int,
    speculate: int,
    shm: bool,
    profiler: cProfile.Profile | None = None,
) -> Run:
    """``evaluations`` pipelined steps (the baseline first) on a fresh store."""
    base = Path("/dev/shm") if shm and Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="step-overhead-", dir=base) as tmp:
        campaign, store, replay = replay_campaign(
            Path(tmp), space, seed, policy=DEFAULT_POLICY, client_type=TimedReplayClient
        )
        assert isinstance(replay, TimedReplayClient)
        client = replay
        try:
            pool = SteadyPool(workers, speculate)
            pipeline = CampaignPipeline(pool=pool, settings=settings)  # type: ignore[arg-type]
            out = Run()
            for _ in range(evaluations):
                pool.tick()
                inside = client.inside_s
                t0 = time.perf_counter()
                if profiler is not None:
                    profiler.enable()
                row = pipeline.step(campaign)
                if profiler is not None:
                    profiler.disable()
                wall = time.perf_counter() - t0
                if row is None:
                    break
                out.overheads_s.append(wall - (client.inside_s - inside))
                out.ids.append(row.candidate_id)
            out.speculated = list(pool.speculated)
            return out
        finally:
            store.close()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def report(name: str, timed: Run, profiled: Run, stats: pstats.Stats, top: int) -> None:
    steady = timed.overheads_s[1:]
    steady_sorted = sorted(steady)
    p90 = steady_sorted[min(len(steady_sorted) - 1, int(0.9 * len(steady_sorted)))]
    print(f"## {name}\n")
    differs = "" if profiled.digest == timed.digest else f" (PROFILED: {profiled.digest}!)"
    print(
        f"{len(timed.ids)} evaluations, candidates digest {timed.digest}{differs}, "
        f"{len(timed.speculated)} speculative compiles (digest {timed.speculated_digest})\n"
    )
    print("| main-process overhead per step | ms |")
    print("| --- | --- |")
    print(f"| first step (baseline, policy load) | {_ms(timed.overheads_s[0])} |")
    print(f"| median (steps 2..{len(timed.ids)}) | {_ms(statistics.median(steady))} |")
    print(f"| p90 | {_ms(p90)} |")
    print(f"| mean | {_ms(statistics.mean(steady))} |")
    print(f"| max | {_ms(max(steady))} |")
    print()
    steps = max(1, len(profiled.ids))
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("cumulative")
    width = stats.total_tt / steps  # type: ignore[attr-defined]
    print(
        f"cProfile (a second run; profiling inflates times): {_ms(width)} ms per step in all; "
        f"top {top} by cumulative time, ms per step\n"
    )
    print("| cumulative ms/step | own ms/step | calls/step | function |")
    print("| --- | --- | --- | --- |")
    entries = sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda kv: kv[1][3],
        reverse=True,
    )
    shown = 0
    for (path, line, fn), (_cc, nc, tt, ct, _callers) in entries:
        if shown >= top:
            break
        if fn in ("<built-in method builtins.exec>", "<module>"):
            continue
        where = fn if path == "~" else f"{_short(path)}:{line}({fn})"
        print(f"| {_ms(ct / steps)} | {_ms(tt / steps)} | {nc / steps:.1f} | `{where}` |")
        shown += 1
    print()


def _short(path: str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        parts = p.parts
        return "/".join(parts[-2:])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--space", type=Path, default=DEFAULT_SPACE)
    parser.add_argument("--evaluations", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=15, help="compile processes")
    parser.add_argument(
        "--speculate",
        type=int,
        default=4,
        help="speculative compiles the pool finishes per evaluation",
    )
    parser.add_argument("--top", type=int, default=25, help="cProfile entries to print")
    parser.add_argument("--shm", action="store_true", help="the store in /dev/shm (no fsync)")
    args = parser.parse_args(argv)
    if args.smoke:  # a few steps of each case
        args.evaluations, args.top = 6, 5
    print(
        f"{args.space.name}, policy {DEFAULT_POLICY}, seed {args.seed}, "
        f"{args.evaluations} evaluations, store {'in /dev/shm' if args.shm else 'on disk'}, "
        f"pool of {args.workers} finishing {args.speculate} speculative compiles per "
        f"evaluation, {os.cpu_count()} cores\n"
    )
    cases = [
        ("speculation on (PipelineSettings())", PipelineSettings()),
        ("speculation off", PipelineSettings(speculate=False)),
    ]
    for name, settings in cases:
        kw: dict[str, Any] = dict(
            evaluations=args.evaluations,
            seed=args.seed,
            workers=args.workers,
            speculate=args.speculate,
            shm=args.shm,
        )
        run(args.space, settings, **{**kw, "evaluations": 3})  # warm imports and caches
        timed = run(args.space, settings, **kw)
        profiler = cProfile.Profile()
        profiled = run(args.space, settings, **kw, profiler=profiler)
        report(name, timed, profiled, pstats.Stats(profiler), args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
