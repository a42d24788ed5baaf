"""The model arm's proposer: a Gaussian process over the whole space, expected improvement.

Local moves climb from good parents, one knob at a time; they cannot tell which of the
thousands of configurations they have not touched is worth a try. This proposer fits a
surrogate of the latency to every evaluation so far and proposes the free configuration
with the largest *expected improvement* over the incumbent (Jones et al., 1998), the
usual Bayesian-optimization step, on knob spaces:

* a configuration is a point of ``[0, 1]^d``, one coordinate per knob with more than one
  value: a numeric knob's value position over its list (``BLOCK_M`` 16, 32, 64, 128 ->
  0, 1/3, 2/3, 1), so neighbours in the list are close; a knob of names or flags
  (``"ijk"``, ``True``) is categorical: two values are either equal or distance 1;
* the kernel is the exponential (Laplace) product kernel
  ``k(x, y) = exp(-sum_j |x_j - y_j| / l)``, rough enough for tile sizes that fall off a
  cliff, with one length scale ``l`` chosen from ``lengthscales`` by marginal likelihood
  at every proposal (a pure function of the history: a restarted daemon proposes the same);
* the target is the log latency, standardized; a failed configuration counts as the
  slowest successful one, so the model learns where the space does not compile;
* candidates are ``pool`` uniformly random free configurations plus every one-knob
  (any value) neighbour of the ``local_top`` fastest candidates; the one with the
  largest expected improvement is proposed.

It is a proposer, not a policy: the hierarchical bandit offers it as one more arm
(``model``), credited like any other with the child's gain over its parent, the incumbent.
Cost: the fit uses at most ``max_points`` evaluations (the fastest half and the most recent
rest), so a decision stays ``O(max_points^3 + max_points * pool * knobs)`` however long the
history. All randomness comes from the ``rng`` passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from policies.history import TrialLog
from policies.space_index import SpaceIndex

__all__ = ["SurrogateProposer", "SurrogateSettings"]

#: Codes below this are vectorized as int64; larger spaces take the per-code path.
_INT64_SAFE = 2**62


@dataclass(frozen=True)
class SurrogateSettings:
    """The model arm's constants (generic: measured on the recorded spaces, issue 24)."""

    pool: int = 600
    local_top: int = 8
    max_points: int = 200
    lengthscales: tuple[float, ...] = (0.15, 0.3, 0.6, 1.2)
    noise: float = 0.01

    def __post_init__(self) -> None:
        if self.pool < 0 or self.local_top < 0:
            raise ValueError("pool and local_top must be >= 0")
        if self.pool == 0 and self.local_top == 0:
            raise ValueError("pool and local_top are both 0: the model arm has no candidates")
        if self.max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {self.max_points}")
        if not self.lengthscales or any(not ls > 0 for ls in self.lengthscales):
            raise ValueError(f"lengthscales must be positive, got {self.lengthscales}")
        if not self.noise > 0:
            raise ValueError(f"noise must be > 0, got {self.noise}")


class SurrogateProposer:
    """Proposes the free configuration of largest expected improvement; see the module."""

    def __init__(self, *, settings: SurrogateSettings | None = None) -> None:
        self.settings = settings or SurrogateSettings()
        self._index: SpaceIndex | None = None
        self._knobs: np.ndarray = np.zeros(0, dtype=np.int64)
        self._scale: np.ndarray = np.zeros(0)
        self._categorical: np.ndarray = np.zeros(0, dtype=bool)

    def propose(self, log: TrialLog, rng: np.random.Generator, taken: set[int]) -> int | None:
        """A free code (valid, not evaluated, not in ``taken``); ``None`` without data to
        fit (fewer than two evaluations) or without a free candidate."""
        index = log.index
        if self._index is not index:
            self._prepare(index)
        codes, y, n_ok = self._points(log)
        if len(codes) < 2 or not self._knobs.size:
            return None
        candidates = self._candidates(log, rng, taken)
        if not candidates:
            return None
        mean, sd = float(y.mean()), float(y.std())
        target = (y - mean) / (sd if sd > 0 else 1.0)
        x = self._features(index, codes)
        distance = self._distance(x, x)
        fit = self._fit(distance, target)
        if fit is None:  # numerically singular at every length scale: no proposal
            return None
        scale, chol, alpha = fit
        xc = self._features(index, candidates)
        cross = np.exp(-self._distance(x, xc) / scale)
        mu = cross.T @ alpha
        v = np.linalg.solve(chol, cross)
        sigma = np.sqrt(np.maximum(1.0 - np.einsum("ij,ij->j", v, v), 1e-12))
        best = float(target[:n_ok].min())
        z = (best - mu) / sigma
        cdf = np.array([0.5 * math.erfc(-q / math.sqrt(2.0)) for q in z.tolist()])
        improvement = sigma * (z * cdf + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
        return candidates[int(np.argmax(improvement))]

    # -- internals --------------------------------------------------------------------------

    def _prepare(self, index: SpaceIndex) -> None:
        self._index = index
        knobs = list(index.movable_positions)
        self._knobs = np.array(knobs, dtype=np.int64)
        self._scale = np.array([1.0 / (index.cards[j] - 1) for j in knobs])
        self._categorical = np.array(
            [
                not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in index.values[j]
                )
                for j in knobs
            ],
            dtype=bool,
        )

    def _points(self, log: TrialLog) -> tuple[list[int], np.ndarray, int]:
        """Codes and log times to fit and how many of them succeeded: successes first (the
        fastest half of ``max_points``, then the most recent), then failures at the slowest
        success's time."""
        ok = [c for c in log.codes if c in log.times]
        limit = self.settings.max_points
        if len(ok) > limit:
            fastest = sorted(ok, key=log.times.__getitem__)[: limit // 2]
            keep = set(fastest)
            recent = [c for c in reversed(ok) if c not in keep][: limit - len(fastest)]
            ok = fastest + recent
        if not ok:
            return [], np.zeros(0), 0
        room = max(0, limit - len(ok))
        failed = [c for c in log.codes if c in log.failed][-room:] if room else []
        logs = [math.log(log.times[c]) for c in ok]
        worst = max(logs)
        return ok + failed, np.array(logs + [worst] * len(failed)), len(ok)

    def _candidates(self, log: TrialLog, rng: np.random.Generator, taken: set[int]) -> list[int]:
        index = log.index
        s = self.settings
        out: dict[int, None] = {}
        if s.pool and index.size:
            if index.size < _INT64_SAFE:
                draws = [int(c) for c in rng.integers(index.size, size=s.pool)]
            else:
                draws = [index.random_code(rng) for _ in range(s.pool)]
            for code in draws:
                if log.is_free(code, taken):
                    out[code] = None
        for _, i in log.ranked[: s.local_top]:
            parent = log.ok[i].code
            if parent is None:
                continue
            for code in index.hamming(parent, index.movable_positions):
                if code not in out and log.is_free(code, taken):
                    out[code] = None
        return list(out)

    def _features(self, index: SpaceIndex, codes: Sequence[int]) -> np.ndarray:
        """Value positions of the movable knobs, scaled to [0, 1]; one row per code."""
        if index.size < _INT64_SAFE:
            arr = np.asarray(codes, dtype=np.int64)[:, None]
            strides = np.asarray(index.strides, dtype=np.int64)[self._knobs]
            cards = np.asarray(index.cards, dtype=np.int64)[self._knobs]
            digits = (arr // strides) % cards
        else:
            digits = np.array([[index.digits(c)[j] for j in self._knobs] for c in codes])
        scaled: np.ndarray = digits.astype(float) * self._scale
        return scaled

    def _distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Sum over knobs of |a_j - b_j| (numeric) or [a_j != b_j] (categorical)."""
        out = np.zeros((len(a), len(b)))
        for j, categorical in enumerate(self._categorical):
            diff = np.abs(a[:, j, None] - b[None, :, j])
            out += (diff > 0) if categorical else diff
        return out

    def _fit(
        self, distance: np.ndarray, target: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray] | None:
        """The length scale of largest marginal likelihood, its Cholesky factor and
        ``K^-1 y``; ``None`` if no length scale gives a positive definite matrix."""
        best: tuple[float, float, np.ndarray, np.ndarray] | None = None
        eye = self.settings.noise * np.eye(len(target))
        for scale in self.settings.lengthscales:
            try:
                chol = np.linalg.cholesky(np.exp(-distance / scale) + eye)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, target))
            evidence = -0.5 * float(target @ alpha) - float(np.log(np.diag(chol)).sum())
            if best is None or evidence > best[0]:
                best = (evidence, scale, chol, alpha)
        return None if best is None else best[1:]
