"""How many candidates may the pipeline keep in flight before the search loses efficiency?

    python bench/lookahead_replay.py [--spaces DIR|FILE ...] [--lookahead 1,2,4,8,17]
        [--seeds N] [--target 0.99] [--cap N]
    python bench/lookahead_replay.py --smoke     # the tests' small recorded space, seconds

The compile pool hides compile latency by compiling candidates the policy proposed before
the results of those ahead of them are known (:mod:`tuned.pipeline`). The deeper that
look-ahead, the more decisions are made without the newest results (pending candidates
count as pulls in flight, but their outcomes are unknown). This replays recorded spaces
(Kernel Tuner caches: ``../shared/benchdata`` and ``bench/data/matmul_H100.json.gz``, the
H100 sweep of the example matmul) through the real :class:`~tuned.pipeline.CampaignPipeline`
with a compile pool that answers at once, for each look-ahead, and counts evaluations until
the first result within ``--target`` of the space's optimum (``t_opt / t >= target``).
A run that reaches ``--cap`` evaluations without it counts as ``cap`` (and is reported).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from concurrent.futures import Future
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fleet_replay import compiled_at_once, replay_campaign
from bench.harness import bench_parser
from bench.harness.spaces import BUNDLED_SPACES, SMOKE_SPACE, optimum_s, replay_caches
from policies import DEFAULT_POLICY
from tuned.evaluation.client import EvaluationSettings
from tuned.evaluation.compile_pool import Precompiled
from tuned.outcomes import Candidate, Outcome
from tuned.pipeline import CampaignPipeline, PipelineSettings
from tuned.registry import KernelSpec


class InstantPool:
    """Stands in for :class:`~tuned.evaluation.compile_pool.CompilePool`: every candidate
    is "compiled" at once (a replay has nothing to compile). Speculative submits are
    counted: ``workers`` of them fit between two proposed candidates (the compile
    throughput per evaluation: on the H100, 15 processes x ~0.25 s of GPU time per
    evaluation / ~1 s per compile ~ 4), and a proposed candidate that was speculated
    before is a *hit* (compiled before it was proposed)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.settings = EvaluationSettings(interpreter=True)
        self.speculated: set[str] = set()
        self.since_proposal = 0
        self.proposed = 0
        self.hits = 0

    def pending(self) -> int:
        return self.since_proposal

    def submit(
        self, spec: KernelSpec, candidate: Candidate, *, speculative: bool = False
    ) -> Future[Precompiled]:
        if speculative:
            self.speculated.add(candidate.id)
            self.since_proposal += 1
        else:
            self.proposed += 1
            self.hits += candidate.id in self.speculated
            self.since_proposal = 0
        return compiled_at_once(candidate)

    def close(self) -> None:
        pass


def run_one(
    cache: Path,
    lookahead: int,
    seed: int,
    *,
    policy: str,
    cap: int,
    goal_s: float,
    speculate: int,
) -> tuple[int | None, float]:
    """Evaluations (the baseline included) until one within the goal (None: not by
    ``cap``), and the fraction of proposed candidates speculated before."""
    with tempfile.TemporaryDirectory(prefix="lookahead-replay-") as tmp:
        campaign, store, _ = replay_campaign(Path(tmp), cache, seed, policy=policy)
        try:
            pool = InstantPool(speculate + lookahead)  # the pipeline keeps `lookahead` free
            pipeline = CampaignPipeline(
                pool=pool,  # type: ignore[arg-type]
                settings=PipelineSettings(
                    batch_size=min(4, lookahead), lookahead=lookahead, speculate=speculate > 0
                ),
            )
            reached = None
            for n in range(1, cap + 1):
                row = pipeline.step(campaign)
                if row is None:
                    break
                t = row.result.time_s
                if row.result.outcome is Outcome.OK and t is not None and t <= goal_s:
                    reached = n
                    break
            return reached, pool.hits / max(1, pool.proposed)
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--spaces", nargs="+", type=Path, default=BUNDLED_SPACES)
    parser.add_argument("--lookahead", default="1,2,4,8,17")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--cap", type=int, default=300, help="evaluations at most per run")
    parser.add_argument(
        "--speculate",
        type=int,
        default=4,
        help="speculative compiles per proposed candidate (0: none); reported: hit rate",
    )
    args = parser.parse_args(argv)
    if args.smoke:  # the tests' small real space, two depths, one seed
        args.spaces, args.lookahead, args.seeds, args.cap = [SMOKE_SPACE], "1,4", 1, 20
    caches = replay_caches(parser, args.spaces)
    depths = [int(k) for k in args.lookahead.split(",")]
    print(
        f"policy {args.policy}, {args.seeds} seeds, target {args.target:.0%} of optimum, "
        f"cap {args.cap}; evaluations until the target (mean; runs that missed count as cap)\n"
    )
    print("| space | " + " | ".join(f"lookahead {k}" for k in depths) + " |")
    print("| --- |" + " --- |" * len(depths))
    totals: dict[int, list[float]] = {k: [] for k in depths}
    for cache in caches:
        goal = optimum_s(cache) / args.target
        cells = []
        for k in depths:
            runs = [
                run_one(
                    cache,
                    k,
                    seed,
                    policy=args.policy,
                    cap=args.cap,
                    goal_s=goal,
                    speculate=args.speculate,
                )
                for seed in range(args.seeds)
            ]
            mean = statistics.mean(args.cap if r is None else r for r, _ in runs)
            missed = sum(r is None for r, _ in runs)
            hits = statistics.mean(h for _, h in runs)
            totals[k].append(mean)
            cells.append(
                f"{mean:.1f}"
                + (f" ({missed} missed)" if missed else "")
                + (f", {hits:.0%} hits" if args.speculate else "")
            )
        print(f"| {cache.name.split('.')[0]} | " + " | ".join(cells) + " |", flush=True)
    print("| mean | " + " | ".join(f"{statistics.mean(totals[k]):.1f}" for k in depths) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
