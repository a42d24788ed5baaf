"""Shared helpers for the policy tests: small spaces, a simulated tuning loop."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from policies import POLICIES, Config, Policy, SearchSpace, Suggestion, Trial, config_key

ALL_POLICIES = sorted(POLICIES)


def latency(config: Config) -> float | None:
    """A deterministic synthetic objective with failures (``None``) and interactions."""
    h = zlib.crc32(repr(sorted(config.items())).encode())
    if h % 11 == 0:
        return None
    x = sum((i + 1) * (zlib.crc32(str(v).encode()) % 7) for i, v in enumerate(config.values()))
    return 1e-3 * (1.0 + (h % 1000) / 2000.0 + 0.01 * math.sin(x))


def restricted(config: Config) -> bool:
    """A restriction that rejects about a fifth of a space, deterministically."""
    return zlib.crc32(repr(sorted(config.items())).encode()) % 5 != 0


@st.composite
def spaces(draw: st.DrawFn, *, max_knobs: int = 4, max_values: int = 5) -> SearchSpace:
    """Small knob spaces of mixed value types, sometimes restricted."""
    n = draw(st.integers(1, max_knobs))
    names = ["BLOCK_M", "num_warps", "num_stages", "EVEN_K", "GROUP_SIZE_M", "VEC"][:n]
    knobs: dict[str, tuple[int | bool, ...]] = {}
    for name in names:
        if name == "EVEN_K":
            knobs[name] = (False, True)
        else:
            size = draw(st.integers(1, max_values))
            knobs[name] = tuple(2**i for i in range(size))
    return SearchSpace(knobs=knobs, is_valid=restricted if draw(st.booleans()) else None)


def valid_configs(space: SearchSpace) -> list[dict[str, object]]:
    return [c for c in (space.config_at(i) for i in range(space.size())) if space.admits(c)]


def make_trial(index: int, config: Config, suggestion: Suggestion | None = None) -> Trial:
    t = latency(config)
    return Trial(
        candidate_id=f"c{index}",
        knobs=dict(config),
        outcome="ok" if t is not None else "runtime_error",
        time_s=t,
        strategy="original" if suggestion is None else suggestion.strategy,
        parent_id=None if suggestion is None else suggestion.parent_id,
    )


@dataclass
class Loop:
    """The daemon's loop in miniature: baseline, then suggest -> evaluate -> observe."""

    space: SearchSpace
    policy: Policy
    seed: int = 0
    trials: list[Trial] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    metrics: Callable[[Config], dict[str, float]] | None = None

    def start(self) -> None:
        configs = valid_configs(self.space)
        rng = np.random.default_rng([self.seed, 99])
        ok = [c for c in configs if latency(c) is not None] or configs
        baseline = ok[int(rng.integers(len(ok)))]
        self.trials.append(self._trial(baseline, None))

    def _trial(self, config: Config, suggestion: Suggestion | None) -> Trial:
        trial = make_trial(len(self.trials), config, suggestion)
        if self.metrics is not None and trial.ok:
            trial = Trial(
                trial.candidate_id,
                trial.knobs,
                trial.outcome,
                trial.time_s,
                trial.strategy,
                trial.parent_id,
                self.metrics(config),
            )
        return trial

    def step(self) -> Suggestion | None:
        if not self.trials:
            self.start()
        rng = np.random.default_rng([self.seed, len(self.trials)])
        suggestion = self.policy.suggest(self.space, list(self.trials), rng)
        if suggestion is None:
            return None
        self.suggestions.append(suggestion)
        trial = self._trial(suggestion.knobs, suggestion)
        self.policy.observe(suggestion, trial)
        self.trials.append(trial)
        return suggestion

    def run(self, steps: int) -> None:
        for _ in range(steps):
            if self.step() is None:
                return

    def keys(self) -> list[tuple[tuple[str, object], ...]]:
        return [config_key(t.knobs) for t in self.trials]


@pytest.fixture(params=ALL_POLICIES)
def policy_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def fractions_at(
    fixture: Path, budget: int, seeds: Iterable[int], settings: Any = None
) -> list[float]:
    """Per seed, the fraction of the optimum after ``budget`` evaluations on the recorded
    space ``fixture`` (bench/search_replay.py's replay): of the default policy, or of a
    :class:`~policies.HierarchicalPolicy` with ``settings`` (a switched-off feature)."""
    from bench import search_replay
    from policies import DEFAULT_POLICY, HierarchicalPolicy

    space = search_replay.RecordedSpace(fixture)
    if settings is None:
        return [search_replay.replay(space, DEFAULT_POLICY, s, budgets=(budget,))[0] for s in seeds]
    return [
        search_replay.replay(
            space, "p", s, budgets=(budget,), policy=HierarchicalPolicy(settings=settings)
        )[0]
        for s in seeds
    ]
