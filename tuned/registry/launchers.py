"""Launchers as people write them: dotted paths and the call fields, checked without running.

``launcher``, ``reference`` and ``inputs`` are dotted paths (docs/registry.md, "Launchers"):
their first part is bound at the top level of the entry's module (a def, a class, an import,
an assignment), or it is an installed package (``liger_kernel.ops...``), found with
:func:`importlib.util.find_spec` on the top-level name only, which imports nothing. The
call fields (``outputs``, ``backward``, ``init``, ``grad_outputs``, ``keywords``) are read here
too. Where the launcher's definition is in the module (a def, ``Class.apply`` of an autograd
Function, ``Class.method``, an ``nn.Module`` class), its ``ast`` node gives the knob defaults
and the check that a launcher returning nothing declares its ``outputs``.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field

from tuned.registry.kernel_sources import alias_of
from tuned.registry.problems import Problems, show
from tuned.registry.source import ModuleOutline
from tuned.registry.spec import KnobValue
from tuned.registry.validate import is_identifier, is_int

__all__ = [
    "CALL_KEYS",
    "CallFieldValues",
    "check_call_fields",
    "check_dotted_path",
    "check_paths_bound",
    "constructor_missing",
    "launcher_definition",
    "returns_nothing",
    "stub_reason",
]

#: The top-level keys this module reads.
CALL_KEYS = ("outputs", "backward", "init", "grad_outputs", "keywords")


@dataclass(frozen=True)
class CallFieldValues:
    outputs: tuple[int | str, ...] = ()
    backward: tuple[int | str, ...] = ()
    init: Mapping[str, KnobValue] = field(default_factory=dict)
    grad_outputs: str | None = None
    keywords: tuple[str, ...] = ()


def check_dotted_path(key: str, value: object, out: Problems) -> str | None:
    """A dotted Python path (``softmax``, ``SoftmaxFunction.apply``, ``pkg.mod.func``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not all(is_identifier(p) for p in value.split(".")):
        out.add(
            key,
            "must be a Python identifier naming a function of the module, or a dotted path "
            "to one (softmax, "
            f"SoftmaxFunction.apply, package.module.function), got {show(value)}",
        )
        return None
    return value


def _positions(key: str, value: object, out: Problems) -> tuple[int | str, ...]:
    items = value if isinstance(value, list) else [value]
    found: list[int | str] = []
    for i, item in enumerate(items):
        if (is_int(item) and item >= 0) or is_identifier(item):
            found.append(item)
        else:
            out.add(
                f"{key}[{i}]" if isinstance(value, list) else key,
                "must name a launcher parameter or give an input position (0, 1, ...), "
                f"got {show(item)}",
            )
    if len(set(found)) != len(found):
        out.add(key, "lists an argument twice")
    return tuple(found)


def check_call_fields(doc: Mapping[object, object], out: Problems) -> CallFieldValues:
    """``outputs``, ``backward``, ``init`` and ``grad_outputs`` of ``kernel.yaml``."""
    outputs: tuple[int | str, ...] = ()
    if doc.get("outputs") is not None:
        outputs = _positions("outputs", doc["outputs"], out)
        if not outputs and not out.items:
            out.add("outputs", "is empty; list the arguments the launcher writes, or remove it")
    backward: tuple[int | str, ...] = ()
    raw = doc.get("backward")
    if raw is True:
        backward = ("*",)
    elif raw is not None and raw is not False:
        backward = _positions("backward", raw, out)
    init: dict[str, KnobValue] = {}
    raw = doc.get("init")
    if raw is not None:
        if not isinstance(raw, dict):
            out.add(
                "init",
                "must be a mapping of constructor argument to value (a string naming a shape "
                f"dimension is that dimension's size), e.g. {{hidden_size: N}}, got {show(raw)}",
            )
        else:
            for k, v in raw.items():
                if not is_identifier(k):
                    out.add(f"init.{k}", "is not a Python identifier")
                elif not isinstance(v, (bool, int, float, str)):
                    out.add(f"init.{k}", f"must be a number, boolean or string, got {show(v)}")
                else:
                    init[k] = v
    grad = check_dotted_path("grad_outputs", doc.get("grad_outputs"), out)
    if grad is not None and not backward:
        out.add("grad_outputs", "is only used with backward; add `backward: true` or remove it")
    return CallFieldValues(
        outputs=outputs,
        backward=backward,
        init=init,
        grad_outputs=grad,
        keywords=_keywords(doc.get("keywords"), out),
    )


def _keywords(value: object, out: Problems) -> tuple[str, ...]:
    """``keywords``: the launcher's parameters that the last inputs fill by keyword, in order
    (a keyword-only ``out0`` buffer: ``def add(x, y, *, out0)``)."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    names: list[str] = []
    for i, item in enumerate(items):
        if is_identifier(item):
            names.append(str(item))
        else:
            out.add(
                f"keywords[{i}]" if isinstance(value, list) else "keywords",
                f"must name a keyword parameter of the launcher, got {show(item)}",
            )
    if not names and not out.items:
        out.add("keywords", "is empty; list the launcher's keyword inputs, or remove it")
    if len(set(names)) != len(names):
        out.add("keywords", "lists a parameter twice")
    return tuple(names)


def check_paths_bound(
    outline: ModuleOutline,
    module: str,
    paths: Mapping[str, str | None],
    out: Problems,
    local: frozenset[str] = frozenset(),
) -> None:
    """Each dotted path's first part is bound in the module, is one of the entry's own
    modules or packages (``local``: ``helpers`` for ``helpers.py`` or ``helpers/``), or names
    an installed package."""
    for key, path in paths.items():
        if path is None:
            continue
        head = path.split(".")[0]
        if head in outline.functions or head in outline.other:
            continue
        defined = ", ".join(sorted([*outline.functions, *outline.other])) or "none"
        if "." in path and (head in local or importlib.util.find_spec(head) is not None):
            continue  # an installed package: resolved (and imported) in the worker only
        if "." in path:
            what = f"'{head}' of '{path}' is not bound in {module} nor an installed package"
        else:
            what = f"no top-level function '{path}' in {module} (top-level names: {defined})"
        out.add(
            key,
            f"{what}; define or import it there, or write the full dotted path of an "
            "installed module",
        )


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}


def launcher_definition(
    source: str, outline: ModuleOutline, path: str, _depth: int = 0
) -> tuple[ast.FunctionDef | None, int]:
    """The ``def`` that receives the inputs and knobs for ``path``, and how many leading
    parameters are not inputs (``self``, ``ctx``); ``(None, 0)`` when it is not in the module.

    ``name`` is a top-level def; ``Class.apply`` of an autograd Function is ``forward`` (after
    ``ctx``); ``Class.method`` the method (after ``self``/``cls`` unless a staticmethod); a class
    (an ``nn.Module``) its ``forward`` (after ``self``); a top-level alias (``matmul =
    _matmul.apply``) what it names.
    """
    parts = path.split(".")
    if len(parts) == 1 and parts[0] in outline.functions:
        return outline.functions[parts[0]], 0
    if len(parts) > 2:
        return None, 0
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, 0
    alias = alias_of(tree, path) if len(parts) == 1 else None
    if alias is not None and _depth < 4:  # matmul = _matmul.apply
        return launcher_definition(source, outline, alias, _depth + 1)
    cls = _classes(tree).get(parts[0])
    if cls is None:
        return None, 0
    methods = {s.name: s for s in cls.body if isinstance(s, ast.FunctionDef)}
    name = "forward" if len(parts) == 1 or parts[1] == "apply" else parts[1]
    method = methods.get(name)
    if method is None:
        return None, 0
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in method.decorator_list)
    if name == "forward" and len(parts) == 2:  # autograd Function: forward(ctx, ...)
        return method, 1
    return method, 0 if static else 1


def constructor_missing(
    source: str, path: str, given: Mapping[str, object]
) -> tuple[int, list[str]]:
    """For a launcher ``path`` that names a class of ``source`` (an ``nn.Module``): the line of
    its ``__init__`` and the required parameters of it that ``given`` (``init`` and the knobs)
    leaves out; ``(0, [])`` for anything else, or a class without an ``__init__`` of its own.

    The worker builds the instance as ``Class(**init, **knobs)``: a required argument missing
    there fails every evaluation, the original's first, with a ``TypeError`` raised inside
    ktuned; said here, it is an entry problem before anything runs.
    """
    if "." in path:
        return 0, []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0, []
    cls = _classes(tree).get(path)
    init = (
        None
        if cls is None
        else next(
            (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
        )
    )
    if init is None:
        return 0, []
    positional = [*init.args.posonlyargs, *init.args.args]
    required = positional[: len(positional) - len(init.args.defaults)][1:]  # not self
    required += [
        a for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True) if d is None
    ]
    return init.lineno, [a.arg for a in required if a.arg not in given]


def returns_nothing(fn: ast.FunctionDef) -> bool:
    """True when ``fn`` has no ``return <value>`` and no ``yield`` (nested defs left out)."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        value = node.value if isinstance(node, ast.Return) else None
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            return False
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return False
        stack.extend(ast.iter_child_nodes(node))
    return True


def returned_parameters(fn: ast.FunctionDef, *, beside: bool = False) -> list[str]:
    """The parameters without a default that every ``return`` of ``fn`` gives back, in order
    (``return quantized_out, absmax``: buffers the launcher writes and returns); empty when a
    return gives anything else, a parameter is rebound, or the returns disagree. With
    ``beside``, those it gives back beside other values too (``return loss, student_prob``)."""
    args = [*fn.args.posonlyargs, *fn.args.args]
    required = {a.arg for a in args[: len(args) - len(fn.args.defaults)]}
    required |= {  # keyword-only without a default (FlagGems' ``*, out0``)
        a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is None
    }
    found: list[list[str]] = []
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            required.discard(node.id)  # rebound: no longer the caller's buffer
        if isinstance(node, ast.Return):
            value = node.value
            elts = value.elts if isinstance(value, ast.Tuple) else [value]
            found.append([e.id if isinstance(e, ast.Name) else "" for e in elts])
        stack.extend(ast.iter_child_nodes(node))
    if not found or any(f != found[0] for f in found):
        return []
    if beside:
        return [name for name in found[0] if name in required]
    return found[0] if all(name in required for name in found[0]) else []


def stub_reason(fn: ast.FunctionDef) -> str | None:
    """The message of a top-level ``raise NotImplementedError("TODO ...")`` in ``fn`` (a stub
    ``ktuned registry add`` wrote for what it could not infer), else None."""
    for node in fn.body:
        if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
            continue
        call = node.exc
        if isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError":
            args = [a.value for a in call.args if isinstance(a, ast.Constant)]
            text = str(args[0]) if args else ""
            if "TODO" in text:
                return text
    return None
