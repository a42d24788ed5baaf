"""Measurement: timing, and (later) Nsight Compute, NVML and Triton compile metadata.

A library: never imports ``tuned``.
"""

from __future__ import annotations

from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds

__all__ = ["TimingSettings", "gpu_median_seconds", "wall_median_seconds"]
