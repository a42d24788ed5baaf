"""bench/tune_stats.py's GPU state sampler, with a stand-in for NVML (no GPU here)."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from bench.tune_stats import gpu_state, print_gpu_state


def _fake_nvml(clocks: list[int]) -> types.ModuleType:
    nvml = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    calls = iter(clocks)
    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    nvml.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: f"gpu{i}"  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: next(calls, 1980)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetPowerUsage = lambda h: 650_000  # type: ignore[attr-defined]  # mW
    nvml.nvmlDeviceGetTemperature = lambda h, kind: 71  # type: ignore[attr-defined]
    # the older name only: the sampler falls back to it
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4  # type: ignore[attr-defined]
    return nvml


def test_the_gpu_state_while_a_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([1500, 1600, 1700]))
    state: dict[str, Any] = {}
    with gpu_state(state, period_s=0.005):
        time.sleep(0.2)
    assert state["samples"] >= 4
    assert state["sm_mhz_min"] == 1500 and state["sm_mhz_median"] == 1980
    assert state["power_w_median"] == 650 and state["temperature_c_max"] == 71
    assert state["limited_share"] == {
        "power cap": 1.0,
        "hw slowdown": 0.0,
        "sw thermal": 0.0,
        "hw thermal": 0.0,
    }
    print_gpu_state("tune", state)
    out = capsys.readouterr().out
    assert "SM clock median 1980 MHz (min 1500)" in out and "clocks limited: power cap 100%" in out


def test_no_nvml_is_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    state: dict[str, Any] = {}
    with gpu_state(state):
        pass
    assert state == {"nvml": "unavailable (ModuleNotFoundError)"}
    print_gpu_state("referee", state)
    assert "GPU during referee: NVML unavailable (ModuleNotFoundError)" in capsys.readouterr().out
