"""Nsight Compute: profile one candidate's kernel launches and read them into a :class:`Profile`.

:class:`NcuProfiler` runs a target command (the daemon's is ``python -m
tuned.evaluation.profile_target REQUEST``) under ``ncu`` in its own process group::

    ncu --csv --page raw --print-units base --metrics M1,M2,...
        --kernel-name regex:^(k1|k2)$ --profile-from-start off
        --launch-skip S --launch-count C --clock-control none --log-file OUT.csv  TARGET...

The target calls ``cudaProfilerStart`` after its warm-up (compilation) calls, so ``ncu`` sees
only the timed launches whatever number of kernels one launcher call makes; ``--launch-skip``
skips further launches inside that range. ``--clock-control none`` leaves the GPU's clocks
as production runs see them (``ncu`` locks them to base clocks by default). A deadline kills
the whole process group (``ncu`` and the target).

:func:`parse_raw_csv` reads the raw page: a header row, a units row, one row per profiled
launch; numbers may carry thousands separators, missing values are ``n/a``. Values are
averaged over the launches weighted by their duration (``gpu__time_duration.sum``), so a
launcher that makes a long and a short kernel is described the way its time is spent.

Profiling is optional equipment: a missing ``ncu`` or a driver that forbids counters to
non-admins (``ERR_NVGPUCTRPERM``) gives a :class:`ProfileResult` with status
``unavailable`` and a reason saying how to fix it; callers keep tuning without profiles.
"""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_METRICS",
    "Launch",
    "NcuProfiler",
    "NcuSettings",
    "Profile",
    "ProfileResult",
    "ProfileStatus",
    "Stall",
    "kernel_regex",
    "parse_raw_csv",
    "profile_from_launches",
]

DURATION = "gpu__time_duration.sum"
SOL_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
SOL_MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SOL_DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
#: The same figure under the name ``--set full`` reports it (its SpeedOfLight section).
SOL_DRAM_FULL = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
SOL_L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
SOL_L1 = "l1tex__throughput.avg.pct_of_peak_sustained_active"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
SHARED_STATIC = "launch__shared_mem_per_block_static"
SHARED_DYNAMIC = "launch__shared_mem_per_block_dynamic"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
L2_HIT = "lts__t_sector_hit_rate.pct"

#: Stall reasons, as cycles per issued instruction (WarpStateStats section).
_STALL_RATIO = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: The same reasons as program-counter sampling counts (SourceCounters section).
_STALL_SAMPLES = re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$")

#: What :class:`NcuProfiler` asks for: the SOL breakdown, occupancy, launch figures, cache
#: hit rates and every stall reason (one ``regex:`` entry, so a reason that one GPU
#: generation lacks is no error). A few passes of kernel replay, far cheaper than ``--set
#: full``; the same list as bench/ncu_capture.py, whose captures are the test fixtures.
DEFAULT_METRICS: tuple[str, ...] = (
    DURATION,
    SOL_SM,
    SOL_MEMORY,
    SOL_DRAM,
    SOL_L2,
    SOL_L1,
    OCCUPANCY,
    THEORETICAL_OCCUPANCY,
    REGISTERS,
    SHARED_STATIC,
    SHARED_DYNAMIC,
    "launch__block_size",
    "launch__grid_size",
    L2_HIT,
    L1_HIT,
    "dram__bytes.sum",
    "smsp__inst_executed.sum",
    "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio",
)

# Scale of a unit to the base unit (seconds, bytes); ncu prints SI prefixes for bytes. Per-unit
# forms ("byte/block", "Kbyte/block") scale by their numerator.
_UNIT_SCALE = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Kibyte": 1024.0,
    "Mibyte": 1024.0**2,
    "Gibyte": 1024.0**3,
}
_PERMISSION_MARKER = "ERR_NVGPUCTRPERM"
_NO_KERNELS = "No kernels were profiled"


class ProfileStatus(str, enum.Enum):
    """How a profiling run ended."""

    OK = "ok"
    #: ncu is missing or may not read the counters: profiling is off, tuning goes on unmasked.
    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"  # the deadline passed; the process group was killed
    FAILED = "failed"  # ncu or the target failed, or no kernel matched the filter


@dataclass(frozen=True)
class Stall:
    """One warp stall reason: cycles per issued instruction, and its share of all stalls."""

    reason: str
    cycles_per_issue: float
    share: float


@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch: its name and metric values in base units (``None``: n/a)."""

    kernel: str
    values: Mapping[str, float | None]


def _fraction(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


@dataclass(frozen=True)
class Profile:
    """What Nsight Compute measured, averaged over the launches weighted by duration.

    Speed-of-light (SOL) throughputs, occupancy and hit rates are fractions in ``[0, 1]``
    (``ncu`` prints percentages); ``None`` where ``ncu`` did not report the metric.
    ``sol_memory`` is ``gpu__compute_memory_throughput``: the busiest of the memory units.
    """

    kernels: tuple[str, ...]
    launches: int
    duration_s: float | None  # mean duration of one launch
    sol_sm: float | None
    sol_memory: float | None
    sol_dram: float | None
    sol_l2: float | None
    sol_l1: float | None
    occupancy: float | None  # achieved: active warps / maximum warps per SM
    theoretical_occupancy: float | None
    registers_per_thread: float | None
    shared_bytes_per_block: float | None
    l1_hit_rate: float | None
    l2_hit_rate: float | None
    stalls: tuple[Stall, ...] = ()

    def metrics(self) -> dict[str, float]:
        """The ``Trial.metrics`` a policy and the clustering read (known values only)."""
        named = {
            "sol_sm": self.sol_sm,
            "sol_dram": self.sol_dram,
            "sol_l2": self.sol_l2,
            "sol_l1": self.sol_l1,
            "sol_memory": self.sol_memory,
            "occupancy": self.occupancy,
            "l1_hit_rate": self.l1_hit_rate,
            "l2_hit_rate": self.l2_hit_rate,
            "registers": self.registers_per_thread,
            "shared_bytes": self.shared_bytes_per_block,
        }
        return {k: float(v) for k, v in named.items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("stalls",)
        }
        out["kernels"] = list(self.kernels)
        out["stalls"] = [[s.reason, s.cycles_per_issue, s.share] for s in self.stalls]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        def num(key: str) -> float | None:
            value = d.get(key)
            return None if value is None else float(value)

        return cls(
            kernels=tuple(str(k) for k in d.get("kernels", ())),
            launches=int(d.get("launches", 0)),
            duration_s=num("duration_s"),
            sol_sm=num("sol_sm"),
            sol_memory=num("sol_memory"),
            sol_dram=num("sol_dram"),
            sol_l2=num("sol_l2"),
            sol_l1=num("sol_l1"),
            occupancy=num("occupancy"),
            theoretical_occupancy=num("theoretical_occupancy"),
            registers_per_thread=num("registers_per_thread"),
            shared_bytes_per_block=num("shared_bytes_per_block"),
            l1_hit_rate=num("l1_hit_rate"),
            l2_hit_rate=num("l2_hit_rate"),
            stalls=tuple(Stall(str(r), float(c), float(s)) for r, c, s in d.get("stalls", ())),
        )


@dataclass(frozen=True)
class ProfileResult:
    """The typed end of one profiling run; ``profile`` is set exactly when status is OK."""

    status: ProfileStatus
    profile: Profile | None = None
    reason: str = ""
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is ProfileStatus.OK


# ----------------------------------------------------------------------------- parsing


def _number(text: str) -> float | None:
    """``"1,234.5"`` -> 1234.5; ``n/a``, empty and non-numeric cells -> ``None``."""
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan", "-"):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV table of a raw page, without ``==PROF==``/``==WARNING==`` lines around it."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    table = [line for line in lines[start:] if line.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(table))))


def parse_raw_csv(text: str) -> list[Launch]:
    """Every launch of an ``ncu --csv --page raw`` output (header, units row, data rows).

    Values are converted to base units (seconds, bytes) from the units row, so output made
    with or without ``--print-units base`` reads the same. Columns that are not numbers
    (IDs, names, "Block Size" tuples) are dropped, except the kernel's name.
    """
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    units: list[str] = [""] * len(header)
    data = rows[1:]
    if data and data[0] and data[0][0].strip() == "":
        units = data[0] + [""] * (len(header) - len(data[0]))
        data = data[1:]
    name_col = header.index("Kernel Name") if "Kernel Name" in header else None
    launches = []
    for row in data:
        if not row or len(row) < len(header) // 2:
            continue
        values: dict[str, float | None] = {}
        for col, metric in enumerate(header):
            if "__" not in metric or col >= len(row):
                continue
            value = _number(row[col])
            scale = _UNIT_SCALE.get(units[col].strip().split("/")[0], 1.0)
            values[metric] = None if value is None else value * scale
        kernel = row[name_col] if name_col is not None and name_col < len(row) else ""
        launches.append(Launch(kernel=kernel, values=values))
    return launches


def _weighted(launches: Sequence[Launch], metric: str) -> float | None:
    """Duration-weighted mean over the launches that report ``metric``."""
    total = weight = 0.0
    for launch in launches:
        value = launch.values.get(metric)
        if value is None:
            continue
        w = launch.values.get(DURATION) or 0.0
        w = w if w > 0 else 1e-12  # launches without a duration count (almost) nothing
        total += w * value
        weight += w
    return total / weight if weight > 0 else None


def _weighted_any(launches: Sequence[Launch], *metrics: str) -> float | None:
    """The first of ``metrics`` that the launches report (one figure under several names)."""
    for metric in metrics:
        value = _weighted(launches, metric)
        if value is not None:
            return value
    return None


def _stalls(launches: Sequence[Launch], top: int) -> tuple[Stall, ...]:
    names: dict[str, str] = {}
    for launch in launches:
        for metric in launch.values:
            match = _STALL_RATIO.match(metric)
            if match:
                names[match.group(1)] = metric
    if not names:  # fall back to program-counter samples
        for launch in launches:
            for metric in launch.values:
                match = _STALL_SAMPLES.match(metric)
                if match and not metric.endswith("_not_issued"):
                    names[match.group(1)] = metric
    values = {reason: _weighted(launches, metric) for reason, metric in names.items()}
    # "selected" is the issuing warp itself, not a stall.
    known = {r: v for r, v in values.items() if v is not None and v > 0 and r != "selected"}
    total = sum(known.values())
    ranked = sorted(known.items(), key=lambda kv: -kv[1])[:top]
    return tuple(Stall(r, v, v / total) for r, v in ranked)


def profile_from_launches(launches: Sequence[Launch], *, top_stalls: int = 5) -> Profile | None:
    """Average launches into one :class:`Profile`; ``None`` when there are none."""
    if not launches:
        return None
    shared_static = _weighted(launches, SHARED_STATIC)
    shared_dynamic = _weighted(launches, SHARED_DYNAMIC)
    shared = (
        None
        if shared_static is None and shared_dynamic is None
        else (shared_static or 0.0) + (shared_dynamic or 0.0)
    )
    durations = [v for v in (x.values.get(DURATION) for x in launches) if v is not None]
    kernels = tuple(dict.fromkeys(x.kernel for x in launches if x.kernel))
    return Profile(
        kernels=kernels,
        launches=len(launches),
        duration_s=sum(durations) / len(durations) if durations else None,
        sol_sm=_fraction(_weighted(launches, SOL_SM)),
        sol_memory=_fraction(_weighted(launches, SOL_MEMORY)),
        sol_dram=_fraction(_weighted_any(launches, SOL_DRAM, SOL_DRAM_FULL)),
        sol_l2=_fraction(_weighted(launches, SOL_L2)),
        sol_l1=_fraction(_weighted(launches, SOL_L1)),
        occupancy=_fraction(_weighted(launches, OCCUPANCY)),
        theoretical_occupancy=_fraction(_weighted(launches, THEORETICAL_OCCUPANCY)),
        registers_per_thread=_weighted(launches, REGISTERS),
        shared_bytes_per_block=shared,
        l1_hit_rate=_fraction(_weighted(launches, L1_HIT)),
        l2_hit_rate=_fraction(_weighted(launches, L2_HIT)),
        stalls=_stalls(launches, top_stalls),
    )


def kernel_regex(names: Sequence[str]) -> str | None:
    """An ``ncu --kernel-name`` filter matching exactly these kernel names (``None``: all)."""
    names = sorted({n for n in names if n})
    if not names:
        return None
    return "regex:^(" + "|".join(re.escape(n) for n in names) + ")$"


# ----------------------------------------------------------------------------- running


@dataclass(frozen=True)
class NcuSettings:
    """How ``ncu`` is run. ``launch_count`` caps the profiled launches (each is replayed
    once per metric pass, so it bounds the cost); ``deadline_s`` bounds the whole run."""

    executable: str = "ncu"
    metrics: tuple[str, ...] = DEFAULT_METRICS
    launch_skip: int = 0
    launch_count: int = 6
    deadline_s: float = 300.0
    clock_control: str = "none"
    top_stalls: int = 5
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.launch_skip < 0 or self.launch_count < 1:
            raise ValueError("launch_skip must be >= 0 and launch_count >= 1")
        if self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        if self.clock_control not in ("none", "base"):
            raise ValueError(f"clock_control must be 'none' or 'base', got {self.clock_control}")


class NcuProfiler:
    """Runs a target command under ``ncu`` and returns a :class:`ProfileResult`.

    Not thread-safe; one profiling run at a time (they share the GPU with the benchmarks).
    """

    def __init__(self, *, settings: NcuSettings | None = None) -> None:
        self.settings = settings or NcuSettings()

    def executable(self) -> str | None:
        """The resolved ``ncu`` path, or ``None`` when it cannot be found."""
        exe = self.settings.executable
        if os.sep in exe:
            return exe if os.access(exe, os.X_OK) else None
        return shutil.which(exe)

    def command(
        self, target: Sequence[str], *, log_file: Path, kernel_filter: str | None
    ) -> list[str]:
        """The full ``ncu`` command line that profiles ``target``."""
        s = self.settings
        argv = [
            self.executable() or s.executable,
            "--csv",
            "--page",
            "raw",
            "--print-units",
            "base",
            "--metrics",
            ",".join(s.metrics),
            "--profile-from-start",
            "off",
            "--launch-skip",
            str(s.launch_skip),
            "--launch-count",
            str(s.launch_count),
            "--clock-control",
            s.clock_control,
            "--log-file",
            str(log_file),
        ]
        if kernel_filter:
            argv += ["--kernel-name", kernel_filter]
        return [*argv, *s.extra_args, *target]

    def profile(
        self,
        target: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        kernel_filter: str | None = None,
    ) -> ProfileResult:
        """Profile the kernel launches ``target`` makes between its profiler start and stop.

        ``target`` runs with ``env`` (the caller scrubs it) in ``cwd``, in a new process
        group that is killed whole when the deadline passes. Never raises for what ``ncu``
        or the target do; every ending is a :class:`ProfileResult`.
        """
        started = time.monotonic()
        if self.executable() is None:
            return ProfileResult(
                ProfileStatus.UNAVAILABLE,
                reason=f"Nsight Compute ({self.settings.executable!r}) was not found on PATH; "
                "install it (CUDA toolkit) or set profiling.ncu to its path",
            )
        with tempfile.TemporaryDirectory(prefix="ktuned-ncu-") as tmp:
            log_file = Path(tmp) / "ncu.csv"
            output = Path(tmp) / "output.txt"
            argv = self.command(target, log_file=log_file, kernel_filter=kernel_filter)
            with output.open("wb") as out:
                try:
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=None if env is None else dict(env),
                        cwd=cwd,
                        start_new_session=True,
                    )
                except OSError as exc:
                    return ProfileResult(
                        ProfileStatus.UNAVAILABLE,
                        reason=f"cannot run {argv[0]}: {exc}",
                        wall_s=time.monotonic() - started,
                    )
                try:
                    code = proc.wait(timeout=self.settings.deadline_s)
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    return ProfileResult(
                        ProfileStatus.TIMEOUT,
                        reason=f"profiling exceeded its {self.settings.deadline_s:g} s "
                        "deadline; ncu's process group was killed",
                        wall_s=time.monotonic() - started,
                    )
            text = output.read_text("utf-8", "replace")
            report = log_file.read_text("utf-8", "replace") if log_file.exists() else ""
        wall = time.monotonic() - started
        return self._result(code, text + "\n" + report, report, wall)

    def _result(self, code: int, everything: str, report: str, wall: float) -> ProfileResult:
        if _PERMISSION_MARKER in everything:
            return ProfileResult(
                ProfileStatus.UNAVAILABLE,
                reason="the driver does not let this user read GPU performance counters "
                f"({_PERMISSION_MARKER}); run ktuned as root or set the nvidia module option "
                "NVreg_RestrictProfilingToAdminUsers=0 "
                "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)",
                wall_s=wall,
            )
        profile = profile_from_launches(parse_raw_csv(report), top_stalls=self.settings.top_stalls)
        if profile is not None and code == 0:
            return ProfileResult(ProfileStatus.OK, profile=profile, wall_s=wall)
        if code == 0 or _NO_KERNELS in everything:
            reason = "no kernel launch matched the filter inside the profiled range"
        else:
            reason = f"ncu exited with status {code}"
        tail = _tail(everything)
        return ProfileResult(
            ProfileStatus.FAILED,
            reason=reason + (f"; output ends: {tail}" if tail else ""),
            wall_s=wall,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(text: str, limit: int = 600) -> str:
    lines = [
        line for line in text.strip().splitlines() if line.strip() and not line.startswith('"')
    ]
    return " | ".join(lines)[-limit:]
