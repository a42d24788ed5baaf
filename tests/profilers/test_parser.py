"""The raw-page parser on the Nsight Compute captures of every example kernel (H100)."""

from __future__ import annotations

import pytest

from profilers.ncu import (
    DURATION,
    Profile,
    parse_raw_csv,
    profile_from_launches,
)
from tests.profilers.conftest import FIXTURES, recorded
from tuned.daemon.config import default_registry
from tuned.profiling import jit_kernel_names
from tuned.registry import load_entry

KERNELS = ("layer_norm", "matmul", "rms_norm", "softmax", "swiglu", "vector_add")


def profile_of(kernel: str, kind: str = "metrics") -> Profile:
    profile = profile_from_launches(parse_raw_csv(recorded(f"{kernel}.{kind}.csv")))
    assert profile is not None
    return profile


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_capture_parses_into_a_plausible_profile(kernel: str) -> None:
    text = recorded(f"{kernel}.metrics.csv")
    assert text.startswith("==")  # ncu's own lines come before the table and are skipped
    launches = parse_raw_csv(text)
    assert len(launches) == 2  # --launch-count 2
    spec = load_entry(default_registry() / kernel)
    # The kernel-name filter ktuned builds from the source selects what was captured.
    assert {x.kernel for x in launches} <= set(jit_kernel_names(spec.module_source))
    profile = profile_of(kernel)
    for value in (
        profile.sol_sm,
        profile.sol_memory,
        profile.sol_dram,
        profile.sol_l2,
        profile.sol_l1,
        profile.occupancy,
        profile.l2_hit_rate,
    ):
        assert value is not None and 0.0 <= value <= 1.0
    assert profile.duration_s is not None and 1e-6 < profile.duration_s < 1e-2
    assert profile.registers_per_thread is not None and 8 <= profile.registers_per_thread <= 255
    assert profile.stalls and profile.stalls[0].reason == "long_scoreboard"
    shares = [s.share for s in profile.stalls]
    assert shares == sorted(shares, reverse=True) and sum(shares) <= 1.0 + 1e-9
    assert Profile.from_dict(profile.to_dict()) == profile


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_production_list_and_the_full_set_agree(kernel: str) -> None:
    """Two captures of the same launch: the metric list ktuned asks for, and ``--set full``
    (where DRAM's SOL is named gpu__dram_throughput): the same figures within noise."""
    mine, full = profile_of(kernel, "metrics"), profile_of(kernel, "full")
    for name in ("sol_sm", "sol_memory", "sol_dram", "sol_l2", "sol_l1", "occupancy"):
        assert getattr(mine, name) == pytest.approx(getattr(full, name), abs=0.05), name
    assert mine.registers_per_thread == full.registers_per_thread
    assert mine.shared_bytes_per_block == full.shared_bytes_per_block
    assert mine.duration_s == pytest.approx(full.duration_s, rel=0.1)


def test_thousands_separators_and_units_are_read() -> None:
    profile = profile_of("vector_add", "full")  # "30,080" ns, gpu__dram_throughput 84.23 %
    assert profile.duration_s == pytest.approx(30_080e-9)
    assert profile.sol_dram == pytest.approx(0.8423)
    assert profile.registers_per_thread == 20
    matmul = profile_of("matmul", "full")  # 24,576 byte/block of dynamic shared memory
    assert matmul.shared_bytes_per_block == 24_576


def test_launches_are_averaged_weighted_by_duration() -> None:
    launches = parse_raw_csv(recorded("matmul.metrics.csv"))
    metric = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    durations = [x.values[DURATION] for x in launches]
    values = [x.values[metric] for x in launches]
    assert all(d is not None for d in durations) and all(v is not None for v in values)
    expected = sum(d * v for d, v in zip(durations, values)) / sum(durations)  # type: ignore[operator]
    assert profile_of("matmul").sol_sm == pytest.approx(expected / 100)


def test_edge_cases_of_the_format() -> None:
    text = (
        "==PROF== Connected to process 1\n"
        '"ID","Kernel Name","gpu__time_duration.sum","launch__shared_mem_per_block_static",'
        '"lts__t_sector_hit_rate.pct"\n'
        '"","","usecond","Kbyte/block","%"\n'
        '"0","k","1,500.5","2.05","n/a"\n'
        "==PROF== Disconnected from process 1\n"
    )
    (launch,) = parse_raw_csv(text)
    assert launch.values["gpu__time_duration.sum"] == pytest.approx(1500.5e-6)
    assert launch.values["launch__shared_mem_per_block_static"] == pytest.approx(2050)
    assert launch.values["lts__t_sector_hit_rate.pct"] is None
    assert parse_raw_csv("==PROF== No kernels were profiled.\n") == []
    assert profile_from_launches([]) is None


def test_the_fixtures_are_the_ones_documented() -> None:
    readme = (FIXTURES / "README.md").read_text()
    assert "--clock-control none" in (FIXTURES / "commands.txt").read_text()
    assert "H100" in readme
