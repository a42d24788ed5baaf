"""Runtime-behaviour features and clustering of candidates and kernels.

A library: it never imports ``tuned`` or ``policies`` (policies import it).
"""

from __future__ import annotations

from clustering.features import FEATURES, Standardizer, feature_matrix, feature_row
from clustering.kernels import cluster_kernels, kernel_feature_rows, peer_prior
from clustering.runtime import ClusteringSettings, ClusterModel, RuntimeClusterer

__all__ = [
    "FEATURES",
    "ClusterModel",
    "ClusteringSettings",
    "RuntimeClusterer",
    "Standardizer",
    "cluster_kernels",
    "feature_matrix",
    "feature_row",
    "kernel_feature_rows",
    "peer_prior",
]
