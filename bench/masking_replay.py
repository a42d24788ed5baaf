"""What hardware-aware masking changes: evaluations to reach 95 % of the best, with and without.

Three steps; the first two need the GPU, the replay runs anywhere (and in CI on a toy table):

    # 1. ground truth: every configuration timed (bench/sweep.py, one file per kernel)
    python bench/sweep.py --entry examples/registry/softmax --out sweeps/softmax.json
    # 2. a profile of every valid configuration: ONE ncu run per kernel, all configurations
    #    launched once each inside the profiler range (--launch-count = their number)
    python bench/masking_replay.py record --entry examples/registry/softmax \
        --sweep sweeps/softmax.json --out profiles/softmax.json
    # 3. replay the daemon's loop on the recorded tables
    python bench/masking_replay.py replay --sweeps sweeps --profiles profiles --seeds 20
    # or, on the CPU in seconds, the replay of a synthetic table (checks the code, no result)
    python bench/masking_replay.py --smoke

The replay runs the hierarchical policy exactly as :class:`tuned.search.Campaign` does:
baseline first (the entry's declared knobs), then ``suggest`` -> recorded time -> ``observe``.
As in the daemon, only the incumbent and each cluster's representative get their (recorded)
profile, after the step that made them so, and the policy learns about it through
``Trial.metrics`` and ``update_metrics``. Two arms differ only in the mask thresholds:

* ``masked``: the defaults (SM 80 %, DRAM 70 %, L2 75 %);
* ``unmasked``: every threshold 1.0 (a strategy is closed only at 100 % of peak: never).

Both get the same profiles, so clustering and level-2 parent choice see the same data; the
difference is the masking alone. Score per kernel and arm over seeds: evaluations (baseline
included) until the best time found is within 95 % of the table's best (``t_opt / t >=
0.95``), median and mean over the seeds that reached it, how many did within ``--budget``,
and the mean fraction of the optimum reached at the budget.

What it can show: whether closing saturated strategies' arms saves evaluations on these
spaces. What it cannot: the parametric strategies move knob groups, so masking a strategy
only changes which knobs move next; on small spaces, and where the baseline is far from the
saturation thresholds, the two arms may well be indistinguishable. LLM strategies (code
rewrites), where masking saves the most, are not part of this replay.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # K-means on a few points: one thread

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.harness import ROOT, bench_parser
from policies import HierarchicalPolicy, SearchSpace, Trial
from policies.masks import MaskSettings
from profilers.ncu import DURATION, OCCUPANCY, SOL_DRAM, SOL_L1, SOL_L2, SOL_MEMORY, SOL_SM

ARMS = {"masked": MaskSettings(), "unmasked": MaskSettings(sm=1.0, dram=1.0, l2=1.0)}
#: Few metrics: one or two replay passes per launch, so hundreds of configurations fit in
#: one ncu run of a few minutes.
RECORD_METRICS = (DURATION, SOL_SM, SOL_MEMORY, SOL_DRAM, SOL_L2, SOL_L1, OCCUPANCY)


def _key(knobs: Mapping[str, Any]) -> str:
    return json.dumps(dict(knobs), sort_keys=True)


# ----------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Table:
    """One kernel's recorded space: time (``None``: failed) and profile metrics per config."""

    kernel: str
    knobs: dict[str, tuple[Any, ...]]
    baseline: dict[str, Any]
    times: dict[str, float | None]
    metrics: dict[str, dict[str, float]]

    @property
    def best(self) -> float:
        return min(t for t in self.times.values() if t is not None)


def load_table(sweep: Path, profiles: Path | None, entry: Path | None = None) -> Table:
    """A :class:`Table` from a bench/sweep.py file and (optionally) a ``record`` file."""
    data = json.loads(sweep.read_text())
    from tuned.registry import load_entry

    entry = entry or ROOT / "examples" / "registry" / data["kernel"]
    spec = load_entry(entry)
    times = {_key(r["knobs"]): r["objective"] for r in data["rows"]}
    metrics: dict[str, dict[str, float]] = {}
    if profiles is not None and profiles.exists():
        for row in json.loads(profiles.read_text())["profiles"]:
            metrics[_key(row["knobs"])] = dict(row["metrics"])
    return Table(
        kernel=data["kernel"],
        knobs={k: tuple(v) for k, v in spec.knobs.items()},
        baseline=dict(spec.baseline_knobs),
        times=times,
        metrics=metrics,
    )


# ----------------------------------------------------------------------------- the replay


def replay_one(table: Table, masks: MaskSettings, seed: int, budget: int) -> list[float]:
    """Best time found after each evaluation (baseline first), as the daemon would search."""
    space = SearchSpace(knobs=table.knobs, is_valid=lambda c: _key(c) in table.times)
    policy = HierarchicalPolicy(
        settings=dataclasses.replace(HierarchicalPolicy.default_settings, masks=masks)
    )
    trials: list[Trial] = []
    profiled: set[str] = set()
    best_so_far: list[float] = []

    def record(knobs: Mapping[str, Any], strategy: str) -> Trial:
        key = _key(knobs)
        t = table.times.get(key)
        trial = Trial(
            candidate_id=key,
            knobs=dict(knobs),
            outcome="ok" if t is not None else "compile_error",
            time_s=t,
            strategy=strategy,
        )
        trials.append(trial)
        previous = best_so_far[-1] if best_so_far else float("inf")
        best_so_far.append(min(previous, t) if t is not None else previous)
        return trial

    def view() -> list[Trial]:
        return [
            dataclasses.replace(t, metrics=table.metrics.get(t.candidate_id, {}))
            if t.candidate_id in profiled
            else t
            for t in trials
        ]

    def profile_what_the_daemon_would() -> None:
        ok = [t for t in trials if t.ok]
        if ok:
            profiled.add(min(ok, key=lambda t: t.time_s or 0.0).candidate_id)  # incumbent
        profiled.update(policy.representatives().values())
        policy.update_metrics({c: table.metrics[c] for c in profiled if c in table.metrics})

    record(table.baseline, "original")
    profile_what_the_daemon_would()
    for n in range(1, budget):
        rng = np.random.default_rng([seed, n])
        suggestion = policy.suggest(space, view(), rng)
        if suggestion is None:
            break
        trial = record(suggestion.knobs, suggestion.strategy)
        policy.observe(suggestion, trial)
        profile_what_the_daemon_would()
    return best_so_far


def evaluations_to(best_so_far: Sequence[float], target: float) -> int | None:
    """1-based evaluation count at which ``best_so_far`` first reaches ``target``."""
    return next((i + 1 for i, t in enumerate(best_so_far) if t <= target), None)


def replay(
    tables: Sequence[Table], seeds: int, budget: int, quality: float = 0.95
) -> list[dict[str, Any]]:
    """One row per kernel and arm: evaluations to ``quality`` of the best, over seeds."""
    rows = []
    for table in tables:
        target = table.best / quality
        for arm, masks in ARMS.items():
            counts, finals = [], []
            for seed in range(seeds):
                curve = replay_one(table, masks, seed, budget)
                counts.append(evaluations_to(curve, target))
                finals.append(table.best / curve[-1] if curve[-1] < float("inf") else 0.0)
            reached = [c for c in counts if c is not None]
            rows.append(
                {
                    "kernel": table.kernel,
                    "arm": arm,
                    "configs": sum(1 for t in table.times.values() if t is not None),
                    "profiled_configs": len(table.metrics),
                    "reached": len(reached),
                    "seeds": seeds,
                    "median_evals": statistics.median(reached) if reached else None,
                    "mean_evals": statistics.fmean(reached) if reached else None,
                    "mean_fraction_at_budget": statistics.fmean(finals),
                }
            )
    return rows


def toy_table() -> Table:
    """A synthetic softmax-like space (block size, warps, stages: a smooth bowl with its
    optimum at 2048 x 8 warps) whose every configuration saturates L2 and leaves the SM
    idle: what ``--smoke`` replays."""
    knobs: dict[str, tuple[Any, ...]] = {
        "BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192),
        "num_warps": (2, 4, 8, 16),
        "num_stages": (1, 2, 3, 4),
    }
    times: dict[str, float | None] = {}
    profiles: dict[str, dict[str, float]] = {}
    for block, warps, stages in itertools.product(*knobs.values()):
        config = {"BLOCK_SIZE": block, "num_warps": warps, "num_stages": stages}
        b, w = math.log2(block), math.log2(warps)
        times[_key(config)] = 1e-4 * (1 + 0.1 * (b - 11) ** 2 + 0.2 * (w - 3) ** 2 + 0.02 * stages)
        profiles[_key(config)] = {"sol_l2": 0.9, "sol_dram": 0.5, "sol_sm": 0.1}
    return Table(
        kernel="toy",
        knobs=knobs,
        baseline={"BLOCK_SIZE": 256, "num_warps": 2, "num_stages": 1},
        times=times,
        metrics=profiles,
    )


def print_rows(rows: Sequence[dict[str, Any]], budget: int, quality: float) -> None:
    print(f"evaluations to {quality:.0%} of the best (budget {budget}, baseline included)")
    print(
        f"{'kernel':<12} {'arm':<9} {'configs':>7} {'profiled':>8} {'reached':>8} "
        f"{'median':>7} {'mean':>7} {'at budget':>9}"
    )
    for r in rows:
        median = "-" if r["median_evals"] is None else f"{r['median_evals']:.1f}"
        mean = "-" if r["mean_evals"] is None else f"{r['mean_evals']:.1f}"
        print(
            f"{r['kernel']:<12} {r['arm']:<9} {r['configs']:>7} {r['profiled_configs']:>8} "
            f"{r['reached']:>3}/{r['seeds']:<4} {median:>7} {mean:>7} "
            f"{r['mean_fraction_at_budget']:>9.3f}"
        )


# ----------------------------------------------------------------------------- recording


def _load_module(entry: Path) -> tuple[Any, Any]:
    from tuned.registry import load_entry

    spec = load_entry(entry)
    module_spec = importlib.util.spec_from_file_location(
        f"masking_{spec.name}", entry / spec.module
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(entry))
    module_spec.loader.exec_module(module)
    return spec, module


def target(entry: Path, sweep: Path) -> int:
    """Under ncu: compile every valid configuration, then launch each once in the range."""
    import torch

    spec, module = _load_module(entry)
    rows = [r for r in json.loads(sweep.read_text())["rows"] if r["objective"] is not None]
    shape = (spec.perf_shapes or spec.shapes)[0]
    inputs = getattr(module, spec.inputs)(
        dict(shape.dims), getattr(torch, spec.dtypes[0]), "cuda", 0
    )
    launcher = getattr(module, spec.launcher)
    for r in rows:  # compile (a warm Triton cache from the sweep makes this fast)
        launcher(*inputs, **r["knobs"])
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for r in rows:
        launcher(*inputs, **r["knobs"])
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def record(entry: Path, sweep: Path, out: Path, ncu: str) -> int:
    from profilers.ncu import (
        NcuProfiler,
        NcuSettings,
        kernel_regex,
        parse_raw_csv,
        profile_from_launches,
    )
    from tuned.profiling import jit_kernel_names

    spec, _ = _load_module(entry)
    rows = [r for r in json.loads(sweep.read_text())["rows"] if r["objective"] is not None]
    settings = NcuSettings(
        executable=ncu, metrics=RECORD_METRICS, launch_count=len(rows), deadline_s=3600.0
    )
    profiler = NcuProfiler(settings=settings)
    log_file = out.with_suffix(".ncu.csv")
    argv = profiler.command(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "target",
            "--entry",
            str(entry),
            "--sweep",
            str(sweep),
        ],
        log_file=log_file,
        kernel_filter=kernel_regex(jit_kernel_names(spec.module_source)),
    )
    started = time.monotonic()
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    wall = time.monotonic() - started
    launches = parse_raw_csv(log_file.read_text()) if log_file.exists() else []
    if proc.returncode != 0 or len(launches) != len(rows):
        print(
            f"ncu exited {proc.returncode} with {len(launches)} launches for {len(rows)} "
            f"configurations (one launch per launcher call expected); see {log_file}",
            file=sys.stderr,
        )
        return 1
    profiles = []
    for r, launch in zip(rows, launches):
        profile = profile_from_launches([launch])
        assert profile is not None
        profiles.append({"knobs": r["knobs"], "metrics": profile.metrics()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "kernel": spec.name,
                "ncu_wall_s": wall,
                "metrics": list(RECORD_METRICS),
                "profiles": profiles,
            },
            indent=1,
        )
    )
    print(f"{spec.name}: {len(profiles)} configurations profiled in {wall:.0f} s -> {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="profile every valid configuration of a sweep (GPU)")
    rec.add_argument("--entry", type=Path, required=True)
    rec.add_argument("--sweep", type=Path, required=True)
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--ncu", default="ncu")
    tgt = sub.add_parser("target", help=argparse.SUPPRESS)
    tgt.add_argument("--entry", type=Path, required=True)
    tgt.add_argument("--sweep", type=Path, required=True)
    rep = sub.add_parser("replay", help="replay the loop with and without masking (CPU)")
    rep.add_argument("--sweeps", type=Path, required=True, help="directory of <kernel>.json")
    rep.add_argument("--profiles", type=Path, required=True, help="directory of <kernel>.json")
    rep.add_argument("--seeds", type=int, default=20)
    rep.add_argument("--budget", type=int, default=60)
    rep.add_argument("--quality", type=float, default=0.95)
    rep.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.smoke:  # the replay on a synthetic table (the GPU tables are bench data)
        smoke_rows = replay([toy_table()], seeds=2, budget=30, quality=0.95)
        print_rows(smoke_rows, 30, 0.95)
        return 0
    if args.command is None:
        parser.error("a command is required: record, replay (or --smoke)")
    if args.command == "target":
        return target(args.entry, args.sweep)
    if args.command == "record":
        return record(args.entry, args.sweep, args.out, args.ncu)
    tables = [
        load_table(sweep, args.profiles / sweep.name)
        for sweep in sorted(args.sweeps.glob("*.json"))
    ]
    if not tables:
        parser.error(f"no sweep files in {args.sweeps}")
    rows = replay(tables, args.seeds, args.budget, args.quality)
    print_rows(rows, args.budget, args.quality)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
