"""The ktuned daemon (``ktuned run``): tunes a registry forever as a systemd service.

- :mod:`tuned.daemon.config`: the YAML configuration, validated once into frozen dataclasses.
- :mod:`tuned.daemon.watcher`: registry polling with stable-signature detection (NFS-safe).
- :mod:`tuned.daemon.scheduler`: which kernel gets the next evaluation.
- :mod:`tuned.daemon.gpu`: the GPU-busy gate and throttle check (NVML, or a stand-in).
- :mod:`tuned.daemon.gated`: the worker client the daemon uses (interruptible, throttle-aware).
- :mod:`tuned.daemon.notify`: systemd's notify protocol, watchdog and STATUS line.
- :mod:`tuned.daemon.reload`: what SIGHUP applies at once and what waits for a restart.
- :mod:`tuned.daemon.signals`: SIGTERM/SIGINT/SIGHUP as flags, interruptible sections.
- :mod:`tuned.daemon.service`: the main loop and its life cycle.
"""

from __future__ import annotations

from tuned.daemon.config import ConfigError, DaemonConfig, load_config, parse_config
from tuned.daemon.gpu import GpuDevice, GpuMonitor, NoGpuMonitor, NvmlMonitor, ThrottleMark
from tuned.daemon.notify import Notifier, Watchdog
from tuned.daemon.scheduler import KernelTrack, Scheduler
from tuned.daemon.service import Daemon
from tuned.daemon.watcher import RegistryChanges, RegistryWatcher

__all__ = [
    "ConfigError",
    "Daemon",
    "DaemonConfig",
    "GpuDevice",
    "GpuMonitor",
    "KernelTrack",
    "NoGpuMonitor",
    "Notifier",
    "NvmlMonitor",
    "RegistryChanges",
    "RegistryWatcher",
    "Scheduler",
    "ThrottleMark",
    "Watchdog",
    "load_config",
    "parse_config",
]
