"""Measurement: timing, Nsight Compute profiles, bottleneck classes and roofline, GPU peaks.
docs/profiling.md describes how ktuned uses them.

A library: never imports ``tuned``. Heavy or optional dependencies (torch) are imported
where used.
"""

from __future__ import annotations

from profilers.classify import Bottleneck, ClassifySettings, RooflinePoint, classify, roofline_point
from profilers.ncu import (
    NcuProfiler,
    NcuSettings,
    Profile,
    ProfileResult,
    ProfileStatus,
    Stall,
    parse_raw_csv,
    profile_from_launches,
)
from profilers.peaks import PeakMeasurementError, Peaks, measure_in_subprocess
from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds

__all__ = [
    "Bottleneck",
    "ClassifySettings",
    "NcuProfiler",
    "NcuSettings",
    "PeakMeasurementError",
    "Peaks",
    "Profile",
    "ProfileResult",
    "ProfileStatus",
    "RooflinePoint",
    "Stall",
    "TimingSettings",
    "classify",
    "gpu_median_seconds",
    "measure_in_subprocess",
    "parse_raw_csv",
    "profile_from_launches",
    "roofline_point",
    "wall_median_seconds",
]
