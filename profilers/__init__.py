"""Measurement: timing, Nsight Compute profiles, bottleneck classes and roofline, GPU peaks,
and observers (NVML, proton) around a benchmark. docs/profiling.md describes how ktuned uses
them.

A library: never imports ``tuned``. Heavy or optional dependencies (torch, pynvml, Triton's
proton) are imported where used.
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
from profilers.observers import NvmlObserver, Observer, ProtonObserver, observing
from profilers.peaks import PeakMeasurementError, Peaks, measure_in_subprocess
from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds

__all__ = [
    "Bottleneck",
    "ClassifySettings",
    "NcuProfiler",
    "NcuSettings",
    "NvmlObserver",
    "Observer",
    "PeakMeasurementError",
    "Peaks",
    "Profile",
    "ProfileResult",
    "ProfileStatus",
    "ProtonObserver",
    "RooflinePoint",
    "Stall",
    "TimingSettings",
    "classify",
    "gpu_median_seconds",
    "measure_in_subprocess",
    "observing",
    "parse_raw_csv",
    "profile_from_launches",
    "roofline_point",
    "wall_median_seconds",
]
