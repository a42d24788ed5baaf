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
import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from tuned.registry.kernel_sources import located_source, module_functions, only_raises
from tuned.registry.launchers import launcher_definition, returned_parameters, returns_nothing
from tuned.registry.problems import Problems
from tuned.registry.source import outline_module

__all__ = [
    "ShapeRead",
    "SourceSignature",
    "axis_params",
    "object_params",
    "shape_reads",
    "signature_from_source",
    "tested_params",
]

#: Annotations ``infer_inputs`` tells apart, by the name written in the source.
_ANNOTATIONS: dict[str, object] = {"int": int, "float": float, "bool": bool, "str": str}


@dataclass(frozen=True)
class SourceSignature:
    """What ``registry add`` needs of a launcher, read from its module's source."""

    params: tuple[inspect.Parameter, ...]  # the inputs' parameters (``ctx``/``self`` left out)
    returns_nothing: bool
    returned: tuple[str, ...]  # parameters every return gives back (:func:`returned_parameters`)
    flags: frozenset[str]  # parameters tested as conditions (:func:`tested_params`)
    objects: Mapping[str, str]  # parameters read as objects (:func:`object_params`)
    shapes: Mapping[str, ShapeRead]  # how parameters' shapes are read (:func:`shape_reads`)
    sizes: frozenset[str] = frozenset()  # parameters passed as sizes (:func:`size_params`)
    #: parameters used as axes, and whether each is a list of them (:func:`axis_params`)
    axes: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    stand_in: bool = False  # the def only raises (:func:`~.kernel_sources.only_raises`)


#: Tensor factories whose positional arguments are sizes (``torch.randn(M, K)``), and
#: ``torch.full``'s first; ``x.new_zeros(n)`` too.
_FACTORIES = frozenset({"empty", "zeros", "ones", "rand", "randn", "arange"})


def size_params(fn: ast.FunctionDef) -> frozenset[str]:
    """The parameters of ``fn`` it passes as sizes: to a tensor factory (``torch.randn(M, K,
    device=...)``, ``torch.zeros((M, N))``, ``torch.full((n,), 0.0)``, ``x.new_empty(n)``),
    to ``range`` or to ``triton.cdiv``: integers, never tensors (TritonBench-G's
    ``batched_vecmat(M, N, K, ...)`` got ``K`` drawn as a tensor, which ``torch.randn``
    refused on the device)."""
    names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    found: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        factory = last.removeprefix("new_")
        if factory in _FACTORIES or last in ("range", "cdiv"):
            args: list[ast.expr] = list(node.args)
        elif factory == "full":
            args = list(node.args[:1])
        else:
            continue
        args += [k.value for k in node.keywords if k.arg == "size"]
        for arg in args:
            for item in arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]:
                if isinstance(item, ast.Name) and item.id in names:
                    found.add(item.id)
    return frozenset(found)


def axis_params(fn: ast.FunctionDef) -> dict[str, bool]:
    """The parameters of ``fn`` named ``dim`` or ``axis`` that it uses as an axis: to index a
    shape or a stride (``x.shape[dim]``, ``x.size(dim)``, ``x.stride(dim)``), reduced modulo
    the rank (``dim % x.ndim``, ``dim % x.dim()``) or passed on as one (``dim=dim``): an axis,
    never a tensor, nor a size only production knows (FlagGems' ``softmax(self, dim)`` loops
    ``for i in range(dim)`` over the leading axes; ``index_select(inp, dim, index)`` got
    ``dim`` drawn as a tensor). Each with whether it is a list of axes: iterated, each item
    used so (``[d % x.ndim for d in dim]``, FlagGems' ``mean_dim(x, dim)``)."""
    names = {
        a.arg
        for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        if a.arg.lower() in ("dim", "axis")
    }
    items: dict[str, str] = {}  # a loop variable over one of them -> that parameter
    for node in ast.walk(fn):
        loops: list[ast.For | ast.comprehension] = [node] if isinstance(node, ast.For) else []
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            loops += node.generators
        for loop in loops:
            if (
                isinstance(loop.iter, ast.Name)
                and loop.iter.id in names
                and isinstance(loop.target, ast.Name)
            ):
                items[loop.target.id] = loop.iter.id
    found: dict[str, bool] = {}

    def use(node: ast.expr) -> None:
        if isinstance(node, ast.Name) and node.id in names:
            found.setdefault(node.id, False)
        elif isinstance(node, ast.Name) and node.id in items:
            found[items[node.id]] = True

    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "shape":
                use(node.slice)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("size", "stride"):
                for arg in node.args[:1]:
                    use(arg)
            for k in node.keywords:
                if (
                    k.arg in ("dim", "axis")
                    and isinstance(k.value, ast.Name)
                    and k.value.id in names
                ):
                    found.setdefault(k.value.id, False)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            rank = node.right
            if isinstance(rank, ast.Call):
                rank = rank.func
            if isinstance(rank, ast.Attribute) and rank.attr in ("ndim", "dim"):
                use(node.left)
    return found


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


@dataclass(frozen=True)
class ShapeRead:
    """How a launcher reads a tensor parameter's shape, in its own statements (not under an
    ``if``, a loop or a ``try``, where another rank may be meant): at least ``rank``
    dimensions, and the names it unpacks them into (``B, H, L, D = q.shape``), None per
    position that is not a plain name, or no names when it does not unpack."""

    rank: int
    names: tuple[str | None, ...]
    line: int
    text: str  # the statement, for the note
    #: Parameters an ``assert p.shape == q.shape`` says have this one's shape.
    same_as: tuple[str, ...] = ()
    #: Unpacked whole (``B, H, T = s.shape``): exactly ``rank`` dimensions, not at least.
    exact: bool = False


def shape_reads(fn: ast.FunctionDef) -> dict[str, ShapeRead]:
    """The parameters of ``fn`` whose rank its top-level statements show: unpacking
    ``p.shape`` / ``p.size()`` (exactly that many dimensions), or ``p.shape[i]``,
    ``p.size(i)``, ``p.stride(i)`` with a literal ``i >= 0`` (at least ``i + 1``). Real
    launchers read ``q.shape`` as 4-D while ``registry add`` drew every tensor with the
    ``--shape`` given, 2-D in a new user's first try: the original then failed on
    "not enough values to unpack" (99 of TritonBench-G's 159 valid entries)."""
    names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args]}
    found: dict[str, ShapeRead] = {}
    #: parameter -> dimension -> (the name a statement binds it to, its line, its text)
    named: dict[str, dict[int, tuple[str, int, str]]] = {}

    def shape_of(node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr == "shape":
            base = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "size"
            and not node.args
        ):
            base = node.func.value
        else:
            return None
        return base.id if isinstance(base, ast.Name) and base.id in names else None

    def indexed(node: ast.AST) -> tuple[str, int] | None:
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            owner, index = shape_of(node.value), node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("size", "stride")
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names
        ):
            owner, index = node.func.value.id, node.args[0].value
        else:
            return None
        if owner is None or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return None
        return owner, index

    for stmt in fn.body:
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.Try, ast.With, ast.FunctionDef)):
            continue
        text = ast.unparse(stmt)
        text = text if len(text) <= 60 else f"{text[:57]}..."
        if (  # assert q.shape == k.shape == g.shape: flash-linear-attention's gate `g`
            isinstance(stmt, ast.Assert)
            and isinstance(stmt.test, ast.Compare)
            and all(isinstance(op, ast.Eq) for op in stmt.test.ops)
        ):
            group = [shape_of(e) for e in [stmt.test.left, *stmt.test.comparators]]
            members = {g for g in group if g is not None}
            if None not in group and len(members) > 1:
                for member in members:
                    was = found.get(member) or ShapeRead(1, (), stmt.lineno, text)
                    same = tuple(sorted({*was.same_as, *(members - {member})}))
                    found[member] = dataclasses.replace(was, same_as=same)
                continue
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (ast.Tuple, ast.List))
            and (owner := shape_of(stmt.value)) is not None
            and not any(isinstance(e, ast.Starred) for e in stmt.targets[0].elts)
        ):
            unpacked = tuple(
                e.id if isinstance(e, ast.Name) and e.id != "_" else None
                for e in stmt.targets[0].elts
            )
            read = ShapeRead(len(unpacked), unpacked, stmt.lineno, text, exact=True)
            prior = found.get(owner)
            if prior is None or not prior.names:  # (an assertion only gave its peers)
                found[owner] = dataclasses.replace(read, same_as=prior.same_as if prior else ())
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            # `M = x.shape[0]`, `M, K, N = x.shape[0], x.shape[1], w.shape[1]`: which name
            # each dimension gets (gemlite's GEMM; drawn 3-D from a three-name --shape)
            target, value = stmt.targets[0], stmt.value
            pairs = [(target, value)]
            if (
                isinstance(target, (ast.Tuple, ast.List))
                and isinstance(value, ast.Tuple)
                and len(target.elts) == len(value.elts)
            ):
                pairs = list(zip(target.elts, value.elts))
            for t, v in pairs:
                hit = indexed(v)
                if isinstance(t, ast.Name) and hit is not None:
                    named.setdefault(hit[0], {}).setdefault(hit[1], (t.id, stmt.lineno, text))
        for node in ast.walk(stmt):
            hit = indexed(node)
            if hit is not None:
                name, index = hit
                seen = found.get(name)
                if seen is None or (not seen.names and seen.rank < index + 1):
                    same = seen.same_as if seen else ()
                    found[name] = ShapeRead(index + 1, (), stmt.lineno, text, same)
    for owner, dims in named.items():  # every dimension up to the last read named: those
        seen = found.get(owner)
        if seen is None or seen.names or sorted(dims) != list(range(seen.rank)):
            continue
        first = dims[0]
        found[owner] = dataclasses.replace(
            seen, names=tuple(dims[i][0] for i in range(seen.rank)), line=first[1], text=first[2]
        )
    for owner, seen in list(found.items()):  # `assert x.shape == y.shape` then `N =
        if seen.names or seen.exact:  # x.shape[0]`: y is read as x is (FlagGems' dot;
            continue  # y was drawn with every dimension of the shape, x 1-D)
        peer = next((found[p] for p in seen.same_as if p in found and found[p].names), None)
        if peer is not None:
            found[owner] = dataclasses.replace(peer, same_as=seen.same_as)
    return found


def object_params(fn: ast.FunctionDef) -> dict[str, str]:
    """The parameters of ``fn`` it reads an attribute of that ``torch.Tensor`` lacks, with
    the first such attribute: ``fast_rms_layernorm(layernorm, X)`` reads
    ``layernorm.weight``, a module, never a tensor make_inputs can draw."""
    import torch

    names = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    # Reads under `if isinstance(X, DTensor): X = X.full_tensor()` (Liger's tensor-parallel
    # path) are of another type's attribute, taken only when X is one: X may still be a tensor.
    guarded: set[tuple[int, str]] = set()
    for branch in ast.walk(fn):
        if isinstance(branch, ast.If):
            tests = [v for n in ast.walk(branch.test) for v in _isinstance_of(n)]
            for inner in (n for part in [branch.test, *branch.body] for n in ast.walk(part)):
                guarded.update((id(inner), name) for name in tests)
    found: dict[str, str] = {}
    reads = [n for n in ast.walk(fn) if isinstance(n, ast.Attribute)]
    for node in sorted(reads, key=lambda n: (n.lineno, n.col_offset)):  # the first in source
        if (
            isinstance(node.value, ast.Name)
            and node.value.id in names
            and not hasattr(torch.Tensor, node.attr)
            and (id(node), node.value.id) not in guarded
        ):
            found.setdefault(node.value.id, node.attr)
    return found


def _isinstance_of(node: ast.AST) -> list[str]:
    """``[X]`` for ``isinstance(X, ...)``, else ``[]``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and node.args
        and isinstance(node.args[0], ast.Name)
    ):
        return [node.args[0].id]
    return []


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
    found = located_source(dotted)
    if found is None:
        return None
    _, qualname, path, source = found
    outline = outline_module(source, path, Problems(path))
    if outline is None:
        return None
    fn, skip = launcher_definition(source, outline, qualname)
    if fn is None and "." not in qualname:  # a def inside a top-level `if has_triton():`
        fn = module_functions(ast.parse(source)).get(qualname)
    if fn is None:
        return None
    return SourceSignature(
        params=tuple(_parameters(fn, skip)),
        returns_nothing=returns_nothing(fn),
        returned=tuple(returned_parameters(fn)),
        flags=tested_params(fn),
        objects=object_params(fn),
        shapes=shape_reads(fn),
        sizes=size_params(fn),
        axes=axis_params(fn),
        stand_in=only_raises(fn),
    )
