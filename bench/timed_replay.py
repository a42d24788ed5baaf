"""(c) in simulated seconds: the pipeline on a recorded space, with recorded compile times.

    python bench/timed_replay.py [--space bench/data/matmul4096_H100.json.gz] [--seeds 20]
        [--variants NAME,...] [--workers 15]
    python bench/timed_replay.py --smoke      # one seed of two variants, stopped early
    python bench/timed_replay.py --from-throughput throughput.json   # rebuild the space

``bench/throughput.py``'s (c) on the H100 is one draw per seven-minute GPU run, and the
policy's evaluations to the best vary several-fold between runs (23 to 58), so a change to
how the pipeline starts or keeps the GPU fed cannot be judged by a few GPU runs. This
replays the same campaign on the CPU, in *simulated* time, many times over:

- the space: (b)'s sweep of ``bench/throughput.py`` on the H100 (216 configurations of the
  example matmul at 4096^3, ``bench/data/matmul4096_H100.json.gz``): each configuration's
  time (the mean of (a)'s and (b)'s, ``noise: none``), its compile failure, and the
  seconds its compile took in the pool (``compile_s``, from (b), 15 processes busy);
- the real :class:`~tuned.search.Campaign` (policy, store, acceptance rule) and the real
  :class:`~tuned.pipeline.CampaignPipeline` (look-ahead, speculation, the order the GPU
  takes candidates in), driven by a clock that advances only by what the GPU box would
  spend: a compile pool of ``--workers`` processes that runs each job for its recorded
  ``compile_s`` (regular jobs before speculative ones, as :class:`CompilePool` does), and a
  GPU worker that spends, per evaluation, ``GPU_COSTS`` (the H100 run's medians: a
  screened benchmark, a full one, the correctness run, the main process's overhead per
  step; the baseline's own compile and first correctness run);
- measured: simulated seconds from the loop's start (warm workers, as in (c)) until an
  evaluated configuration is within 1 % of the space's best, and until the campaign's
  incumbent is; the mean and quartiles over ``--seeds`` policy seeds, per variant of
  :class:`~tuned.pipeline.PipelineSettings`.

A model, not a measurement: it leaves out the GPU's own noise (``noise: none``: a
configuration is screened when it is recorded more than 5 % slower than the incumbent), the
spread of compile times between runs, and re-measurements by spares. It ranks pipeline
variants; the GPU run (``bench/throughput.py``) gives the figure.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fleet_replay import replay_campaign
from bench.harness import bench_parser, quartiles
from bench.harness.spaces import MATMUL4096_H100
from policies import DEFAULT_POLICY
from tuned.evaluation.client import EvaluationSettings
from tuned.evaluation.compile_pool import Precompiled
from tuned.evaluation.replay import ReplayClient
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.pipeline import CampaignPipeline, PipelineSettings
from tuned.registry import KernelSpec
from tuned.search import Campaign

DEFAULT_SPACE = MATMUL4096_H100
KNOBS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
WITHIN = 1.01

#: Seconds the GPU box spends, from the H100 run of bench/throughput.py (RESULTS.md, fourth
#: session, run 4): medians over the policy's steps.
GPU_COSTS = {
    "screened": 0.068,  # benchmark phase, a candidate screened out
    "full": 0.28,  # benchmark phase, timed in full against the incumbent
    "correctness": 0.011,
    "step": 0.07,  # main process and worker round trip per evaluation (0.05-0.09 s)
    "baseline": 1.8,  # the baseline: compiled in the worker, first correctness run, timed
    "remeasure": 0.3,  # an acceptance's re-measurement on a prepared spare
}
SCREEN_SLOWER = 1.05

#: name: (pipeline settings, whether the first proposals are guessed before the baseline).
VARIANTS = {
    "before": (PipelineSettings(compiling=0, in_order=True), False),
    "first-guess": (PipelineSettings(compiling=0, in_order=True), True),
    "out-of-order": (PipelineSettings(compiling=0), True),
    "compiling-1": (PipelineSettings(compiling=1), True),
    "compiling-2": (PipelineSettings(compiling=2), True),
    "default": (PipelineSettings(), True),
    "compiling-8": (PipelineSettings(compiling=8), True),
}


class Clock:
    now = 0.0


@dataclass(eq=False)
class Job:
    candidate: Candidate
    duration: float
    failure: EvalResult | None
    speculative: bool
    start: float | None = None
    finish: float | None = None
    future: SimFuture | None = field(default=None, repr=False)


class SimFuture(Future):  # type: ignore[type-arg]
    """A compile job's future whose completion follows the simulated clock."""

    def __init__(self, pool: SimPool, job: Job, *, stamped_at: float | None = None) -> None:
        super().__init__()
        self.pool, self.job, self.stamped_at = pool, job, stamped_at

    def done(self) -> bool:
        self.pool.advance()
        return self.job.finish is not None and self.job.finish <= self.pool.clock.now

    def result(self, timeout: float | None = None) -> Precompiled:
        while not self.done():
            self.pool.wait_next()
        job = self.job
        assert job.finish is not None
        at = job.finish if self.stamped_at is None else self.stamped_at
        if job.failure is not None:
            return Precompiled(job.candidate.id, job.failure, at)
        result = EvalResult(Outcome.OK, phase="precompile", metadata={"precompiled": True})
        return Precompiled(job.candidate.id, result, at)


class SimPool:
    """:class:`~tuned.evaluation.compile_pool.CompilePool` in simulated time: ``workers``
    processes, regular jobs first, a regular submit takes a speculative job over."""

    def __init__(self, clock: Clock, workers: int, space: dict[tuple[Any, ...], dict[str, Any]]):
        self.clock, self.workers, self.space = clock, workers, space
        self.settings = EvaluationSettings(interpreter=True)
        self.queue: deque[Job] = deque()
        self.spec_queue: deque[Job] = deque()
        self.running: list[Job] = []
        self.speculative: dict[str, Job] = {}
        self.t = 0.0
        self.speculated = self.speculation_hits = 0

    def pending(self) -> int:
        self.advance()
        return len(self.queue) + len(self.spec_queue) + len(self.running)

    def submit(
        self, spec: KernelSpec, candidate: Candidate, *, speculative: bool = False
    ) -> Future[Precompiled]:
        self.advance()
        job = self.speculative.get(candidate.id)
        if job is not None:
            if speculative:
                assert job.future is not None
                return job.future
            del self.speculative[candidate.id]
            if job in self.spec_queue:
                self.spec_queue.remove(job)
                self.queue.append(job)
            elif job.finish is not None and job.finish <= self.clock.now:
                self.speculation_hits += 1
                return SimFuture(self, job, stamped_at=self.clock.now)
            assert job.future is not None
            return job.future
        entry = self.space[tuple(candidate.knobs[k] for k in KNOBS)]
        failure = None
        if not isinstance(entry["time"], (int, float)):
            failure = EvalResult(
                Outcome.COMPILE_ERROR, phase="compile", reason=f"recorded: {entry['time']}"
            )
        job = Job(candidate, float(entry["compile_s"]), failure, speculative)
        job.future = SimFuture(self, job)
        if speculative:
            self.speculated += 1
            self.spec_queue.append(job)
            self.speculative[candidate.id] = job
        else:
            self.queue.append(job)
        self.advance()
        return job.future

    def advance(self) -> None:
        """Run the pool up to the clock: finish jobs, start queued ones on freed processes."""
        now = self.clock.now
        while True:
            self._start(self.t)
            due = [j.finish for j in self.running if j.finish is not None and j.finish <= now]
            if not due:
                break
            self.t = min(due)
            self.running = [j for j in self.running if j.finish is None or j.finish > self.t]
        self.t = now
        self._start(now)

    def wait_next(self) -> None:
        """Advance the clock to the pool's next finished job (the GPU waits)."""
        self.advance()
        finishes = [j.finish for j in self.running if j.finish is not None]
        if not finishes:
            raise RuntimeError("waiting on a compile the pool will never run")
        self.clock.now = max(self.clock.now, min(finishes))
        self.advance()

    def _start(self, at: float) -> None:
        while len(self.running) < self.workers and (self.queue or self.spec_queue):
            job = (self.queue or self.spec_queue).popleft()
            job.start, job.finish = at, at + job.duration
            self.running.append(job)

    def close(self) -> None:
        pass


class SimPipeline(CampaignPipeline):
    """The real pipeline; only its wait for the pool advances the simulated clock."""

    def _wait_any(self, futures: Sequence[Future[Precompiled]], timeout: float) -> None:
        pool = self.pool
        assert isinstance(pool, SimPool)
        while not any(f.done() for f in futures):
            pool.wait_next()


class NoFirstGuess(SimPipeline):
    """As the pipeline was before it guessed the first proposals."""

    def _speculate_first(self, campaign: Campaign) -> None:
        pass


class TimedClient(ReplayClient):
    """The replay client, advancing the clock by what the GPU worker would spend."""

    clock: Clock

    def evaluate(self, spec: KernelSpec, candidate: Candidate, incumbent: Any = None, **kw: Any):  # type: ignore[no-untyped-def,override]
        result = super().evaluate(spec, candidate, incumbent, **kw)
        cost = GPU_COSTS["step"]
        if candidate.provenance is Provenance.ORIGINAL and self._measurements[candidate.id] <= 1:
            cost += GPU_COSTS["baseline"]
        elif result.outcome is Outcome.OK:
            cost += GPU_COSTS["correctness"]
            theirs = (result.metadata.get("incumbent_samples") or {}).get("recorded") or []
            mine = result.time_s or 0.0
            screened = bool(theirs) and mine > SCREEN_SLOWER * statistics.median(theirs)
            cost += GPU_COSTS["screened" if screened else "full"]
        self.clock.now += cost
        return result


def load_space(path: Path) -> tuple[dict[str, Any], dict[tuple[Any, ...], dict[str, Any]]]:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return doc, {tuple(e[k] for k in KNOBS): e for e in doc["cache"].values()}


def run_one(space_path: Path, variant: str, seed: int, *, workers: int, cap: int) -> dict[str, Any]:
    doc, space = load_space(space_path)
    best = min(float(e["time"]) for e in space.values() if isinstance(e["time"], (int, float)))
    goal_ms = best * WITHIN
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="timed-replay-") as tmp:
        campaign, store, client = replay_campaign(
            Path(tmp),
            space_path,
            seed,
            policy=DEFAULT_POLICY,
            client_type=TimedClient,
            baseline=doc["baseline"],
        )
        try:
            assert isinstance(client, TimedClient)
            client.clock = clock
            spec, fid = campaign.spec, campaign.fingerprint
            pool = SimPool(clock, workers, space)
            settings, first_guess = VARIANTS[variant]
            kind = SimPipeline if first_guess else NoFirstGuess
            pipeline = kind(pool=pool, settings=settings)  # type: ignore[arg-type]
            found = held = None
            first10 = None
            n = 0
            while n < cap and (found is None or held is None):
                row = pipeline.step(campaign)
                if row is None:
                    break
                n += 1
                if n == 10:
                    first10 = clock.now
                t = row.result.time_s
                ok = row.result.outcome is Outcome.OK and t is not None
                if found is None and ok and t is not None and t * 1e3 <= goal_ms:
                    found = (clock.now, n)
                incumbent = store.best(spec.name, fid)
                if held is None and incumbent is not None:
                    entry_ms = space[tuple(incumbent.knobs[k] for k in KNOBS)]["time"]
                    if float(entry_ms) <= goal_ms:
                        held = (clock.now, n)
            return {
                "found": found,
                "held": held,
                "first10": first10,
                "hits": pool.speculation_hits,
            }
        finally:
            store.close()


def from_throughput(path: Path, out: Path) -> None:
    """Rebuild the recorded space from a bench/throughput.py ``--out`` JSON (a GPU run)."""
    doc = json.loads(path.read_text())
    cache: dict[str, dict[str, Any]] = {}
    values: dict[str, set[Any]] = {k: set() for k in KNOBS}
    for c in doc["configurations"]:
        knobs = c["knobs"]
        for k in KNOBS:
            values[k].add(knobs[k])
        serial, piped = c["serial"], c["pipelined"]
        entry: dict[str, Any] = {k: knobs[k] for k in KNOBS}
        if piped["outcome"] == "ok" and serial.get("time_s"):
            ms = [serial["time_s"] * 1e3, piped["time_s"] * 1e3]
            entry["time"] = statistics.mean(ms)
        else:
            entry["time"] = "CompilationFailedConfig"
        entry["compile_s"] = round(float(piped["phases"].get("precompile", 1.0)), 4)
        cache[",".join(str(knobs[k]) for k in KNOBS)] = entry
    first = doc["policy"]["steps"][0]["incumbent_knobs"]
    space = {
        "device_name": doc["device"],
        "kernel_name": "matmul (examples/registry/matmul), fp16 4096^3",
        "tune_params_keys": list(KNOBS),
        "tune_params": {k: sorted(v) for k, v in values.items()},
        "objective": "time",
        "baseline": {k: first[k] for k in KNOBS},
        "cache": cache,
        "note": f"From bench/throughput.py --out on {doc['date']} ({doc['device']}): time = "
        "mean of (a)'s and (b)'s ms; compile_s = (b)'s precompile seconds (15 processes).",
    }
    with gzip.open(out, "wt") as f:
        json.dump(space, f, indent=0, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--space", type=Path, default=DEFAULT_SPACE)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--cap", type=int, default=216)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--from-throughput", type=Path, metavar="JSON")
    args = parser.parse_args(argv)
    if args.smoke:  # one seed of the first and the default variant, stopped early
        args.seeds, args.cap, args.variants = 1, 30, "before,default"
    if args.from_throughput:
        from_throughput(args.from_throughput, args.space)
        print(f"wrote {args.space}")
        return 0
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    print(f"{args.space.name}, {args.seeds} seeds, {args.workers} compile processes")
    print("| variant | 10th evaluation (s) | found (s) | found (evals) | held (s) | held (evals) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in names:
        runs = [
            run_one(args.space, name, seed, workers=args.workers, cap=args.cap)
            for seed in range(args.seeds)
        ]
        row = [
            quartiles([r["first10"] for r in runs if r["first10"] is not None]),
            quartiles([r["found"][0] for r in runs if r["found"]]),
            quartiles([float(r["found"][1]) for r in runs if r["found"]]),
            quartiles([r["held"][0] for r in runs if r["held"]]),
            quartiles([float(r["held"][1]) for r in runs if r["held"]]),
        ]
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
