"""Field checks of a registry entry's ``kernel.yaml`` (knobs and roofline have their own modules).

Each ``check_*`` function takes the raw value that YAML produced (``None`` when the key is
absent or null), records every problem it finds in a :class:`Problems` list and returns its
best reading of the value. The loader builds a :class:`~tuned.registry.spec.KernelSpec` only
when the list stays empty, so a value returned after a problem is never used. Nothing is
executed; the only file access is the existence check of the module path.
"""

from __future__ import annotations

import difflib
import keyword
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import TypeGuard

from tuned.registry.problems import Problems, show
from tuned.registry.spec import DTYPE_NAMES, Shape, Tolerance

__all__ = [
    "DEFAULT_TOLERANCE",
    "DTYPE_ALIASES",
    "TOP_LEVEL_KEYS",
    "canonical_dtype",
    "check_dtypes",
    "check_function_name",
    "check_module_path",
    "check_name",
    "check_shapes",
    "check_tolerance",
    "check_top_level",
    "check_weight",
    "is_identifier",
    "is_int",
    "is_number",
    "yaml_number_hint",
]

TOP_LEVEL_KEYS: tuple[str, ...] = (
    "name",
    "module",
    "launcher",
    "reference",
    "inputs",
    "shapes",
    "dtypes",
    "tolerance",
    "knobs",
    "weight",
    "roofline",
    "kind",
    # how the launcher is called (tuned.registry.launchers)
    "outputs",
    "backward",
    "init",
    "grad_outputs",
    "keywords",
)
_REQUIRED_EXAMPLES: dict[str, str] = {
    "name": "name: softmax",
    "module": "module: softmax.py",
    "launcher": "launcher: softmax",
    "inputs": "inputs: make_inputs",
    "shapes": "shapes: [{M: 4096, N: 4096, perf: true}]",
    "dtypes": "dtypes: [float16, float32]",
}

DTYPE_ALIASES: dict[str, str] = {
    "fp16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}

#: Tolerance of a dtype that ``tolerance`` does not mention (integers must match exactly; the
#: float8 formats one step of their 3 or 2 mantissa bits).
DEFAULT_TOLERANCE: dict[str, Tolerance] = {
    "float16": Tolerance(atol=1e-2, rtol=1e-2),
    "bfloat16": Tolerance(atol=2e-2, rtol=2e-2),
    "float32": Tolerance(atol=1e-4, rtol=1e-4),
    "float64": Tolerance(atol=1e-7, rtol=1e-7),
    "float8_e4m3fn": Tolerance(atol=0.125, rtol=0.125),
    "float8_e5m2": Tolerance(atol=0.25, rtol=0.25),
    "uint8": Tolerance(atol=0.0, rtol=0.0),
    "int8": Tolerance(atol=0.0, rtol=0.0),
    "int16": Tolerance(atol=0.0, rtol=0.0),
    "int32": Tolerance(atol=0.0, rtol=0.0),
    "int64": Tolerance(atol=0.0, rtol=0.0),
}

_NAME_RE = re.compile(r"[a-z0-9_-]+")
_VALID_DTYPES = (
    f"valid: {', '.join(DTYPE_NAMES)} "
    f"(aliases: {', '.join(f'{a}={c}' for a, c in DTYPE_ALIASES.items())})"
)


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_identifier(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def yaml_number_hint(value: object) -> str:
    """When a number was meant but YAML produced a string, say why (``1e-2`` is text to PyYAML)."""
    if not isinstance(value, str):
        return ""
    try:
        float(value)
    except ValueError:
        return ""
    return (
        "; that is text, not a number: YAML 1.1 reads exponents only with a dot and a sign "
        "(write 1.0e-2, 1.0e+3), and quoted values are always text"
    )


def canonical_dtype(name: str) -> str | None:
    """The canonical dtype name for ``name`` (an alias or a canonical name), else None."""
    if name in DTYPE_NAMES:
        return name
    return DTYPE_ALIASES.get(name)


#: A reference entry (``kind: reference``) needs its reference, not a launcher.
_REFERENCE_REQUIRED: dict[str, str] = {
    **{k: v for k, v in _REQUIRED_EXAMPLES.items() if k != "launcher"},
    "reference": "reference: reference",
}


def check_top_level(doc: dict[object, object], out: Problems, *, kind: str = "triton") -> None:
    """Unknown keys (with the allowed ones) and missing required keys (those of ``kind``)."""
    for key in doc:
        if not isinstance(key, str):
            out.add(
                "",
                f"top-level key {show(key)} is not a string; allowed keys: "
                + ", ".join(TOP_LEVEL_KEYS),
            )
        elif key not in TOP_LEVEL_KEYS:
            out.add(
                key,
                "unknown key; allowed keys: "
                + ", ".join(TOP_LEVEL_KEYS)
                + _did_you_mean(key, TOP_LEVEL_KEYS),
            )
    required = _REFERENCE_REQUIRED if kind == "reference" else _REQUIRED_EXAMPLES
    for key, example in required.items():
        if doc.get(key) is None:
            out.add(key, f"required but missing; add it, e.g. `{example}`")


def check_name(value: object, out: Problems) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        out.add(
            "name",
            "must be a string of lowercase letters, digits, '_' and '-' "
            f"(it names the kernel in metrics and the store), got {show(value)}",
        )
        return ""
    return value


def check_module_path(value: object, directory: Path, out: Problems) -> str | None:
    """The module's path relative to the entry directory (POSIX form), or None if unusable."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        out.add(
            "module",
            "must be the path of the kernel's Python module relative to the "
            f"entry directory, e.g. softmax.py; got {show(value)}",
        )
        return None
    rel = PurePosixPath(value)
    if rel.is_absolute():
        out.add("module", f"must be relative to the entry directory, got the absolute path {value}")
        return None
    if ".." in rel.parts:
        out.add("module", f"must stay inside the entry directory; '..' is not allowed: {value}")
        return None
    if rel.suffix != ".py":
        out.add("module", f"must name a .py file, got {show(value)}")
        return None
    target = directory / rel
    try:
        inside = target.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        out.add("module", f"cannot resolve {target}: {exc}")
        return None
    if not inside:
        out.add(
            "module",
            f"{value} resolves outside the entry directory (a symlink?); keep the module inside it",
        )
        return None
    if not target.is_file():
        out.add("module", f"file not found: {target}; module is relative to {directory}")
        return None
    return rel.as_posix()


def check_function_name(key: str, value: object, out: Problems) -> str | None:
    """``launcher``/``inputs``/``reference``: a Python identifier (the def is checked later)."""
    if value is None:
        return None
    if not is_identifier(value):
        out.add(
            key,
            "must be the name of a top-level function of the module "
            f"(a Python identifier), got {show(value)}",
        )
        return None
    return value


#: Bounds of a shape's sizes: far beyond any GPU's memory, even for a matmul's M x N x K.
MAX_DIM = 1 << 40
MAX_SHAPE_PRODUCT = 1 << 50


def check_shapes(value: object, out: Problems) -> tuple[tuple[Shape, ...], frozenset[str] | None]:
    """The shapes, and the dimension names of the first shape (None when there is none)."""
    if value is None:
        return (), None
    if not isinstance(value, list) or not value:
        out.add(
            "shapes",
            "must be a non-empty list of shapes such as "
            f"{{M: 4096, N: 4096, perf: true}}, got {show(value)}",
        )
        return (), None
    shapes: list[Shape] = []
    first: tuple[int, frozenset[str]] | None = None
    seen: dict[tuple[tuple[str, int], ...], int] = {}
    perf_broken = False
    for i, item in enumerate(value):
        where = f"shapes[{i}]"
        if not isinstance(item, dict):
            out.add(
                where,
                f"must be a mapping of dimension name to size, e.g. {{M: 4096, "
                f"N: 4096}}, got {show(item)}",
            )
            continue
        dims: dict[str, int] = {}
        names: set[str] = set()
        perf = False
        for key, size in item.items():
            if key == "perf":
                if isinstance(size, bool):
                    perf = size
                else:
                    out.add(f"{where}.perf", f"must be true or false, got {show(size)}")
                    perf_broken = True
            elif not is_identifier(key):
                out.add(where, f"dimension name {show(key)} is not a Python identifier")
            elif key == "elem":
                out.add(
                    f"{where}.elem",
                    "'elem' is reserved (bytes per element in roofline "
                    "expressions); rename the dimension",
                )
            else:
                names.add(key)
                if is_int(size) and 0 < size <= MAX_DIM:
                    dims[key] = size
                elif is_int(size) and size > 0:
                    out.add(
                        f"{where}.{key}",
                        f"{_magnitude(size)} is larger than any GPU holds (at "
                        f"most 2**{MAX_DIM.bit_length() - 1}); is the size mistyped?",
                    )
                else:
                    out.add(f"{where}.{key}", f"must be a positive integer, got {show(size)}")
        product = _product(dims.values())
        if len(dims) == len(names) and product is not None:
            out.add(
                where,
                f"its sizes multiply to {product} (more than "
                f"2**{MAX_SHAPE_PRODUCT.bit_length() - 1}); no GPU holds inputs this large, "
                "is a size mistyped?",
            )
            continue
        if not names:
            out.add(where, "names no dimension; give at least one, e.g. {N: 4096}")
            continue
        if first is None:
            first = (i, frozenset(names))
        elif names != first[1]:
            out.add(
                where,
                f"dimensions {', '.join(sorted(names))} differ from "
                f"shapes[{first[0]}]'s {', '.join(sorted(first[1]))}; every shape must "
                "name the same dimensions",
            )
        sizes = tuple(sorted(dims.items()))
        if len(dims) == len(names) and sizes in seen:
            out.add(
                where,
                f"same sizes as shapes[{seen[sizes]}]; list each shape once "
                "(with perf: true if it should be timed)",
            )
        seen.setdefault(sizes, i)
        shapes.append(Shape(dims=dims, perf=perf))
    if shapes and not perf_broken and not any(s.perf for s in shapes):
        out.add(
            "shapes",
            "no shape has perf: true, so nothing would be timed; add perf: true "
            "to the shapes production runs at, e.g. {M: 4096, N: 4096, perf: true}",
        )
    return tuple(shapes), None if first is None else first[1]


def _magnitude(value: int) -> str:
    """A large integer for a message: ``1e+30``, or ``about 10**400`` beyond any float."""
    if value.bit_length() <= 1000:
        return f"{value:.3g}"
    return f"about 10**{math.floor(math.log10(value))}"


def _product(sizes: Iterable[int]) -> str | None:
    """The product of ``sizes`` for a message when it exceeds :data:`MAX_SHAPE_PRODUCT`,
    else None; never builds a number of more than a few thousand bits."""
    sizes = list(sizes)
    log2 = math.fsum(math.log2(s) for s in sizes)
    if log2 > 4000:  # 40 sizes of 2**100 would take 4000 bits: say the exponent
        return f"about 2**{math.floor(log2)}"
    product = math.prod(sizes)
    return _magnitude(product) if product > MAX_SHAPE_PRODUCT else None


def _too_large(value: int | float) -> bool:
    """An integer beyond every float (``1`` and 400 zeros): ``math.isfinite`` would raise."""
    try:
        float(value)
    except OverflowError:
        return True
    return False


def check_dtypes(value: object, out: Problems) -> tuple[str, ...] | None:
    """Canonical dtype names in the order given, or None when the list is unusable."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        out.add(
            "dtypes",
            f"must be a non-empty list of dtype names, e.g. [float16, float32]; "
            f"{_VALID_DTYPES}; got {show(value)}",
        )
        return None
    result: list[str] = []
    first_at: dict[str, int] = {}
    for i, name in enumerate(value):
        canon = canonical_dtype(name) if isinstance(name, str) else None
        if canon is None:
            hint = (
                _did_you_mean(name, [*DTYPE_NAMES, *DTYPE_ALIASES]) if isinstance(name, str) else ""
            )
            out.add(f"dtypes[{i}]", f"unknown dtype {show(name)}; {_VALID_DTYPES}{hint}")
        elif canon in first_at:
            out.add(
                f"dtypes[{i}]",
                f"{name} duplicates dtypes[{first_at[canon]}] ({canon}); list each dtype once",
            )
        else:
            first_at[canon] = i
            result.append(canon)
    return tuple(result)


def _tolerance_value(raw: object, where: str, default: float, out: Problems) -> float:
    if raw is None:
        return default
    if is_number(raw) and _too_large(raw):
        out.add(where, f"{_magnitude(int(raw))} is too large; must be a finite number >= 0")
        return default
    if not is_number(raw) or not math.isfinite(raw) or raw < 0:
        out.add(where, f"must be a finite number >= 0, got {show(raw)}{yaml_number_hint(raw)}")
        return default
    return float(raw)


def check_tolerance(
    value: object, dtypes: Sequence[str] | None, out: Problems
) -> dict[str, Tolerance]:
    """Tolerance per dtype of ``dtypes``: the given ones, defaults for the rest."""
    given: dict[str, Tolerance] = {}
    if value is not None and not isinstance(value, dict):
        out.add(
            "tolerance",
            "must be a mapping of dtype to {atol, rtol}, e.g. "
            f"{{float16: {{atol: 1.0e-2, rtol: 1.0e-2}}}}, got {show(value)}",
        )
    elif isinstance(value, dict):
        for key, spec in value.items():
            where = f"tolerance.{key}"
            canon = canonical_dtype(key) if isinstance(key, str) else None
            if canon is None:
                out.add(where, f"unknown dtype {show(key)}; {_VALID_DTYPES}")
                continue
            if dtypes is not None and canon not in dtypes:
                out.add(
                    where,
                    f"{key} is not in dtypes ({', '.join(dtypes)}); add it to "
                    "dtypes or remove this tolerance",
                )
            if canon in given:
                out.add(where, f"{key} is {canon}, which already has a tolerance")
            if not isinstance(spec, dict):
                out.add(
                    where, f"must be a mapping {{atol: <number>, rtol: <number>}}, got {show(spec)}"
                )
                continue
            for k in spec:
                if k not in ("atol", "rtol"):
                    out.add(f"{where}.{k}", "unknown key; allowed keys: atol, rtol")
            default = DEFAULT_TOLERANCE[canon]
            given[canon] = Tolerance(
                atol=_tolerance_value(spec.get("atol"), f"{where}.atol", default.atol, out),
                rtol=_tolerance_value(spec.get("rtol"), f"{where}.rtol", default.rtol, out),
            )
    return {d: given.get(d, DEFAULT_TOLERANCE[d]) for d in dtypes or ()}


def check_weight(value: object, out: Problems) -> float:
    if value is None:
        return 1.0
    if is_number(value) and _too_large(value):
        out.add(
            "weight",
            f"{_magnitude(int(value))} is too large; must be a number > 0 (the kernel's share "
            "of production GPU time, e.g. 1 or 2.5)",
        )
        return 1.0
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        out.add(
            "weight",
            "must be a number > 0 (the kernel's share of production GPU time), "
            f"got {show(value)}{yaml_number_hint(value)}",
        )
        return 1.0
    return float(value)
