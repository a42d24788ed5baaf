"""Clustering the kernels of a registry, and strategy priors from cluster peers."""

from __future__ import annotations

import numpy as np
import pytest

from clustering import cluster_kernels, feature_row, peer_prior


def _rows(t: float, regs: float, n: int = 5) -> list[dict[str, float]]:
    rng = np.random.default_rng(int(t * 1e6) + int(regs))
    return [
        feature_row(t * float(np.exp(rng.normal(0, 0.02))), {"registers": regs}) for _ in range(n)
    ]


def test_kernels_that_behave_alike_share_a_cluster() -> None:
    rows = {
        "softmax": _rows(1e-4, 32),
        "layernorm": _rows(1.1e-4, 34),
        "matmul": _rows(5e-3, 200),
        "attention": _rows(6e-3, 210),
        "empty": [],
    }
    clusters = cluster_kernels(rows, k=2)
    assert "empty" not in clusters
    assert clusters["softmax"] == clusters["layernorm"] == 0
    assert clusters["matmul"] == clusters["attention"] == 1
    assert cluster_kernels(rows, k=2) == clusters  # deterministic


def test_peer_prior_pools_peers_and_excludes_the_kernel_itself() -> None:
    clusters = {"a": 0, "b": 0, "c": 0, "d": 1}
    stats = {
        "a": {"tiling": (100.0, 90.0)},  # the kernel itself: ignored
        "b": {"tiling": (4.0, 1.0), "pipeline": (2.0, 0.0)},
        "c": {"tiling": (6.0, 1.0)},
        "d": {"tiling": (10.0, 10.0)},  # another cluster: ignored
    }
    prior = peer_prior("a", clusters, stats, weight=2.0)
    assert prior["tiling"] == pytest.approx((2.0, 2.0 * 2.0 / 10.0))
    assert prior["pipeline"] == pytest.approx((2.0, 0.0))
    assert peer_prior("new", clusters, stats) == {}
    with pytest.raises(ValueError):
        peer_prior("a", clusters, stats, weight=-1)


def test_prior_feeds_the_hierarchical_policy() -> None:
    from policies import HierarchicalPolicy

    prior = peer_prior("a", {"a": 0, "b": 0}, {"b": {"tiling": (4.0, 2.0)}})
    policy = HierarchicalPolicy(prior=prior)
    assert policy.to_dict()["prior"] == {"tiling": [3.0, 1.5]}
