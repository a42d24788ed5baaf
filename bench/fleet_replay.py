"""Fleet mode on recorded spaces: does the search stay efficient with parallel workers?

    python bench/fleet_replay.py [--spaces DIR|FILE ...] [--workers 1,2,4,8] [--seeds N]
        [--policy NAME] [--cap N]
    python bench/fleet_replay.py --smoke     # the tests' small recorded space, seconds

For each recorded space (Kernel Tuner cache, ``../shared/benchdata``), worker count and
seed, W simulated workers tune one replay entry of that space together: each is a thread
with its own store connection and its own :class:`~tuned.search.Campaign` with claims
(``ClaimSettings``), exactly as W daemons of a fleet would, sharing one SQLite store (on
``/dev/shm`` where it exists; the claim protocol is the one PostgreSQL runs, under SQLite's
write lock). Times are the recorded medians (``noise: none``), so a configuration's time
is the same whoever evaluates it.

Measured: the evaluations recorded in the store (every worker's, the baseline included)
until the first result within 95 % of the space's optimum (``t_opt / t <= 0.95``'s
complement: ``t <= t_opt / 0.95``), and per worker (that number / W: the wall-clock proxy
on real GPUs, where one evaluation takes seconds), and the wall time of the run here.
A run that reaches ``--cap`` evaluations without it counts as ``cap`` (and is reported).
Worker seeds differ (``seed * 100 + worker``), so parallel workers do not propose alike.

Python threads share one interpreter: wall times here measure the policy and store
overhead, serialised; on a fleet the evaluations run in parallel.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_parser
from bench.harness.spaces import (
    BENCHDATA,
    SMOKE_SPACE,
    optimum_s,
    replay_caches,
    write_replay_entry,
)
from policies import DEFAULT_POLICY
from tuned.evaluation.compile_pool import Precompiled
from tuned.evaluation.replay import ReplayClient
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry import KernelSpec
from tuned.search import Campaign, TuneSettings
from tuned.store import ClaimSettings, SqliteStore

TARGET = 0.95


def replay_campaign(
    root: Path,
    cache: Path,
    seed: int,
    *,
    policy: str,
    client_type: type[ReplayClient] = ReplayClient,
    baseline: dict[str, object] | None = None,
) -> tuple[Campaign, SqliteStore, ReplayClient]:
    """A campaign on a fresh store in ``root`` over a replay entry of ``cache`` (the
    caller closes the store)."""
    spec = write_replay_entry(root, cache, seed, baseline=baseline)
    store = SqliteStore(root / "ktuned.sqlite")
    store.sync_kernel(spec)
    client = client_type(spec)
    fid = store.record_fingerprint(client.start())
    campaign = Campaign(
        spec=spec,
        store=store,
        client=client,
        fingerprint=fid,
        settings=TuneSettings(budget=None, policy=policy, seed=seed),
    )
    return campaign, store, client


def compiled_at_once(candidate: Candidate) -> Future[Precompiled]:
    """A compile pool's answer for ``candidate``, done: compiled, ready for the worker (the
    pool stand-ins of the replay benchmarks)."""
    future: Future[Precompiled] = Future()
    result = EvalResult(Outcome.OK, phase="precompile", metadata={"precompiled": True})
    future.set_result(Precompiled(candidate.id, result, time.monotonic()))
    return future


@dataclass
class RunResult:
    evaluations: int  # in the store when the target was first reached (cap: not reached)
    reached: bool
    wall_s: float


def run_fleet(
    cache: Path, workers: int, seed: int, *, policy: str, cap: int, opt_s: float
) -> RunResult:
    """``workers`` threads tune one replay entry of ``cache`` into one fresh store."""
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="fleet-replay-", dir=base) as tmp:
        root = Path(tmp)
        spec = write_replay_entry(root, cache, seed)
        path = root / "ktuned.sqlite"
        setup = SqliteStore(path)
        setup.sync_kernel(spec)
        fid = setup.record_fingerprint(ReplayClient(spec).start())
        setup.close()
        stop = threading.Event()
        lock = threading.Lock()
        state = {"count": 0, "hit": 0}
        errors: list[BaseException] = []

        def on_result(_s: KernelSpec, _c: Candidate, result: EvalResult, _sum: object) -> None:
            with lock:
                state["count"] += 1
                ok = result.outcome is Outcome.OK and result.time_s is not None
                if ok and not state["hit"] and result.time_s <= opt_s / TARGET:  # type: ignore[operator]
                    state["hit"] = state["count"]
                    stop.set()
                if state["count"] >= cap:
                    stop.set()

        def worker(index: int) -> None:
            store = SqliteStore(path)
            try:
                campaign = Campaign(
                    spec=spec,
                    store=store,
                    client=ReplayClient(spec),
                    fingerprint=fid,
                    settings=TuneSettings(budget=None, policy=policy, seed=seed * 100 + index),
                    on_result=on_result,
                    claims=ClaimSettings(lease_s=600.0, poll_s=0.01, max_wait_s=5.0),
                )
                while not stop.is_set():
                    row = campaign.step()
                    if row is None and not campaign.note.startswith("waiting for"):
                        break  # the space is exhausted (or the original fails)
            finally:
                store.close()

        def failed(hook: threading.ExceptHookArgs) -> None:
            errors.append(hook.exc_value or RuntimeError("a worker thread failed"))
            stop.set()  # the other workers stop; the error is raised below

        threading.excepthook = failed
        start = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        if errors:
            raise errors[0]
        hit = state["hit"]
        return RunResult(hit or cap, bool(hit), wall)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--spaces", nargs="+", type=Path, default=[BENCHDATA])
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--cap", type=int, default=300, help="evaluations at most per run")
    args = parser.parse_args(argv)
    if args.smoke:  # the tests' small real space, 1 and 2 workers, one seed
        args.spaces, args.workers, args.seeds, args.cap = [SMOKE_SPACE], "1,2", 1, 40
    caches = replay_caches(parser, args.spaces)
    counts = [int(w) for w in args.workers.split(",")]
    print(
        f"policy {args.policy}, {args.seeds} seeds, target {TARGET:.0%} of optimum, "
        f"cap {args.cap} evaluations; SQLite store shared by W worker threads with claims\n"
    )
    header = "| space | W | evaluations to 95 % (mean) | per worker | reached | wall s (mean) |"
    print(header)
    print("| --- | --- | --- | --- | --- | --- |")
    totals: dict[int, list[float]] = {w: [] for w in counts}
    for cache in caches:
        opt = optimum_s(cache)
        for w in counts:
            runs = [
                run_fleet(cache, w, seed, policy=args.policy, cap=args.cap, opt_s=opt)
                for seed in range(args.seeds)
            ]
            mean = statistics.mean(r.evaluations for r in runs)
            totals[w].append(mean)
            print(
                f"| {cache.name.split('.')[0]} | {w} | {mean:.1f} | {mean / w:.1f} | "
                f"{sum(r.reached for r in runs)}/{len(runs)} | "
                f"{statistics.mean(r.wall_s for r in runs):.2f} |",
                flush=True,
            )
    for w in counts:
        mean = statistics.mean(totals[w])
        print(f"| mean | {w} | {mean:.1f} | {mean / w:.1f} | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
