"""Knob discovery: the tuning space of an entry that declares no ``knobs``, read from its source.

Nothing is executed: the module's syntax tree (:mod:`ast`) is searched for launch sites
``kernel[grid](...)`` inside the launcher, where ``kernel`` is a top-level ``@triton.jit``
function. A value reaching such a launch is a knob when

- it is bound to a ``tl.constexpr`` parameter of the kernel (by position or keyword), or to the
  launch options ``num_warps`` / ``num_stages``, and
- it is a plain name of a launcher parameter that is passable by keyword and has a literal
  ``bool``/``int`` default: the tuner calls ``launcher(*inputs, **knobs)``, so only such a
  parameter can carry a candidate's value, and its default is the baseline.

Candidate values follow fixed rules (:func:`candidate_values`, documented in
``docs/registry.md``). A value hard-coded at the launch site (``BLOCK=1024``), a parameter
without a literal default, a name no rule covers, or an ``@triton.autotune`` kernel is not
tuned; each gets a :class:`Notice` saying what to change. The source is never rewritten:
the code that runs is always the code the user wrote.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tuned.registry.source import ModuleOutline
from tuned.registry.spec import KnobValue

__all__ = [
    "BLOCK_OCTAVES",
    "Discovery",
    "Notice",
    "candidate_values",
    "discover_knobs",
    "knob_rule",
]

#: Octaves (factors of two) searched below and above a block size found in the source.
BLOCK_OCTAVES = 3
#: Bounds of discovered block sizes: ``tl.arange`` takes powers of two, a block of 2^16
#: elements is already far past what one program holds in registers.
BLOCK_BOUNDS = (1, 1 << 16)
#: Bounds for block sizes of kernels that call ``tl.dot``: it needs every dimension >= 16, and
#: tiles past 256 exceed shared memory on current GPUs.
DOT_BLOCK_BOUNDS = (16, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
GROUPS = (1, 2, 4, 8, 16)
_LAUNCH_OPTIONS = ("num_warps", "num_stages")
_SCALARS = (bool, int, float, str)
_BLOCK_RE = re.compile(r"BLOCK|TILE", re.IGNORECASE)
_GROUP_RE = re.compile(r"GROUP", re.IGNORECASE)


@dataclass(frozen=True)
class Notice:
    """Something discovery could not tune and what the user can change (not an error)."""

    line: int
    reason: str


@dataclass
class Discovery:
    """The discovered space (launcher parameter order) and the notices."""

    knobs: dict[str, tuple[KnobValue, ...]] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)


def knob_rule(names: set[str], baseline: KnobValue) -> str | None:
    """Which value rule covers a knob: ``names`` are the launcher parameter and the kernel
    parameters or launch options it feeds. None: no rule (the knob is not tuned)."""
    if isinstance(baseline, bool):
        return "boolean"
    if not isinstance(baseline, int):
        return None
    if "num_warps" in names:
        return "warps"
    if "num_stages" in names:
        return "stages"
    if any(_GROUP_RE.search(n) for n in names):
        return "group"
    if any(_BLOCK_RE.search(n) for n in names):
        return "block"
    return None


def candidate_values(rule: str, baseline: KnobValue, *, uses_dot: bool) -> tuple[KnobValue, ...]:
    """The candidate values of a knob under ``rule`` (see :func:`knob_rule`)."""
    if rule == "boolean":
        return (False, True)
    assert isinstance(baseline, int) and not isinstance(baseline, bool)
    if rule == "warps":
        return (*WARPS, 32) if baseline >= 16 else WARPS
    if rule == "stages":
        return STAGES
    if rule == "group":
        return GROUPS
    low, high = DOT_BLOCK_BOUNDS if uses_dot else BLOCK_BOUNDS
    centre = 1 << max(baseline, 1).bit_length() - 1  # the power of two at or below it
    low = max(low, centre >> BLOCK_OCTAVES)
    high = min(high, centre << BLOCK_OCTAVES)
    values: list[KnobValue] = []
    v = 1
    while v <= high:
        if v >= low:
            values.append(v)
        v <<= 1
    return tuple(values)


def _is_jit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr == "jit"
    return isinstance(target, ast.Name) and target.id == "jit"


def _decorator_name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _is_constexpr(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "constexpr"
    if isinstance(annotation, ast.Name):
        return annotation.id == "constexpr"
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.rsplit(".", 1)[-1] == "constexpr"
    return False


@dataclass(frozen=True)
class _Kernel:
    name: str
    params: tuple[str, ...]  # positional-or-keyword parameters, in order
    constexprs: frozenset[str]
    uses_dot: bool
    tuned_by_triton: str  # "autotune" / "heuristics" decorator, or ""


def _kernels(outline: ModuleOutline) -> dict[str, _Kernel]:
    kernels: dict[str, _Kernel] = {}
    for name, fn in outline.functions.items():
        if not any(_is_jit(d) for d in fn.decorator_list):
            continue
        args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
        uses_dot = any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("dot", "dot_scaled")
            for node in ast.walk(fn)
        )
        by_triton = next(
            (
                _decorator_name(d)
                for d in fn.decorator_list
                if _decorator_name(d) in ("autotune", "heuristics")
            ),
            "",
        )
        kernels[name] = _Kernel(
            name=name,
            params=tuple(a.arg for a in [*fn.args.posonlyargs, *fn.args.args]),
            constexprs=frozenset(a.arg for a in args if _is_constexpr(a.annotation)),
            uses_dot=uses_dot,
            tuned_by_triton=by_triton,
        )
    return kernels


def _launcher_parameters(launcher: ast.FunctionDef) -> dict[str, ast.expr | None]:
    """Keyword-passable parameters of the launcher and their default expressions (or None)."""
    args = launcher.args
    positional = [*args.posonlyargs, *args.args]
    defaults: dict[str, ast.expr | None] = {p.arg: None for p in args.args}
    tail = positional[len(positional) - len(args.defaults) :]
    for p, d in zip(tail, args.defaults, strict=True):
        if p.arg in defaults:
            defaults[p.arg] = d
    defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)})
    return defaults


def _literal(node: ast.expr) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False, None


def _launch_bindings(call: ast.Call, kernel: _Kernel) -> list[tuple[str, ast.expr]]:
    """(kernel parameter or launch option, argument expression) of one launch."""
    bound: list[tuple[str, ast.expr]] = []
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) or index >= len(kernel.params):
            break  # *args: positions after it are unknown
        bound.append((kernel.params[index], arg))
    bound.extend((kw.arg, kw.value) for kw in call.keywords if kw.arg is not None)
    return [
        (name, expr) for name, expr in bound if name in kernel.constexprs or name in _LAUNCH_OPTIONS
    ]


class _Finder:
    """Walks the launcher's launch sites and collects knobs and notices."""

    def __init__(self, outline: ModuleOutline, launcher: ast.FunctionDef, module: str) -> None:
        self.kernels = _kernels(outline)
        self.launcher = launcher
        self.module = module
        self.parameters = _launcher_parameters(launcher)
        self.positional_only = {p.arg for p in launcher.args.posonlyargs}
        self.feeds: dict[str, set[str]] = {}  # launcher parameter -> what it feeds
        self.dot: set[str] = set()  # launcher parameters that reach a tl.dot kernel
        self.result = Discovery()

    def note(self, node: ast.AST, reason: str) -> None:
        self.result.notices.append(Notice(line=getattr(node, "lineno", 0), reason=reason))

    def run(self) -> Discovery:
        sites = [
            (node, self.kernels[node.func.value.id])
            for node in ast.walk(self.launcher)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.kernels
        ]
        where = f"launcher '{self.launcher.name}' in {self.module}"
        if not sites:
            self.note(
                self.launcher,
                f"no launch `kernel[grid](...)` of a top-level @triton.jit function in {where}, "
                "so no knob was discovered; declare knobs in kernel.yaml",
            )
        for call, kernel in sorted(sites, key=lambda s: (s[0].lineno, s[0].col_offset)):
            self.site(call, kernel)
        self.finish()
        return self.result

    def site(self, call: ast.Call, kernel: _Kernel) -> None:
        at = f"{kernel.name}[...]"
        if kernel.tuned_by_triton:
            self.note(
                call,
                f"{kernel.name} is decorated with @triton.{kernel.tuned_by_triton}: Triton "
                f"chooses its values at run time, so discovery leaves its launch alone; declare "
                "knobs in kernel.yaml to tune the launcher's parameters",
            )
            return
        bindings = _launch_bindings(call, kernel)
        passed = {name for name, _ in bindings}
        for name, expr in bindings:
            self.binding(call, kernel, name, expr, at)
        launcher = self.launcher.name
        if "num_warps" not in passed and "num_warps" not in self.parameters:
            self.note(
                call,
                f"{at} does not pass num_warps, so Triton's default (4) is never varied; to "
                f"tune it, add a parameter `num_warps: int = 4` to {launcher} and pass "
                "`num_warps=num_warps` at the launch",
            )
        if kernel.uses_dot and "num_stages" not in passed and "num_stages" not in self.parameters:
            self.note(
                call,
                f"{at} calls tl.dot but does not pass num_stages (software pipelining); to "
                f"tune it, add a parameter `num_stages: int = 3` to {launcher} and pass "
                "`num_stages=num_stages` at the launch",
            )

    def binding(self, call: ast.Call, kernel: _Kernel, name: str, expr: ast.expr, at: str) -> None:
        launcher = self.launcher.name
        if isinstance(expr, ast.Name) and (
            expr.id in self.parameters or expr.id in self.positional_only
        ):
            param = expr.id
            default = self.parameters.get(param)
            ok, value = (False, None) if default is None else _literal(default)
            if param not in self.positional_only and ok and isinstance(value, _SCALARS):
                self.feeds.setdefault(param, {param}).add(name)
                if kernel.uses_dot:
                    self.dot.add(param)
                return
            if knob_rule({name, param}, 1) is None:
                return  # not a kind of value discovery would tune: nothing to say
            if param in self.positional_only:
                why = "is positional-only; make it a keyword parameter"
            elif default is None:
                why = f"has no default; give it a literal default (`{param}=...`, the baseline)"
            else:
                why = (
                    f"has the default `{ast.unparse(default)}`, not a literal int or bool; "
                    f"write the value itself (`{param}=...`, the baseline)"
                )
            self.note(
                call, f"{at} passes {name}={param}, but {param} of {launcher} {why} to tune it"
            )
            return
        ok, value = _literal(expr)
        if ok and isinstance(value, (bool, int)) and knob_rule({name}, value) is not None:
            annotation = "bool" if isinstance(value, bool) else "int"
            self.note(
                call,
                f"{at} passes {name}={value!r} as a literal, so it cannot be tuned (knobs reach "
                f"the kernel as keyword arguments of {launcher}); to tune it, add a parameter "
                f"`{name}: {annotation} = {value!r}` to {launcher} and pass `{name}={name}` at "
                "the launch",
            )

    def finish(self) -> None:
        order = list(self.parameters)
        for param in sorted(self.feeds, key=order.index):
            default = self.parameters[param]
            assert default is not None
            _, value = _literal(default)
            assert isinstance(value, (bool, int, float, str))
            rule = knob_rule(self.feeds[param], value)
            if rule is None:
                fed = ", ".join(sorted(self.feeds[param] - {param})) or param
                self.note(
                    default,
                    f"launcher parameter {param} (default {value!r}) feeds {fed}, but no "
                    "discovery rule covers it (rules: block/tile sizes, group sizes, num_warps, "
                    "num_stages, booleans); declare knobs in kernel.yaml to tune it",
                )
                continue
            self.result.knobs[param] = candidate_values(rule, value, uses_dot=param in self.dot)


def discover_knobs(outline: ModuleOutline, launcher: ast.FunctionDef, module: str) -> Discovery:
    """The knobs of ``launcher`` found at its launch sites, and notices of what was left out.

    Every knob is a keyword-passable parameter of the launcher with a literal default, so
    :func:`tuned.registry.source.launcher_defaults` accepts it and the default is the
    baseline (it may lie outside the candidate values, like a declared baseline may).
    """
    return _Finder(outline, launcher, module).run()
