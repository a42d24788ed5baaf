"""A/A test of the acceptance rule on recorded timings: how often is noise taken for a win?

    python bench/aa_replay.py [--spaces ../shared/benchdata] [--comparisons 1000] [--seed 0]
    python bench/aa_replay.py --smoke      # the tests' small recorded space, 40 comparisons

For each recorded space (Kernel Tuner cache files: 32 measured runs per configuration), pick
random configurations and compare each with itself: the "candidate" and the "incumbent" get
independent draws of the configuration's recorded runs, as two interleaved timings of
identical code would. The acceptance rule of :mod:`tuned.acceptance` (bootstrap interval of
the speedup, lower bound above 1 + min_gain, confirmed by a re-measurement) then decides. Any
acceptance is a false improvement. For contrast it also reports how often a real 5 % and 10 %
gain (the incumbent's runs scaled up) is accepted.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import bench_parser, print_table
from bench.harness.spaces import BENCHDATA, SMOKE_SPACE, recorded_runs
from tuned.acceptance import AcceptanceSettings, decide, speedup_interval


def accept_rate(
    runs: list[list[float]],
    comparisons: int,
    gain: float,
    rng: np.random.Generator,
    settings: AcceptanceSettings,
) -> float:
    """Fraction of comparisons accepted when the candidate is truly ``gain`` faster."""
    accepted = 0
    for _ in range(comparisons):
        times = np.asarray(runs[rng.integers(len(runs))])

        def draw(
            times: np.ndarray = times,
        ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
            cand = rng.choice(times, size=len(times)) / (1.0 + gain)
            inc = rng.choice(times, size=len(times))
            return {"case": cand.tolist()}, {"case": inc.tolist()}

        first = speedup_interval(*draw(), rng, settings)
        status = decide(first, settings)
        if status == "remeasure":
            status = decide(first, settings, speedup_interval(*draw(), rng, settings))
        accepted += status == "accepted"
    return accepted / comparisons


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--spaces", type=Path, default=BENCHDATA)
    parser.add_argument("--comparisons", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--min-gain", type=float, default=AcceptanceSettings().min_gain, help="the rule's bar"
    )
    args = parser.parse_args(argv)
    if args.smoke:  # the tests' small real space, few comparisons
        args.spaces, args.comparisons = SMOKE_SPACE, 40
    settings = AcceptanceSettings(min_gain=args.min_gain)
    files = [args.spaces] if args.spaces.is_file() else sorted(args.spaces.glob("*.json.gz"))
    if not files:
        print(f"no *.json.gz under {args.spaces}", file=sys.stderr)
        return 2
    print(
        f"acceptance rule: lower bound of the {settings.confidence:.0%} bootstrap interval > "
        f"1 + {settings.min_gain}, confirmed by a re-measurement; {args.comparisons} "
        f"comparisons per space, seed {args.seed}\n"
    )
    rows = []
    total_false = 0
    for path in files:
        runs = recorded_runs(path, at_least=8)
        rng = np.random.default_rng(args.seed)
        cv = statistics.median(statistics.pstdev(r) / statistics.mean(r) for r in runs)
        aa = accept_rate(runs, args.comparisons, 0.0, rng, settings)
        five = accept_rate(runs, args.comparisons // 4, 0.05, rng, settings)
        ten = accept_rate(runs, args.comparisons // 4, 0.10, rng, settings)
        total_false += round(aa * args.comparisons)
        name = path.name.removesuffix(".json.gz")
        rows.append((name, len(runs[0]), f"{cv:.2%}", f"{aa:.2%}", f"{five:.0%}", f"{ten:.0%}"))
    headers = ("space", "runs/config", "median CV", "false accepts (A/A)", "5 % gain accepted")
    print_table((*headers, "10 % gain accepted"), rows)
    n = args.comparisons * len(files)
    print(f"\nfalse improvements accepted: {total_false}/{n} = {total_false / n:.3%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
