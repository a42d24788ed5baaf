"""The daemon settles a kernel's claims when its campaign ends (docs/evaluation.md,
"Settling"): ``evaluation.settle`` decides, and a failure does not stop the daemon. The
re-measurement itself is ``ktuned referee``'s (tests/cli/test_referee.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tuned.referee
from tuned.daemon.config import DaemonConfig, EvaluationConfig
from tuned.daemon.service import Daemon
from tuned.evaluation.client import EvaluationSettings
from tuned.referee import Claim, RefereeReport


def _daemon(tmp_path: Path, settle: str, interpreter: bool) -> Daemon:
    config = DaemonConfig(state_dir=tmp_path, evaluation=EvaluationConfig(settle=settle))
    daemon = Daemon(config)
    daemon._client = SimpleNamespace(  # type: ignore[assignment]
        settings=EvaluationSettings(interpreter=interpreter)
    )
    daemon._store = SimpleNamespace(location="test")  # type: ignore[assignment]
    return daemon


@pytest.mark.parametrize(
    ("settle", "interpreter", "settled"),
    [
        ("auto", False, True),
        ("auto", True, False),
        ("yes", True, True),
        ("no", False, False),
    ],
)
def test_a_finished_campaign_is_settled_as_configured(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    settle: str,
    interpreter: bool,
    settled: bool,
) -> None:
    calls: list[dict[str, Any]] = []

    def fake_referee(store: Any, **kw: Any) -> RefereeReport:
        calls.append(kw)
        report = RefereeReport(tolerance=0.02, min_gain=0.01)
        report.claims.append(Claim("add", "c1", None, 1.5, measured=1.4))
        return report

    monkeypatch.setattr(tuned.referee, "referee", fake_referee)
    daemon = _daemon(tmp_path, settle, interpreter)
    with caplog.at_level(logging.INFO, logger="tuned.daemon.service"):
        daemon._settle("add")
    assert len(calls) == int(settled)
    if settled:
        assert calls[0]["kernels"] == ["add"]
        assert calls[0]["workdir"] == tmp_path / "workers" / "settle"
        assert "settled (kernel): claimed 1.5, measured 1.4" in caplog.text


def test_a_settling_that_fails_is_logged_and_the_daemon_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(store: Any, **kw: Any) -> RefereeReport:
        raise RuntimeError("the worker died")

    monkeypatch.setattr(tuned.referee, "referee", broken)
    daemon = _daemon(tmp_path, "yes", False)
    with caplog.at_level(logging.ERROR, logger="tuned.daemon.service"):
        daemon._settle("add")  # no exception
    assert "settling its claims failed" in caplog.text and "the worker died" in caplog.text


def test_the_settle_key_is_checked(tmp_path: Path) -> None:
    from tuned.daemon.config import ConfigError, load_config

    path = tmp_path / "ktuned.yaml"
    path.write_text("evaluation:\n  settle: sometimes\n")
    with pytest.raises(ConfigError) as bad:
        load_config(path)
    assert "settle" in str(bad.value) and str(path) in str(bad.value)
    path.write_text("evaluation:\n  settle: 'no'\n")
    assert load_config(path).evaluation.settle == "no"


def test_the_gpu_turn_key_reaches_the_workers_settings(tmp_path: Path) -> None:
    from tuned.daemon.config import ConfigError, load_config

    path = tmp_path / "ktuned.yaml"
    for value, on_gpu in (("auto", True), ("'no'", False), ("'yes'", True)):
        path.write_text(f"evaluation:\n  gpu_turn: {value}\n")
        config = load_config(path)
        assert config.evaluation_settings(False, path).turn is on_gpu
        assert config.evaluation_settings(True, path).turn is (value == "'yes'")
    path.write_text("evaluation:\n  gpu_turn: sometimes\n")
    with pytest.raises(ConfigError) as bad:
        load_config(path)
    assert "gpu_turn" in str(bad.value) and str(path) in str(bad.value)
