"""Triton's autotuner in the interpreter: the first config, without a benchmark.

Triton's interpreter has no GPU driver, and an ``@triton.autotune`` kernel with several configs
benchmarks them through one (``Autotuner.do_bench``: "0 active drivers ... There should only be
one"): on the CPU every autotuned original failed (Liger's, flash-linear-attention's, 34 of the
184 real-world modules of the corpus) and nothing was tuned. In the interpreter each such
autotuner now runs its first config (after its own pruning) for every key, without running the
others: the config that a candidate's ``auto`` knobs stand for
(:func:`tuned.registry.autotune.config_values`). Interpreter timings rank code on the CPU only,
so the autotuner's pick on a GPU is not lost here: on a GPU nothing changes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["first_config_autotuners"]


def _equal_timings(*_args: Any, quantiles: Any = None, **_kwargs: Any) -> Any:
    """Every config's "benchmark" alike: ``min`` then keeps the first one."""
    return [1.0] * len(quantiles) if quantiles else 1.0


def first_config_autotuners() -> bool:
    """Make every Triton ``Autotuner`` of this process (subclasses too) pick its first config
    without benchmarking; whether it was possible (``False``: no such Triton API). Call only in
    the interpreter."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # pragma: no cover - every supported Triton has it
        return False
    if not hasattr(Autotuner, "do_bench"):  # pragma: no cover - an older Triton
        return False
    # A data descriptor: it wins over a value an instance cached for Triton's own property.
    Autotuner.do_bench = property(lambda self: _equal_timings)  # type: ignore[method-assign,assignment]
    return True
