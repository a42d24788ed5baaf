"""Peer tuners on the recorded tuning spaces, scored exactly as ``search_replay.py`` scores.

    python bench/peers.py --spaces DIR [FILE ...] --seeds N [--first-seed K]
        [--methods a,b,...] [--jobs J]

Methods: every ktuned policy by its name (``hierarchical``, ``greedy_ls``, ...), and the peers

* ``optuna_tpe``, ``optuna_random``: Optuna's ``TPESampler`` / ``RandomSampler`` (default
  settings, seeded), one categorical parameter per knob, ask-and-tell;
* ``kt_genetic_algorithm``, ``kt_simulated_annealing`` (and any other Kernel Tuner
  strategy as ``kt_<name>``): Kernel Tuner's strategies (default options) on a
  :class:`kernel_tuner.searchspace.Searchspace` built from the cache file, run by a
  simulation runner that looks every configuration up in the recording.

Scoring (the same for every method, :class:`Scorer`): evaluation 1 is the seed's baseline,
the configuration ``search_replay.replay`` starts from, evaluated before the method runs and
handed to it as its start (Optuna: an enqueued trial; Kernel Tuner: ``x0``). The budget
counts *distinct recorded* configurations: a failed one counts (and is reported to the method
as a failure), a repeat is answered from the record without counting, and a proposal outside
the recorded (restricted) space is answered as invalid and not counted. A method that stops
early, or makes ``MAX_ASKS_PER_EVAL`` times the budget of proposals, keeps its last fraction.

Output: the mean fraction of optimum per space and method at each budget, the mean over
spaces, and the paired difference of each method against ``--reference`` (the default
policy): per seed, the difference of the two methods' space-averaged fractions, its mean and
standard error over seeds. Seeds are ``K .. K+N-1`` (``--first-seed``, 0 by default): a
change chosen on seeds 0-29 is confirmed on seeds it was not chosen on (``--first-seed 30``).
Optuna and Kernel Tuner are bench dependencies (``pip install -e
'.[bench]'``), imported only when a peer method runs.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.search_replay import BUDGETS, DEFAULT_SPACES, RecordedSpace, _space, load_spaces, replay
from policies import POLICIES, KnobValue

__all__ = ["PEERS", "Scorer", "main", "run_method"]

Key = tuple[KnobValue, ...]

#: A method gives up after this many proposals per unit of budget (outside-space ones and
#: repeats included), so a sampler stuck outside the restricted space cannot loop forever.
MAX_ASKS_PER_EVAL = 30


class BudgetSpent(Exception):
    """Raised inside a peer's loop once the budget of distinct evaluations is spent."""


class Scorer:
    """Counts distinct recorded evaluations and the fraction of optimum after each one."""

    def __init__(self, space: RecordedSpace, horizon: int) -> None:
        self.space = space
        self.horizon = horizon
        self.seen: set[Key] = set()
        self.best: float | None = None
        self.fractions: list[float] = []
        self.asks = 0

    def evaluate(self, key: Key) -> float | None:
        """The recorded time (seconds) of ``key``; ``None`` for a failed or outside one.

        Raises :class:`BudgetSpent` once ``horizon`` distinct configurations are evaluated
        (or the proposal cap is reached).
        """
        self.asks += 1
        if len(self.seen) >= self.horizon or self.asks > MAX_ASKS_PER_EVAL * self.horizon:
            raise BudgetSpent
        record = self.space.records.get(key)
        if record is None:
            return None
        if key not in self.seen:
            self.seen.add(key)
            if record.time_s is not None and (self.best is None or record.time_s < self.best):
                self.best = record.time_s
            self.fractions.append(0.0 if self.best is None else self.space.t_opt / self.best)
        return record.time_s

    def at(self, budgets: Sequence[int]) -> list[float]:
        if not self.fractions:
            return [0.0 for _ in budgets]
        return [self.fractions[min(b, len(self.fractions)) - 1] for b in budgets]


def baseline_key(space: RecordedSpace, seed: int) -> Key:
    """The baseline ``search_replay.replay`` draws for ``seed`` (its evaluation 1)."""
    env = np.random.default_rng([seed, 0])
    return space.ok_keys[int(env.integers(len(space.ok_keys)))]


# -- Optuna ---------------------------------------------------------------------------------


def _optuna(sampler_name: str, space: RecordedSpace, scorer: Scorer, seed: int) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    sampler: optuna.samplers.BaseSampler
    if sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    knobs = {k: list(space.space.knobs[k]) for k in space.keys}
    baseline = baseline_key(space, seed)
    study.enqueue_trial(dict(zip(space.keys, baseline)))
    while True:
        trial = study.ask()
        key: Key = tuple(trial.suggest_categorical(k, knobs[k]) for k in space.keys)  # type: ignore[misc]
        try:
            value = scorer.evaluate(key)
        except BudgetSpent:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, value)


# -- Kernel Tuner ---------------------------------------------------------------------------


class _RecordedRunner:
    """Kernel Tuner's runner interface over a recording (its simulation mode, scored by us)."""

    def __init__(self, space: RecordedSpace, scorer: Scorer) -> None:
        from kernel_tuner import util  # type: ignore[import-untyped]

        self.space = space
        self.scorer = scorer
        self.util = util

    def add_strategy_time(self, seconds: float) -> None:
        pass

    def run(self, parameter_space: Sequence[Sequence[Any]], tuning_options: Any) -> list[Any]:
        util = self.util
        out: list[Any] = []
        for element in parameter_space:
            key = tuple(element)
            params: dict[str, Any] = dict(zip(self.space.keys, key))
            if tuning_options.budget.is_done():
                out.append(None)
                continue
            before = len(self.scorer.seen)
            try:
                value = self.scorer.evaluate(key)
            except BudgetSpent:
                out.append(None)
                continue
            tuning_options.budget.add_evaluations(len(self.scorer.seen) - before)
            record = self.space.records.get(key)
            if record is None:
                params["__error__"] = util.InvalidConfig()
                params["time"] = params["__error__"]
            elif value is None:
                failure = (
                    util.RuntimeFailedConfig()
                    if record.outcome == "runtime_error"
                    else util.CompilationFailedConfig()
                )
                params["__error__"] = failure
                params["time"] = failure
            else:
                params["time"] = value * 1000.0
            out.append(params)
        return out


def _kernel_tuner(strategy: str, space: RecordedSpace, scorer: Scorer, seed: int) -> None:
    from kernel_tuner import util
    from kernel_tuner.interface import Options  # type: ignore[import-untyped]
    from kernel_tuner.searchspace import Searchspace  # type: ignore[import-untyped]

    module = importlib.import_module(f"kernel_tuner.strategies.{strategy}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    cache = {",".join(str(v) for v in key): dict(zip(space.keys, key)) for key in space.records}
    searchspace = Searchspace(
        None, None, None, from_cache={"tune_params": dict(space.space.knobs), "cache": cache}
    )
    baseline = baseline_key(space, seed)
    tuning_options = Options(
        strategy_options=Options(x0=list(baseline), max_fevals=scorer.horizon),
        objective=["time"],
        objective_higher_is_better=[False],
        budget=util.TuningBudget(max_fevals=scorer.horizon),
        verbose=False,
        tune_params=dict(space.space.knobs),
        restrictions=None,
        metrics=None,
        eps=1,
    )
    runner = _RecordedRunner(space, scorer)
    with contextlib.suppress(BudgetSpent, util.StopCriterionReached):
        module.tune(searchspace, runner, tuning_options)


# -- dispatch -------------------------------------------------------------------------------

Peer = Callable[[RecordedSpace, Scorer, int], None]

#: Peer name -> runner. ``kt_<strategy>`` also accepts any other Kernel Tuner strategy.
PEERS: dict[str, Peer] = {
    "optuna_tpe": lambda sp, sc, seed: _optuna("tpe", sp, sc, seed),
    "optuna_random": lambda sp, sc, seed: _optuna("random", sp, sc, seed),
    "kt_genetic_algorithm": lambda sp, sc, seed: _kernel_tuner("genetic_algorithm", sp, sc, seed),
    "kt_simulated_annealing": lambda sp, sc, seed: _kernel_tuner(
        "simulated_annealing", sp, sc, seed
    ),
}


def _peer(method: str) -> Peer | None:
    if method in PEERS:
        return PEERS[method]
    if method.startswith("kt_"):
        strategy = method.removeprefix("kt_")
        return lambda sp, sc, seed: _kernel_tuner(strategy, sp, sc, seed)
    return None


def run_method(space: RecordedSpace, method: str, seed: int, budgets: Sequence[int]) -> list[float]:
    """Fraction of optimum at each budget for one seeded run of ``method`` on ``space``."""
    if method in POLICIES:
        return replay(space, method, seed, budgets=budgets)
    peer = _peer(method)
    if peer is None:
        raise ValueError(f"unknown method {method!r}; valid: policies, {sorted(PEERS)}, kt_*")
    scorer = Scorer(space, max(budgets))
    try:
        scorer.evaluate(baseline_key(space, seed))
        peer(space, scorer, seed)
    except BudgetSpent:
        pass
    return scorer.at(budgets)


def _job(args: tuple[str, str, int, tuple[int, ...]]) -> tuple[str, str, int, list[float]]:
    path, method, seed, budgets = args
    space = _space(path)
    return space.name, method, seed, run_method(space, method, seed, budgets)


def _paths(given: Sequence[Path]) -> list[Path]:
    paths: list[Path] = []
    for item in given:
        if item.is_dir():
            paths += sorted(item.glob("*.json.gz"))
        elif item.is_file():
            paths.append(item)
        else:
            raise SystemExit(f"peers: no such directory or file: {item}")
    return list(dict.fromkeys(paths))


def report(
    results: dict[tuple[str, str, int], list[float]],
    spaces: Sequence[str],
    methods: Sequence[str],
    seeds: Sequence[int],
    budgets: Sequence[int],
    reference: str,
) -> str:
    """The tables (markdown) of per-space means, overall means and paired differences over
    the runs of ``seeds``."""
    lines = ["| space | method | " + " | ".join(f"@{b}" for b in budgets) + " |"]
    lines.append("|" + " --- |" * (len(budgets) + 2))
    per_seed: dict[str, np.ndarray] = {}
    for method in methods:
        grid = np.array([[results[(s, method, k)] for k in seeds] for s in spaces])
        per_seed[method] = grid.mean(axis=0)  # seeds x budgets, averaged over spaces
        for s, row in zip(spaces, grid.mean(axis=1)):
            lines.append(f"| {s} | {method} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    for method in methods:
        mean = per_seed[method].mean(axis=0)
        lines.append(f"| **mean** | {method} | " + " | ".join(f"{v:.3f}" for v in mean) + " |")
    if reference in per_seed:
        lines += [
            "",
            f"Paired difference, {reference} minus method (mean +- standard error "
            f"over {len(seeds)} seeds of the space-averaged fraction):",
            "",
        ]
        lines.append("| method | " + " | ".join(f"@{b}" for b in budgets) + " |")
        lines.append("|" + " --- |" * (len(budgets) + 1))
        for method in methods:
            if method == reference:
                continue
            diff = per_seed[reference] - per_seed[method]
            n = len(seeds)
            se = diff.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else diff[0] * 0
            cells = [f"{d:+.3f} +- {e:.3f}" for d, e in zip(diff.mean(axis=0), se)]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from policies import DEFAULT_POLICY

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spaces", type=Path, nargs="+", default=[DEFAULT_SPACES])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds K .. K+N-1 (held-out seeds: 30 on)"
    )
    parser.add_argument(
        "--methods",
        default=f"{DEFAULT_POLICY},optuna_tpe,optuna_random,kt_genetic_algorithm,"
        "kt_simulated_annealing",
    )
    parser.add_argument("--reference", default=DEFAULT_POLICY)
    parser.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    paths = _paths(args.spaces)
    if not paths:
        parser.error("no *.json.gz tuning spaces given")
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in POLICIES and _peer(m) is None]
    if unknown:
        parser.error(f"unknown methods {unknown}; valid: {sorted(POLICIES)}, {sorted(PEERS)}")
    budgets = tuple(int(b) for b in args.budgets.split(","))
    if args.seeds < 1 or args.first_seed < 0:
        parser.error("--seeds must be >= 1 and --first-seed >= 0")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    load_spaces(parser, paths)
    jobs = [(str(p), m, k, budgets) for p in paths for m in methods for k in seeds]
    started = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            outputs = list(pool.map(_job, jobs, chunksize=1))
    else:
        outputs = [_job(j) for j in jobs]
    results = {(s, m, k): f for s, m, k, f in outputs}
    spaces = [p.name.removesuffix(".json.gz") for p in paths]
    print(f"# fraction of optimum, mean over {args.seeds} seeds ({seeds[0]}-{seeds[-1]})")
    print(report(results, spaces, methods, seeds, budgets, args.reference))
    print(f"# {len(jobs)} runs in {time.perf_counter() - started:.1f} s with {args.jobs} worker(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
