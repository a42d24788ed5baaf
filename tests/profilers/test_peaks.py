"""Peak measurement: in a subprocess with a deadline; failures are typed and say why."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from profilers.peaks import PeakMeasurementError, Peaks, measure_in_subprocess
from tests.conftest import has_gpu


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\nimport sys, time, json\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_without_a_gpu_the_measurement_fails_with_the_reason() -> None:
    if has_gpu():
        pytest.skip("this machine has a GPU")
    with pytest.raises(PeakMeasurementError, match="no CUDA device"):
        measure_in_subprocess(deadline_s=120)


def test_the_deadline_kills_the_measurement(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "time.sleep(300)")
    started = time.monotonic()
    with pytest.raises(PeakMeasurementError, match="exceeded 1 s"):
        measure_in_subprocess(python=python, deadline_s=1.0)
    assert time.monotonic() - started < 30


def test_a_measurement_is_read_from_the_last_line(tmp_path: Path) -> None:
    peaks = Peaks("GPU X", 3e12, 9e14, 1 << 30, 8192, 1.0)
    python = _fake_python(tmp_path, f"print('noise')\nprint(json.dumps({peaks.to_dict()!r}))")
    assert measure_in_subprocess(python=python) == peaks
    garbage = _fake_python(tmp_path, "print('{not json')")
    with pytest.raises(PeakMeasurementError, match="unreadable"):
        measure_in_subprocess(python=garbage)


@pytest.mark.gpu
def test_measured_peaks_are_plausible_for_a_datacenter_gpu() -> None:
    if not has_gpu():
        pytest.skip("needs an NVIDIA GPU")
    peaks = measure_in_subprocess(deadline_s=600)
    assert 0.3e12 < peaks.bytes_per_s < 10e12  # bytes/s: A10 ~0.6 TB/s .. B200 ~8 TB/s
    assert 20e12 < peaks.flops_per_s < 3e15  # fp16 dense tensor cores
