"""The static gate every candidate passes before a worker imports it
(:func:`tuned.evaluation.static.static_check`)."""

from __future__ import annotations

import textwrap

from tuned.evaluation.static import static_check

#: A library's guard: the launcher is defined only where Triton is usable, a stand-in that
#: raises elsewhere (torchao's ``if has_triton(): ... else: def op(...): raise ...``).
GUARDED = textwrap.dedent(
    """
    import torch
    from torch.utils._triton import has_triton

    if has_triton():
        import triton
        import triton.language as tl

        @triton.jit
        def _k(x_ptr, n, BLOCK: tl.constexpr):
            pass

        def op(x):
            _k[(1,)](x, x.numel(), BLOCK=128)
            return x

    else:

        def op(x):
            raise NotImplementedError("op requires triton installed")

    try:
        def other(x):
            return x
    except ImportError:
        pass
    """
)


def test_a_launcher_defined_under_a_top_level_guard_passes() -> None:
    """The gate read only the module's own top-level statements, so every launcher of a module
    guarded by ``if has_triton():`` was refused ("the module defines no top-level function"),
    though discovery had found its knobs inside the same block."""
    assert static_check(GUARDED, "op") is None
    assert static_check(GUARDED, "other") is None
    assert static_check(GUARDED, "missing") == (
        "the module defines no top-level function 'missing' (the launcher)"
    )


def test_a_function_nested_in_another_is_not_a_launcher() -> None:
    source = "def outer():\n    def op(x):\n        return x\n    return op\n"
    assert static_check(source, "op") is not None
