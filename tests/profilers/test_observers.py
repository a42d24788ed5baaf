"""The observer seam: lifecycle, failures reported as values, NVML and proton where present."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import ClassVar

import pytest

from profilers.observers import (
    NvmlObserver,
    ObservedValue,
    ProtonObserver,
    available_observers,
    observing,
)
from tests.conftest import has_gpu


class Recorder:
    name: ClassVar[str] = "recorder"

    def __init__(self, log: list[str], fail: str = "") -> None:
        self.log, self.fail = log, fail

    def before_start(self) -> None:
        if self.fail == "start":
            raise RuntimeError("driver gone")
        self.log.append("start")

    def after_finish(self) -> None:
        if self.fail == "finish":
            raise OSError("device lost")
        self.log.append("finish")

    def results(self) -> dict[str, ObservedValue]:
        return {"recorder_calls": float(len(self.log))}


def test_observers_bracket_the_benchmark_and_report_after() -> None:
    log: list[str] = []
    with observing([Recorder(log)]) as results:
        log.append("benchmark")
        assert results == {}  # filled only once the benchmark is over
    assert log == ["start", "benchmark", "finish"]
    assert results == {"recorder_calls": 3.0}


def test_an_observers_trouble_is_reported_never_raised() -> None:
    log: list[str] = []
    with observing([Recorder(log, fail="start"), Recorder(log, fail="finish")]) as results:
        log.append("benchmark")
    assert results["recorder_error"] == "OSError: device lost"
    assert log == ["start", "benchmark"]
    with pytest.raises(ZeroDivisionError), observing([Recorder([])]):
        _ = 1 / 0  # the benchmark's own errors propagate


def test_available_observers_match_this_machine(tmp_path: Path) -> None:
    names = {o.name for o in available_observers(proton_path=tmp_path / "p")}
    if not has_gpu():
        assert "nvml" not in names  # no driver to ask
    if importlib.util.find_spec("triton.profiler") is not None:
        assert "proton" in names
    assert "proton" not in {o.name for o in available_observers()}  # only when asked for


@pytest.mark.gpu
def test_nvml_samples_power_clock_and_temperature_during_a_benchmark() -> None:
    if not has_gpu():
        pytest.skip("needs an NVIDIA GPU")
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    with observing([NvmlObserver(interval_s=0.005)]) as results:
        for _ in range(200):
            a @ a
        torch.cuda.synchronize()
    assert float(results["nvml_samples"]) >= 3
    assert 20.0 < float(results["nvml_power_w_max"]) < 2000.0
    assert 1e8 < float(results["nvml_sm_clock_hz_mean"]) < 5e9
    assert 0.0 < float(results["nvml_temperature_c_max"]) < 120.0


@pytest.mark.gpu
def test_proton_writes_a_profile_of_a_triton_kernel(tmp_path: Path) -> None:
    if not has_gpu() or importlib.util.find_spec("triton.profiler") is None:
        pytest.skip("needs an NVIDIA GPU and triton.profiler")
    import torch

    observer = ProtonObserver(path=tmp_path / "bench")
    x = torch.randn(1 << 20, device="cuda")
    with observing([observer]) as results:
        (x + 1).sum()
        torch.cuda.synchronize()
    assert Path(str(results["proton_profile"])).exists()
