"""K-means clustering of a kernel's candidates by runtime behaviour, with stable cluster ids.

The clusters are the first half of KernelBand's level-1 arms ``(cluster, strategy)``, so a
cluster must keep its id when the clustering is refreshed, or the arm statistics would be
credited to the wrong group. After every refit the new clusters are matched to the old ones
by the Hungarian method (``scipy.optimize.linear_sum_assignment``) on *member overlap*: the
old model assigns the same candidates, and a new cluster inherits the id of the old cluster
whose members it shares most (centroid distance breaks ties). Ids stay in ``[0, k)``. At the
first fit, ids are ordered by mean log-latency: cluster 0 is the fastest.

Refits happen once there are at least ``2k`` candidates, then every ``recluster_every``
evaluations, and for long histories not before the candidate count grew by
``refit_growth`` (which keeps the amortized cost of a decision flat at thousands of
candidates); the fit itself uses at most ``max_fit_rows`` candidates, drawn at random.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from clustering.features import Standardizer, feature_matrix

__all__ = ["ClusterModel", "ClusteringSettings", "RuntimeClusterer"]


@dataclass(frozen=True)
class ClusteringSettings:
    """How many clusters, how often to refit, and how much data one fit may use."""

    k: int = 3
    recluster_every: int = 5
    refit_growth: float = 0.05
    max_fit_rows: int = 2048
    n_init: int = 1

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"clustering k must be >= 1, got {self.k}")
        if self.recluster_every < 1:
            raise ValueError(f"recluster_every must be >= 1, got {self.recluster_every}")
        if not 0 <= self.refit_growth < 1:
            raise ValueError(f"refit_growth must be in [0, 1), got {self.refit_growth}")
        if self.max_fit_rows < 2 * self.k:
            raise ValueError("max_fit_rows must be at least 2k")


@dataclass
class ClusterModel:
    """A fitted clustering: feature names, standardization and centroids by cluster id."""

    names: list[str]
    standardizer: Standardizer
    centroids: dict[int, list[float]]
    fitted_at: int
    fits: int = 1

    def assign(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        """The id of the nearest centroid for every row."""
        if not rows:
            return np.zeros(0, dtype=np.int64)
        matrix, _ = feature_matrix(rows, self.names)
        z = self.standardizer.transform(matrix)
        ids = np.array(sorted(self.centroids))
        centres = np.array([self.centroids[i] for i in ids])
        d = ((z[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2)
        return np.asarray(ids[np.argmin(d, axis=1)], dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": list(self.names),
            "standardizer": self.standardizer.to_dict(),
            "centroids": {str(i): list(c) for i, c in sorted(self.centroids.items())},
            "fitted_at": self.fitted_at,
            "fits": self.fits,
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> ClusterModel:
        return cls(
            names=[str(n) for n in state["names"]],
            standardizer=Standardizer.from_dict(state["standardizer"]),
            centroids={int(i): [float(v) for v in c] for i, c in state["centroids"].items()},
            fitted_at=int(state["fitted_at"]),
            fits=int(state.get("fits", 1)),
        )


@dataclass(kw_only=True)
class RuntimeClusterer:
    """Fits and refreshes a :class:`ClusterModel`; the model is the persisted state."""

    settings: ClusteringSettings = field(default_factory=ClusteringSettings)
    model: ClusterModel | None = None

    def due(self, n_rows: int, n_evaluations: int) -> bool:
        """Whether a (re)fit is due with ``n_rows`` candidates after ``n_evaluations``."""
        if n_rows < 2 * self.settings.k:
            return False
        if self.model is None:
            return True
        since = n_evaluations - self.model.fitted_at
        wait = max(self.settings.recluster_every, math.ceil(self.settings.refit_growth * n_rows))
        return since >= wait or since < 0

    def fit(
        self, rows: Sequence[Mapping[str, float]], n_evaluations: int, rng: np.random.Generator
    ) -> np.ndarray:
        """Refit on ``rows`` (feature dicts); returns every row's stable cluster id."""
        if not rows:
            raise ValueError("cannot cluster zero candidates")
        matrix, names = feature_matrix(rows)
        standardizer = Standardizer.fit(matrix)
        z = standardizer.transform(matrix)
        sample = z
        if len(z) > self.settings.max_fit_rows:
            sample = z[rng.choice(len(z), size=self.settings.max_fit_rows, replace=False)]
        k = min(self.settings.k, len(np.unique(np.round(sample, 9), axis=0)))
        if k <= 1:
            centres = sample.mean(axis=0, keepdims=True)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                km = KMeans(
                    n_clusters=k,
                    n_init=self.settings.n_init,
                    random_state=int(rng.integers(2**31 - 1)),
                ).fit(sample)
            centres = np.asarray(km.cluster_centers_)
        labels = np.argmin(((z[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2), axis=1)
        ids = self._stable_ids(rows, z, centres, labels, names, standardizer)
        self.model = ClusterModel(
            names=list(names),
            standardizer=standardizer,
            centroids={ids[j]: [float(v) for v in centres[j]] for j in range(len(centres))},
            fitted_at=n_evaluations,
            fits=(self.model.fits + 1) if self.model else 1,
        )
        return np.array([ids[j] for j in labels], dtype=np.int64)

    def _stable_ids(
        self,
        rows: Sequence[Mapping[str, float]],
        z: np.ndarray,
        centres: np.ndarray,
        labels: np.ndarray,
        names: tuple[str, ...],
        standardizer: Standardizer,
    ) -> list[int]:
        """Cluster id for each new centre: matched to the old model, else fresh."""
        n_new = len(centres)
        if self.model is None:
            order = np.argsort(centres[:, 0], kind="stable")  # log_latency: fastest is 0
            first = [0] * n_new
            for rank, j in enumerate(order):
                first[int(j)] = rank
            return first
        old_ids = sorted(self.model.centroids)
        old_labels = self.model.assign(rows)
        overlap = np.zeros((len(old_ids), n_new))
        position = {cid: i for i, cid in enumerate(old_ids)}
        for old, new in zip(old_labels, labels):
            overlap[position[int(old)], int(new)] += 1
        # Centroid distance (in the new standardized space, common features) breaks ties.
        distance = np.zeros_like(overlap)
        common = [n for n in names if n in self.model.names]
        if common:
            new_cols = [names.index(n) for n in common]
            old_cols = [self.model.names.index(n) for n in common]
            old_mean = np.asarray(self.model.standardizer.mean)[old_cols]
            old_scale = np.asarray(self.model.standardizer.scale)[old_cols]
            new_mean = np.asarray(standardizer.mean)[new_cols]
            new_scale = np.asarray(standardizer.scale)[new_cols]
            for i, cid in enumerate(old_ids):
                raw = np.asarray(self.model.centroids[cid])[old_cols] * old_scale + old_mean
                old_z = (raw - new_mean) / new_scale
                distance[i] = np.sqrt(((centres[:, new_cols] - old_z) ** 2).sum(axis=1))
        cost = -overlap + distance / (1.0 + distance.max())
        rows_i, cols_j = linear_sum_assignment(cost)
        ids: list[int | None] = [None] * n_new
        for i, j in zip(rows_i, cols_j):
            ids[int(j)] = old_ids[int(i)]
        free = iter(sorted(set(range(max(self.settings.k, n_new))) - set(old_ids)))
        return [cid if cid is not None else next(free) for cid in ids]
