"""Checks on a candidate's outputs and inputs, and how its exceptions map to outcomes.

Runs inside the evaluation worker. Every failed check raises :class:`CaseFailure` with the
outcome name and a reason that names the check.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "CaseFailure",
    "check_aliasing",
    "check_inputs_unchanged",
    "classify_exception",
    "clone_inputs",
    "compare_outputs",
    "describe",
    "output_signature",
    "output_tolerance",
    "sampled_atol",
    "unwritten_elements",
    "widened_atol",
]

# Exception type names that mean "the Triton compiler refused this kernel/config".
_COMPILE_ERROR_NAMES = frozenset(
    {
        "CompilationError",
        "CompileTimeAssertionFailure",
        "OutOfResources",
        "PTXASError",
        "UnsupportedLanguageConstruct",
        "InterpreterError",
    }
)


class CaseFailure(Exception):
    """A candidate failed a case; carries the outcome name and reason."""

    def __init__(self, outcome: str, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.fatal = fatal


def as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def compare_outputs(
    out: Any, ref: Any, atol: float | Sequence[float], rtol: float, *, dtype: str | None = None
) -> None:
    """Raise :class:`CaseFailure` (``nan`` or ``incorrect``) unless ``out`` matches ``ref``;
    ``atol`` is one for every output or one per output (:func:`widened_atol`), at the
    tolerance of the case's ``dtype`` adjusted to each output's own (:func:`output_tolerance`)."""
    import torch

    outs, refs = as_tuple(out), as_tuple(ref)
    if len(outs) != len(refs):
        raise CaseFailure("incorrect", f"returned {len(outs)} outputs, the reference {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if o != r:
                raise CaseFailure("incorrect", f"output {i}: {o!r} != reference {r!r}")
            continue
        if not isinstance(o, torch.Tensor):
            raise CaseFailure("incorrect", f"output {i} is {type(o).__name__}, not a tensor")
        if tuple(o.shape) != tuple(r.shape):
            raise CaseFailure(
                "incorrect", f"output {i} has shape {tuple(o.shape)}, reference {tuple(r.shape)}"
            )
        if o.dtype != r.dtype:
            raise CaseFailure("incorrect", f"output {i} has dtype {o.dtype}, reference {r.dtype}")
        given = atol if isinstance(atol, (int, float)) else atol[i]
        _compare_tensor(i, o, r, *output_tolerance(r, given, rtol, dtype))


def output_tolerance(ref: Any, atol: float, rtol: float, dtype: str | None) -> tuple[float, float]:
    """``(atol, rtol)`` for one output whose reference is ``ref``, in a case of ``dtype``.

    An entry's tolerance is its input dtype's; a quantization kernel's outputs often have
    another. An integer or boolean output (codes, indices, an int32 accumulator) must match
    exactly whatever the case's dtype (a float16 case's ``rtol`` of 1e-2 let an int32 output
    of 1000 be off by 10). A floating output of an integer case (a dequantized value, a scale)
    gets at least its own dtype's default tolerance: the integer case's exact comparison
    would fail a float reduction merely summed in another order."""
    import torch

    if not (ref.is_floating_point() or ref.is_complex()):
        return 0.0, 0.0
    exact = dtype is not None and not getattr(torch, dtype).is_floating_point
    if not exact:
        return atol, rtol
    from tuned.registry.validate import DEFAULT_TOLERANCE

    own = DEFAULT_TOLERANCE.get(str(ref.dtype).removeprefix("torch."))
    if own is None:
        return atol, rtol
    return max(atol, own.atol), max(rtol, own.rtol)


#: Elements compared at a time: the comparison works on several temporaries of up to 8
#: bytes an element at once. Whole, Liger's KL divergence gradient at a 128k vocabulary
#: (8192 x 128256) asked the judge for 7.8 GiB more than the 53.6 GiB it held.
COMPARE_CHUNK = 1 << 24


def _work(t: Any) -> Any:
    """A chunk in the dtype it is compared in: float32 for float16, bfloat16 and float32
    (exact for each, and half the memory traffic of float64: on the H200 the comparisons of
    Liger's 128k-vocabulary gradients took 0.4-1.4 s of a candidate), float64 and complex128
    for wider floats, integers and booleans as they are (compared exactly: in float64 an
    int64 output off by one past 2**53 passed)."""
    import torch

    if t.is_complex():
        return t.to(torch.complex128)
    if not t.is_floating_point():
        return t
    return t.double() if t.dtype == torch.float64 else t.float()


def _chunks(a: Any, b: Any, work: Any = _work) -> Iterator[tuple[int, Any, Any]]:
    """``(start, a_chunk, b_chunk)`` over two tensors of one shape, flattened, each chunk
    through ``work`` (:func:`_work`), :data:`COMPARE_CHUNK` elements at a time."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    for start in range(0, flat_a.numel(), COMPARE_CHUNK):
        end = start + COMPARE_CHUNK
        yield start, work(flat_a[start:end]), work(flat_b[start:end])


def _wide(t: Any) -> Any:
    """A chunk in float64 (complex128 for complex): for the size of an error, where integers
    and booleans must subtract without wrapping."""
    import torch

    return t.to(torch.complex128) if t.is_complex() else t.double()


def _compare_tensor(i: int, o: Any, r: Any, atol: float, rtol: float) -> None:
    """Output ``i`` against its reference, same shape and dtype, in chunks of
    :data:`COMPARE_CHUNK` elements (bounded memory whatever the size)."""
    import torch

    nans = bad = 0
    first_nan = first_bad = None
    for start, of, rf in _chunks(o, r):
        nan = torch.isnan(of)
        count = int(nan.sum())
        if count:
            nans += count
            if first_nan is None:
                first_nan = start + int(torch.nonzero(nan)[0])
        if nans:
            continue  # NaN is the verdict; only their count and the first are wanted now
        off = ~torch.isclose(of, rf, rtol=rtol, atol=atol, equal_nan=False)
        count = int(off.sum())
        if count:
            bad += count
            if first_bad is None:
                first_bad = start + int(torch.nonzero(off)[0])
    if first_nan is not None:
        where = _unravel(first_nan, o.shape)
        raise CaseFailure("nan", f"output {i}: {nans} NaN elements, first at {where}")
    if first_bad is not None:
        max_err = 0.0  # over every element, as a whole comparison would say; only on failure
        for _, of, rf in _chunks(o, r, _wide):
            err = (of - rf).abs()
            err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
            max_err = max(max_err, float(err.max()))
        raise CaseFailure(
            "incorrect",
            f"output {i}: {bad}/{o.numel()} elements outside atol={atol} rtol={rtol}, "
            f"max abs error {max_err:.3g}, first at {_unravel(first_bad, o.shape)}",
        )


#: How far an original's outputs may differ between two runs on the same inputs, as a share
#: of the output's largest magnitude, and still serve as the reference (widened tolerance).
REPRODUCIBLE_SHARE = 0.1


def widened_atol(first: Any, again: Any, atol: float) -> float | tuple[float, ...]:
    """``atol`` for each output of a reference whose two runs on the same inputs gave
    ``first`` and ``again``: where an output differs between them (atomic adds in half
    precision: Liger's group norm accumulates its weight gradient with bfloat16 atomics,
    which differed by up to 12 between two runs of the shipped kernel), twice the largest
    difference; ``atol`` itself when both runs agree exactly.

    Raises :class:`CaseFailure` (``incorrect``) when an output differs by more than
    :data:`REPRODUCIBLE_SHARE` of its largest magnitude (or NaN in one run only): such a
    reference cannot tell a correct candidate from a wrong one."""
    import torch

    widened = []
    for i, (a, b) in enumerate(zip(as_tuple(first), as_tuple(again))):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            widened.append(atol)
            continue
        if not (a.is_floating_point() and b.is_floating_point()) or a.shape != b.shape:
            widened.append(atol)
            continue
        spread = scale = 0.0
        for _, x, y in _chunks(a, b):
            both = torch.isnan(x) & torch.isnan(y)
            diff = torch.where(both, torch.zeros_like(x), (x - y).abs())
            diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
            spread = max(spread, float(diff.max()))
            finite = x[torch.isfinite(x)]
            scale = max(scale, float(finite.abs().max()) if finite.numel() else 0.0)
        if spread > REPRODUCIBLE_SHARE * scale and spread > atol:
            raise CaseFailure(
                "incorrect",
                f"the reference's output {i} differs between two runs on the same inputs by up "
                f"to {spread:.3g} (its largest magnitude: {scale:.3g}): too far from "
                "reproducible to check candidates against; declare a deterministic "
                "`reference:` in kernel.yaml (or, if the launcher is deterministic, check the "
                "entry's inputs: an input of the wrong shape makes its kernels read past it, "
                "and garbage differs from run to run)",
            )
        widened.append(max(atol, 2.0 * spread))
    if all(w == atol for w in widened):
        return atol
    return tuple(widened)


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The index in a tensor of ``shape`` of its ``flat``-th element (row-major)."""
    index = []
    for size in reversed(tuple(shape)):
        flat, at = divmod(flat, size) if size else (flat, 0)
        index.append(at)
    return tuple(reversed(index))


def check_inputs_unchanged(before: Sequence[Any], after: Sequence[Any]) -> None:
    import torch

    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor) and not torch.equal(b, a):
            raise CaseFailure("cheat", f"the candidate modified its input {i}")


def classify_exception(exc: BaseException, phase: str) -> CaseFailure:
    """Map an exception raised by candidate code to an outcome.

    Triton's own errors while the first launch compiles are ``compile_error``; a CUDA fault
    is ``crash`` and fatal (the context is lost); anything else is ``runtime_error``.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    cause = _interpreted_cause(exc)
    if cause is not exc:  # InterpreterError: ValueError: ... (at KERNEL'S FILE:LINE in kernel)
        said = f"{type(cause).__name__}: {cause}".strip().rstrip(":")
        text = f"{type(exc).__name__}: {said}"
    else:
        text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0] if text else type(exc).__name__
    text += _where(cause)
    if "AcceleratorError" in names or "CUDA error" in text or "illegal memory access" in text:
        return CaseFailure("crash", f"CUDA fault in {phase}: {first_line}", fatal=True)
    from_triton = type(exc).__module__.startswith("triton")
    if phase == "compile" and (names & _COMPILE_ERROR_NAMES or from_triton):
        return CaseFailure("compile_error", short(text))
    return CaseFailure("runtime_error", f"{phase}: {short(text)}")


def describe(exc: BaseException) -> str:
    """``Type: message (at FILE:LINE in FUNCTION)``, on as few lines as the message has, for
    an exception outside the phases :func:`classify_exception` maps (a module that raises
    while it is imported): ``format_exception_only`` ended the reason with a newline, which
    split the status table's row, and did not say where the module raised."""
    cause = _interpreted_cause(exc)
    said = f"{type(cause).__name__}: {cause}".strip().rstrip(":")
    head = f"{type(exc).__name__}: {said}" if cause is not exc else said
    return short(head + _where(cause))


def _interpreted_cause(exc: BaseException) -> BaseException:
    """What failed inside a kernel run by Triton's interpreter: it wraps the exception as
    ``InterpreterError(repr(e)) from e`` once per ``@triton.jit`` call level, so its message
    nests escaped reprs, one level per call, and its traceback ends at the launch in the
    launcher; the innermost cause says what failed, and its traceback the kernel's line.
    ``exc`` itself for anything else."""
    seen = 0
    while (
        type(exc).__name__ == "InterpreterError"
        and exc.__cause__ is not None
        and exc.__cause__ is not exc
        and seen < 64
    ):
        exc, seen = exc.__cause__, seen + 1
    return exc


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE in FUNC)``: the innermost frame of the code that raised, outside
    Triton's and PyTorch's own (an ``assert`` in a library's launcher names its line);
    empty without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    own = [f for f in frames if not any(lib in f.filename for lib in _LIBRARY_DIRS)]
    frame = own[-1] if own else frames[-1]
    return f" (at {frame.filename}:{frame.lineno} in {frame.name})"


#: Path parts of the libraries whose frames :func:`_where` skips.
_LIBRARY_DIRS = ("/triton/", "/torch/")


def short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2 :]


#: What an output that is an input means for an original: a launcher that writes into its
#: arguments and returns them (``return out``), which an entry declares.
ALIAS_HINT = " (an out-argument? declare it in kernel.yaml: `outputs: [NAME]`)"


def check_aliasing(outputs: Any, inputs: Sequence[Any]) -> None:
    """An output sharing memory with an input is a ``cheat``: it returned or reused an input."""
    import torch

    spans = []
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.numel():
            start = x.untyped_storage().data_ptr()
            spans.append((j, start, start + x.untyped_storage().nbytes()))
    for i, o in enumerate(as_tuple(outputs)):
        if not isinstance(o, torch.Tensor) or not o.numel():
            continue
        start = o.untyped_storage().data_ptr()
        end = start + o.untyped_storage().nbytes()
        for j, lo, hi in spans:
            if start < hi and lo < end:
                raise CaseFailure("cheat", f"output {i} shares memory with input {j}{ALIAS_HINT}")


def unwritten_elements(first: Any, second: Any) -> str | None:
    """Compare two outputs computed into NaN-poisoned and sentinel-poisoned memory.

    Elements that are NaN in ``first`` and exactly the sentinel in ``second`` were never
    written by the kernel. Returns a description, or ``None`` when every element was written.
    """
    import torch

    from tuned.evaluation.guard import poison_sentinel

    for i, (a, b) in enumerate(zip(as_tuple(first), as_tuple(second))):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            continue
        if not a.is_floating_point() or a.shape != b.shape:
            continue
        never = torch.isnan(a) & (b == poison_sentinel(b.dtype))
        if bool(never.any()):
            first_at = tuple(int(j) for j in torch.nonzero(never)[0].tolist())
            return (
                f"output {i}: {int(never.sum())}/{a.numel()} elements never written "
                f"(poisoned memory survived the call), first at {first_at}"
            )
    return None


def output_signature(outputs: Any) -> tuple[float, ...]:
    """A cheap fingerprint of outputs (sums and a strided sample), to compare across seeds."""
    import torch

    sig: list[float] = []
    for o in as_tuple(outputs):
        if isinstance(o, torch.Tensor) and o.numel():
            flat = o.detach().reshape(-1).double()
            step = max(1, flat.numel() // 64)
            sig.extend([float(flat.nansum()), float(flat.abs().nansum())])
            sig.extend(float(v) for v in flat[::step][:64].tolist())
    return tuple(sig)


#: :func:`sampled_atol` runs a reference that is not reproducible again until about this many
#: output elements were compared, at most :data:`SPREAD_RUNS_MAX` times.
SPREAD_SAMPLE = 4096
SPREAD_RUNS_MAX = 8


def sampled_atol(first: Any, again: Callable[[], Any], atol: float) -> float | tuple[float, ...]:
    """:func:`widened_atol` for a reference whose first run gave ``first``; ``again()`` runs
    it once more on the same inputs. A reproducible reference (the usual case) is run once
    more and no further. One that is not is run until about :data:`SPREAD_SAMPLE` output
    elements were compared (at most :data:`SPREAD_RUNS_MAX` runs), keeping each output's
    widest: for a small output the largest of a handful of differences understates the
    spread (seven elements of uniform noise: twice it failed one correct rerun in 30)."""
    import torch

    elements = sum(
        t.numel() for t in as_tuple(first) if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    widened: float | tuple[float, ...] = atol
    for runs in range(1, SPREAD_RUNS_MAX + 1):
        widened = _wider(widened, widened_atol(first, again(), atol))
        if widened == atol or runs * elements >= SPREAD_SAMPLE:
            break
    return widened


def _wider(a: float | tuple[float, ...], b: float | tuple[float, ...]) -> float | tuple[float, ...]:
    """The larger of two :func:`widened_atol` answers, output by output."""
    if not isinstance(a, tuple):
        return b if isinstance(b, tuple) else max(a, b)
    if not isinstance(b, tuple):
        return tuple(max(x, b) for x in a)
    return tuple(max(x, y) for x, y in zip(a, b))
