"""Clustering the kernels of a registry, and strategy priors from a kernel's cluster peers.

Each kernel is summarized by the mean of its candidates' runtime features
(:mod:`clustering.features`); kernels are then clustered with K-means like candidates are.
A kernel that starts tuning borrows, as a prior, the per-strategy statistics of the kernels
in its cluster: every strategy gets ``weight`` pseudo-pulls at the peers' pooled mean reward,
so it starts where similar kernels ended up, and its own pulls soon dominate::

    prior_pulls(s) = weight,   prior_reward_sum(s) = weight * (sum_peers S_s) / (sum_peers N_s)

This module knows nothing of policies: statistics are plain ``strategy -> (pulls, reward
sum)`` mappings, which the hierarchical policy accepts as its ``prior``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from clustering.features import Standardizer, feature_matrix

__all__ = ["cluster_kernels", "kernel_feature_rows", "peer_prior"]


def kernel_feature_rows(
    rows_by_kernel: Mapping[str, Sequence[Mapping[str, float]]],
) -> tuple[list[str], list[dict[str, float]]]:
    """One averaged feature row per kernel that has candidates (kernels sorted by name)."""
    kernels = sorted(k for k, rows in rows_by_kernel.items() if rows)
    out = []
    for kernel in kernels:
        rows = rows_by_kernel[kernel]
        names = sorted({name for row in rows for name in row})
        out.append({n: float(np.mean([row[n] for row in rows if n in row])) for n in names})
    return kernels, out


def cluster_kernels(
    rows_by_kernel: Mapping[str, Sequence[Mapping[str, float]]],
    *,
    k: int = 3,
    seed: int = 0,
) -> dict[str, int]:
    """Kernel name -> cluster id (``0`` is the cluster of the fastest kernels on average).

    ``rows_by_kernel`` holds each kernel's candidate feature rows (see
    :func:`clustering.features.feature_row`). With fewer kernels than ``k`` every kernel is
    its own cluster. Deterministic for a given ``seed``.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    kernels, rows = kernel_feature_rows(rows_by_kernel)
    if not kernels:
        return {}
    matrix, _ = feature_matrix(rows)
    z = Standardizer.fit(matrix).transform(matrix)
    k_eff = min(k, len(np.unique(np.round(z, 9), axis=0)))
    if k_eff <= 1:
        return dict.fromkeys(kernels, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        km = KMeans(n_clusters=k_eff, n_init=10, random_state=seed).fit(z)
    order = np.argsort(np.asarray(km.cluster_centers_)[:, 0], kind="stable")
    rank = {int(j): r for r, j in enumerate(order)}
    return {kernel: rank[int(label)] for kernel, label in zip(kernels, km.labels_)}


def peer_prior(
    kernel: str,
    clusters: Mapping[str, int],
    stats_by_kernel: Mapping[str, Mapping[str, tuple[float, float]]],
    *,
    weight: float = 3.0,
) -> dict[str, tuple[float, float]]:
    """Strategy -> ``(pseudo_pulls, pseudo_reward_sum)`` pooled from ``kernel``'s peers.

    Peers are the other kernels with the same cluster id in ``clusters``; a kernel that is
    not clustered yet (new) and has no peers gets an empty prior. ``stats_by_kernel`` maps a
    kernel to its ``strategy -> (pulls, reward_sum)``.
    """
    if weight < 0:
        raise ValueError(f"prior weight must be >= 0, got {weight}")
    cluster = clusters.get(kernel)
    if cluster is None:
        return {}
    pulls: dict[str, float] = {}
    rewards: dict[str, float] = {}
    for peer, peer_cluster in clusters.items():
        if peer == kernel or peer_cluster != cluster:
            continue
        for strategy, (n, s) in stats_by_kernel.get(peer, {}).items():
            pulls[strategy] = pulls.get(strategy, 0.0) + float(n)
            rewards[strategy] = rewards.get(strategy, 0.0) + float(s)
    return {
        strategy: (weight, weight * rewards[strategy] / n)
        for strategy, n in sorted(pulls.items())
        if n > 0
    }
