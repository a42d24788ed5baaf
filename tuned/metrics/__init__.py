"""Prometheus metrics of ktuned: a collector that reads the store at scrape time, and its server.

The metric names, units and labels are listed in docs/metrics.md.
"""

from __future__ import annotations

from tuned.metrics.collector import PHASE_BUCKETS, StoreCollector
from tuned.metrics.live import DAEMON_STATES, KERNEL_STATES, GpuLabels, LiveSnapshot, LiveStatus
from tuned.metrics.server import MetricsAddressError, MetricsServer

__all__ = [
    "DAEMON_STATES",
    "KERNEL_STATES",
    "PHASE_BUCKETS",
    "GpuLabels",
    "LiveSnapshot",
    "LiveStatus",
    "MetricsAddressError",
    "MetricsServer",
    "StoreCollector",
]
