"""Settings objects read by several layers, defined low so that each layer reads them without
importing the one that parses them (the daemon's config parses ``profiling:`` into
:class:`ProfilingConfig`; :mod:`tuned.profiling` and the tuner read it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.masks import MaskSettings

__all__ = ["ProfilingConfig"]


@dataclass(frozen=True)
class ProfilingConfig:
    """Hardware feedback (docs/profiling.md): Nsight Compute profiles of cluster
    representatives and new bests, which mask saturated strategies, and roofline fractions
    against the GPU's measured peaks. Off by itself in interpreter mode; a missing ``ncu`` or
    a permission error turns profiling off with one log line, tuning goes on unmasked."""

    enabled: bool = True
    ncu: str = "ncu"
    deadline_s: float = 300.0
    launch_count: int = 6
    per_step: int = 1
    roofline: bool = True
    thresholds: MaskSettings = field(default_factory=MaskSettings)
