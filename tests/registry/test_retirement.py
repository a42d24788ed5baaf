"""A discovered knob wrong on most of its values is retired to its baseline, with a note."""

from __future__ import annotations

from collections.abc import Mapping

from tuned.registry.retirement import retired_knobs
from tuned.registry.spec import KnobValue

SPACE = {"BLOCK": (64, 128, 256, 512), "CHUNK_SPLIT": (1, 2, 4, 8), "num_warps": (2, 4, 8)}
BASE = {"BLOCK": 128, "CHUNK_SPLIT": 1, "num_warps": 4}


def test_a_knob_incorrect_on_most_values_is_pinned_with_a_note() -> None:
    trials = [
        (BASE, "ok"),
        ({**BASE, "CHUNK_SPLIT": 2}, "incorrect"),
        ({**BASE, "CHUNK_SPLIT": 4, "num_warps": 8}, "incorrect"),
        ({**BASE, "CHUNK_SPLIT": 8}, "nan"),
        ({**BASE, "BLOCK": 256}, "ok"),
        ({**BASE, "BLOCK": 512}, "compile_error"),  # says nothing about the math
        ({**BASE, "BLOCK": 64, "num_warps": 2}, "ok"),
    ]
    space, notes = retired_knobs(SPACE, BASE, trials)
    assert space == {**SPACE, "CHUNK_SPLIT": (1,)}
    assert notes == [
        "knob CHUNK_SPLIT retired: candidates were incorrect with 3 of the 3 values tried "
        "(2, 4, 8), so it changes the math rather than the speed; it stays at its baseline 1"
    ]


def test_too_few_verdicts_or_mostly_correct_values_keep_the_knob() -> None:
    few = [({**BASE, "BLOCK": 64}, "incorrect"), ({**BASE, "BLOCK": 256}, "incorrect")]
    assert retired_knobs(SPACE, BASE, few) == (SPACE, [])
    mixed = [
        ({**BASE, "num_warps": 2}, "incorrect"),
        ({**BASE, "num_warps": 2}, "ok"),  # one correct trial: the value passes
        ({**BASE, "num_warps": 8}, "ok"),
        ({**BASE, "BLOCK": 64}, "incorrect"),
        ({**BASE, "BLOCK": 256}, "ok"),
        ({**BASE, "BLOCK": 512}, "ok"),
    ]
    assert retired_knobs(SPACE, BASE, mixed) == (SPACE, [])


def test_a_failure_another_moved_knob_may_explain_is_not_blamed() -> None:
    """Three wrong trials each moved a semantic block (``x2``) and ``num_warps``: the
    warps, never moved alone, were retired though innocent."""
    space: dict[str, tuple[KnobValue, ...]] = {
        "blocksize": ("x1", "x2"),
        "num_warps": (1, 2, 4, 8),
    }
    base: dict[str, KnobValue] = {"blocksize": "x1", "num_warps": 4}
    trials: list[tuple[Mapping[str, KnobValue], str]] = [
        ({"blocksize": "x2", "num_warps": 2}, "incorrect"),
        ({"blocksize": "x2", "num_warps": 8}, "incorrect"),
        ({"blocksize": "x2", "num_warps": 1}, "incorrect"),
    ]
    assert retired_knobs(space, base, trials) == (space, [])
    # once the block is seen failing alone, the mixed failures are its, not the warps'
    solo: Mapping[str, KnobValue] = {"blocksize": "x2", "num_warps": 4}
    alone = [*trials, (solo, "incorrect")]
    assert retired_knobs(space, base, alone) == (space, [])
    # and the warps' own clean failures still retire them
    warps: list[tuple[Mapping[str, KnobValue], str]] = [
        ({"blocksize": "x1", "num_warps": w}, "incorrect") for w in (1, 2, 8)
    ]
    space_after, notes = retired_knobs(space, base, warps)
    assert space_after["num_warps"] == (4,) and len(notes) == 1
