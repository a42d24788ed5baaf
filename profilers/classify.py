"""What limits a kernel: a bottleneck class from its profile, and its place under the roofline.

**Bottleneck class** (Nsight Compute's speed-of-light reading). With ``busy`` the threshold
(default 0.6) and the memory SOL the busiest memory unit, ``max(sol_memory, sol_dram,
sol_l2, sol_l1)``::

    compute  if sol_sm >= busy and sol_sm >= memory
    memory   if memory >= busy
    latency  otherwise: neither the SM nor memory is well used (too few warps in flight,
             dependent stalls, launch overhead, tail effects)

**Roofline** (Williams et al.). The registry entry declares the work of one call as
expressions over the shape (``roofline: {bytes: ..., flops: ...}``); with the measured time
``t`` and the GPU's measured peaks (:mod:`profilers.peaks`)::

    bandwidth fraction = bytes / t / peak_bytes_per_s
    flop fraction      = flops / t / peak_flops_per_s
    roofline fraction  = max(bandwidth fraction, flop fraction)

The maximum equals achieved / attainable performance ``(flops / t) / min(peak_flops, AI *
peak_bw)`` with ``AI = flops / bytes``; it is defined when only one expression is declared.
The FLOP peak is a dense fp16 tensor-core matmul, so for kernels whose math runs on the
CUDA cores the flop fraction understates their compute use; the bandwidth side is what
matters for them.
"""

from __future__ import annotations

import ast
import enum
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from profilers.ncu import Profile

__all__ = [
    "DTYPE_BYTES",
    "Bottleneck",
    "ClassifySettings",
    "RooflinePoint",
    "classify",
    "evaluate_expression",
    "roofline_point",
]

#: Bytes per element of each dtype name the registry accepts (``elem`` in expressions).
DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
}


class Bottleneck(str, enum.Enum):
    MEMORY = "memory"
    COMPUTE = "compute"
    LATENCY = "latency"


@dataclass(frozen=True)
class ClassifySettings:
    """``busy``: the SOL fraction from which a unit counts as the limiter."""

    busy: float = 0.6

    def __post_init__(self) -> None:
        if not 0 < self.busy <= 1:
            raise ValueError(f"busy must be in (0, 1], got {self.busy}")


def memory_sol(profile: Profile) -> float | None:
    """The busiest memory unit's SOL fraction (``None`` when no memory SOL is known)."""
    known = [
        v
        for v in (profile.sol_memory, profile.sol_dram, profile.sol_l2, profile.sol_l1)
        if v is not None
    ]
    return max(known) if known else None


def classify(profile: Profile, settings: ClassifySettings | None = None) -> Bottleneck | None:
    """The bottleneck class of a profile; ``None`` when it has no SOL figures at all."""
    busy = (settings or ClassifySettings()).busy
    sm, memory = profile.sol_sm, memory_sol(profile)
    if sm is None and memory is None:
        return None
    sm_v, mem_v = sm or 0.0, memory or 0.0
    if sm_v >= busy and sm_v >= mem_v:
        return Bottleneck.COMPUTE
    if mem_v >= busy:
        return Bottleneck.MEMORY
    return Bottleneck.LATENCY


# ----------------------------------------------------------------------------- roofline

_OPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}


def evaluate_expression(text: str, names: Mapping[str, float]) -> float:
    """Evaluate a registry ``roofline`` expression (numbers, + - * / // **, parentheses, names).

    Nothing is executed: the expression is walked as a syntax tree; anything else (calls,
    attributes, unknown names) raises ``ValueError`` naming it. The registry loader has
    already rejected such expressions, so this only fails on a hand-made spec. So does a
    value that is not a finite real number (``N/0``, ``(0-N)**0.5``, ``N**N**N``).
    """

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name {node.id!r} in roofline expression {text!r}")
            return float(names[node.id])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            try:
                value = _OPS[type(node.op)](left, right)
            except (ArithmeticError, ValueError) as exc:  # N/0, 0**-1, an overflowing power
                raise ValueError(
                    f"{ast.unparse(node)} fails at {left:g} and {right:g} "
                    f"({exc.args[-1] if exc.args else exc}) in roofline expression {text!r}"
                ) from None
            if not isinstance(value, (int, float)):  # a negative number's fractional power
                raise ValueError(
                    f"{ast.unparse(node)} at {left:g} and {right:g} is not a real number "
                    f"in roofline expression {text!r}"
                )
            return float(value)
        raise ValueError(f"{type(node).__name__} is not allowed in roofline expression {text!r}")

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"roofline expression {text!r} does not parse: {exc.msg}") from exc
    try:
        result = walk(tree.body)
    except RecursionError:
        raise ValueError(f"roofline expression {text!r} is nested too deeply") from None
    if not math.isfinite(result):
        raise ValueError(f"roofline expression {text!r} is {result}, not a finite number")
    return result


def _work(text: str | None, names: Mapping[str, float]) -> float | None:
    """The bytes or flops of ``text`` for one case; None when there is no usable number (a
    negative one, or an expression :func:`evaluate_expression` refuses): no roofline point
    is better than a campaign stopped by a registry expression."""
    if text is None:
        return None
    try:
        value = evaluate_expression(text, names)
    except ValueError:
        return None
    return value if value >= 0 else None


@dataclass(frozen=True)
class RooflinePoint:
    """One timed case under the roofline (fractions of the measured peaks)."""

    bandwidth_fraction: float | None
    flops_fraction: float | None

    @property
    def fraction(self) -> float:
        """``max`` of the known fractions: achieved over attainable performance."""
        return max(v for v in (self.bandwidth_fraction, self.flops_fraction) if v is not None)

    @property
    def bound(self) -> Bottleneck:
        """Which roof is closer: ``memory`` or ``compute``."""
        bw, fl = self.bandwidth_fraction or 0.0, self.flops_fraction or 0.0
        return Bottleneck.COMPUTE if fl > bw else Bottleneck.MEMORY


def roofline_point(
    *,
    bytes_expr: str | None,
    flops_expr: str | None,
    dims: Mapping[str, int],
    dtype: str,
    time_s: float,
    peak_bytes_per_s: float,
    peak_flops_per_s: float,
) -> RooflinePoint | None:
    """Where one timed case (``dims``, ``dtype``, ``time_s``) sits; ``None`` without work
    (also when the expressions give no finite, non-negative number for this case)."""
    if bytes_expr is None and flops_expr is None:
        return None
    if not time_s > 0 or not math.isfinite(time_s):
        raise ValueError(f"a roofline point needs a positive time, got {time_s!r}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    names = {**{k: float(v) for k, v in dims.items()}, "elem": float(DTYPE_BYTES[dtype])}
    bw = fl = None
    if peak_bytes_per_s > 0 and (work := _work(bytes_expr, names)) is not None:
        bw = work / time_s / peak_bytes_per_s
    if peak_flops_per_s > 0 and (work := _work(flops_expr, names)) is not None:
        fl = work / time_s / peak_flops_per_s
    if bw is None and fl is None:
        return None
    return RooflinePoint(bandwidth_fraction=bw, flops_fraction=fl)
