"""A/A test of the acceptance rule on recorded timings: how often is noise taken for a win?

    python bench/aa_replay.py [--spaces ../shared/benchdata] [--comparisons 1000] [--seed 0]

For each recorded space (Kernel Tuner cache files: 32 measured runs per configuration), pick
random configurations and compare each with itself: the "candidate" and the "incumbent" get
independent draws of the configuration's recorded runs, as two interleaved timings of
identical code would. The acceptance rule of :mod:`tuned.acceptance` (bootstrap interval of
the speedup, lower bound above 1 + min_gain, confirmed by a re-measurement) then decides. Any
acceptance is a false improvement. For contrast it also reports how often a real 5 % and 10 %
gain (the incumbent's runs scaled up) is accepted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuned.acceptance import AcceptanceSettings, decide, speedup_interval  # noqa: E402


def recorded_runs(path: Path) -> list[list[float]]:
    """The measured runs (seconds) of every valid configuration of a cache file."""
    with gzip.open(path, "rt") as f:
        cache = json.load(f)["cache"]
    return [
        [t / 1e3 for t in entry["times"]]
        for entry in cache.values()
        if isinstance(entry.get("time"), (int, float)) and len(entry.get("times", ())) >= 8
    ]


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=Path, default=ROOT.parent / "shared" / "benchdata")
    parser.add_argument("--comparisons", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--min-gain", type=float, default=AcceptanceSettings().min_gain, help="the rule's bar"
    )
    args = parser.parse_args()
    settings = AcceptanceSettings(min_gain=args.min_gain)
    files = sorted(args.spaces.glob("*.json.gz"))
    if not files:
        print(f"no *.json.gz under {args.spaces}", file=sys.stderr)
        return 2
    print(
        f"acceptance rule: lower bound of the {settings.confidence:.0%} bootstrap interval > "
        f"1 + {settings.min_gain}, confirmed by a re-measurement; {args.comparisons} "
        f"comparisons per space, seed {args.seed}\n"
    )
    print(
        "| space | runs/config | median CV | false accepts (A/A) | 5 % gain accepted | "
        "10 % gain accepted |"
    )
    print("|---|---|---|---|---|---|")
    total_false = 0
    for path in files:
        runs = recorded_runs(path)
        rng = np.random.default_rng(args.seed)
        cv = statistics.median(statistics.pstdev(r) / statistics.mean(r) for r in runs)
        aa = accept_rate(runs, args.comparisons, 0.0, rng, settings)
        five = accept_rate(runs, args.comparisons // 4, 0.05, rng, settings)
        ten = accept_rate(runs, args.comparisons // 4, 0.10, rng, settings)
        total_false += round(aa * args.comparisons)
        print(
            f"| {path.name.removesuffix('.json.gz')} | {len(runs[0])} | {cv:.2%} | "
            f"{aa:.2%} | {five:.0%} | {ten:.0%} |"
        )
    n = args.comparisons * len(files)
    print(f"\nfalse improvements accepted: {total_false}/{n} = {total_false / n:.3%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
