"""Runtime-behaviour features of candidates, and their standardization.

One row per successful candidate. Columns, when known:

==================  ======================================================================
feature             source
==================  ======================================================================
``log_latency``     ``ln(time_s)``, always present
``registers``       registers per thread (Triton compile metadata)
``shared_kib``      ``log2(1 + shared_bytes / 1024)``: shared memory, log-compressed
``num_warps``       warps per program
``occupancy``       achieved or theoretical occupancy in ``[0, 1]``
``sol_sm``          profiler speed-of-light fractions in ``[0, 1]`` (Nsight Compute)
``sol_dram``
``sol_l2``
==================  ======================================================================

A column is used when at least half of the candidates report it; the others get the column's
mean (so one unprofiled candidate does not drop the SOL features of all). Columns are then
standardized to zero mean and unit variance; a constant column keeps scale 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FEATURES", "Standardizer", "feature_matrix", "feature_row"]

FEATURES = (
    "log_latency",
    "registers",
    "shared_kib",
    "num_warps",
    "occupancy",
    "sol_sm",
    "sol_dram",
    "sol_l2",
)

# Below this share of candidates reporting a feature, the feature is left out.
_MIN_COVERAGE = 0.5


def feature_row(time_s: float, metrics: Mapping[str, float]) -> dict[str, float]:
    """The known features of one candidate (absent keys are unknown)."""
    if not time_s > 0:
        raise ValueError(f"a runtime feature needs a positive time, got {time_s!r}")
    row = {"log_latency": math.log(time_s)}
    for name in ("registers", "num_warps", "occupancy", "sol_sm", "sol_dram", "sol_l2"):
        if name in metrics and metrics[name] is not None:
            row[name] = float(metrics[name])
    if metrics.get("shared_bytes") is not None:
        row["shared_kib"] = math.log2(1.0 + float(metrics["shared_bytes"]) / 1024.0)
    return row


def feature_matrix(
    rows: Sequence[Mapping[str, float]], names: Sequence[str] | None = None
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Stack feature rows into a matrix; ``names`` fixes the columns (else chosen by coverage).

    Missing entries are filled with their column's mean over the rows that have it (``0``
    when none has it, which only happens when ``names`` asks for an absent feature).
    """
    if names is None:
        n = max(len(rows), 1)
        names = tuple(
            f for f in FEATURES if sum(1 for r in rows if f in r) / n >= _MIN_COVERAGE
        ) or ("log_latency",)
    matrix = np.full((len(rows), len(names)), np.nan)
    for i, row in enumerate(rows):
        for j, name in enumerate(names):
            if name in row:
                matrix[i, j] = row[name]
    for j in range(len(names)):
        column = matrix[:, j]
        missing = np.isnan(column)
        if missing.any():
            column[missing] = float(np.mean(column[~missing])) if (~missing).any() else 0.0
    return matrix, tuple(names)


@dataclass
class Standardizer:
    """``z = (x - mean) / scale`` per column; JSON-safe."""

    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)

    @classmethod
    def fit(cls, matrix: np.ndarray) -> Standardizer:
        mean = matrix.mean(axis=0) if len(matrix) else np.zeros(matrix.shape[1])
        std = matrix.std(axis=0) if len(matrix) else np.ones(matrix.shape[1])
        scale = np.where(std > 1e-12, std, 1.0)
        return cls(mean=[float(v) for v in mean], scale=[float(v) for v in scale])

    def transform(self, matrix: np.ndarray) -> np.ndarray:
        out: np.ndarray = (matrix - np.asarray(self.mean)) / np.asarray(self.scale)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"mean": list(self.mean), "scale": list(self.scale)}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> Standardizer:
        return cls(
            mean=[float(v) for v in state.get("mean", [])],
            scale=[float(v) for v in state.get("scale", [])],
        )
