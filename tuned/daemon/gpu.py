"""Being a good citizen on a shared GPU: is foreign work using it, and did clocks throttle?

:class:`GpuMonitor` is the seam: the daemon asks :meth:`~GpuMonitor.foreign_work` before each
evaluation and waits (state ``paused_gpu_busy``) while it names a reason, and brackets each
evaluation with :meth:`~GpuMonitor.throttle_mark` / :meth:`~GpuMonitor.throttled_since` to
discard measurements taken while clocks were held down. :class:`NvmlMonitor` answers from
NVML (``pynvml``, package ``nvidia-ml-py``, imported lazily); :class:`NoGpuMonitor` stands in
where there is no GPU or no NVML and says so once. Tests inject their own monitor.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "GpuDevice",
    "GpuMonitor",
    "NoGpuMonitor",
    "NvmlMonitor",
    "ThrottleMark",
    "interpreter_mode",
    "open_monitor",
]

log = logging.getLogger(__name__)

# Clock throttle reasons that distort a timing (NVML's nvmlClocksThrottleReason* bits). Idle,
# application-clock settings, sync boost and display clocks are harmless and left out.
_SW_POWER_CAP = 0x4
_HW_SLOWDOWN = 0x8
_SW_THERMAL = 0x20
_HW_THERMAL = 0x40
_HW_POWER_BRAKE = 0x80
_HARMFUL = {
    _SW_POWER_CAP: "power cap",
    _HW_SLOWDOWN: "hardware slowdown",
    _SW_THERMAL: "software thermal slowdown",
    _HW_THERMAL: "hardware thermal slowdown",
    _HW_POWER_BRAKE: "power brake",
}


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as dcgm-exporter labels it: ``gpu`` (index) and ``UUID``, plus its model."""

    index: int
    uuid: str
    model: str


@dataclass(frozen=True)
class ThrottleMark:
    """What :meth:`GpuMonitor.throttled_since` compares against: reasons and violation time."""

    reasons: int = 0
    violation_ns: int = 0


def _ours(pid: int, own_pids: Collection[int]) -> bool:
    """``pid`` is one of ``own_pids``, or in the process group of one: a worker leads its own
    group, and its runners (the processes that run candidate code,
    :mod:`tuned.evaluation.runners`) are in it."""
    if pid in own_pids:
        return True
    try:
        return os.getpgid(pid) in own_pids
    except (ProcessLookupError, PermissionError):
        return False


class GpuMonitor(Protocol):
    """What the daemon needs to know about the GPU it benchmarks on.

    Called from the daemon's main loop only (not thread-safe). ``own_pids`` are the daemon's
    and its workers' process ids: their GPU use is not foreign.
    """

    def devices(self) -> tuple[GpuDevice, ...]: ...

    def foreign_work(self, own_pids: Collection[int]) -> str | None:
        """A reason ("2 other processes use 5.1 GiB", "utilization 87 %") or None when idle."""
        ...

    def throttle_mark(self) -> ThrottleMark: ...

    def throttled_since(self, mark: ThrottleMark) -> str | None:
        """Why clocks were (or are) held down since ``mark``, or None."""
        ...

    def close(self) -> None: ...


class NoGpuMonitor:
    """No GPU to watch (interpreter mode, or NVML missing): never busy, never throttled."""

    def __init__(self, why: str, *, level: int = logging.WARNING) -> None:
        self.why = why
        log.log(level, "%s; the GPU-busy gate and the throttle check are off", why)

    def devices(self) -> tuple[GpuDevice, ...]:
        return ()

    def foreign_work(self, own_pids: Collection[int]) -> str | None:
        return None

    def throttle_mark(self) -> ThrottleMark:
        return ThrottleMark()

    def throttled_since(self, mark: ThrottleMark) -> str | None:
        return None

    def close(self) -> None:
        pass


class NvmlMonitor:
    """NVML's view of GPU ``index``: processes, utilization, memory, throttle reasons."""

    def __init__(
        self,
        *,
        index: int,
        busy_utilization_percent: float,
        busy_memory_bytes: int,
        nvml: Any,
    ) -> None:
        self.nvml = nvml
        self.index = index
        self.busy_utilization_percent = busy_utilization_percent
        self.busy_memory_bytes = busy_memory_bytes
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.device = GpuDevice(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(self.handle)),
            model=_text(nvml.nvmlDeviceGetName(self.handle)),
        )

    def devices(self) -> tuple[GpuDevice, ...]:
        return (self.device,)

    def foreign_work(self, own_pids: Collection[int]) -> str | None:
        nvml = self.nvml
        processes: list[Any] = []
        for query in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            try:
                processes.extend(getattr(nvml, query)(self.handle))
            except nvml.NVMLError as exc:
                log.debug("NVML %s failed: %s", query, exc)
        foreign = [p for p in processes if not _ours(int(p.pid), own_pids)]
        if foreign:
            used = sum(int(p.usedGpuMemory or 0) for p in foreign)
            return (
                f"{len(foreign)} other process{'es' if len(foreign) > 1 else ''} on GPU "
                f"{self.index} (pid {', '.join(str(p.pid) for p in foreign[:4])}; "
                f"{used / 2**30:.1f} GiB)"
            )
        utilization = nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
        if utilization >= self.busy_utilization_percent:
            return f"GPU {self.index} utilization {utilization} % while ktuned is idle"
        own_memory = sum(int(p.usedGpuMemory or 0) for p in processes)
        used = int(nvml.nvmlDeviceGetMemoryInfo(self.handle).used) - own_memory
        if used >= self.busy_memory_bytes:
            return f"{used / 2**30:.1f} GiB of GPU {self.index} memory used by others"
        return None

    def throttle_mark(self) -> ThrottleMark:
        return ThrottleMark(reasons=self._reasons(), violation_ns=self._violation_ns())

    def throttled_since(self, mark: ThrottleMark) -> str | None:
        reasons = (mark.reasons | self._reasons()) & sum(_HARMFUL)
        if reasons:
            return "clocks throttled: " + ", ".join(n for b, n in _HARMFUL.items() if reasons & b)
        if self._violation_ns() > mark.violation_ns:
            return "clocks throttled (power or thermal violation time grew)"
        return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    def _reasons(self) -> int:
        nvml = self.nvml
        query = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if query is None:  # older nvidia-ml-py
            query = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            return int(query(self.handle))
        except nvml.NVMLError as exc:
            log.debug("NVML throttle reasons unavailable: %s", exc)
            return 0

    def _violation_ns(self) -> int:
        nvml = self.nvml
        total = 0
        for policy in ("NVML_PERF_POLICY_POWER", "NVML_PERF_POLICY_THERMAL"):
            try:
                total += int(
                    nvml.nvmlDeviceGetViolationStatus(
                        self.handle, getattr(nvml, policy)
                    ).violationTime
                )
            except (nvml.NVMLError, AttributeError) as exc:
                log.debug("NVML violation status %s unavailable: %s", policy, exc)
        return total


def open_monitor(
    *, interpreter: bool, index: int, busy_utilization_percent: float, busy_memory_bytes: int
) -> GpuMonitor:
    """The monitor for this machine: NVML on a GPU box, else one that says why it is blind."""
    if interpreter:
        return NoGpuMonitor("no GPU in use (Triton interpreter mode)", level=logging.INFO)
    try:
        import pynvml
    except ImportError:
        return NoGpuMonitor(
            "NVML is not available (install the nvidia-ml-py package to let ktuned see "
            "foreign work on the GPU)"
        )
    try:
        pynvml.nvmlInit()
        return NvmlMonitor(
            index=index,
            busy_utilization_percent=busy_utilization_percent,
            busy_memory_bytes=busy_memory_bytes,
            nvml=pynvml,
        )
    except pynvml.NVMLError as exc:
        return NoGpuMonitor(f"NVML could not be initialised for GPU {index}: {exc}")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def interpreter_mode(device: str) -> bool:
    """``device`` resolved as ``ktuned tune`` does, but probing CUDA in a short-lived child:
    the daemon itself never imports torch (hundreds of MiB it would keep for months)."""
    from tuned.tuning import detect_interpreter

    if device != "auto" or os.environ.get("TRITON_INTERPRET") == "1":
        return detect_interpreter(device)
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        code = subprocess.run([sys.executable, "-c", probe], timeout=300, check=False).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not probe for CUDA (%s): using Triton's interpreter", exc)
        return True
    if code != 0:
        log.warning(
            "no CUDA GPU found: kernels run in Triton's interpreter on the CPU; "
            "correctness is real, timings are interpreter timings"
        )
        return True
    return False
