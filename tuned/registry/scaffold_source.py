"""A launcher's signature read from its source, for a module that cannot be imported here.

``ktuned registry add`` imports the launcher to read its signature. Real Triton code often
cannot be imported on the machine the entry is written on: module-level code that asks the
GPU driver for its device (``triton.runtime.driver.active.get_active_torch_device()``, which
raises "0 active drivers" on a CPU-only machine and in Triton's interpreter), runs a test or a
benchmark, or reads device properties. The entry itself needs only the parameter names, their
defaults and whether the launcher returns anything, and all of that is in the source: found on
the import path without importing anything
(:func:`~tuned.registry.kernel_sources.locate_launcher`) and read with :mod:`ast`
(:func:`~tuned.registry.launchers.launcher_definition`), as the loader reads entries.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from tuned.registry.kernel_sources import MAX_SOURCE_BYTES, locate_launcher
from tuned.registry.launchers import launcher_definition, returns_nothing
from tuned.registry.problems import Problems
from tuned.registry.source import outline_module

__all__ = ["SourceSignature", "object_params", "signature_from_source", "tested_params"]

#: Annotations ``infer_inputs`` tells apart, by the name written in the source.
_ANNOTATIONS: dict[str, object] = {"int": int, "float": float, "bool": bool, "str": str}


@dataclass(frozen=True)
class SourceSignature:
    """What ``registry add`` needs of a launcher, read from its module's source."""

    params: tuple[inspect.Parameter, ...]  # the inputs' parameters (``ctx``/``self`` left out)
    returns_nothing: bool
    flags: frozenset[str]  # parameters tested as conditions (:func:`tested_params`)
    objects: Mapping[str, str]  # parameters read as objects (:func:`object_params`)


def tested_params(fn: ast.FunctionDef) -> frozenset[str]:
    """The parameters of ``fn`` it tests as conditions, directly (``if causal:``, ``3 if causal
    else 1``, ``not causal``, ``causal and ...``, ``assert causal``): flags, never tensors."""
    names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    tests: list[ast.expr] = []
    for node in ast.walk(fn):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.BoolOp):
            tests.extend(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tests.append(node.operand)
    return frozenset(t.id for t in tests if isinstance(t, ast.Name) and t.id in names)


def object_params(fn: ast.FunctionDef) -> dict[str, str]:
    """The parameters of ``fn`` it reads an attribute of that ``torch.Tensor`` lacks, with
    the first such attribute: ``fast_rms_layernorm(layernorm, X)`` reads
    ``layernorm.weight``, a module, never a tensor make_inputs can draw."""
    import torch

    names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    found: dict[str, str] = {}
    reads = [n for n in ast.walk(fn) if isinstance(n, ast.Attribute)]
    for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):  # the first in source
        if (
            isinstance(node.value, ast.Name)
            and node.value.id in names
            and not hasattr(torch.Tensor, node.attr)
        ):
            found.setdefault(node.value.id, node.attr)
    return found


def _annotation(node: ast.expr | None) -> object:
    if isinstance(node, ast.Name):
        return _ANNOTATIONS.get(node.id, inspect.Parameter.empty)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _ANNOTATIONS.get(node.value, inspect.Parameter.empty)
    return inspect.Parameter.empty


def _default(node: ast.expr | None) -> object:
    """The literal default, or a placeholder for one that is computed (it has one either way)."""
    if node is None:
        return inspect.Parameter.empty
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)


def _parameters(fn: ast.FunctionDef, skip: int) -> list[inspect.Parameter]:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    out: list[inspect.Parameter] = []
    for i, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY
            if i < len(args.posonlyargs)
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        out.append(inspect.Parameter(arg.arg, kind, default=_default(default)))
        out[-1] = out[-1].replace(annotation=_annotation(arg.annotation))
    if args.vararg is not None:
        out.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(
            inspect.Parameter(
                arg.arg,
                inspect.Parameter.KEYWORD_ONLY,
                default=_default(kw_default),
                annotation=_annotation(arg.annotation),
            )
        )
    if args.kwarg is not None:
        out.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return out[skip:]


def signature_from_source(dotted: str) -> SourceSignature | None:
    """The signature of the launcher at ``dotted`` read from its module file on the import
    path, or None: no module file, unreadable, or the path does not name a ``def``, an
    autograd Function's ``apply``, a method or a class with ``forward`` in it."""
    located = locate_launcher(dotted)
    if located is None:
        return None
    _, qualname, path = located
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    outline = outline_module(source, path, Problems(path))
    if outline is None:
        return None
    fn, skip = launcher_definition(source, outline, qualname)
    if fn is None:
        return None
    return SourceSignature(
        params=tuple(_parameters(fn, skip)),
        returns_nothing=returns_nothing(fn),
        flags=tested_params(fn),
        objects=object_params(fn),
    )
