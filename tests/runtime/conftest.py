"""Fixtures of the runtime tests: a state directory where an example kernel was tuned."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.rows import EXAMPLES
from tuned.evaluation.client import EvaluationSettings
from tuned.runtime import current_fingerprint
from tuned.search import TuneSettings
from tuned.store.sqlite import SqliteStore
from tuned.tuning import tune_registry


@pytest.fixture(scope="session")
def tuned_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state directory where vector_add was tuned for real (baseline + 2 candidates)."""
    state = tmp_path_factory.mktemp("tuned_state")
    store = SqliteStore(state / "ktuned.sqlite")
    try:
        tune_registry(
            EXAMPLES / "vector_add",
            store=store,
            state_dir=state,
            settings=TuneSettings(budget=2, seed=0),
            evaluation=EvaluationSettings(
                interpreter=current_fingerprint()["mode"] == "interpreter",
                interpreter_max_size=1 << 17,
            ),
        )
    finally:
        store.close()
    return state
