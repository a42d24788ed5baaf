"""An input that fills a knob's parameter by position: inputs are positional, so a launcher's
later argument (a dequantizer's ``dtype`` after ``quant_blocksize=64``) can only be reached
by passing the ones before it; the knob then takes that place."""

from __future__ import annotations

from typing import Any

import pytest

from tuned.evaluation.checks import CaseFailure
from tuned.evaluation.invoke import CallFields, EntryCall


def dequantize(a: Any, quant_blocksize: int = 64, dtype: Any = None, num_warps: int = 4) -> Any:
    return (a, quant_blocksize, dtype, num_warps)


def _call(inputs: tuple[Any, ...], knobs: dict[str, Any]) -> Any:
    entry = EntryCall(target=dequantize, fields=CallFields.from_payload(None), role="launcher")
    return entry.invoke(inputs, knobs, {"N": 4})


def test_a_knob_takes_the_place_an_input_gave_its_default() -> None:
    # was: TypeError "got multiple values for argument 'quant_blocksize'"
    assert _call(("a", 64, "f32"), {"quant_blocksize": 128, "num_warps": 8}) == (
        "a",
        128,
        "f32",
        8,
    )
    assert _call(("a",), {"quant_blocksize": 128}) == ("a", 128, None, 4)


def test_an_input_that_is_not_the_knob_s_baseline_is_named() -> None:
    with pytest.raises(CaseFailure) as failure:
        _call(("a", 256, "f32"), {"quant_blocksize": 128})
    assert failure.value.outcome == "rejected_static"
    assert "input 1 (256)" in failure.value.reason and "'quant_blocksize'" in failure.value.reason
    assert "field inputs" in failure.value.reason
