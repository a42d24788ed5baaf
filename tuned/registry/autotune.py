"""Knobs of ``@triton.autotune`` and ``@triton.heuristics`` kernels, read from the decorators.

**Autotune.** The space is the autotuner's own configurations, read from a literal
``configs=[triton.Config({...}, num_warps=..., num_stages=...), ...]``, a list comprehension
over literal lists (or module-level names bound to them: ``for BT in BT_LIST``, or
``itertools.product`` of such lists), a
module-level list, ``A + B`` of those, or a helper function that builds them (appends Configs
in ``for`` loops over literals, ``results.append(triton.Config(...))``, or binds, extends and
returns such lists); anything else gets a note naming the statement discovery stopped at.
Where the source chooses by platform (``if is_cuda(): ... else: ...``, ``[...] if is_amd
else [...]``, at module level or in the helper), NVIDIA's side is read: ktuned tunes on
NVIDIA GPUs (:func:`nvidia_branch`); a module-level choice on a test it does not recognize
gives the union of both lists; so does a config function bound by module-level aliases on
such a test (gemlite: ``if AUTOTUNE_SETTING == 'max': get_autotune_config = get_max_config
elif ...``), over the branches it can read. One knob per key of the configs' dicts,
plus ``num_warps`` and ``num_stages``. Each knob's values are the configs' values, their
neighbours and the rest of the ladder between them (:func:`autotune_values`). A candidate pins
one configuration: the decorator's ``configs`` becomes a list of that single ``Config``
(Triton's autotuner runs a single configuration without benchmarking), every other argument of
the decorator (``key``, ``prune_configs_by``, hooks) is kept. The baseline is :data:`AUTO`: the
source unchanged, so the autotuner's own pick is what candidates are measured against.

**Heuristics.** A ``@triton.heuristics({"BLOCK": lambda args: ...})`` value whose key is a
block size (or ``num_warps``) of the kernel is a knob whose values scale the heuristic's own
value (``x2``: the lambda's body is wrapped as ``min((body) * 2, 65536)``), so it stays a
function of the shape; a value that is a function (``"BLOCK": _block``) is wrapped in a lambda
that transforms what it returns, and a module-level dict (``@triton.heuristics(HEURISTICS)``)
is read where it is bound. Keys that are flags (``EVEN_K: lambda args: ...``) are never knobs.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tuned.registry.bindings import parameters
from tuned.registry.kernel_sources import dotted_name, module_statements
from tuned.registry.spec import KnobValue

__all__ = [
    "AUTO",
    "AutotuneSpace",
    "autotune_space",
    "autotune_values",
    "config_text",
    "config_values",
    "module_bound",
    "nvidia_branch",
]

#: The baseline value of an autotuned kernel's knobs: let the autotuner pick (source as written).
AUTO = "auto"
#: Triton's defaults for a ``Config`` that does not set them.
CONFIG_DEFAULTS = {"num_warps": 4, "num_stages": 3}
_OPTIONS = ("num_warps", "num_stages")
_MAX_CONFIGS = 4096


@dataclass(frozen=True, eq=False)
class AutotuneSpace:
    """The configurations of one ``@triton.autotune`` decorator."""

    kernel: str
    configs_node: ast.expr  # the expression replaced by a single pinned config
    config_func: str  # how the source spells the Config class (``triton.Config``)
    keys: tuple[str, ...]  # the dict keys, then num_warps, num_stages
    configs: tuple[dict[str, KnobValue], ...]
    #: other keyword arguments of the first Config (``pre_hook=...``, ``maxnreg=...``), kept
    extra: str = ""


class _Unreadable(Exception):
    """A configs expression this module does not evaluate statically."""


#: Module-level names bound to literals, read once per module (:func:`_constants`).
_Consts = Mapping[str, object]
_NO_CONSTS: _Consts = {}

#: Words of a platform test that name NVIDIA's CUDA, and other platforms (``is_hip()``).
_CUDA_WORDS = frozenset({"cuda", "nvidia"})
_OTHER_WORDS = frozenset({"hip", "rocm", "amd", "xpu", "intel", "cpu", "mps", "musa", "npu"})


def _platform_words(text: str) -> set[str]:
    """``is_cuda`` -> {"is", "cuda"}; ``isHip`` -> {"is", "hip"}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return {w for w in re.split(r"[\W_]+", spaced.lower()) if w}


def _platform_of(words: set[str]) -> bool | None:
    """True for words that name CUDA, False for another platform, None for neither or both."""
    cuda, other = bool(words & _CUDA_WORDS), bool(words & _OTHER_WORDS)
    return cuda if cuda != other else None


def nvidia_branch(test: ast.expr) -> bool | None:
    """Which branch of ``if test:`` is NVIDIA's: True for the body, False for the ``else``,
    None when ``test`` is not a platform test discovery recognizes.

    ktuned measures on NVIDIA GPUs, so where the source chooses its configurations by platform
    (Triton's matmul tutorial: ``if is_cuda(): return cuda_configs() else: return
    hip_configs()``) the CUDA side is the one the autotuner runs there; the other side's
    configurations (``waves_per_eu``, AMD's warp counts) would be knobs the tuned machine never
    uses. A platform test is a name, attribute or call without arguments whose own name says
    the platform (``is_cuda()``, ``IS_HIP``, ``torch.version.hip``, ``torch.cuda.is_available()``),
    ``not`` of one, one compared with ``is None`` / ``is not None``, or anything compared with
    ``==`` / ``!=`` to a string naming the platform (``backend == "cuda"``). A capability test
    (``torch.cuda.get_device_capability()[0] >= 9``) is not one: it chooses between NVIDIA
    GPUs."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = nvidia_branch(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if not isinstance(right, ast.Constant):
            return None
        if isinstance(right.value, str) and isinstance(op, (ast.Eq, ast.NotEq)):
            found = _platform_of(_platform_words(right.value))
            if found is None:
                return None
            return found if isinstance(op, ast.Eq) else not found
        if right.value is None and isinstance(op, (ast.Is, ast.IsNot)):
            found = nvidia_branch(test.left)
            if found is None:
                return None
            return found if isinstance(op, ast.IsNot) else not found
        return None
    if isinstance(test, ast.Call):
        if test.args or test.keywords:
            return None
        test = test.func
    parts = dotted_name(test).split(".")
    if parts == [""]:
        return None
    if parts[-1] == "is_available" and len(parts) > 1:  # torch.cuda.is_available()
        parts = parts[:-1]
    return _platform_of(_platform_words(parts[-1]))


def _eval(node: ast.expr, env: dict[str, object], consts: _Consts = _NO_CONSTS) -> object:
    """A literal, a name bound by an enclosing comprehension or at module level to a literal
    (``BT_LIST = [16, 32]``), or ``range(literals)``."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in consts:
            return consts[node.id]
        raise _Unreadable(f"the name `{node.id}`")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and not node.keywords
    ):
        args = [_eval(a, env, consts) for a in node.args]
        ints = [a for a in args if isinstance(a, int)]
        if len(ints) == len(args) and 1 <= len(ints) <= 3:
            return list(range(*ints))
        raise _Unreadable(f"`{ast.unparse(node)[:60]}`")
    if isinstance(node, ast.Call) and dotted_name(node.func) == "itertools.product":
        return _product(node, env, consts)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, env, consts) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Pow)):
        left, right = _eval(node.left, env, consts), _eval(node.right, env, consts)
        if isinstance(left, int) and isinstance(right, int) and abs(right) < 64:
            if isinstance(node.op, ast.Mult):
                return left * right
            return left + right if isinstance(node.op, ast.Add) else left**right
        raise _Unreadable(f"`{ast.unparse(node)[:60]}`")
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise _Unreadable(f"`{ast.unparse(node)[:60]}`") from exc


def _product(node: ast.Call, env: dict[str, object], consts: _Consts) -> list[object]:
    """``itertools.product(A, B, ..., repeat=N)`` of literal lists, as the comprehension over
    nested ``for`` clauses it stands for (torchao: ``for (bm, bn), ns, nw in
    itertools.product(TILE_SHAPES, [1, 2, 3], [2, 4, 8])``)."""
    evaluated = [_eval(a, env, consts) for a in node.args]
    lists = [x for x in evaluated if isinstance(x, list)]
    repeat: object = 1
    for keyword in node.keywords:
        if keyword.arg != "repeat":
            raise _Unreadable(f"`{ast.unparse(node)[:60]}`")
        repeat = _eval(keyword.value, env, consts)
    if len(lists) != len(evaluated) or not (isinstance(repeat, int) and repeat >= 0):
        raise _Unreadable(f"`{ast.unparse(node)[:60]}`")
    if math.prod(len(x) for x in lists) ** repeat > _MAX_CONFIGS:
        raise _Unreadable("too many configurations")
    return [list(t) for t in itertools.product(*lists, repeat=repeat)]


def _statements(module: ast.Module) -> list[ast.stmt]:
    """The module's statements (:func:`module_statements`) but those on the non-NVIDIA side of
    a platform test (``if is_hip(): CONFIGS = [...]``, see :func:`nvidia_branch`)."""
    off: set[int] = set()
    for stmt in module_statements(module):
        if isinstance(stmt, ast.If) and id(stmt) not in off:
            side = nvidia_branch(stmt.test)
            if side is not None:
                skipped = stmt.orelse if side else stmt.body
                off |= {id(n) for s in skipped for n in ast.walk(s)}
    return [s for s in module_statements(module) if id(s) not in off]


def _either(node: ast.IfExp, consts: _Consts) -> object:
    """``[1, 2, 4, 8, 16] if is_amd else [1, 2, 4, 8, 16, 32]`` at module level: NVIDIA's side
    of a platform test (:func:`nvidia_branch`); a test discovery does not recognize gives the
    union of lists on both sides (the values of either branch are values the autotuner may
    list), equal values that value."""
    side = nvidia_branch(node.test)
    if side is not None:
        return _eval(node.body if side else node.orelse, {}, consts)
    body, orelse = _eval(node.body, {}, consts), _eval(node.orelse, {}, consts)
    if isinstance(body, list) and isinstance(orelse, list):
        return list(dict.fromkeys([*body, *orelse]))
    if body == orelse:
        return body
    raise _Unreadable(f"`{ast.unparse(node)[:60]}`")


def _constants(module: ast.Module | None, before: ast.stmt | None = None) -> dict[str, object]:
    """The module's top-level names bound (once, or in both branches of an ``if``) to a
    literal, a list of literals or a conditional choice between lists (:func:`_either`).
    A name bound to anything else, or rebound by ``+=`` and the like, is left out. With
    ``before``, only the statements above it count (the value a rebinding reads)."""
    if module is None:
        return {}
    consts: dict[str, object] = {}
    unreadable: set[str] = set()
    for stmt in _statements(module):
        if stmt is before:
            break
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            unreadable.add(stmt.target.id)
            continue
        targets: list[ast.expr]
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        elif isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        else:
            continue
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            name = target.id
            try:
                if isinstance(value, ast.IfExp):
                    found = _either(value, consts)
                else:
                    found = _eval(value, {}, consts)
            except (_Unreadable, RecursionError):
                unreadable.add(name)
                continue
            if name in consts and consts[name] != found:  # bound in both branches of an if
                old = consts[name]
                if not (isinstance(old, list) and isinstance(found, list)):
                    unreadable.add(name)
                    continue
                found = list(dict.fromkeys([*old, *found]))
            consts[name] = found
    return {k: v for k, v in consts.items() if k not in unreadable}


def _bind(target: ast.expr, value: object, env: dict[str, object]) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, ast.Tuple) and isinstance(value, (list, tuple)):
        if len(value) != len(target.elts):
            raise _Unreadable(f"unpacking into `{ast.unparse(target)}`")
        for t, v in zip(target.elts, value, strict=True):
            _bind(t, v, env)
    else:
        raise _Unreadable(f"the loop target `{ast.unparse(target)[:60]}`")


def _config(
    call: ast.expr, env: dict[str, object], consts: _Consts = _NO_CONSTS
) -> tuple[str, dict[str, KnobValue]]:
    if not (isinstance(call, ast.Call) and ast.unparse(call.func).endswith("Config")):
        raise _Unreadable(f"`{ast.unparse(call)[:60]}` is not a triton.Config(...) call")
    config: dict[str, KnobValue] = {}
    for key, v in _config_items(call, env, consts):
        value = _eval(v, env, consts)
        if not isinstance(value, (int, float, str, bool)):
            raise _Unreadable(f"the Config value `{ast.unparse(v)[:60]}`")
        config[key] = value
    for kw in call.keywords:
        if kw.arg not in _OPTIONS and set(env) & {
            n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)
        }:
            raise _Unreadable(f"Config's {kw.arg} varies between configs")
        if kw.arg in _OPTIONS:
            value = _eval(kw.value, env, consts)
            if not isinstance(value, int):
                raise _Unreadable(f"{kw.arg}={ast.unparse(kw.value)[:60]}")
            config[kw.arg] = value
    for option, default in CONFIG_DEFAULTS.items():
        config.setdefault(option, default)
    return ast.unparse(call.func), config


def _config_items(
    call: ast.Call, env: dict[str, object], consts: _Consts
) -> list[tuple[str, ast.expr]]:
    """The keys and value expressions of a Config's first argument: a literal dict (a key may
    be a name bound to a string, a helper's parameter default, ``{block_name: 64}`` in
    ``def configs(block_name="BLOCK_SIZE")``), or ``dict(BLOCK_M=BLOCK_M, ...)``
    (inductor-style config tuples unpacked into a dict)."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Dict):
        items = []
        for k, v in zip(first.keys, first.values, strict=True):
            key = _eval(k, env, consts) if isinstance(k, ast.Name) else None
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                key = k.value
            if not isinstance(key, str):
                raise _Unreadable("a Config key that is not a string literal")
            items.append((key, v))
        return items
    if (
        isinstance(first, ast.Call)
        and ast.unparse(first.func) == "dict"
        and not first.args
        and all(k.arg is not None for k in first.keywords)
    ):
        return [(str(k.arg), k.value) for k in first.keywords]
    raise _Unreadable(f"`{ast.unparse(call)[:60]}` has no literal dict of values")


def _rebinding(node: ast.expr, module: ast.Module | None) -> ast.stmt | None:
    """The module statement ``node`` (a name) is last bound by when that statement reads the
    name itself (``configs = [triton.Config(...) for ... in configs]``): its iterable is the
    earlier binding, read from the statements above it."""
    if module is None or not isinstance(node, ast.Name):
        return None
    bound = [
        s
        for s in _statements(module)
        if isinstance(s, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == node.id for t in s.targets)
    ]
    if bound and any(
        isinstance(n, ast.Name) and n.id == node.id for n in ast.walk(bound[-1].value)
    ):
        return bound[-1]
    return None


_Pair = tuple[ast.expr, dict[str, object]]  # a Config call and the names bound around it


def _items(node: ast.expr, env: dict[str, object], consts: _Consts) -> list[object]:
    """What a ``for`` loop or comprehension iterates over: a literal list (:func:`_eval`)."""
    items = _eval(node, env, consts)
    if not isinstance(items, list):
        raise _Unreadable(f"`{ast.unparse(node)[:60]}` is not a literal list")
    return items


def _expanded(node: ast.ListComp, env: dict[str, object], consts: _Consts) -> list[_Pair]:
    envs: list[dict[str, object]] = [env]
    for gen in node.generators:
        if gen.is_async:
            raise _Unreadable("an async comprehension")
        grown: list[dict[str, object]] = []
        for outer in envs:
            for item in _items(gen.iter, outer, consts):
                inner = dict(outer)
                _bind(gen.target, item, inner)
                if gen.ifs:
                    raise _Unreadable(f"the filter `if {ast.unparse(gen.ifs[0])[:60]}`")
                grown.append(inner)
        envs = grown
        if len(envs) > _MAX_CONFIGS:
            raise _Unreadable("too many configurations")
    return [(node.elt, e) for e in envs]


def _holds_configs(node: ast.expr, module: ast.Module | None) -> bool:
    """Whether a helper's ``name = node`` binds configurations (:func:`_pairs` reads them):
    ``node`` spells a ``Config(...)`` call or calls a function of the module without
    arguments (``configs = get_cuda_configs()``)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        name = node.func.id
        return _function(name, module) is not None or bool(_aliases(name, module))
    return any(_is_config(n) for n in ast.walk(node) if isinstance(n, ast.expr))


def _built(fn: ast.FunctionDef, module: ast.Module | None, consts: _Consts) -> list[_Pair]:
    """The configurations a helper builds: ``out = []``, ``for X in (...):`` (nested), ``cfg =
    triton.Config(...)``, ``out.append(cfg)``, ``out = [Config(...) for ...]``, ``out +=
    [...]`` / ``out.extend(...)``, ``return out``; of a platform test (``if is_cuda():``) only
    NVIDIA's side runs (:func:`nvidia_branch`)."""
    lists: dict[str, list[_Pair]] = {}
    made: dict[str, _Pair] = {}

    def run(body: list[ast.stmt], env: dict[str, object]) -> list[_Pair] | None:
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                name, value = stmt.targets[0].id, stmt.value
                if _is_config(value):
                    made[name] = (value, dict(env))
                elif isinstance(value, ast.List) and not value.elts:
                    lists[name] = []
                elif _holds_configs(value, module):  # configs = [Config(...) for ...]
                    lists[name] = _pairs(value, module, dict(env), consts)
                else:
                    env[name] = _eval(value, env, consts)
            elif (
                isinstance(stmt, ast.AugAssign)
                and isinstance(stmt.op, ast.Add)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id in lists
            ):  # configs += [Config(...) for ...]
                lists[stmt.target.id] += _pairs(stmt.value, module, dict(env), consts)
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(call := stmt.value, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "extend"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id in lists
                and len(call.args) == 1
                and not call.keywords
            ):
                lists[call.func.value.id] += _pairs(call.args[0], module, dict(env), consts)
            elif isinstance(stmt, ast.If) and (side := nvidia_branch(stmt.test)) is not None:
                if (done := run(stmt.body if side else stmt.orelse, env)) is not None:
                    return done
            elif isinstance(stmt, ast.For) and not stmt.orelse:
                for item in _items(stmt.iter, env, consts):
                    inner = dict(env)
                    _bind(stmt.target, item, inner)
                    if (done := run(stmt.body, inner)) is not None:
                        return done
                    if sum(len(v) for v in lists.values()) > _MAX_CONFIGS:
                        raise _Unreadable("too many configurations")
            elif (
                isinstance(stmt, ast.Expr)
                and isinstance(call := stmt.value, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append"
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id in lists
                and len(call.args) == 1
            ):
                arg = call.args[0]
                if isinstance(arg, ast.Name) and arg.id in made:
                    lists[call.func.value.id].append(made[arg.id])
                elif _is_config(arg):
                    lists[call.func.value.id].append((arg, dict(env)))
                else:
                    raise _Unreadable(f"line {stmt.lineno}: `{ast.unparse(stmt)[:60]}`")
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                if isinstance(stmt.value, ast.Name) and stmt.value.id in lists:
                    return lists[stmt.value.id]
                value = stmt.value
                if isinstance(value, (ast.List, ast.Tuple)) and any(
                    isinstance(e, ast.Name) and e.id in made for e in value.elts
                ):  # `config = triton.Config(...)`, `return [config]` (gemlite's GEMV default)
                    return [
                        made[e.id] if isinstance(e, ast.Name) and e.id in made else (e, dict(env))
                        for e in value.elts
                    ]
                return _pairs(value, module, env, consts)
            else:
                first = ast.unparse(stmt).splitlines()[0][:60]
                raise _Unreadable(f"line {stmt.lineno}, in {fn.name}(): `{first}`")
        return None

    found = run(fn.body, _defaults(fn))
    if found is None:
        raise _Unreadable(f"{fn.name}() returns no list discovery can follow")
    return found


def _defaults(fn: ast.FunctionDef) -> dict[str, object]:
    """What a call without arguments binds ``fn``'s parameters to: their literal defaults
    (``block_name="BLOCK_SIZE"``); a parameter without one, or with another default, is
    left unbound (reading it stops discovery)."""
    bound: dict[str, object] = {}
    for name, default in parameters(fn).items():
        if default is None:
            continue
        try:
            bound[name] = ast.literal_eval(default)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
    return bound


def _is_config(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Config")


def _pairs(
    node: ast.expr,
    module: ast.Module | None,
    env: dict[str, object],
    consts: _Consts,
    *,
    hops: int = 0,
) -> list[_Pair]:
    node = _resolved(node, module)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [(e, env) for e in node.elts]
    if isinstance(node, ast.ListComp):
        return _expanded(node, env, consts)
    if isinstance(node, ast.IfExp) and (side := nvidia_branch(node.test)) is not None:
        return _pairs(node.body if side else node.orelse, module, env, consts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # CONFIGS_A + CONFIGS_B
        return _pairs(node.left, module, env, consts) + _pairs(node.right, module, env, consts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
        fn = _function(node.func.id, module)
        if fn is not None:
            return _built(fn, module, consts)
        aliases = _aliases(node.func.id, module)
        if aliases and hops < _ALIAS_HOPS:  # each branch's configurations: the union of
            out: list[_Pair] = []  # those it can read (gemlite's "max" branch: 8,000)
            unread: list[_Unreadable] = []
            for alias in aliases:
                call = ast.Call(func=ast.Name(id=alias, ctx=ast.Load()), args=[], keywords=[])
                try:
                    out += _pairs(call, module, env, consts, hops=hops + 1)
                except _Unreadable as exc:
                    unread.append(exc)
            if out or not unread:
                return out
            raise unread[0]
    raise _Unreadable(f"`{ast.unparse(node)[:60]}`")


#: Hops through module-level aliases of a configs function (``get_configs = get_fast``).
_ALIAS_HOPS = 4


def _aliases(name: str, module: ast.Module | None) -> list[str]:
    """The functions a module-level ``name = other`` binds ``name`` to, in order: one, or one
    per branch of a test that is not a platform's (gemlite's ``if AUTOTUNE_SETTING == 'max':
    get_autotune_config = get_max_autotune_config elif ...: ... else: ...``, whose setting is
    read at import: every branch's configurations are configurations the autotuner may run).
    A platform test keeps NVIDIA's side only (:func:`_statements`)."""
    if module is None:
        return []
    out: list[str] = []
    for stmt in _statements(module):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Name)
            and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
            and stmt.value.id != name
            and stmt.value.id not in out
        ):
            out.append(stmt.value.id)
    return out


def _configs(
    node: ast.expr, module: ast.Module | None
) -> tuple[str, list[dict[str, KnobValue]], str]:
    """(how the source spells Config, the configurations, the first one's other keywords)."""
    consts = _constants(module, before=_rebinding(node, module))
    pairs = _pairs(node, module, {}, consts)
    if not pairs:
        raise _Unreadable("no configuration")
    configs = [_config(call, env, consts) for call, env in pairs]
    first = pairs[0][0]
    assert isinstance(first, ast.Call)
    extra = "".join(f", {ast.unparse(kw)}" for kw in first.keywords if kw.arg not in _OPTIONS)
    return configs[0][0], [c for _, c in configs], extra


def _function(name: str, module: ast.Module | None) -> ast.FunctionDef | None:
    if module is None:
        return None
    defs = [s for s in _statements(module) if isinstance(s, ast.FunctionDef) and s.name == name]
    return defs[-1] if defs else None


def module_bound(module: ast.Module, name: str) -> list[ast.expr]:
    """The values ``name`` is bound to at module level, in source order, NVIDIA's side of a
    platform test only (:func:`_statements`): ``CONFIGS = [...]``, also annotated,
    ``CONFIGS: list[triton.Config] = [...]``."""
    return [
        s.value
        for s in _statements(module)
        if isinstance(s, (ast.Assign, ast.AnnAssign))
        and s.value is not None
        and any(
            isinstance(t, ast.Name) and t.id == name
            for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
        )
    ]


def _resolved(node: ast.expr, module: ast.Module | None) -> ast.expr:
    """``CONFIGS`` (a module-level list) or ``get_configs()`` (a module function that only
    returns one) followed to the expression that holds the configurations, a few steps deep;
    ``node`` itself otherwise."""
    if module is None:
        return node
    for _ in range(4):
        if isinstance(node, ast.Name):
            bound = module_bound(module, node.id)
            if not bound:
                return node
            node = bound[-1]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args:
            fn = _function(node.func.id, module)
            if fn is not None and (fn.args.args or fn.args.posonlyargs or fn.args.kwonlyargs):
                return node  # its parameters' defaults are bound where it is run (_built)
            body = fn.body if fn is not None else []
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # a docstring
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                return node
            node = body[0].value
        else:
            return node
    return node


def autotune_space(
    kernel: str, decorator: ast.Call, module: ast.Module | None = None
) -> AutotuneSpace | str:
    """The configurations of ``@triton.autotune(...)`` on ``kernel``, or why they cannot be
    read without running the module. With the kernel's ``module``, configs given as a
    module-level list or by a function that only returns one are read too."""
    node = next((k.value for k in decorator.keywords if k.arg == "configs"), None)
    if node is None and decorator.args:
        node = decorator.args[0]
    # Named as written: a library's own autotuner (FlagGems' @libtuner) is not Triton's.
    shown = f"@{dotted_name(decorator.func) or 'triton.autotune'}"
    if node is None:
        return f"its {shown} has no configs"
    try:
        func, configs, extra = _configs(node, module)
    except _Unreadable as exc:
        return (
            f"its {shown} configs could not be read without running the module "
            f"(discovery reads a list of triton.Config, a comprehension over literal lists, a "
            f"module-level list, list + list, or a function that appends Configs in for "
            f"loops over literals or returns such lists, NVIDIA's side of an `if is_cuda()`); "
            f"it stopped at {exc}"
        )
    keys = list(dict.fromkeys(k for c in configs for k in c if k not in _OPTIONS))
    missing = [k for k in keys if any(k not in c for c in configs)]
    if missing:
        return f"its {shown} configs do not all set {', '.join(missing)}"
    return AutotuneSpace(
        kernel=kernel,
        configs_node=node,
        config_func=func,
        extra=extra,
        keys=(*keys, *_OPTIONS),
        configs=tuple(configs),
    )


def autotune_values(
    key: str, seen: list[KnobValue], ladder: tuple[int, ...] | None
) -> tuple[KnobValue, ...]:
    """The configs' values of ``key``, and where ``ladder`` (sorted ints) is given, its rungs
    from one below the smallest to one above the largest config value."""
    ints = [v for v in seen if isinstance(v, int) and not isinstance(v, bool)]
    if ladder is None or len(ints) != len(seen):
        return tuple(dict.fromkeys(seen))
    low = max([r for r in ladder if r < min(ints)] or [min(ints)])
    high = min([r for r in ladder if r > max(ints)] or [max(ints)])
    rungs = [r for r in ladder if low <= r <= high]
    return tuple(sorted(set(ints) | set(rungs)))


def config_values(space: AutotuneSpace, pinned: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
    """Every key of the configs, from ``pinned`` (keys not pinned, or pinned to :data:`AUTO`,
    take the first config's value)."""
    return {
        k: pinned[k] if pinned.get(k, AUTO) != AUTO else space.configs[0][k] for k in space.keys
    }


def config_text(space: AutotuneSpace, pinned: Mapping[str, KnobValue]) -> str:
    """The source of a configs list holding the single configuration ``pinned``."""
    chosen = config_values(space, pinned)
    body = ", ".join(f"{k!r}: {chosen[k]!r}" for k in space.keys if k not in _OPTIONS)
    options = ", ".join(f"{k}={chosen[k]!r}" for k in _OPTIONS)
    return f"[{space.config_func}({{{body}}}, {options}{space.extra})]"


def product_size(space: AutotuneSpace) -> int:
    """How many distinct configurations the decorator lists."""
    return len({tuple(sorted(c.items())) for c in space.configs})
