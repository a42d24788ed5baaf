"""The whole tuning loop on recorded spaces: ``ktuned tune`` on replay entries, scored.

    python bench/replay_loop.py --cache FILE [FILE ...] --budget N --seeds K
                                [--noise none|recorded] [--policy NAME] [--jobs J]
    python bench/replay_loop.py --smoke      # the tests' small recorded space, one short loop

For each cache file (a Kernel Tuner cache, e.g. ``../shared/benchdata/*.json.gz``) and seed,
a registry holding one replay entry (``kind: replay``, ``seed`` = the seed, so the baseline is
a random working configuration as in ``bench/search_replay.py``) is tuned by
:func:`tuned.tuning.tune_registry` into a fresh SQLite store with ``--budget N-1``: N distinct
evaluations, the baseline included. Unlike ``search_replay.py`` (the policy alone), this is
the full loop: the campaign, the store, the policy state persisted after every step, the
acceptance rule with its re-measurements, and the knob space of the entry, which is the
cartesian product of ``tune_params`` (configurations absent from the cache come back as
``rejected_static`` and count as evaluations).

Scores, each ``t_opt / t`` with recorded mean times (``t_opt``: the cache's optimum), mean
over seeds:

- ``shipped``: ``t`` of the accepted best (what ``ktuned best`` reports and ships);
- ``found``: ``t`` of the fastest configuration evaluated (the score of ``search_replay.py``);
- ``absent``: the share of evaluations spent on configurations absent from the cache.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

# K-means on a few hundred points is fastest on one thread (see search_replay.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.harness import bench_parser, print_table
from bench.harness.spaces import SMOKE_SPACE, write_replay_entry
from policies import DEFAULT_POLICY, POLICIES, KnobValue
from tuned.evaluation import EvaluationSettings
from tuned.outcomes import Outcome
from tuned.registry.replay import read_cache
from tuned.search import TuneSettings
from tuned.store import SqliteStore
from tuned.tuning import tune_registry

Job = tuple[str, int, int, str, str]


def run_one(job: Job) -> tuple[str, float, float, float, float]:
    """(space, shipped, found, absent share, seconds) of one seeded loop."""
    cache_path, seed, budget, noise, policy = job
    cache, _ = read_cache(Path(cache_path).read_bytes())
    t_opt = cache.optimum_ms()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ktuned-replay-") as tmp:
        registry = Path(tmp) / "registry"
        write_replay_entry(registry, Path(cache_path), seed, name="space", noise=noise)
        store = SqliteStore(Path(tmp) / "ktuned.sqlite")
        try:
            report = tune_registry(
                registry,
                store=store,
                state_dir=Path(tmp),
                settings=TuneSettings(budget=budget - 1, policy=policy, seed=seed),
                evaluation=EvaluationSettings(interpreter=True),  # no worker is started
            )
            summary = report.summaries[0]
            best = store.best("space")
            kernel = store.kernel("space")
            assert best is not None and kernel is not None
            trials = store.trials("space", kernel.generation, best.fingerprint)
        finally:
            store.close()
    seconds = time.perf_counter() - started

    def mean_ms(knobs: Mapping[str, KnobValue]) -> float:
        record = cache.lookup(knobs)
        assert record is not None and record.time_ms is not None
        return record.time_ms

    found = min(mean_ms(t.knobs) for t in trials if t.result.outcome is Outcome.OK)
    absent = sum(t.result.metadata.get("replay") == "absent" for t in trials) / len(trials)
    assert summary.evaluations == len(trials) - 1
    name = Path(cache_path).name.removesuffix(".gz").removesuffix(".json")
    return name, t_opt / mean_ms(best.knobs), t_opt / found, absent, seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--cache", type=Path, nargs="+", help="cache file(s) (required)")
    parser.add_argument("--budget", type=int, default=50, help="distinct evaluations (N)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--noise", choices=("none", "recorded"), default="none")
    parser.add_argument("--policy", default=DEFAULT_POLICY, choices=sorted(POLICIES))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.smoke:  # the tests' small real space, one short loop in this process
        args.cache, args.budget, args.seeds, args.jobs = [SMOKE_SPACE], 6, 1, 1
    if not args.cache:
        parser.error("the following arguments are required: --cache")
    logging.basicConfig(level=logging.WARNING)
    if args.budget < 2:
        parser.error("--budget must be at least 2 (the baseline and one candidate)")
    missing = [str(p) for p in args.cache if not p.is_file()]
    if missing:
        parser.error(f"no such cache file: {', '.join(missing)}")

    jobs: list[Job] = [
        (str(p), s, args.budget, args.noise, args.policy)
        for p in args.cache
        for s in range(args.seeds)
    ]
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_one, jobs))
    else:
        results = [run_one(j) for j in jobs]
    elapsed = time.perf_counter() - started

    by_space: dict[str, list[tuple[float, float, float, float]]] = {}
    for name, *scores in results:
        by_space.setdefault(name, []).append((scores[0], scores[1], scores[2], scores[3]))
    print(
        f"# full loop, policy {args.policy}, {args.budget} distinct evaluations, "
        f"noise {args.noise}, mean over {args.seeds} seeds"
    )
    means = {name: np.mean(rows, axis=0) for name, rows in by_space.items()}
    means["**mean**"] = np.mean(list(means.values()), axis=0)
    print_table(
        ("space", "shipped", "found", "absent", "s/run"),
        [
            (name, f"{m[0]:.3f}", f"{m[1]:.3f}", f"{m[2]:.2f}", f"{m[3]:.1f}")
            for name, m in means.items()
        ],
    )
    print(f"# {len(jobs)} runs in {elapsed:.1f} s with {args.jobs} worker(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
