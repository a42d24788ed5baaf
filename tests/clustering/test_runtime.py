"""Runtime clustering: K-means on features, stable ids across refits, refit schedule."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clustering import ClusteringSettings, ClusterModel, RuntimeClusterer, feature_row


def blobs(rng: np.random.Generator, n: int = 30) -> list[dict[str, float]]:
    """Three well separated behaviours: fast/compute, medium/memory, slow/spilling."""
    rows = []
    for centre, regs in ((1e-4, 64), (1e-3, 128), (1e-2, 255)):
        for _ in range(n):
            t = centre * float(np.exp(rng.normal(0, 0.05)))
            rows.append(feature_row(t, {"registers": regs + float(rng.normal(0, 2))}))
    return rows


def test_first_fit_orders_ids_by_latency() -> None:
    rng = np.random.default_rng(0)
    rows = blobs(rng)
    clusterer = RuntimeClusterer()
    labels = clusterer.fit(rows, len(rows), rng)
    assert list(labels[:30]) == [0] * 30
    assert list(labels[30:60]) == [1] * 30
    assert list(labels[60:]) == [2] * 30


@settings(max_examples=25, deadline=None, database=None)
@given(seed=st.integers(0, 10_000), extra=st.integers(0, 20))
def test_ids_are_stable_across_refits(seed: int, extra: int) -> None:
    rng = np.random.default_rng(seed)
    rows = blobs(rng)
    clusterer = RuntimeClusterer()
    first = clusterer.fit(rows, len(rows), rng)
    # More candidates arrive, in shuffled order, and the model is refitted from scratch
    # (a new k-means seed): every old candidate keeps its cluster id.
    more = rows + blobs(rng, n=max(extra, 1))
    order = rng.permutation(len(more))
    shuffled = [more[i] for i in order]
    second = clusterer.fit(shuffled, len(more), rng)
    old_positions = {int(p): i for i, p in enumerate(order) if p < len(rows)}
    for p, i in old_positions.items():
        assert second[i] == first[p]
    assert set(second) <= set(range(3))


def test_ids_survive_a_restart_through_to_dict() -> None:
    rng = np.random.default_rng(1)
    rows = blobs(rng)
    clusterer = RuntimeClusterer()
    first = clusterer.fit(rows, len(rows), rng)
    assert clusterer.model is not None
    restored = ClusterModel.from_dict(json.loads(json.dumps(clusterer.model.to_dict())))
    assert restored.to_dict() == clusterer.model.to_dict()
    assert list(restored.assign(rows)) == list(first)
    again = RuntimeClusterer(model=restored).fit(rows, len(rows) + 5, np.random.default_rng(9))
    assert list(again) == list(first)


def test_refit_schedule() -> None:
    clusterer = RuntimeClusterer(settings=ClusteringSettings(k=3, recluster_every=5))
    assert not clusterer.due(5, 10)  # fewer than 2k candidates
    assert clusterer.due(6, 10)
    rng = np.random.default_rng(0)
    clusterer.fit(blobs(rng, 2), 10, rng)
    assert not clusterer.due(7, 14)
    assert clusterer.due(7, 15)
    # Long histories: wait until the candidate count grew by refit_growth (5 %).
    assert not clusterer.due(5000, 10 + 200)
    assert clusterer.due(5000, 10 + 250)


def test_fewer_distinct_points_than_k() -> None:
    rows = [feature_row(1e-3, {})] * 4 + [feature_row(2e-3, {})] * 4
    labels = RuntimeClusterer().fit(rows, 8, np.random.default_rng(0))
    assert sorted(set(labels)) == [0, 1]


def test_profiles_take_part_when_most_candidates_have_them() -> None:
    rows = [feature_row(1e-3, {"sol_dram": 0.9 if i % 2 else 0.1}) for i in range(10)]
    clusterer = RuntimeClusterer(settings=ClusteringSettings(k=2))
    labels = clusterer.fit(rows, 10, np.random.default_rng(0))
    assert clusterer.model is not None and "sol_dram" in clusterer.model.names
    assert len(set(labels[0::2])) == 1 and len(set(labels[1::2])) == 1
    assert labels[0] != labels[1]
