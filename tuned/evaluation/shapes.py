"""Extra correctness shapes derived from the declared ones.

A kernel that is right only at the sizes it was shown (multiples of its block, its timed
shape) is wrong. From the smallest declared shape whose dimensions are all at least 2, this
derives, keeping only shapes not declared already and of at most ``max_size`` elements:

- **one row**: the first dimension set to 1 (for shapes of two or more dimensions);
- **odd**: every dimension made odd (``d + 1`` if even, else ``d + 2``);
- **just above a power of two**: every dimension set to ``2**ceil(log2 (d + 1)) + 1``.

Derived shapes are checked like declared ones, except that a shape the entry's input maker or
reference refuses (raises on) is skipped, and a shape the *original* fails on is dropped for
the whole generation (the baseline's evaluation records those), so only the candidate's own
mistakes fail it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuned.registry.spec import Shape

__all__ = ["DERIVED_MAX_SIZE", "derive_shapes"]

DERIVED_MAX_SIZE = 1 << 14


def _next_pow2(d: int) -> int:
    return 1 << max(0, (d - 1).bit_length())


def derive_shapes(shapes: Sequence[Shape], *, max_size: int = DERIVED_MAX_SIZE) -> list[Shape]:
    """The derived shapes (never ``perf``), in a stable order."""
    if not shapes:
        return []
    roomy = [s for s in shapes if all(v >= 2 for v in s.dims.values())]
    base = min(roomy or shapes, key=lambda s: s.size())
    names = list(base.dims)
    variants = []
    if len(names) >= 2:
        variants.append({**base.dims, names[0]: 1})
    variants.append({k: v + 1 if v % 2 == 0 else v + 2 for k, v in base.dims.items()})
    variants.append({k: _next_pow2(v + 1) + 1 for k, v in base.dims.items()})
    seen = {tuple(sorted(s.dims.items())) for s in shapes}
    out = []
    for dims in variants:
        key = tuple(sorted(dims.items()))
        shape = Shape(dims=dims, perf=False)
        if key in seen or shape.size() > max_size:
            continue
        seen.add(key)
        out.append(shape)
    return out
