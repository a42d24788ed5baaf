"""Replay search policies on recorded tuning spaces (Kernel Tuner cache files).

    python bench/search_replay.py --spaces DIR --seeds N [--first-seed K]
        [--policies a,b,...] [--noise]

Every ``*.json.gz`` in DIR is a brute-forced tuning space (see the benchdata README);
``--spaces`` also takes several directories and files at once (``--spaces DIR FILE ...``),
e.g. the shared spaces plus a newly recorded one. For
each space, policy and seed, a simulated tuning loop runs the policy exactly as the daemon
does: ``suggest`` -> look up the recorded time -> ``observe``. The first trial is the
baseline, a random configuration that ran correctly (strategy ``"original"``). A failed
configuration becomes a trial with outcome ``compile_error`` or ``runtime_error`` and no
time; it counts as an evaluation. ``--noise`` draws each evaluation's time from the
configuration's recorded runs instead of using their mean.

Restrictions: the recorded spaces are not cartesian products; a configuration absent from
``cache`` violates the kernel's restrictions. The policy gets the cartesian
:class:`~policies.SearchSpace` of ``tune_params`` with ``is_valid`` set to "recorded in
``cache``", like Kernel Tuner's restrictions, so it only ever proposes configurations of the
restricted space; proposing anything else (or anything twice) is a policy bug and aborts.

Score: fraction of optimum after N distinct evaluations (the baseline included),
``t_opt / t(best found)`` (0 if nothing valid was found; with ``--noise`` the best found is
the one with the best *measured* time, scored by its recorded mean), averaged over seeds.
One row per space and policy, then a mean row per policy. Seeds are ``K .. K+N-1``
(``--first-seed``, 0 by default): confirm a change chosen on seeds 0-29 on seeds 30 and up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# K-means on a few hundred points is fastest on one thread; OpenMP threads competing with
# the replay's worker processes only spin. Set before scikit-learn is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness.spaces import read_space  # noqa: E402
from policies import (  # noqa: E402
    DEFAULT_POLICY,
    POLICIES,
    Config,
    KnobValue,
    Policy,
    SearchSpace,
    Trial,
    make_policy,
)
from tuned.registry.replay import CacheFormatError  # noqa: E402

BUDGETS = (25, 50, 100, 200)
DEFAULT_SPACES = ROOT.parent / "shared" / "benchdata"
DEFAULT_POLICIES = (
    DEFAULT_POLICY,
    "ucb",
    "hierarchical_nocluster",
    "random",
    "simulated_annealing",
    "greedy_ls",
)
_FAILURES = {
    "CompilationFailedConfig": "compile_error",
    "InvalidConfig": "compile_error",
    "RuntimeFailedConfig": "runtime_error",
}


@dataclass(frozen=True)
class Record:
    """One recorded configuration: mean time and runs in seconds, or the failure outcome."""

    outcome: str
    time_s: float | None
    times_s: tuple[float, ...]


class RecordedSpace:
    """A Kernel Tuner cache file as a restricted :class:`SearchSpace` plus a lookup table.

    Read and checked by :mod:`tuned.registry.replay` (the one reader): a file that is not a
    cache raises :class:`~tuned.registry.replay.CacheFormatError` naming the field.
    """

    def __init__(self, path: Path) -> None:
        cache = read_space(path)
        self.name = path.name.removesuffix(".json.gz")
        self.keys: tuple[str, ...] = cache.keys
        knobs = {k: cache.values[k] for k in self.keys}
        self.records: dict[tuple[KnobValue, ...], Record] = {}
        for key, recorded in cache.records.items():
            if recorded.status == "ok" and recorded.time_ms is not None:
                runs = tuple(t / 1000.0 for t in recorded.times_ms)
                self.records[key] = Record("ok", recorded.time_ms / 1000.0, runs)
            else:
                outcome = _FAILURES.get(recorded.status, "runtime_error")
                self.records[key] = Record(outcome, None, ())
        self.space = SearchSpace(knobs=knobs, is_valid=self.is_valid)
        self.t_opt = min(r.time_s for r in self.records.values() if r.time_s is not None)
        self.ok_keys = [k for k, r in self.records.items() if r.time_s is not None]

    def key(self, config: Config) -> tuple[KnobValue, ...]:
        return tuple(config[k] for k in self.keys)

    def is_valid(self, config: Config) -> bool:
        return self.key(config) in self.records


_SPACES: dict[str, RecordedSpace] = {}


def _space(path: str) -> RecordedSpace:
    if path not in _SPACES:
        _SPACES[path] = RecordedSpace(Path(path))
    return _SPACES[path]


def load_spaces(parser: argparse.ArgumentParser, paths: Sequence[Path]) -> None:
    """Read every space before any job runs (forked workers inherit them); a file that is
    not a Kernel Tuner cache ends the command with its name and the field (exit 2)."""
    for path in paths:
        try:
            _space(str(path))
        except (CacheFormatError, OSError) as exc:
            parser.error(f"{path}: {exc}")


def replay(
    space: RecordedSpace,
    policy_name: str,
    seed: int,
    *,
    budgets: Sequence[int] = BUDGETS,
    noise: bool = False,
    policy: Policy | None = None,
) -> list[float]:
    """Fraction of optimum at each budget for one seeded run of one policy.

    ``policy``: an instance to run instead of a new ``policy_name`` with default settings
    (e.g. one built with other settings); ``policy_name`` then only labels errors.
    """
    env = np.random.default_rng([seed, 0])
    rng = np.random.default_rng([seed, 1])
    policy = policy if policy is not None else make_policy(policy_name)
    baseline = space.ok_keys[int(env.integers(len(space.ok_keys)))]
    trials: list[Trial] = []
    seen: set[tuple[KnobValue, ...]] = set()
    best_measured = float("inf")
    best_true: float | None = None
    fractions: list[float] = []
    horizon = max(budgets)

    def evaluate(key: tuple[KnobValue, ...], strategy: str, parent: str | None) -> Trial:
        nonlocal best_measured, best_true
        record = space.records[key]
        measured = record.time_s
        if measured is not None and noise and record.times_s:
            measured = record.times_s[int(env.integers(len(record.times_s)))]
        if measured is not None and measured < best_measured:
            best_measured, best_true = measured, record.time_s
        seen.add(key)
        fractions.append(0.0 if best_true is None else space.t_opt / best_true)
        return Trial(
            candidate_id=f"c{len(trials)}",
            knobs=dict(zip(space.keys, key)),
            outcome=record.outcome,
            time_s=measured,
            strategy=strategy,
            parent_id=parent,
        )

    trials.append(evaluate(baseline, "original", None))
    while len(trials) < horizon:
        suggestion = policy.suggest(space.space, trials, rng)
        if suggestion is None:
            break
        key = space.key(suggestion.knobs)
        if not space.space.admits(suggestion.knobs) or key in seen:
            raise RuntimeError(
                f"{policy_name} proposed {dict(suggestion.knobs)} on {space.name}, which is "
                f"{'already evaluated' if key in seen else 'outside the restricted space'}"
            )
        trial = evaluate(key, suggestion.strategy, suggestion.parent_id)
        policy.observe(suggestion, trial)
        policy.to_dict()  # the daemon persists after every update: keep that cost in
        trials.append(trial)
    return [fractions[min(b, len(fractions)) - 1] for b in budgets]


def _job(args: tuple[str, str, int, tuple[int, ...], bool]) -> tuple[str, str, list[float]]:
    path, policy_name, seed, budgets, noise = args
    space = _space(path)
    return space.name, policy_name, replay(space, policy_name, seed, budgets=budgets, noise=noise)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--spaces",
        type=Path,
        nargs="+",
        default=[DEFAULT_SPACES],
        help="directories (every *.json.gz in them) and/or *.json.gz files",
    )
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds K .. K+N-1 (held-out seeds: 30 on)"
    )
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS))
    parser.add_argument("--noise", action="store_true", help="draw times from recorded runs")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    paths: list[Path] = []
    for given in args.spaces:
        if given.is_dir():
            paths += sorted(given.glob("*.json.gz"))
        elif given.is_file():
            paths.append(given)
        else:
            parser.error(f"no such directory or file: {given}")
    paths = list(dict.fromkeys(paths))
    if not paths:
        parser.error(f"no *.json.gz tuning spaces in {', '.join(map(str, args.spaces))}")
    if len({p.name for p in paths}) != len(paths):
        parser.error("two spaces share a file name; their rows would be merged")
    names = [p for p in args.policies.split(",") if p]
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; valid: {', '.join(sorted(POLICIES))}")
    budgets = tuple(int(b) for b in args.budgets.split(","))
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    load_spaces(parser, paths)
    jobs = [(str(p), n, s, budgets, args.noise) for p in paths for n in names for s in seeds]

    started = time.perf_counter()
    results: dict[tuple[str, str], list[list[float]]] = {}
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            outputs = list(pool.map(_job, jobs, chunksize=max(1, args.seeds // 4)))
    else:
        outputs = [_job(j) for j in jobs]
    for space_name, policy_name, fractions in outputs:
        results.setdefault((space_name, policy_name), []).append(fractions)
    elapsed = time.perf_counter() - started

    header = "| space | policy | " + " | ".join(f"@{b}" for b in budgets) + " |"
    noise = " (noise)" if args.noise else ""
    print(f"# fraction of optimum, mean over {args.seeds} seeds ({seeds[0]}-{seeds[-1]}){noise}")
    print(header)
    print("|" + " --- |" * (len(budgets) + 2))
    space_names = [p.name.removesuffix(".json.gz") for p in paths]
    for space_name in space_names:
        for name in names:
            mean = np.mean(results[(space_name, name)], axis=0)
            print(f"| {space_name} | {name} | " + " | ".join(f"{v:.3f}" for v in mean) + " |")
    for name in names:
        per_space = [np.mean(results[(s, name)], axis=0) for s in space_names]
        mean = np.mean(per_space, axis=0)
        print(f"| **mean** | {name} | " + " | ".join(f"{v:.3f}" for v in mean) + " |")
    print(f"# {len(jobs)} runs in {elapsed:.1f} s with {args.jobs} worker(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
