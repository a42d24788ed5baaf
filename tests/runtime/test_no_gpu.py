"""``load`` on a machine where no Triton kernel can run: a clear error, not a kernel that
reports "tuned" and fails inside Triton at its first call."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tuned.errors import TunedError
from tuned.runtime import NoGpuDriverError, RuntimeLoadError, load


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU driver")
def test_load_without_driver_or_interpreter_says_what_to_do(
    tuned_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(NoGpuDriverError) as caught:
        load("vector_add", store=tuned_state)
    assert isinstance(caught.value, RuntimeLoadError)
    assert isinstance(caught.value, TunedError)
    message = str(caught.value)
    assert "no GPU driver" in message
    assert "TRITON_INTERPRET=1" in message


def test_load_in_the_interpreter_is_not_refused(
    tuned_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    kernel = load("vector_add", store=tuned_state)
    assert kernel.status in ("tuned", "original")
