"""Which arguments a launcher that returns nothing writes, read from its kernels' stores.

Real Triton launchers often return nothing and write their results into arguments whose
names say nothing of it: ``context_attention_fwd(q, k, v, o, ...)`` writes ``o``,
``rotary_emb_fwd(q, k, cos, sin)`` rotates ``q`` and ``k`` in place. ``ktuned registry add``
declares those arguments as the entry's ``outputs`` when the syntax trees show it; nothing is
imported or executed:

- in each ``@triton.jit`` kernel the launcher launches (``k[grid](...)``, in the launcher and
  in the module's functions, autograd Functions and static methods it calls, as
  :func:`~tuned.registry.call_graph.reachable` follows them), the parameters a pointer given
  to ``tl.store`` / ``tl.atomic_*`` points into: the parameter itself, pointer arithmetic on
  it (``Out + offs``, through the kernel's local variables, ``o_ptrs = Out + offs``),
  ``tl.make_block_ptr(base=P, ...)`` / ``tl.advance``, a tensor descriptor's ``store``, and
  the same inside the module's ``@triton.jit`` helpers the kernel passes the pointer to;
- those kernel parameters mapped back to the launch's arguments, and an argument that is a
  launcher parameter, directly or through a view of it (``o.view(-1, d)``, ``q.contiguous()``,
  ``x[:, 0]``, ``p.data``, or a local variable bound to one of these), makes that parameter
  an output.

It is conservative on purpose: pointer arithmetic counts only its left-most pointer (``Out +
offs``: never an index loaded from another tensor), a value read with ``tl.load`` is never a
pointer, a ``tl.constexpr`` never one, and a tensor the launcher allocates itself
(``o = torch.empty_like(q)``) is not the caller's buffer. What it cannot see (kernels launched
from another module's functions, a pointer loaded from memory) it leaves out: ``registry add``
then writes the TODO it always wrote.

The same walk finds the arguments whose *values* the kernels use as positions
(:func:`indexed_inputs`): a value ``tl.load`` reads from a parameter (``start =
tl.load(B_Start_Loc + b)``), or anything computed from it, that ends up in a pointer
expression of a load or store (``Q + (start + offs) * stride``), in a block pointer's shape or
offsets, or in a loop's bounds (``range(0, seq_len, BLOCK)``). Such an argument is an integer
tensor of offsets, lengths or indices (vLLM- and LightLLM-style attention, KV-cache copies,
embeddings): ``registry add`` asks for its values instead of drawing floats, which Triton
refuses in pointer arithmetic ("invalid operands of type pointer<fp32> and float32").

And the arguments the kernels take by value, as numbers (:func:`by_value_inputs`): a kernel
parameter that is used, not ``tl.constexpr``, never memory (no load, store, atomic, block
pointer or descriptor of it, through its jit helpers too), no attribute of it read and passed
to no unknown call: a dropout's ``p``, a ``seed``, a ``sliding_window``. Drawn as a tensor,
the kernel would get a pointer where it computes with a number; ``registry add`` asks for it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tuned.registry.call_graph import CALL_DEPTH
from tuned.registry.kernel_facts import is_constexpr, is_jit
from tuned.registry.kernel_sources import (
    dotted_name,
    imported_kernels,
    launched_name,
    launcher_functions,
    located_source,
    module_functions,
)

__all__ = ["by_value_inputs", "indexed_inputs", "inferred_outputs", "stored_outputs"]

#: What a name may point into: parameter names (of the kernel or of the launcher).
_Env = dict[str, frozenset[str]]
_NONE: frozenset[str] = frozenset()

#: Tensor methods whose result shares the caller's memory (``contiguous``/``reshape``: when the
#: input already is, as ``make_inputs``' fresh tensors are), so a kernel writing it writes the
#: argument.
ALIAS_METHODS = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "contiguous",
        "flatten",
        "unflatten",
        "squeeze",
        "unsqueeze",
        "transpose",
        "permute",
        "t",
        "narrow",
        "select",
        "detach",
        "as_strided",
    }
)
#: Attributes that are the same memory (``p.data``, ``x.T``).
_ALIAS_ATTRIBUTES = frozenset({"data", "T", "mT"})
#: Triton calls whose result points where their first argument (or ``base``) points.
_POINTER_CALLS = frozenset(
    {
        "make_block_ptr",
        "advance",
        "multiple_of",
        "max_contiguous",
        "max_constancy",
        "make_tensor_descriptor",
        "_experimental_make_tensor_descriptor",
    }
)
_POINTER_KEYWORDS = ("base", "input", "pointer", "ptr")
#: The names ``triton.language`` goes by in kernels (``tl.store``).
_LANGUAGE = frozenset({"tl", "triton.language", "language"})


def _first_argument(call: ast.Call, keywords: Sequence[str]) -> ast.expr | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in keywords), None)


def _bind(target: ast.expr, value: ast.expr, env: _Env, derived: _Derived) -> None:
    """Bind ``target = value`` in ``env`` (tuples element by element when both are tuples)."""
    if isinstance(target, ast.Name):
        env[target.id] = derived(value, env)
    elif isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                _bind(t, v, env, derived)
        else:
            for t in target.elts:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name):
                        env[name.id] = derived(value, env)


def _merge(*envs: _Env) -> _Env:
    out: _Env = {}
    for env in envs:
        for name, points in env.items():
            out[name] = out.get(name, _NONE) | points
    return out


_Derived = Callable[[ast.expr, _Env], frozenset[str]]
_Visit = Callable[[ast.Call, _Env], None]


def _calls(node: ast.AST) -> list[ast.Call]:
    """The calls in an expression, lambdas' bodies left out (a grid function is not run here)."""
    out: list[ast.Call] = []
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Call):
            out.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return out


def _flow(stmts: Sequence[ast.stmt], env: _Env, derived: _Derived, visit: _Visit) -> _Env:
    """Walk ``stmts`` in order: each call is visited with what every name may point into at
    that point; an assignment rebinds its name (``o = torch.empty_like(q)``: no longer the
    argument ``o``); the branches of an ``if`` merge, a loop's body runs twice (what its
    second pass sees: a pointer advanced in the first)."""
    for stmt in stmts:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # a nested def (a grid function): not run by this body
        if isinstance(stmt, ast.If):
            for call in _calls(stmt.test):
                visit(call, env)
            env = _merge(
                _flow(stmt.body, dict(env), derived, visit),
                _flow(stmt.orelse, dict(env), derived, visit),
            )
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            head = stmt.test if isinstance(stmt, ast.While) else stmt.iter
            for call in _calls(head):
                visit(call, env)
            inner = dict(env)
            if not isinstance(stmt, ast.While):
                for name in ast.walk(stmt.target):
                    if isinstance(name, ast.Name):
                        inner[name.id] = _NONE
            once = _flow(stmt.body, inner, derived, visit)
            twice = _flow(stmt.body, _merge(inner, once), derived, visit)
            env = _flow(stmt.orelse, _merge(env, twice), derived, visit)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                for call in _calls(item.context_expr):
                    visit(call, env)
            env = _flow(stmt.body, env, derived, visit)
        elif isinstance(stmt, ast.Try):
            body = _flow([*stmt.body, *stmt.orelse], dict(env), derived, visit)
            handlers = [_flow(h.body, dict(env), derived, visit) for h in stmt.handlers]
            env = _flow(stmt.finalbody, _merge(body, *handlers), derived, visit)
        else:
            for call in _calls(stmt):
                visit(call, env)
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    _bind(target, stmt.value, env, derived)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                _bind(stmt.target, stmt.value, env, derived)
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                grown = ast.BinOp(left=ast.Name(id=stmt.target.id), op=stmt.op, right=stmt.value)
                env[stmt.target.id] = derived(grown, env)
    return env


def _arguments(
    call: ast.Call, params: Sequence[str], wanted: Collection[str]
) -> list[tuple[str, ast.expr]]:
    """(parameter, argument) of each argument of ``call`` that binds one of the parameters
    ``wanted`` (of ``params``, in order: positional, then keywords); none after a ``*args``."""
    out: list[tuple[str, ast.expr]] = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(params) and params[i] in wanted:
            out.append((params[i], arg))
    out += [(k.arg, k.value) for k in call.keywords if k.arg is not None and k.arg in wanted]
    return out


def _positional(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]


@dataclass
class _KernelFacts:
    """The parameters of the module's ``@triton.jit`` functions that something holds of,
    found by walking each kernel (:func:`_flow`) and the module's jit helpers it passes
    them to: what their stores write (:class:`_Stores`), whose values they use as positions
    (:class:`_Indexes`)."""

    jit: Mapping[str, ast.FunctionDef]
    found: dict[tuple[int, int], frozenset[str]] = field(default_factory=dict)

    def derive(self, node: ast.expr, env: _Env) -> frozenset[str]:
        """What a name bound to ``node`` stands for (see :func:`_flow`)."""
        return _pointee(node, env)

    def own(self, call: ast.Call, env: _Env) -> frozenset[str] | None:
        """The parameters ``call`` itself says the fact of; None for a call of no concern
        here (a jit helper's is followed)."""
        raise NotImplementedError

    def of(self, fn: ast.FunctionDef, depth: int = 0) -> frozenset[str]:
        key = (id(fn), depth)  # deeper, fewer helpers are followed
        if key in self.found:
            return self.found[key]
        self.found[key] = _NONE  # recursion: a kernel calling itself adds nothing
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        env: _Env = {a.arg: frozenset({a.arg}) for a in args if not is_constexpr(a.annotation)}
        hits: set[str] = set()

        def visit(call: ast.Call, env: _Env) -> None:
            own = self.own(call, env)
            if own is not None:
                hits.update(own)
                return
            func = call.func
            helper = self.jit.get(func.id) if isinstance(func, ast.Name) else None
            if helper is not None and helper is not fn and depth < CALL_DEPTH:
                inner = self.of(helper, depth + 1)
                for _, arg in _arguments(call, _positional(helper), inner):
                    hits.update(_pointee(arg, env))

        _flow(fn.body, env, self.derive, visit)
        self.found[key] = frozenset(hits) & set(env)
        return self.found[key]


class _Stores(_KernelFacts):
    """The parameters a kernel's stores (``tl.store``, ``tl.atomic_*``, a descriptor's
    ``store``) write."""

    def own(self, call: ast.Call, env: _Env) -> frozenset[str] | None:
        name = _callee(call)
        if not (name == "store" or name.startswith("atomic_")):
            return None
        if _is_language_call(call, (name,)):  # tl.store(pointer, value)
            pointer = _first_argument(call, ("pointer",))
            return _NONE if pointer is None else _pointee(pointer, env)
        if isinstance(call.func, ast.Attribute):  # a tensor descriptor's desc.store(...)
            return _pointee(call.func.value, env)
        return _NONE


#: Marks, in an environment, the parameter whose loaded values a name carries (``@P``).
_LOADED = "@"
#: Calls whose arguments (past a block pointer's base) are positions or bounds.
_POSITION_CALLS = frozenset({"make_block_ptr", "range", "static_range"})


def _callee(call: ast.Call) -> str:
    """The last name of what ``call`` calls (``store`` for ``tl.store``, ``desc.store``)."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_language_call(call: ast.Call, names: Collection[str]) -> bool:
    """A call of one of ``names`` from ``triton.language``: ``tl.load(...)``, or a bare
    ``load(...)`` imported from it."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr in names
        and dotted_name(func.value) in _LANGUAGE
    )


def _values(node: ast.expr, env: _Env) -> frozenset[str]:
    """What an expression may point into (a parameter ``P``, as :func:`_pointee` says) and the
    parameters whose loaded values it may carry (``@P``: a ``tl.load`` from ``P``, and any
    arithmetic, cast or call on such a value)."""
    pointers = {k: frozenset(v for v in vs if v[:1] != _LOADED) for k, vs in env.items()}
    out = set(_pointee(node, pointers))
    for sub in _value_nodes(node):
        if isinstance(sub, ast.Name):
            out.update(v for v in env.get(sub.id, _NONE) if v[:1] == _LOADED)
        elif isinstance(sub, ast.Call) and _is_language_call(sub, ("load",)):
            pointer = _first_argument(sub, ("pointer",))
            if pointer is not None:
                out.update(_LOADED + p for p in _pointee(pointer, pointers))
    return frozenset(out)


#: Calls whose result is a position chosen by comparing values, not a value used as one.
_POSITION_OF = frozenset({"argmax", "argmin"})


def _value_nodes(node: ast.expr) -> list[ast.AST]:
    """The nodes of ``node`` whose values flow into its value: not those under a comparison
    or a boolean operator (a mask, a condition: ``samp <= cum_scores``) nor an ``argmax`` /
    ``argmin`` (the position of the largest value is a position whatever the values are:
    a sampling kernel's scores are data, not indices)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Compare, ast.BoolOp, ast.Lambda)):
            continue
        if isinstance(n, ast.Call) and _callee(n) in _POSITION_OF:
            continue
        out.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return out


def _loaded_in(node: ast.expr, env: _Env) -> set[str]:
    """The parameters whose loaded values ``node`` carries."""
    return {v[1:] for v in _values(node, env) if v[:1] == _LOADED}


class _Indexes(_KernelFacts):
    """The parameters whose loaded values a kernel uses as positions (see the module
    docstring)."""

    def derive(self, node: ast.expr, env: _Env) -> frozenset[str]:
        return _values(node, env)

    def own(self, call: ast.Call, env: _Env) -> frozenset[str] | None:
        short = _callee(call)
        memory = short in ("load", "store") or short.startswith("atomic_")
        if memory and _is_language_call(call, (short,)):
            pointer = _first_argument(call, ("pointer",))
            return _NONE if pointer is None else frozenset(_loaded_in(pointer, env))
        if short in _POSITION_CALLS:  # a block pointer's shape and offsets, loop bounds
            base = _first_argument(call, _POINTER_KEYWORDS) if "ptr" in short else None
            used: set[str] = set()
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if arg is not base:
                    used.update(_loaded_in(arg, env))
            return frozenset(used)
        return None


class _Memory(_KernelFacts):
    """The parameters a kernel uses as memory: the pointer of a load, store or atomic, a
    block pointer's or descriptor's base, a descriptor's own ``load``/``store``."""

    def own(self, call: ast.Call, env: _Env) -> frozenset[str] | None:
        short = _callee(call)
        memory = short in ("load", "store") or short.startswith("atomic_")
        if memory and _is_language_call(call, (short,)):
            pointer = _first_argument(call, ("pointer",))
            return _NONE if pointer is None else _pointee(pointer, env)
        if memory and isinstance(call.func, ast.Attribute):  # desc.load(...)
            return _pointee(call.func.value, env)
        if short in _POINTER_CALLS:
            base = _first_argument(call, _POINTER_KEYWORDS)
            return _NONE if base is None else _pointee(base, env)
        return None


#: Bare calls a number may be passed to in a kernel (anything else might take a pointer).
_NUMBER_CALLS = frozenset({"min", "max", "abs", "int", "float", "range", "static_range"})


class _ByValue(_KernelFacts):
    """The parameters a kernel takes by value, as numbers: used, not ``tl.constexpr``, never
    memory (:class:`_Memory`, through its jit helpers), no attribute of theirs read
    (``X.dtype.element_ty``), never passed to a bare call other than the module's jit
    helpers and Python's number builtins. Conservative: a parameter it cannot rule out as a
    pointer is not one of them."""

    def of(self, fn: ast.FunctionDef, depth: int = 0) -> frozenset[str]:
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        params = {a.arg for a in args if not is_constexpr(a.annotation)}
        ruled_out = set(self._memory.of(fn))
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in params}
        ruled_out |= params - used  # an unused parameter takes whatever production passes
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                ruled_out.add(node.value.id)
            if isinstance(node, ast.Call) and not self._number_call(node.func):
                passed = [*node.args, *(k.value for k in node.keywords)]
                ruled_out.update(
                    n.id for a in passed for n in ast.walk(a) if isinstance(n, ast.Name)
                )
        return frozenset(params - ruled_out)

    @cached_property
    def _memory(self) -> _Memory:
        return _Memory(self.jit)

    def _number_call(self, func: ast.expr) -> bool:
        """A call a number may be passed to: ``tl.exp``, ``libdevice.pow`` (attributes), the
        module's jit helpers (followed by :class:`_Memory`) and Python's number builtins."""
        return not isinstance(func, ast.Name) or func.id in self.jit or func.id in _NUMBER_CALLS


def _pointee(node: ast.expr, env: _Env) -> frozenset[str]:
    """The kernel parameters a pointer expression may point into (see the module docstring)."""
    if isinstance(node, ast.Name):
        return env.get(node.id, _NONE)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _pointee(node.left, env)
        return left or _pointee(node.right, env)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        return _pointee(node.left, env)
    if isinstance(node, ast.Subscript):  # ptrs[:, None]
        return _pointee(node.value, env)
    if isinstance(node, ast.IfExp):
        return _pointee(node.body, env) | _pointee(node.orelse, env)
    if isinstance(node, ast.Call):
        func = node.func
        name = dotted_name(func).rpartition(".")[2]
        if isinstance(func, ast.Attribute) and func.attr == "to":  # ptr.to(tl.pointer_type(..))
            return _pointee(func.value, env)
        if name in _POINTER_CALLS:
            base = _first_argument(node, _POINTER_KEYWORDS)
            return _NONE if base is None else _pointee(base, env)
        if name == "where" and len(node.args) == 3:
            return _pointee(node.args[1], env) | _pointee(node.args[2], env)
    return _NONE


def _basic_index(node: ast.expr) -> bool:
    """A subscript that is a view, not a copy: slices, integer constants, ``None``, ``...``."""
    if isinstance(node, ast.Tuple):
        return all(_basic_index(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _basic_index(node.operand)
    return isinstance(node, ast.Slice) or (
        isinstance(node, ast.Constant)
        and (node.value is None or node.value is Ellipsis or type(node.value) is int)
    )


def _aliased(node: ast.expr, env: _Env) -> frozenset[str]:
    """The launcher parameters an argument is (a view of): see the module docstring."""
    if isinstance(node, ast.Name):
        return env.get(node.id, _NONE)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ALIAS_METHODS
    ):
        return _aliased(node.func.value, env)
    if isinstance(node, ast.Attribute) and node.attr in _ALIAS_ATTRIBUTES:
        return _aliased(node.value, env)
    if isinstance(node, ast.Subscript) and _basic_index(node.slice):
        return _aliased(node.value, env)
    return _NONE


@dataclass
class _Launches:
    """What the launcher and the module functions it calls write, by their parameters."""

    tree: ast.Module
    functions: Mapping[str, ast.FunctionDef]
    kernels: Mapping[str, ast.FunctionDef]
    stores: _KernelFacts  # the kernels' parameters that count: written, or indices
    found: dict[tuple[int, int], dict[str, frozenset[str]]] = field(default_factory=dict)

    def callees(self, call: ast.Call) -> list[tuple[ast.FunctionDef, int]]:
        """(def, leading parameters the call does not pass: ``ctx``, ``cls``) of a call into
        the module: ``f(...)``, ``Fn.apply(...)``, ``Cls.method(...)``."""
        func = call.func
        if isinstance(func, ast.Name):
            found = self.functions.get(func.id)
            return [] if found is None or func.id in self.kernels else [(found, 0)]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            out = []
            qualname = f"{func.value.id}.{func.attr}"
            for fn in launcher_functions(self.tree, qualname, backward=False):
                static = any(dotted_name(d) == "staticmethod" for d in fn.decorator_list)
                out.append((fn, 1 if func.attr == "apply" or not static else 0))
            return out
        return []

    def of(self, fn: ast.FunctionDef, depth: int = 0) -> dict[str, frozenset[str]]:
        """Parameter of ``fn`` -> the kernels that store into it."""
        key = (id(fn), depth)  # deeper, fewer calls are followed
        if key in self.found:
            return self.found[key]
        self.found[key] = {}
        env: _Env = {p: frozenset({p}) for p in _positional(fn)}
        env.update({a.arg: frozenset({a.arg}) for a in fn.args.kwonlyargs})
        written: dict[str, frozenset[str]] = {}

        def add(params: frozenset[str], kernels: frozenset[str]) -> None:
            for p in params:
                written[p] = written.get(p, _NONE) | kernels

        def visit(call: ast.Call, env: _Env) -> None:
            if isinstance(call.func, ast.Subscript):  # kernel[grid](...)
                name = launched_name(call.func.value)
                kernel = self.kernels.get(name)
                if kernel is not None:
                    stores = self.stores.of(kernel)
                    for _, arg in _arguments(call, _positional(kernel), stores):
                        add(_aliased(arg, env), frozenset({name}))
                return
            if depth >= CALL_DEPTH:
                return
            for callee, skip in self.callees(call):
                if callee is fn:
                    continue
                inner = self.of(callee, depth + 1)
                for param, arg in _arguments(call, _positional(callee)[skip:], inner):
                    add(_aliased(arg, env), inner[param])

        _flow(fn.body, env, _aliased, visit)
        self.found[key] = written
        return written


def stored_outputs(
    source: str, qualname: str, *, search: Sequence[str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Launcher parameter -> the kernels whose stores write it, for the launcher ``qualname``
    of the module ``source`` (see the module docstring), in the launcher's parameter order;
    empty when the source does not parse or lacks the launcher. ``search``: where imported
    kernels' modules are looked up (default ``sys.path``)."""
    return _launcher_facts(source, qualname, _Stores, search)


def indexed_inputs(dotted: str) -> dict[str, tuple[str, ...]]:
    """Launcher parameter -> the kernels that use its values as positions (see the module
    docstring), for the launcher at the dotted path ``dotted``, its module found on the
    import path by file name (never imported); empty when it is not found or read."""
    found = located_source(dotted)
    return {} if found is None else _launcher_facts(found[3], found[1], _Indexes, None)


def by_value_inputs(dotted: str) -> dict[str, tuple[str, ...]]:
    """Launcher parameter -> the kernels that take it by value, as a number (:class:`_ByValue`),
    for the launcher at the dotted path ``dotted`` (found on the import path by file name,
    never imported), leaving out any parameter a kernel also uses as memory; empty when it
    is not found or read. ``registry add`` asks for such a parameter's value instead of
    drawing a tensor (FlagGems' dropout ``p``, a ``k``, an ``alpha``)."""
    found = located_source(dotted)
    if found is None:
        return {}
    numbers = _launcher_facts(found[3], found[1], _ByValue, None)
    memory = _launcher_facts(found[3], found[1], _Memory, None)
    return {p: kernels for p, kernels in numbers.items() if p not in memory}


def _launcher_facts(
    source: str,
    qualname: str,
    facts: type[_KernelFacts],
    search: Sequence[str] | None,
) -> dict[str, tuple[str, ...]]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    launchers = launcher_functions(tree, qualname, backward=False)
    if not launchers:
        return {}
    functions = module_functions(tree)
    jit = {n: f for n, f in functions.items() if any(is_jit(d) for d in f.decorator_list)}
    kernels = {**imported_kernels(tree, search=search), **jit}
    launches = _Launches(tree, functions, kernels, facts({**kernels, **jit}))
    launcher = launchers[0]
    written = launches.of(launcher)
    return {p: tuple(sorted(written[p])) for p in _positional(launcher) if p in written}


def inferred_outputs(dotted: str) -> dict[str, tuple[str, ...]]:
    """:func:`stored_outputs` of the launcher at the dotted path ``dotted``, its module found
    on the import path by file name (never imported); empty when it is not found or read."""
    found = located_source(dotted)
    return {} if found is None else stored_outputs(found[3], found[1])
