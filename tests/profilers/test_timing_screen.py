"""Interleaved timing with a screening round: a clearly slower candidate stops early."""

from __future__ import annotations

import dataclasses

import pytest

from profilers.timing import TimingSettings, interleaved_timing
from tests.conftest import has_gpu

SETTINGS = TimingSettings(target_ms=60.0, warmup_ms=5.0, screen_ms=10.0, screen_slower=1.05)


def test_screening_is_off_in_the_interpreter_and_every_round_is_kept() -> None:
    calls = [0, 0]

    def slow() -> None:
        calls[0] += 1
        sum(range(20000))

    def fast() -> None:
        calls[1] += 1

    timed = interleaved_timing(
        [slow, fast],
        gpu=False,
        settings=dataclasses.replace(SETTINGS, interpreter_reps=4),
        screen=True,
    )
    assert not timed.screened
    assert [len(s) for s in timed.samples] == [4, 4] and calls == [4, 4]


@pytest.mark.gpu
@pytest.mark.parametrize("factor, cut", [(4, True), (1, False)])
def test_a_candidate_slower_than_the_incumbent_is_screened_out(factor: int, cut: bool) -> None:
    """4x the incumbent's work: the screening round's samples are the result (far fewer than
    the full measurement's); the same work: the full measurement, screened=False."""
    if not has_gpu():
        pytest.skip("needs an NVIDIA GPU")
    import torch

    x = torch.randn(2048, 2048, device="cuda")

    def incumbent() -> None:
        x @ x

    def candidate() -> None:
        for _ in range(factor):
            x @ x

    full = interleaved_timing([candidate, incumbent], gpu=True, settings=SETTINGS)
    timed = interleaved_timing([candidate, incumbent], gpu=True, settings=SETTINGS, screen=True)
    assert timed.screened is cut
    assert len(timed.samples) == 2 and len(timed.samples[0]) == len(timed.samples[1])
    if cut:
        assert len(timed.samples[0]) < len(full.samples[0]) / 2
    else:
        assert len(timed.samples[0]) >= len(full.samples[0]) / 2
    # A faster candidate is never screened out, whatever its margin.
    faster = interleaved_timing([incumbent, candidate], gpu=True, settings=SETTINGS, screen=True)
    assert not faster.screened
