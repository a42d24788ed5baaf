"""How long one policy decision takes with a long history (5,000 candidates by default).

    python bench/policy_overhead.py [--candidates 5000] [--decisions 500] [--policies a,b]

A synthetic Triton-like space (block sizes, warps, stages, group size, flags: 50,000
configurations, of which a restriction rejects 15 %) is filled with ``--candidates``
evaluated trials (random configurations with a synthetic latency, compile metadata and, for
a third of them, SOL profiles; about 6 % fail to compile). Then ``--decisions`` decisions
are timed exactly as the daemon makes them: ``suggest`` on the whole history, ``observe``,
``to_dict``; the synthetic evaluation in between is not timed. The first decision, which
digests the whole history after a (re)start, is reported apart as the cold start. Periodic
re-clustering is included in the mean (it is amortized over the decisions between refits).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from policies import DEFAULT_POLICY, POLICIES, Config, SearchSpace, Trial, make_policy  # noqa: E402

KNOBS = {
    "BLOCK_M": (16, 32, 64, 128, 256),
    "BLOCK_N": (16, 32, 64, 128, 256),
    "BLOCK_K": (16, 32, 64, 128),
    "GROUP_SIZE_M": (1, 2, 4, 8, 16),
    "num_warps": (1, 2, 4, 8, 16),
    "num_stages": (1, 2, 3, 4, 5),
    "EVEN_K": (False, True),
    "use_tma": (0, 1),
}


def _valid(config: Config) -> bool:
    """A Triton-like restriction: not too many elements per program."""
    m, n, k = (int(config[c]) for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return m * n <= 128 * 128 and m * n * k <= 128 * 128 * 64


def _evaluate(
    config: Config, rng: np.random.Generator
) -> tuple[str, float | None, dict[str, float]]:
    """A synthetic latency with interactions, compile metadata, sometimes a profile."""
    m, n, k = (math.log2(float(config[c])) for c in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    warps, stages = math.log2(float(config["num_warps"])), float(config["num_stages"])
    if m + n - warps > 13 or (stages > 4 and m + n + k > 18):
        return "compile_error", None, {}
    t = 1e-3 * (
        1.0
        + 0.05 * (m - 6.5) ** 2
        + 0.05 * (n - 6.0) ** 2
        + 0.08 * (k - 5.0) ** 2
        + 0.04 * (warps - (m + n) / 4) ** 2
        + 0.03 * (stages - 3) ** 2
        + 0.02 * math.log2(float(config["GROUP_SIZE_M"]))
        + (0.1 if config["EVEN_K"] else 0.0)
        + 0.05 * float(config["use_tma"])
    )
    t *= float(np.exp(rng.normal(0, 0.01)))
    metrics = {
        "registers": float(min(255, 2 ** (m + n - 8) * 32 / 2**warps + 32)),
        "shared_bytes": float(2 ** (m + k) * stages * 2 + 2 ** (n + k) * stages * 2),
        "num_warps": float(config["num_warps"]),
    }
    if rng.random() < 1 / 3:
        metrics.update(
            sol_sm=float(rng.uniform(0.3, 0.95)),
            sol_dram=float(rng.uniform(0.2, 0.9)),
            sol_l2=float(rng.uniform(0.2, 0.9)),
        )
    return "ok", t, metrics


def measure(
    policy_name: str, candidates: int, decisions: int, seed: int = 0
) -> tuple[float, float, float, float]:
    """(cold start, mean, median, p99) decision time in milliseconds."""
    space = SearchSpace(knobs=KNOBS, is_valid=_valid)
    rng = np.random.default_rng(seed)
    trials: list[Trial] = []
    seen = set()
    while len(trials) < candidates:
        config = space.config_at(int(rng.integers(space.size())))
        key = tuple(sorted(config.items()))
        if key in seen or not _valid(config):
            continue
        seen.add(key)
        outcome, t, metrics = _evaluate(config, rng)
        strategy = "original" if not trials else "config"
        trials.append(Trial(f"c{len(trials)}", config, outcome, t, strategy, None, metrics))
    policy = make_policy(policy_name)
    timings = []
    cold = 0.0
    for i in range(decisions + 1):
        step_rng = np.random.default_rng([seed, len(trials)])
        history = list(trials)  # the daemon hands over a fresh list every time
        started = time.perf_counter()
        suggestion = policy.suggest(space, history, step_rng)
        elapsed = time.perf_counter() - started
        if suggestion is None:
            break
        outcome, t, metrics = _evaluate(suggestion.knobs, rng)
        trial = Trial(
            f"c{len(trials)}",
            dict(suggestion.knobs),
            outcome,
            t,
            suggestion.strategy,
            suggestion.parent_id,
            metrics,
        )
        started = time.perf_counter()
        policy.observe(suggestion, trial)
        policy.to_dict()
        elapsed += time.perf_counter() - started
        trials.append(trial)
        if i == 0:
            cold = elapsed
        else:
            timings.append(elapsed)
    ms = np.asarray(timings) * 1e3
    return cold * 1e3, float(ms.mean()), float(np.median(ms)), float(np.percentile(ms, 99))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=5000)
    parser.add_argument("--decisions", type=int, default=500)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--smoke", action="store_true", help="a few decisions of the default (CI): no verdict"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.candidates, args.decisions, args.policies = 500, 20, DEFAULT_POLICY
    names = [p for p in args.policies.split(",") if p]
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        parser.error(f"unknown policies {unknown}; valid: {', '.join(sorted(POLICIES))}")
    print(f"Policy decision cost with {args.candidates} candidates, {args.decisions} decisions.\n")
    print("| policy | mean ms | median ms | p99 ms | cold start ms |")
    print("| --- | --- | --- | --- | --- |")
    verdict = 0
    for name in names:
        cold, mean, median, p99 = measure(name, args.candidates, args.decisions)
        print(f"| {name} | {mean:.3f} | {median:.3f} | {p99:.3f} | {cold:.1f} |")
        if name == DEFAULT_POLICY and mean >= 1.0:
            verdict = 1
    figure = [n for n in names if n == DEFAULT_POLICY]
    if figure:
        _, mean, _, _ = measure(DEFAULT_POLICY, args.candidates, args.decisions, seed=1)
        status = "under" if mean < 1.0 else "NOT under"
        print(
            f"\nDefault policy {DEFAULT_POLICY!r}, second run (seed 1): {mean:.3f} ms per "
            f"decision with {args.candidates} candidates ({status} 1 ms)."
        )
    return 0 if args.smoke else verdict


if __name__ == "__main__":
    raise SystemExit(main())
