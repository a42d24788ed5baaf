"""Running ``ncu``: the command line, and every way a run can end (fake ``ncu`` scripts)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from profilers.ncu import NcuProfiler, NcuSettings, ProfileStatus, kernel_regex
from tests.profilers.conftest import MakeNcu, alive

# A report in the raw page's layout: header, units row, two launches (weights 3:1).
REPORT = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum",'
    '"dram__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"sm__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"sm__warps_active.avg.pct_of_peak_sustained_active"\n'
    '"","","","","","","","","","","","nsecond","%","%","%"\n'
    '"0","77","python3","host","_add","1","7","(128, 1, 1)","(24, 1, 1)","0","9.0",'
    '"3,000","80","10","50"\n'
    '"1","77","python3","host","_add","1","7","(128, 1, 1)","(24, 1, 1)","0","9.0",'
    '"1,000","40","n/a","n/a"\n'
)


def test_the_command_line_asks_for_what_the_parser_reads(tmp_path: Path) -> None:
    profiler = NcuProfiler(settings=NcuSettings(executable="ncu", launch_skip=2, launch_count=4))
    argv = profiler.command(
        ["python", "-m", "target"], log_file=tmp_path / "x.csv", kernel_filter="regex:^(k)$"
    )
    joined = " ".join(argv)
    for part in (
        "--csv --page raw",
        "--print-units base",
        "--profile-from-start off",
        "--launch-skip 2",
        "--launch-count 4",
        "--clock-control none",
        f"--log-file {tmp_path / 'x.csv'}",
        "--kernel-name regex:^(k)$",
    ):
        assert part in joined
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in metrics
    assert argv[-3:] == ["python", "-m", "target"]


def test_kernel_filter_matches_exactly_the_named_kernels() -> None:
    assert kernel_regex(["_b", "_a", "_a"]) == "regex:^(_a|_b)$"
    assert kernel_regex([]) is None


def test_a_report_written_to_the_log_file_becomes_a_profile(make_ncu: MakeNcu) -> None:
    ncu = make_ncu(f"open(log_file, 'w').write({REPORT!r})\nprint('==PROF== Disconnected')\n")
    result = NcuProfiler(settings=NcuSettings(executable=str(ncu))).profile(
        ["true"], kernel_filter="regex:^(_add)$"
    )
    assert result.status is ProfileStatus.OK, result.reason
    profile = result.profile
    assert profile is not None and profile.kernels == ("_add",) and profile.launches == 2
    # Duration-weighted: (3000 * 80 + 1000 * 40) / 4000 = 70 %; n/a is skipped.
    assert profile.sol_dram == pytest.approx(0.70)
    assert profile.sol_sm == pytest.approx(0.10)
    assert profile.occupancy == pytest.approx(0.50)
    assert profile.duration_s == pytest.approx(2e-6)
    recorded = (ncu.parent / "argv.txt").read_text().splitlines()
    assert recorded[recorded.index("--kernel-name") + 1] == "regex:^(_add)$"
    assert result.wall_s > 0


def test_missing_ncu_means_profiling_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu anywhere on it
    result = NcuProfiler().profile(["true"])
    assert result.status is ProfileStatus.UNAVAILABLE
    assert "not found" in result.reason and "profiling.ncu" in result.reason
    by_path = NcuProfiler(settings=NcuSettings(executable=str(tmp_path / "ncu"))).profile(["true"])
    assert by_path.status is ProfileStatus.UNAVAILABLE


def test_permission_error_means_profiling_unavailable_with_the_fix(
    make_ncu: MakeNcu, monkeypatch: pytest.MonkeyPatch
) -> None:
    ncu = make_ncu(
        "print('==PROF== Connected to process 4242')\n"
        "print('==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA "
        "GPU Performance Counters on the target device 0.')\n"
        "sys.exit(1)\n"
    )
    monkeypatch.setenv("PATH", str(ncu.parent))  # found by name, as in production
    result = NcuProfiler().profile(["true"])
    assert result.status is ProfileStatus.UNAVAILABLE
    assert "ERR_NVGPUCTRPERM" in result.reason
    assert "NVreg_RestrictProfilingToAdminUsers=0" in result.reason


def test_the_deadline_kills_ncu_and_its_children(make_ncu: MakeNcu, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    ncu = make_ncu(
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    started = time.monotonic()
    result = NcuProfiler(settings=NcuSettings(executable=str(ncu), deadline_s=2.0)).profile(
        ["true"]
    )
    assert result.status is ProfileStatus.TIMEOUT
    assert "deadline" in result.reason
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the profiled process outlived the deadline"


def test_no_profiled_kernel_is_a_failure_that_says_so(make_ncu: MakeNcu) -> None:
    ncu = make_ncu("print('==WARNING== No kernels were profiled.')\n")
    result = NcuProfiler(settings=NcuSettings(executable=str(ncu))).profile(["true"])
    assert result.status is ProfileStatus.FAILED
    assert "no kernel launch matched" in result.reason


def test_a_failing_target_is_a_failure_with_its_output(make_ncu: MakeNcu) -> None:
    ncu = make_ncu("print('Traceback: RuntimeError: CUDA error: out of memory')\nsys.exit(3)\n")
    result = NcuProfiler(settings=NcuSettings(executable=str(ncu))).profile(["true"])
    assert result.status is ProfileStatus.FAILED
    assert "status 3" in result.reason and "out of memory" in result.reason
