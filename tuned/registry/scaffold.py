"""``ktuned registry add``: an entry for a function that already exists, in one command.

Given a dotted path (``package.module.function``, ``package.module.SomeFunction.apply``, a
method, an ``nn.Module`` class), shapes and dtypes, :func:`add_entry` writes a directory with
``kernel.yaml`` and ``entry.py``:

- ``launcher`` is the dotted path itself (the code is used as it is, never copied);
- no ``reference``: the original, at its own defaults, is the reference;
- no ``knobs``: discovery finds them (``ktuned registry check`` prints the space);
- ``inputs: make_inputs`` in ``entry.py``, generated from the launcher's signature: every
  parameter without a default becomes an input, made by its name (a tensor of the shape's
  dimensions in the given order, 1-D of the last dimension for weights and biases, the size
  for a parameter named after a dimension, a small float for ``eps``, integer indices into the
  last dimension, one per row, for labels and ids such as ``target``; for quantization code,
  scales such as ``absmax`` in floating point whatever the entry's dtype, a ``dtype`` argument
  the entry's floating dtype or float32, and a buffer named ``out`` or ``*_out`` zeros of that
  dtype, declared under ``outputs:`` when the launcher returns nothing; so are the arguments
  its kernels store into, :mod:`tuned.registry.stored_outputs`). A parameter it cannot
  read makes ``make_inputs`` a stub that raises ``NotImplementedError("TODO ...")``, which
  ``ktuned registry check`` reports until it is written.

Unlike the loader, this imports the target (the user asked for it, on their own code): the
signature is read with :mod:`inspect`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuned.errors import BadInputError
from tuned.registry.discovery import knob_rule, launches_knobs
from tuned.registry.kernel_sources import only_raises
from tuned.registry.scaffold_source import (
    ShapeRead,
    axis_params,
    object_params,
    shape_reads,
    signature_from_source,
    size_params,
    tested_params,
)
from tuned.registry.validate import canonical_dtype

__all__ = ["AddedEntry", "add_entry", "infer_inputs", "parse_shape"]

STUB_MARK = "TODO(ktuned registry add)"
_WEIGHT = re.compile(r"^(w|weight|weights|gamma|beta|bias|b|alpha|scale|shift|g)(_.*)?$", re.I)
#: One-letter names that are a weight only where the signature has no spelled-out one:
#: flash-linear-attention's ``rms_norm_gated(x, g, weight, bias)`` takes ``g`` as the gate
#: (the input's shape), not as gamma; drawn 1-D, the kernel read past it.
_ALIASES = {"g": ("weight", "weights", "gamma"), "w": ("weight", "weights"), "b": ("bias", "beta")}
_EPS = re.compile(r"eps|epsilon", re.I)
#: Parameters that hold indices into the last dimension (class labels, token ids): integers.
_INDEX = re.compile(
    r"^(target|targets|label|labels|index|indices|idx|ids|input_ids|token_ids|class_ids)$"
    r"|_(labels?|targets?)$",  # Liger's JSD `shift_labels` (read as a weight, `shift`: 1-D of V)
    re.I,
)
#: A shape argument, as torch.nn.functional.layer_norm's: a tuple of the last dimension.
_SHAPE = re.compile(r"^normalized_shape$")
#: Scalars by name: a softmax scale (attention's ``sm_scale``), a temperature, a probability.
_SCALAR = re.compile(
    r"^((sm|softmax|qk|attn)_scale|scaling|temperature|softcap|dropout_p|p_drop(out)?)$", re.I
)
#: Scalars whose usual value is known (a softmax scale is 1/sqrt of the head dimension, an
#: optimizer's betas 0.9 and 0.999): make_inputs passes it, with a comment, instead of a
#: TODO. Such a value changes the math, not the speed a candidate is timed at.
_KNOWN_SCALARS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^((sm|softmax|qk|attn)_scale|scaling)$", re.I), "1.0 / {last} ** 0.5"),
    (re.compile(r"^temperature$", re.I), "1.0"),
    (re.compile(r"^(dropout_p|p_drop(out)?)$", re.I), "0.0"),
    (re.compile(r"^(lr|learning_rate)$", re.I), "1e-3"),
    (re.compile(r"^beta_?1$", re.I), "0.9"),
    (re.compile(r"^beta_?2$", re.I), "0.999"),
    (re.compile(r"^(wd|weight_decay)$", re.I), "1e-2"),
    (re.compile(r"^momentum$", re.I), "0.9"),
)
#: Quantization scales: floating point whatever the entry's dtype (an int8 entry's scales).
_SCALE = re.compile(r"(^|_)(scale|scales|absmax|amax|inv_scale)(_|$)", re.I)
#: A dtype argument (the output's): the entry's dtype when floating, else float32.
_DTYPE = re.compile(r"^(dtype|out_dtype|output_dtype|dst_dtype)$", re.I)
#: A dtype argument that names a float8 format (``fp8_dtype``): float8_e4m3fn.
_FP8 = re.compile(r"fp8|float8", re.I)
#: An integer size the caller chooses (a quantizer's block size), not a tensor.
_SIZE_ARG = re.compile(r"(block|group|chunk|tile)_?size|^(quant_)?block$", re.I)
#: A buffer the launcher writes: declared under ``outputs:`` when the launcher returns nothing.
_OUT = re.compile(r"^(out|output|result|dst)\d*$|_out$|^out_", re.I)
#: The names make_inputs binds itself (its parameters, the generator, its helpers, the
#: import): an input named like one (fla's gate ``g``) gets a variable ``g_``, or it would
#: replace the generator the inputs after it are drawn with.
_LOCALS = frozenset(
    {"shape", "dtype", "device", "seed", "g", "rand", "frand", "index", "torch", "t"}
)
#: Constructor parameters of a module that mean "the size of the last dimension".
_HIDDEN = re.compile(
    r"^(hidden(_size|_dim)?|dim|d_model|embed_dim|n_embd|num_features|normalized_shape|"
    r"in_features|size|features|head_dim)$",
    re.I,
)


@dataclass(frozen=True)
class AddedEntry:
    directory: Path
    name: str
    todo: tuple[str, ...]  # parameters make_inputs could not infer (a stub when not empty)
    note: str = ""  # the module could not be imported here: its signature was read from source


def parse_shape(text: str) -> dict[str, int]:
    """``M=4096,N=4096`` -> ``{"M": 4096, "N": 4096}``."""
    dims: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep or not name.isidentifier() or not value.strip().isdigit():
            raise BadInputError(
                f"--shape {text!r}: write dimensions as NAME=SIZE separated by commas, "
                "e.g. --shape M=4096,N=4096"
            )
        if int(value) <= 0:
            raise BadInputError(f"--shape {text!r}: {name} must be a positive size")
        dims[name] = int(value)
    return dims


class _ImportFailed(Exception):
    """The launcher's module was found but raised while it was imported."""

    def __init__(self, module: str, exc: BaseException) -> None:
        module = _raising_module(exc) or module
        super().__init__(f"importing {module} raised {type(exc).__name__}: {exc}")
        self.module = module


def _raising_module(exc: BaseException) -> str:
    """The module whose top-level code raised ``exc`` (the innermost ``<module>`` frame):
    importing ``pkg.mod.Class`` fails in ``pkg.mod``, not in a module named ``Class``."""
    name = ""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "<module>":
            name = str(frame.f_globals.get("__name__", name))
        tb = tb.tb_next
    return name


def _resolve(path: str) -> Any:
    parts = path.split(".")
    if not all(p.isidentifier() for p in parts):
        raise BadInputError(f"{path!r} is not a dotted Python path (package.module.function)")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module)
        except ImportError as exc:
            missing = exc.name or ""
            if isinstance(exc, ModuleNotFoundError) and (
                missing == module or module.startswith(f"{missing}.")
            ):
                continue  # no such module: the path's tail may be attributes
            # The module exists and its own imports failed (`from torch._C import
            # _cuda_getCurrentRawStream` on a CPU build, `triton.ops` gone in Triton 3):
            # read from its source, saying why, rather than "has no attribute".
            raise _ImportFailed(module, exc) from exc
        except Exception as exc:  # the user's module-level code raised: anything
            raise _ImportFailed(module, exc) from exc
        for part in parts[cut:]:
            if not hasattr(obj, part):
                raise BadInputError(f"{'.'.join(parts[:cut])} has no attribute {part!r} ({path})")
            obj = getattr(obj, part)
        return obj
    raise BadInputError(
        f"cannot import any module of {path!r}; install the package or run from the "
        "directory that holds it (and make it importable for the worker: installed, or on "
        "PYTHONPATH)"
    )


@dataclass(frozen=True)
class Forwarded:
    """The launcher a thin wrapper hands its arguments to (:func:`forwarded_to`)."""

    path: str  # its dotted path (``pkg.ops.Fn.apply``)
    target: Any
    #: The callee's parameters (by name) that make_inputs passes as the wrapper's defaults,
    #: where the callee's own differ or it has none (``in_place=True``; ``dim=-1``).
    pinned: Mapping[str, object]


def forwarded_to(target: Any) -> Forwarded | None:
    """The launcher a thin wrapper ``target`` hands its arguments to unchanged, ``return
    Fn.apply(x, w, eps)`` or ``return K.launch(x, w, eps)``, its own parameters in order
    (Liger's ``liger_rms_norm`` returns ``LigerRMSNormFunction.apply(X, W, eps, ...)``); a
    default of the wrapper that the callee lacks or sets otherwise is pinned (passed by
    make_inputs) when it is a plain value passed by position; None for anything else.
    Calling the callee so is calling the wrapper."""
    if not inspect.isfunction(target):
        return None
    fn = _launcher_def(target)
    body = list(fn.body) if fn is not None else []
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    call = body[0].value
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    params = list(inspect.signature(target).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None
    positional = [a.id if isinstance(a, ast.Name) else "" for a in call.args]
    keywords = {k.arg: k.value for k in call.keywords}
    if any(not isinstance(v, ast.Name) or v.id != k for k, v in keywords.items()):
        return None  # a keyword passed another value (or **kwargs)
    if positional != [p.name for p in params[: len(positional)]]:
        return None
    if sorted(keywords) != sorted(p.name for p in params[len(positional) :]):  # type: ignore[type-var]
        return None
    namespace = getattr(target, "__globals__", {})
    func, callee = call.func, None
    if isinstance(func, ast.Name):
        callee = namespace.get(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        held = namespace.get(func.value.id)
        if held is not None and (
            isinstance(held, types.ModuleType) or (func.attr == "apply" and isinstance(held, type))
        ):
            callee = getattr(held, func.attr, None)
    owner = _function_class(callee) if callee is not None else None
    if owner is not None:
        where = f"{owner.__module__}.{owner.__qualname__}.apply"
    elif inspect.isfunction(callee):
        where = f"{callee.__module__}.{callee.__qualname__}"
    else:
        return None
    if "<" in where:  # defined in a function: no importable path
        return None
    inner = _signature_params(callee)
    if len(inner) < len(params) or any(p.kind == p.VAR_POSITIONAL for p in inner):
        return None
    by_name = {p.name: p for p in inner}
    differ: list[int] = []
    for i, p in enumerate(params):
        other = inner[i] if i < len(positional) else by_name.get(p.name)
        if other is None:
            return None
        if p.default is not p.empty and not _same(p.default, other.default):
            if i >= len(positional) or not _plain(p.default):
                return None  # passed by keyword, or not a plain value: not pinned
            differ.append(i)
    if any(p.default is p.empty for p in inner[len(params) :]):
        return None
    # Positional: every default up to the last that differs is passed (its own, as a value).
    pinned = {inner[i].name: params[i].default for i in range(max(differ, default=-1) + 1)}
    pinned = {k: v for k, v in pinned.items() if v is not inspect.Parameter.empty}
    if any(knob_rule({k}, 1) is not None for k in pinned):
        return None  # a knob (BLOCK=128) is the tuner's to pass, never an input
    return Forwarded(path=where, target=callee, pinned=pinned)


def _plain(value: object) -> bool:
    """A default make_inputs can write as a literal (and compare): no ``nan`` or ``inf``,
    whose repr is no Python literal."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int, str, bytes, type(None)))


def _same(a: object, b: object) -> bool:
    """Equal defaults of plain types (anything else: not known to be the same)."""
    return type(a) is type(b) and _plain(a) and a == b


def _function_class(target: Any) -> Any:
    """The autograd Function class when ``target`` is its ``apply``, else None."""
    import torch

    owner = getattr(target, "__self__", None)
    if (
        isinstance(owner, type)
        and issubclass(owner, torch.autograd.Function)
        and getattr(target, "__name__", "") == "apply"
    ):
        return owner
    return None


def _launcher_def(target: Any) -> ast.FunctionDef | None:
    """The ``def`` that receives the inputs (an autograd Function's ``forward`` for its
    ``apply``), parsed from its source; None when the source cannot be read."""
    owner = _function_class(target)
    if owner is not None:
        target = owner.forward
    wrapped = _function_of(target)
    function = getattr(wrapped, "__func__", wrapped)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    return defs[0] if defs else None


def reads_through_calls(target: Any, fn: ast.FunctionDef, depth: int = 2) -> dict[str, ShapeRead]:
    """:func:`~tuned.registry.scaffold_source.shape_reads` of the launcher ``fn`` (``target``'s
    def), and of the functions it hands a parameter to unchanged (``_attention.apply(q, k,
    v, ...)``, ``_fwd(q, k)``), resolved in its module, ``depth`` calls deep: a wrapper that
    reads no shape itself passes its tensors to a Function whose ``forward`` unpacks
    ``B, H, L, D = q.shape``."""
    own = shape_reads(fn)
    if depth <= 0:
        return own
    wrapped = _function_of(target)
    function = getattr(wrapped, "__func__", wrapped)
    owner = _function_class(target)
    namespace = getattr(owner.forward if owner is not None else function, "__globals__", {})
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        callee = _named_object(node.func, namespace)
        if callee is None or callee is target:
            continue
        inner = _launcher_def(callee)
        if inner is None:
            continue
        theirs = reads_through_calls(callee, inner, depth - 1)
        positional = [a.arg for a in [*inner.args.posonlyargs, *inner.args.args]]
        if _function_class(callee) is not None:
            positional = positional[1:]  # forward's ctx
        passed = [(positional[i], a) for i, a in enumerate(node.args) if i < len(positional)]
        passed += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
        name = ast.unparse(node.func)
        for their, arg in passed:
            if (
                isinstance(arg, ast.Name)
                and arg.id in params
                and arg.id not in own
                and (read := theirs.get(their)) is not None
            ):
                text = (
                    f"{name}: {read.text}" if their == arg.id else f"{name}({their}): {read.text}"
                )
                own[arg.id] = ShapeRead(read.rank, read.names, read.line, text)
    return own


def _named_object(node: ast.expr, namespace: Mapping[str, Any]) -> Any:
    """The object a call's function expression (``f``, ``Cls.apply``, ``mod.f``) names in a
    module's ``namespace``, when it is a Python function or an autograd Function's ``apply``;
    else None (nothing is called or imported to find it)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in namespace:
        return None
    obj = namespace[node.id]
    for part in reversed(parts):
        obj = (
            inspect.getattr_static(obj, part, None) if part != "apply" else getattr(obj, part, None)
        )
        if obj is None:
            return None
    if isinstance(obj, staticmethod):
        obj = obj.__func__
    if inspect.isfunction(obj) or _function_class(obj) is not None:
        return obj
    return None


def _has_own_backward(target: Any) -> bool:
    """Whether ``target`` is an autograd Function's ``apply`` whose class defines ``backward``
    (rather than inheriting the one that raises): training calls it, so the entry checks it.
    Forward-only, a knob the forward saves on ``ctx`` would be tuned without its effect on the
    gradients (Triton's layer-norm tutorial keeps its forward's ``BLOCK_SIZE`` for a backward
    kernel that needs a whole row in one block)."""
    import torch

    owner = _function_class(target)
    return owner is not None and any(
        "backward" in vars(c)
        for c in owner.__mro__
        if c is not torch.autograd.Function
        and issubclass(c, torch.autograd.Function)
        and c.__module__.split(".")[0] != "torch"
    )


def _written(target: Any) -> tuple[bool, list[str]]:
    """(the launcher's source is readable and has no ``return <value>``, the parameters it
    returns as they came: the buffers it writes, as ``returned_parameters`` finds them)."""
    from tuned.registry.launchers import returned_parameters, returns_nothing

    fn = _launcher_def(target)
    if fn is None:
        return False, []
    return returns_nothing(fn), returned_parameters(fn)


def _returned_beside(target: Any) -> list[str]:
    """The parameters the launcher returns beside other values (Liger's JSD primitive:
    ``return loss, student_prob``, the gradient written into ``student_prob``)."""
    from tuned.registry.launchers import returned_parameters

    fn = _launcher_def(target)
    return [] if fn is None else returned_parameters(fn, beside=True)


def _signature_params(target: Any) -> list[inspect.Parameter]:
    """The parameters that receive inputs (``ctx``/``self`` left out)."""
    owner = _function_class(target)
    if owner is not None:
        return list(inspect.signature(owner.forward).parameters.values())[1:]
    if isinstance(target, type):
        return list(
            inspect.signature(getattr(target, "forward", target.__call__)).parameters.values()
        )[1:]
    params = list(inspect.signature(_function_of(target)).parameters.values())
    schema = getattr(getattr(target, "_opoverload", None), "_schema", None)
    if schema is not None and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return _schema_params(schema)  # a triton_op: its function is a (*args, **kwargs) shim
    return params


def _schema_params(schema: Any) -> list[inspect.Parameter]:
    """A custom op's parameters as its registered schema states them (names, ``int`` / ``float``
    / ``bool`` scalars, ``torch.dtype``, defaults). A ``ScalarType`` is a dtype: its ``type`` is
    ``int`` (how it is passed), its ``real_type`` says ``ScalarType`` (torchao's ``out_dtype``
    was asked for as "an int scalar")."""
    import torch

    kinds: dict[str, object] = {"int": int, "SymInt": int, "float": float, "bool": bool}
    kinds |= {"str": str, "ScalarType": torch.dtype}
    out = []
    for arg in schema.arguments:
        default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
        annotation = kinds.get(str(getattr(arg, "real_type", arg.type)), inspect.Parameter.empty)
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if arg.kwarg_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        out.append(inspect.Parameter(arg.name, kind, default=default, annotation=annotation))
    return out


def _function_of(target: Any) -> Any:
    """The function a ``torch.library.custom_op`` / ``triton_op`` wraps (its object's own
    signature is ``(*args, **kwargs)``), else ``target``."""
    function = getattr(target, "_init_fn", None)  # torch._library.custom_ops.CustomOpDef
    return function if callable(function) else target


def infer_inputs(
    params: Sequence[inspect.Parameter],
    dims: Mapping[str, int],
    flags: frozenset[str] = frozenset(),
    objects: Mapping[str, str] | None = None,
    reads: Mapping[str, ShapeRead] | None = None,
) -> tuple[list[str], list[str]]:
    """(lines of make_inputs' body that build each input, parameters it could not infer).
    ``flags``: parameters the launcher tests as conditions (``if causal:``), never tensors;
    ``objects``: parameters it reads an attribute of that a tensor lacks (``norm.weight``:
    :func:`~tuned.registry.scaffold_source.object_params`), with that attribute; ``reads``:
    how it reads parameters' shapes (:func:`~tuned.registry.scaffold_source.shape_reads`)."""
    lines, todo, _, _ = _plan_inputs(params, dims, flags, objects, reads)
    return lines, todo


def _plan_inputs(
    params: Sequence[inspect.Parameter],
    dims: Mapping[str, int],
    flags: frozenset[str] = frozenset(),
    objects: Mapping[str, str] | None = None,
    reads: Mapping[str, ShapeRead] | None = None,
    indexes: Mapping[str, Sequence[str]] | None = None,
    sizes: frozenset[str] = frozenset(),
    axes: Mapping[str, bool] | None = None,
    pinned: Mapping[str, object] | None = None,
    numbers: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[str], list[str], frozenset[str], list[str]]:
    """:func:`infer_inputs`, the parameters that are tensors, drawn or asked for at another
    rank (those a launcher's kernels can store into: :func:`_stored_outputs`), and the
    keyword-only ones it draws (the last inputs, passed by keyword: ``keywords:``).
    ``indexes``: parameters whose values its kernels use as positions
    (:func:`~tuned.registry.stored_outputs.indexed_inputs`), with those kernels: asked for,
    never drawn as floats; ``sizes``: parameters it passes as sizes
    (:func:`~tuned.registry.scaffold_source.size_params`): a dimension, or asked for;
    ``axes``: ``dim`` or ``axis`` parameters it uses as an axis, or as a list of them
    (:func:`~tuned.registry.scaffold_source.axis_params`): the last one; ``pinned``:
    parameters passed as these values (a thin wrapper's defaults, :class:`Forwarded`);
    ``numbers``: parameters its kernels take by value, as numbers, with those kernels
    (:func:`~tuned.registry.stored_outputs.by_value_inputs`): asked for, never drawn as
    tensors, unless the launcher reads their shape."""
    pinned = pinned or {}
    numbers = numbers or {}
    objects = objects or {}
    reads = reads or {}
    indexes = indexes or {}
    axes = axes or {}
    order = list(dims)
    full = ", ".join(f'shape["{d}"]' for d in order)
    last = f'shape["{order[-1]}"]'
    lines: list[str] = []
    todo: list[str] = []
    names: list[str] = []
    keywords: list[str] = []
    tensors: set[str] = set()
    taken = set(_LOCALS) | {p.name for p in params}
    typed = any(_DTYPE.match(p.name) or _is_dtype(p.annotation) for p in params)
    out_dtype = "dtype if dtype.is_floating_point else torch.float32" if typed else "dtype"
    outputs = written_outputs(params)
    spelled = {p.name.lower() for p in params}

    def weight(name: str) -> bool:  # 1-D of the last dimension (see _ALIASES)
        aliases = _ALIASES.get(name.lower(), ())
        read = reads.get(name)  # read as 2-D or more, or asserted to have the shape of an
        if read is not None and (  # input that is no weight: drawn as the launcher reads it
            read.rank > 1 or any(not _WEIGHT.match(o) for o in read.same_as)
        ):
            return False
        return bool(_WEIGHT.match(name)) and not spelled.intersection(aliases)

    for p in params:
        if p.kind is p.VAR_POSITIONAL and not names and not lines:
            todo.append(f"*{p.name} (the signature does not say which inputs it takes)")
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty and p.name not in pinned:
            continue  # the launcher's own default: left to it (or to knob discovery)
        lowered = p.name.lower()
        var = p.name  # the input's variable in make_inputs: never one of its own names
        while var in _LOCALS or (var != p.name and var in taken):
            var += "_"
        taken.add(var)
        if p.name in pinned:
            lines.append(f"{var} = {pinned[p.name]!r}  # the default of the wrapper registered")
        elif p.name in dims:
            lines.append(f'{var} = shape["{p.name}"]')
        elif p.name in flags:
            todo.append(f"{p.name} (a flag the launcher tests: choose the value production uses)")
            continue
        elif p.name in axes:  # x.shape[dim], dim % x.ndim: an axis of the drawn tensors
            last_axis = f"[{len(order) - 1}]" if axes[p.name] else str(len(order) - 1)
            lines.append(f"{var} = {last_axis}  # the last axis: use production's if it differs")
        elif p.name in sizes:
            todo.append(
                f"{p.name} (an integer the launcher passes as a size: the value production "
                "uses, or a dimension of --shape named so)"
            )
            continue
        elif _SHAPE.match(p.name):  # F.layer_norm's normalized_shape: the last dimension
            lines.append(f"{var} = ({last},)")
        elif p.name in objects:
            todo.append(
                f"{p.name} (an object: the launcher reads {p.name}.{objects[p.name]}, which a "
                "tensor lacks: build the value production passes)"
            )
            continue
        elif known := _known_scalar(p.name, last):
            lines.append(f"{var} = {known}  # the usual value: use production's if it differs")
        elif _SCALAR.search(p.name):
            todo.append(f"{p.name} (a scalar: choose the value production uses)")
            continue
        elif _EPS.search(lowered):
            lines.append(f"{var} = 1e-6")
        elif (_DTYPE.match(p.name) or _is_dtype(p.annotation)) and _FP8.search(p.name):
            lines.append(f"{var} = torch.float8_e4m3fn")
        elif (_DTYPE.match(p.name) and not _scalar(p.annotation)) or _is_dtype(p.annotation):
            lines.append(f"{var} = dtype if dtype.is_floating_point else torch.float32")
        elif _SIZE_ARG.search(p.name) and _scalar(p.annotation):
            todo.append(f"{p.name} (an integer size the caller chooses: the value production uses)")
            continue
        elif _scalar(p.annotation):  # annotated `int`, `float`, `bool`, `str`: never a tensor,
            # whatever its name says (gemlite's `W_nbits: int`, `channel_scale_mode: int`)
            todo.append(f"{p.name} ({_scalar(p.annotation)})")
            continue
        elif p.name in numbers and p.name not in reads:  # a kernel's scalar argument
            kernels = ", ".join(numbers[p.name])
            todo.append(
                f"{p.name} (a number: {kernels} take{'s' if len(numbers[p.name]) == 1 else ''} "
                "it by value, not as a tensor; choose the value production uses)"
            )
            continue
        elif p.name in outputs:  # written by the launcher: zeros of the output's dtype
            lines.append(f"{var} = torch.zeros({full}, dtype={out_dtype}, device=device)")
            tensors.add(p.name)
        elif _SCALE.search(p.name):
            lines.append(f"{var} = frand({last if weight(p.name) else full}).abs()")
            tensors.add(p.name)
        elif _SIZE_ARG.search(p.name):
            todo.append(f"{p.name} (an integer size the caller chooses: the value production uses)")
            continue
        elif _INDEX.search(p.name):  # one index per row, into the last dimension
            rows = ", ".join(f'shape["{d}"]' for d in order[:-1]) or last
            lines.append(f"{var} = index({rows}, high={last})")
            tensors.add(p.name)
        elif p.name in indexes:  # offsets, lengths: values only production knows
            todo.append(
                f"{p.name} (an integer tensor: {', '.join(indexes[p.name])} "
                f"use{'s' if len(indexes[p.name]) == 1 else ''} its values as positions, "
                "offsets or lengths; build the values production passes)"
            )
            continue
        elif weight(p.name):
            lines.append(f"{var} = rand({last})")
            tensors.add(p.name)
        elif _other_type(p.annotation):
            what = getattr(p.annotation, "__name__", p.annotation)
            todo.append(f"{p.name} (a {what}: build the value production passes)")
            continue
        elif p.name in reads and (drawn := _read_as(reads[p.name], order)) is not None:
            if not drawn:
                read = reads[p.name]
                has = (
                    f"--shape does not name {', '.join(_missing(read, order))}"
                    if read.rank == len(order)
                    else f"the shape has {len(order)} dimensions"
                )
                todo.append(
                    f"{p.name} (the launcher reads it as {read.rank}-D, line {read.line}: "
                    f"`{read.text}`; {has}: give --shape the dimensions it needs"
                    f"{_named(read)})"
                )
                tensors.add(p.name)  # a tensor still: what its kernels write is declared
                continue
            lines.append(f"{var} = rand({drawn})")
            tensors.add(p.name)
        else:
            lines.append(f"{var} = rand({full})")
            tensors.add(p.name)
        names.append(var)
        if p.kind is p.KEYWORD_ONLY:
            keywords.append(p.name)
    lines.append(f"return ({', '.join(names)}{',' if len(names) == 1 else ''})")
    undrawn = [
        p.name
        for p in params
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in keywords
    ]
    if undrawn:
        todo.append(
            f"keyword-only {', '.join(undrawn)}: return {'it' if len(undrawn) == 1 else 'them'}"
            f" last and list {'it' if len(undrawn) == 1 else 'them'} under `keywords:` in "
            "kernel.yaml"
        )
    return lines, todo, frozenset(tensors), keywords


def _read_as(read: ShapeRead, order: Sequence[str]) -> str | None:
    """How make_inputs draws a tensor the launcher reads as ``read``: its unpacked names in
    that order where the shape has every one (``B, H, L, D = q.shape`` with ``--shape
    B=..,H=..,L=..,D=..``); "" when the shape has fewer dimensions than it reads, or another
    number than it unpacks whole (``B, H, T = s.shape`` with a 4-D shape: "too many values
    to unpack" on the device, 8 TritonBench-G originals), or names some of the shape's
    dimensions and others it lacks (``K, N = b.shape`` with ``--shape M=..,N=..``: drawn
    ``(M, N)``, a matmul's weight fitted square shapes only) (a TODO); None to draw it with
    the shape's dimensions in order, as before (``n_rows, n_cols = x.shape``)."""
    if read.names and all(n is not None and n in order for n in read.names):
        return ", ".join(f'shape["{n}"]' for n in read.names)
    if read.rank > len(order) or (read.exact and read.rank != len(order)):
        return ""
    if read.exact and _missing(read, order) and any(n in order for n in read.names if n):
        return ""
    return None


def _missing(read: ShapeRead, order: Sequence[str]) -> list[str]:
    """The dimension names ``read`` unpacks that the shape ``order`` lacks."""
    return [n for n in read.names if n is not None and n not in order]


def _named(read: ShapeRead) -> str:
    named = [n for n in read.names if n is not None]
    return f", e.g. {','.join(f'{n}=...' for n in named)}" if len(named) == read.rank else ""


def _known_scalar(name: str, last: str) -> str:
    """The usual value of a scalar parameter named ``name`` (:data:`_KNOWN_SCALARS`) as
    make_inputs writes it (``last``: the last dimension's expression); "" when unknown."""
    for pattern, value in _KNOWN_SCALARS:
        if pattern.match(name):
            return value.format(last=last)
    return ""


def _scalar(annotation: object) -> str:
    """What make_inputs' TODO says of a parameter annotated as a Python scalar (``int``,
    ``float``, ``bool``, ``str``, or their names in a postponed annotation); "" otherwise."""
    if annotation in (int, "int"):
        return "an int scalar"
    if annotation in (float, "float"):
        return "a float scalar"
    if annotation in (bool, "bool", str, "str"):
        return "a flag or mode: choose the value production uses"
    return ""


def _is_dtype(annotation: object) -> bool:
    """``torch.dtype`` as an annotation (the object, or its string in a postponed one)."""
    return str(annotation) in ("torch.dtype", "<class 'torch.dtype'>", "dtype")


def _other_type(annotation: object) -> bool:
    """An annotation, not of a tensor: an object (``LinearMMConfig``) make_inputs cannot draw."""
    import torch

    if isinstance(annotation, type) and issubclass(annotation, torch.Tensor):
        return False
    members = typing.get_args(annotation)  # Union[torch.Tensor, StridedBuffer], Optional[...]
    if members and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(_other_type(m) for m in members if m is not type(None))
    text = str(getattr(annotation, "__name__", annotation))
    return annotation is not inspect.Parameter.empty and "Tensor" not in text


def written_outputs(params: Sequence[inspect.Parameter]) -> list[str]:
    """The required parameters named like a buffer the launcher writes (``out``,
    ``quantized_out``): its ``outputs`` when it returns nothing."""
    return [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and _OUT.search(p.name)
    ]


def _stored_outputs(
    path: str, params: Sequence[inspect.Parameter], tensors: frozenset[str]
) -> dict[str, tuple[str, ...]]:
    """Parameter -> kernels, for the launcher's parameters ``make_inputs`` draws as tensors
    (``tensors``: never a size, a flag, a scalar) that its kernels store into
    (:func:`~tuned.registry.stored_outputs.inferred_outputs`, read from the source): its
    ``outputs`` when it returns nothing, beside those named like a buffer."""
    from tuned.registry.stored_outputs import inferred_outputs

    named = set(written_outputs(params))
    return {
        name: kernels
        for name, kernels in inferred_outputs(path).items()
        if name in tensors and name not in named
    }


def infer_init(target: Any, dims: Mapping[str, int]) -> tuple[dict[str, str], list[str]]:
    """For a class launcher (an ``nn.Module``): the ``init`` mapping of its constructor's
    required parameters (a dimension's name stands for its size: ``hidden_size`` -> the last
    dimension), and the parameters it could not infer."""
    if not isinstance(target, type):
        return {}, []
    try:
        params = list(inspect.signature(target).parameters.values())  # __init__'s, no self
    except (TypeError, ValueError):
        return {}, []
    last = list(dims)[-1]
    init: dict[str, str] = {}
    todo: list[str] = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if p.name in dims:
            init[p.name] = p.name
        elif _HIDDEN.match(p.name):
            init[p.name] = last
        else:
            todo.append(f"init.{p.name} (a constructor argument: give its value under init:)")
    return init, todo


def _module_text(
    path: str,
    params: Sequence[inspect.Parameter],
    dims: Mapping[str, int],
    flags: frozenset[str] = frozenset(),
    objects: Mapping[str, str] | None = None,
    reads: Mapping[str, ShapeRead] | None = None,
) -> tuple[str, list[str]]:
    body, todo, _, keywords = _plan_inputs(params, dims, flags, objects, reads)
    return _entry_text(path, params, body, todo, keywords), todo


def _entry_text(
    path: str,
    params: Sequence[inspect.Parameter],
    body: Sequence[str],
    todo: Sequence[str],
    keywords: Sequence[str] = (),
) -> str:
    """entry.py: ``make_inputs`` with ``body`` (a stub raising with the ``todo`` if any)."""
    signature = ", ".join(p.name for p in params)
    called = (
        "launcher(*inputs)"
        if not keywords
        else f"launcher(*inputs[:-{len(keywords)}], "
        + ", ".join(f"{k}=inputs[{i - len(keywords)}]" for i, k in enumerate(keywords))
        + ") (kernel.yaml: keywords)"
    )
    head = [
        f'"""Inputs for {path}, written by `ktuned registry add`.',
        "",
        f"Its parameters: {signature}.",
        "Edit freely: inputs must be deterministic in seed (made on the device with a seeded",
        "generator: on a GPU, drawing large inputs on the CPU took seconds per case). The",
        f'launcher is called as {called}."""',
        "",
        "import torch",
        "",
        "",
        "def make_inputs(shape, dtype, device, seed):",
    ]
    if todo:
        what = "; ".join(todo)
        head.append(f'    raise NotImplementedError("{STUB_MARK}: make the inputs for {what}")')
    head += [
        "    g = torch.Generator(device=device).manual_seed(seed)",
        "",
        "    def rand(*size):",
        "        t = torch.randn(*size, generator=g, device=device)",
        "        if dtype.is_floating_point:",
        "            return t.to(dtype)",
        "        t = (t * 8).round()  # small integers; never negative for an unsigned dtype",
        "        return (t if dtype.is_signed else t.abs()).to(dtype)",
        "",
        "    def frand(*size):  # floating point whatever the entry's dtype (scales)",
        "        t = torch.randn(*size, generator=g, device=device)",
        "        return t.to(dtype if dtype.is_floating_point else torch.float32)",
        "",
        "    def index(*size, high):",
        "        return torch.randint(0, high, size, generator=g, device=device)",
        "",
    ]
    return "\n".join(head + [f"    {line}" for line in body]) + "\n"


def _entry_name(path: str) -> str:
    """The entry's directory name from the launcher's dotted path (``Fn.apply``: ``fn``)."""
    last = path.split(".")[-1 if not path.endswith(".apply") else -2]
    return re.sub(r"[^a-z0-9_-]+", "-", last.lower()).strip("-")


def add_entry(
    path: str,
    shapes: Sequence[Mapping[str, int]],
    dtypes: Sequence[str],
    out: Path,
    *,
    name: str | None = None,
) -> AddedEntry:
    """Write the entry directory ``out/NAME`` for the launcher at ``path`` (module docstring)."""
    if not shapes:
        raise BadInputError("give at least one --shape, e.g. --shape M=4096,N=4096")
    first = list(shapes[0])
    for s in shapes[1:]:
        if list(s) != first:
            raise BadInputError(f"every --shape must name the same dimensions ({', '.join(first)})")
    canon = []
    for d in dtypes or ["float16"]:
        c = canonical_dtype(d)
        if c is None:
            raise BadInputError(f"--dtype {d!r} is not a dtype ktuned knows (e.g. float16)")
        canon.append(c)
    note = ""
    asked = path  # as the user gave it (a thin wrapper's callee is registered instead)
    pins: dict[str, object] = {}  # a thin wrapper's defaults its callee lacks (Forwarded)
    try:
        target: Any = _resolve(path)
    except _ImportFailed as failed:
        read = signature_from_source(path)
        if read is None:
            raise BadInputError(
                f"{failed}; its source does not define {path.rpartition('.')[2]!r} as a "
                "function, method, autograd Function or module ktuned can read: make the "
                "module importable on this machine (module-level code that needs a GPU or "
                'runs tests belongs under `if __name__ == "__main__":`) or write the entry '
                "by hand (docs/registry.md)"
            ) from failed
        note = (
            f"{failed}; its signature was read from the source instead. The worker imports "
            "the module too: tune where that import succeeds (e.g. on the GPU machine)"
        )
    else:
        forwarded = forwarded_to(target)
        if forwarded is not None and not launches_knobs(path) and launches_knobs(forwarded.path):
            name = name or _entry_name(path)
            pinned = ", ".join(f"{k}={v!r}" for k, v in forwarded.pinned.items())
            note = (
                f"{path} passes its arguments unchanged to {forwarded.path}, whose module "
                "launches the kernels: the entry registers that launcher (kernels launched "
                "in another module are tuned through a launcher of their own module)"
                + (f"; make_inputs passes the wrapper's defaults {pinned}" if pinned else "")
            )
            path, target, pins = forwarded.path, forwarded.target, dict(forwarded.pinned)
        fn = _launcher_def(target)
        read = None
        if fn is not None and only_raises(fn):  # `else: def op(...): raise ...` was bound
            read = signature_from_source(path)
            read = None if read is None or read.stand_in else read
        if read is not None:
            note = (
                f"{path} as imported here only raises: a stand-in its module binds where a "
                "condition of its own fails on this machine (`if has_triton():`, a GPU "
                "generation); its signature was read from the definition in the source "
                "instead. The worker imports the module too: tune where that condition holds"
            )
    if read is not None:
        target, params, writes = None, list(read.params), read.returns_nothing
        returned = list(read.returned)  # an argument written in place and returned
        flags, objects, reads, sizes = read.flags, read.objects, read.shapes, read.sizes
        axes = read.axes
    else:
        params = _signature_params(target)
        writes, returned = _written(target)
        flags = tested_params(fn) if fn is not None else frozenset()
        sizes = size_params(fn) if fn is not None else frozenset()
        axes = axis_params(fn) if fn is not None else {}
        objects = object_params(fn) if fn is not None else {}
        reads = reads_through_calls(target, fn) if fn is not None else {}
    entry_name = name or _entry_name(path)
    directory = out / entry_name
    if (directory / "kernel.yaml").exists():
        raise BadInputError(f"{directory / 'kernel.yaml'} exists already; choose --name or --out")
    directory.mkdir(parents=True, exist_ok=True)
    from tuned.registry.stored_outputs import by_value_inputs, indexed_inputs

    indexes = indexed_inputs(path)
    numbers = by_value_inputs(path)
    body, todo, tensors, keywords = _plan_inputs(
        params, shapes[0], flags, objects, reads, indexes, sizes, axes, pins, numbers
    )
    (directory / "entry.py").write_text(
        _entry_text(path, params, body, todo, keywords), encoding="utf-8"
    )
    rows = []
    for i, s in enumerate(shapes):
        dims = ", ".join(f"{k}: {v}" for k, v in s.items())
        rows.append(f"  - {{{dims}{', perf: true' if i == 0 else ''}}}")
    forwarded_lines = (
        []
        if asked == path
        else textwrap.wrap(
            f"{asked} hands its arguments unchanged to {path}, the launcher registered "
            "here (its module launches the kernels).",
            width=92,
            initial_indent="# ",
            subsequent_indent="# ",
        )
    )
    yaml = [
        f"# Written by `ktuned registry add {asked}`.",
        *forwarded_lines,
        "# The launcher is used as it is; without a reference, its own outputs (at its",
        "# defaults) are the reference; without knobs, they are discovered: `ktuned",
        "# registry check` prints the space. A launcher that writes its results into",
        "# arguments needs `outputs: [NAME, ...]`; gradients: `backward: true`.",
        f"name: {entry_name}",
        "module: entry.py",
        f"launcher: {path}",
        "inputs: make_inputs",
        "shapes:",
        *rows,
        f"dtypes: [{', '.join(canon)}]",
    ]
    if keywords:
        yaml.append(f"keywords: [{', '.join(keywords)}]  # the last inputs, passed by keyword")
    init, init_todo = infer_init(target, shapes[0])
    if init:
        yaml.append("init: {" + ", ".join(f"{k}: {v}" for k, v in init.items()) + "}")
    if init_todo:
        todo += init_todo
        yaml.append("# TODO: the constructor's other required arguments, e.g. init: {name: 4}")
    if _has_own_backward(target):
        yaml += [
            "# An autograd Function: its input gradients are checked too (a knob its forward",
            "# saves for backward changes them). Without this line only the forward runs.",
            "backward: true",
        ]
    outputs = written_outputs(params) if writes else returned
    stored = _stored_outputs(path, params, tensors) if writes else {}
    if stored:
        outputs = [p.name for p in params if p.name in outputs or p.name in stored]
        by: dict[tuple[str, ...], list[str]] = {}  # q, k by _rotary_kernel
        for name, kernels in stored.items():
            by.setdefault(kernels, []).append(name)
        found = "; ".join(f"{', '.join(names)} by {', '.join(k)}" for k, names in by.items())
        yaml += textwrap.wrap(
            "The launcher returns nothing; what it writes was found from its kernels' stores "
            f"(tl.store into the argument): {found}. Check it.",
            width=92,
            initial_indent="# ",
            subsequent_indent="# ",
        )
    why = "returns nothing" if writes else "returns these arguments"
    beside = [] if (writes or returned or target is None) else _returned_beside(target)
    inplace = (
        {*_stored_outputs(path, params, tensors), *written_outputs(params)} if beside else set()
    )
    if not outputs and (written := [n for n in beside if n in inplace]):
        # The call changes an input it also returns: refused as an output sharing memory
        # with an input it changed unless declared, and declared, its return is not compared.
        outputs, why = written, "writes these in place"
        yaml += textwrap.wrap(
            f"The launcher writes {', '.join(written)} in place (its kernels store into "
            "it) and returns it beside other values: declared as the outputs, so what it "
            "writes is compared and its other return values are not. Check it.",
            width=92,
            initial_indent="# ",
            subsequent_indent="# ",
        )
    if outputs:
        yaml.append(f"outputs: [{', '.join(outputs)}]  # the launcher {why}")
    elif writes:
        todo.append("outputs (the launcher returns nothing: list the arguments it writes)")
        at = 5 + len(forwarded_lines)  # after the header comment
        yaml[at:at] = [
            "# TODO: the launcher returns nothing; name what it writes, e.g.",
            "# outputs: [out]",
        ]
    (directory / "kernel.yaml").write_text("\n".join(yaml) + "\n", encoding="utf-8")
    return AddedEntry(directory=directory, name=entry_name, todo=tuple(todo), note=note)
