"""The ``profiling:`` section of the daemon's configuration."""

from __future__ import annotations

import pytest

from policies.masks import MaskSettings
from tuned.daemon.config import ConfigError, DaemonConfig, ProfilingConfig, parse_config


def test_defaults_profile_with_kernelbands_thresholds() -> None:
    config = DaemonConfig().profiling
    assert config == ProfilingConfig()
    assert config.enabled and config.ncu == "ncu" and config.per_step == 1
    assert config.thresholds == MaskSettings(sm=0.8, dram=0.7, l2=0.75)


def test_a_partial_section_keeps_the_other_defaults() -> None:
    config = parse_config(
        {"profiling": {"ncu": "/opt/nvidia/ncu", "thresholds": {"dram": 0.6}}}, source="t"
    ).profiling
    assert config.ncu == "/opt/nvidia/ncu"
    assert config.thresholds == MaskSettings(sm=0.8, dram=0.6, l2=0.75)
    assert config.deadline_s == 300.0


def test_every_bad_key_is_named_with_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "profiling": {
                    "enabled": "yes",
                    "ncu": "",
                    "deadline_s": 0,
                    "thresholds": {"sm": 1.5, "tensor": 0.5},
                    "sets": "full",
                }
            },
            source="t.yaml",
        )
    text = str(info.value)
    assert "profiling.enabled" in text and "true or false" in text
    assert "profiling.ncu" in text
    assert "profiling.deadline_s" in text
    assert "profiling.thresholds" in text and "sm, dram, l2" in text
    assert "profiling.sets" in text and "unknown key" in text
    assert len(info.value.problems) == 5
