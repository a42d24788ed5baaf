"""Runtime features and their standardization."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clustering import FEATURES, Standardizer, feature_matrix, feature_row


def test_feature_row_maps_metrics() -> None:
    row = feature_row(2e-3, {"registers": 96, "shared_bytes": 3072, "num_warps": 4, "junk": 1})
    assert row["log_latency"] == pytest.approx(math.log(2e-3))
    assert row["shared_kib"] == pytest.approx(2.0)
    assert set(row) == {"log_latency", "registers", "shared_kib", "num_warps"}
    assert set(row) <= set(FEATURES)


def test_feature_row_needs_a_time() -> None:
    with pytest.raises(ValueError, match="positive time"):
        feature_row(0.0, {})


def test_columns_by_coverage_and_mean_imputation() -> None:
    rows = [
        {"log_latency": 0.0, "registers": 10.0, "sol_sm": 0.5},
        {"log_latency": 1.0, "registers": 30.0},
        {"log_latency": 2.0},
    ]
    matrix, names = feature_matrix(rows)
    assert names == ("log_latency", "registers")  # sol_sm: 1 of 3, below half
    assert matrix[2, 1] == pytest.approx(20.0)


def test_standardizer_round_trips_and_keeps_constant_columns() -> None:
    matrix = np.array([[1.0, 5.0], [3.0, 5.0]])
    s = Standardizer.fit(matrix)
    z = s.transform(matrix)
    assert np.allclose(z[:, 0], [-1.0, 1.0])
    assert np.allclose(z[:, 1], [0.0, 0.0])
    assert Standardizer.from_dict(s.to_dict()) == s
