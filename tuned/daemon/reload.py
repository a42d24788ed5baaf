"""What a reload (SIGHUP, ``systemctl reload ktuned``) may change, and what waits for a restart.

The daemon reads its config file again on SIGHUP. Keys that name what is set up once at
start-up (the state directory, the store and its fleet lease, the device, logging, the metrics
address, the LLM client and its credential) and the GPU indexes keep their running values: a
change to them is reported (logged) as taking effect at the next restart. Everything else
(registry, scheduler, policy, seed, gpu thresholds, evaluation deadlines, profiling) is in
force at once.
docs/service.md lists the same keys; tests/daemon/test_reload.py checks that they agree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tuned.daemon.config import DaemonConfig

__all__ = ["RESTART_ONLY", "Reload", "plan_reload"]

#: Top-level config keys that a reload keeps at their running values.
RESTART_ONLY = ("state_dir", "store", "fleet_lease_s", "device", "log_level", "metrics", "llm")
#: The ``gpu:`` keys that a reload keeps (the worker lanes are bound to them).
RESTART_ONLY_GPU = ("index", "indexes")


@dataclass(frozen=True)
class Reload:
    """The outcome of reading the config again: what is in force, what changed."""

    config: DaemonConfig
    #: Keys that differ in the file but take effect at the next restart (``gpu.index`` and
    #: ``gpu.indexes`` as ``gpu.index/indexes``).
    deferred: tuple[str, ...]
    registry_changed: bool
    policy_changed: bool
    profiling_changed: bool


def plan_reload(running: DaemonConfig, read: DaemonConfig) -> Reload:
    """The config to run with after a reload that read ``read`` while ``running`` ran."""
    deferred = [k for k in RESTART_ONLY if getattr(read, k) != getattr(running, k)]
    new = dataclasses.replace(read, **{k: getattr(running, k) for k in RESTART_ONLY})
    if new.gpu.lanes != running.gpu.lanes:
        deferred.append("gpu.index/indexes")
        kept = {k: getattr(running.gpu, k) for k in RESTART_ONLY_GPU}
        new = dataclasses.replace(new, gpu=dataclasses.replace(new.gpu, **kept))
    return Reload(
        config=new,
        deferred=tuple(deferred),
        registry_changed=new.registry.path != running.registry.path,
        policy_changed=(new.policy, new.seed, new.profiling)
        != (running.policy, running.seed, running.profiling),
        profiling_changed=new.profiling != running.profiling,
    )
