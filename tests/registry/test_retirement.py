"""A discovered knob wrong on most of its values is retired to its baseline, with a note."""

from __future__ import annotations

from tuned.registry.retirement import retired_knobs

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
