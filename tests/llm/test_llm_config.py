"""The llm section of the daemon's configuration, and turning the proposer on and off."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuned.daemon.config import ConfigError, parse_config
from tuned.errors import BadInputError
from tuned.llm.settings import LlmSettings
from tuned.llm.setup import open_proposer
from tuned.store.ledger import BudgetCaps, Prices


def test_a_full_section_parses(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    config = parse_config(
        {
            "llm": {
                "base_url": "http://127.0.0.1:8000/v1/",
                "model": "qwen",
                "api_key_file": str(key),
                "max_tokens": 2048,
                "budget": {"total_tokens": 1000, "daily_tokens": None, "kernel_tokens": 10},
                "prices": {"prompt_per_mtok": 1, "completion_per_mtok": 3.5},
            }
        },
        source="test",
    )
    llm = config.llm
    assert llm.enabled and llm.base_url == "http://127.0.0.1:8000/v1"
    assert llm.budget == BudgetCaps(1000, None, 10)
    assert llm.prices == Prices(1.0, 3.5)
    assert llm.api_key_file == key
    assert not parse_config({}, source="test").llm.enabled


def test_every_problem_is_reported_with_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {
                "llm": {
                    "base_url": "api.openai.com",
                    "max_tokens": 0,
                    "budget": {"daily_tokens": 5},
                    "prices": {"per_token": 1},
                    "api_key": "sk-never-in-config",
                }
            },
            source="test",
        )
    text = str(info.value)
    for key in ("llm.base_url", "llm.max_tokens", "llm.budget", "llm.prices", "llm.api_key"):
        assert f"'{key}'" in text, key
    assert "sk-never-in-config" not in text.replace("'api_key'", "")  # the value is not echoed


def test_half_configured_is_an_error_and_unconfigured_is_off(tmp_path: Path) -> None:
    assert open_proposer(LlmSettings(), store_path=tmp_path / "s.sqlite") is None
    with pytest.raises(BadInputError, match=r"llm\.model"):
        open_proposer(LlmSettings(base_url="http://x/v1"), store_path=tmp_path / "s.sqlite")
