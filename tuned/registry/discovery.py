"""Knob discovery: the tuning space of an entry that declares no ``knobs``, read from its source.

Nothing is executed: the module's syntax tree (:mod:`ast`) is searched for launch sites
``kernel[grid](...)`` of ``@triton.jit`` functions (the module's own, or imported:
:mod:`tuned.registry.kernel_sources`), in the launcher (a function, a method, an autograd
Function's ``forward``/``backward``) and in the module's functions it calls
(:mod:`tuned.registry.call_graph`). Each performance parameter reaching a launch becomes a
knob, wherever the code binds it:

- ``param``: a launcher parameter with a literal ``int`` default passed at the launch
  (``BLOCK=BLOCK``): the tuner passes it as a keyword argument, its default is the baseline;
- ``literal``: a literal at the launch (``BLOCK=1024``, ``num_warps=8``) or a local bound to
  one literal (``BLOCK_ROW = 16``): values on the ladder around it, baseline the literal;
- ``option``: ``num_warps`` (and ``num_stages`` for ``tl.dot`` kernels) that the launch does
  not pass: added, baseline Triton's default;
- ``binding`` / ``expression``: a value the code computes from the shape (``BLOCK_SIZE,
  num_warps = calculate_settings(n)``, ``triton.next_power_of_2(n)`` at the launch, a helper's
  parameter): values are *transforms* of the computed value (``x2``, ``/2``, baseline ``x1``,
  clamped), so a knob stays valid on every shape;
- ``autotune`` / ``heuristic``: see :mod:`tuned.registry.autotune`.

Every knob but ``param`` is injected into a generated copy of the module
(:mod:`tuned.registry.injection`); the user's file is never edited. A knob is a performance
parameter: ``num_warps``/``num_stages``, or a ``tl.constexpr`` parameter whose name says block,
tile, group or split and that the kernel uses as a size (:mod:`tuned.registry.kernel_facts`).
Booleans, flags, strings, floats and anything else that changes the math stay inputs.
A block the kernel does not loop over and the grid does not tile (a one-pass row kernel
needs ``BLOCK >= n``) may grow but never shrink. Knobs of one launch are named
``kernel.NAME`` when the launcher launches several kernels (:data:`Discovery.reach` says
which kernels each knob reaches).
"""

from __future__ import annotations

import ast
import contextvars
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuned.registry.autotune import (
    AUTO,
    AutotuneSpace,
    autotune_space,
    autotune_values,
    module_bound,
)
from tuned.registry.bindings import (
    Local,
    caller_input,
    local_bindings,
    names_in,
    parameters,
    returned_sizes,
)
from tuned.registry.call_graph import imported_callees, reachable
from tuned.registry.kernel_facts import KernelFacts, kernel_facts
from tuned.registry.kernel_sources import (
    imported_kernels,
    launch_site,
    launched_name,
    launcher_functions,
    located_source,
    module_functions,
    with_imported_functions,
)
from tuned.registry.knob_values import (
    BLOCK_BOUNDS,
    BLOCK_OCTAVES,
    DOT_BLOCK_BOUNDS,
    GROUPS,
    STAGES,
    WARPS,
    bounds,
    candidate_values,
    knob_rule,
    ladder,
    scale_values,
)
from tuned.registry.source import ModuleOutline
from tuned.registry.spec import KnobValue

__all__ = [
    "BLOCK_OCTAVES",
    "Discovery",
    "Notice",
    "Site",
    "candidate_values",
    "discover_knobs",
    "discover_source",
    "knob_rule",
    "launches_knobs",
    "scale_values",
]


#: How deep discovery follows calls from the launcher into the module's own functions.
#: Triton's defaults for launch options a launch does not pass (the baseline of an added one).
OPTION_DEFAULTS = {"num_warps": 4, "num_stages": 3}
_LAUNCH_OPTIONS = ("num_warps", "num_stages")


@dataclass(frozen=True)
class Notice:
    """Something discovery could not tune and why (not an error)."""

    line: int
    reason: str


@dataclass(frozen=True, eq=False)
class Site:
    """Where one injected knob's value is written into the generated copy.

    ``form``: ``literal`` (``node``, a constant, is replaced by the value), ``option`` (the
    launch ``node`` gets ``target=value``), ``rebind`` (after statement ``node``, or before it
    when ``before``, ``target = transform(target)`` is inserted), ``wrap`` (expression ``node``
    is replaced by its transform), ``autotune`` (the configs ``node`` becomes one config),
    ``heuristic`` (the lambda body ``node`` is replaced by its transform), ``heuristic_call``
    (a heuristic's function ``node`` is wrapped: ``(lambda f: lambda args: transform(f(args)))
    (node)``).
    """

    knob: str
    form: str
    node: ast.AST
    target: str
    rule: str  # block | warps | stages | group | config
    scale: bool  # values are transforms (``x2``) of the value the code computes
    bounds: tuple[int, int] = (1, 1 << 16)
    before: bool = False
    autotune: AutotuneSpace | None = None


@dataclass
class Discovery:
    """The discovered space, the baseline of injected knobs, their sites, and the notices."""

    knobs: dict[str, tuple[KnobValue, ...]] = field(default_factory=dict)
    notices: list[Notice] = field(default_factory=list)
    baseline: dict[str, KnobValue] = field(default_factory=dict)
    sites: dict[str, list[Site]] = field(default_factory=dict)
    #: knob -> the kernels it reaches
    reach: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def injected(self) -> frozenset[str]:
        """Knobs written into the generated copy (not passed to the launcher)."""
        return frozenset(self.sites)


def _literal(node: ast.expr | None) -> tuple[bool, KnobValue | None]:
    """(True, value) for a literal scalar; (False, None) for anything else."""
    if node is None:
        return False, None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False, None
    return (True, value) if isinstance(value, (int, float, str, bool)) else (False, None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class _Use:
    """One value reaching kernel parameters or launch options: how it becomes a knob."""

    key: tuple[str, ...]  # identity: (form, function, name...) so shared bindings merge
    base: str  # the knob's preferred name
    form: str
    nodes: list[tuple[ast.AST, bool]]  # (node, before) for the sites
    targets: set[str] = field(default_factory=set)  # kernel params / options it feeds
    kernels: set[str] = field(default_factory=set)
    value: KnobValue | None = None  # absolute baseline (None: scaled)
    dot: bool = False
    shrink: bool = True
    line: int = 0
    scope: str = ""  # the function or kernel that names it apart when its name is taken


class _Finder:
    def __init__(
        self,
        functions: Mapping[str, ast.FunctionDef],
        launchers: list[ast.FunctionDef],
        module: str,
        imported: Mapping[str, ast.FunctionDef] | None = None,
        tree: ast.Module | None = None,
        backward: bool = True,
        origins: Mapping[str, tuple[str, ast.Module]] | None = None,
        sources: Mapping[str, str] | None = None,
        package: str = "",
    ) -> None:
        self.tree = tree  # the module, for autotune configs bound at its top level
        #: imported kernel -> (its module's dotted name, its tree): where its configs are read
        self.origins = origins or {}
        self.sources = sources  # the entry's other files, where imported helpers are read
        self.package = package  # the package a worker's copy of the module is imported in
        self.backward = backward  # follow `Fn.apply(...)` into Fn.backward too
        self.functions = functions
        imported = {k: v for k, v in (imported or {}).items() if k not in functions}
        self.kernels = kernel_facts({**imported, **functions}, foreign=imported)
        self.launchers = launchers
        self.module = module
        self.uses: dict[tuple[str, ...], _Use] = {}
        self.autotune_spaces: dict[str, AutotuneSpace] = {}
        #: kernel -> what its @triton.heuristics set (read): under an autotuner, those keys
        #: of its configs are overridden at every launch (Triton's Heuristics runs inside)
        self.heuristic_sets: dict[str, set[str]] = {}
        self.result = Discovery()
        self.scanned: list[ast.FunctionDef] = []  # the launchers and what they call (run)

    def note(self, node: ast.AST, reason: str) -> None:
        if all(n.reason != reason for n in self.result.notices):  # once, at its first place
            self.result.notices.append(Notice(line=getattr(node, "lineno", 0), reason=reason))

    def run(self) -> Discovery:
        sites = 0
        self.scanned = scanned = reachable(
            self.launchers, self.functions, self.kernels, self.tree, backward=self.backward
        )
        for fn in scanned:
            local = local_bindings(fn)
            for node in ast.walk(fn):
                launch = launch_site(node)
                if launch is None:
                    continue
                kernel = self.launched(launched_name(launch[0]), local)
                if kernel is not None:
                    assert isinstance(node, ast.Call)
                    sites += 1
                    self.site(fn, local, node, kernel, launch[1])
        if not sites:
            names = ", ".join(f.name for f in self.launchers)
            elsewhere = imported_callees(self.tree, self.module, scanned, self.kernels)
            todo = "declare knobs in kernel.yaml"
            if elsewhere:
                shown = ", ".join(f"{name} (from {origin})" for name, origin in elsewhere)
                read = {f"{o}.{n}": launches_knobs(f"{o}.{n}") for n, o in elsewhere}
                # those that launch a kernel with a knob, else those that could not be read
                launching = [d for d, v in read.items() if v] or [
                    d for d, v in read.items() if v is None
                ]
                todo = (
                    f"it calls {shown}: kernels launched in another module are not tuned "
                    "through this entry, and a candidate that launches none of its own is "
                    "refused; "
                )
                if launching:
                    more = f" (also: {', '.join(launching[1:])})" if launching[1:] else ""
                    todo += (
                        f"register that launcher instead: `ktuned registry add {launching[0]}`"
                        f"{more}"
                    )
                else:  # a dispatcher (Liger's JSD: `dispatch("jsd_loss_and_grad", ...)`)
                    todo += (
                        "none of them launches a kernel with a knob where ktuned can read it "
                        "(a dispatcher, or helpers further down): register the function that "
                        "launches the kernel, `ktuned registry add PACKAGE.MODULE.FUNCTION`"
                    )
            self.note(
                self.launchers[0],
                f"no launch `kernel[grid](...)` of a top-level @triton.jit function in {names} "
                f"or the functions of {self.module} it calls, so no knob was discovered; {todo}",
            )
        self.finish()
        return self.result

    def launched(self, name: str, local: Local) -> KernelFacts | None:
        """The kernel a launch of ``name`` runs: a kernel of the module (or imported), or a
        local the function binds only to such kernels, e.g. ``fx = _gemma_fwd if gemma else
        _fwd`` then ``fx[grid](...)`` (Unsloth's RMS norm), or one per branch of an ``if``:
        the first kernel it names (such kernels take the same launch arguments)."""
        if name in self.kernels:
            return self.kernels[name]
        bound = local.fresh.get(name, [])
        if not bound or name in local.tangled:
            return None
        chosen: list[KernelFacts] = []
        for _, value in bound:
            options = [value]
            found = []
            while options:
                option = options.pop(0)
                if isinstance(option, ast.IfExp):
                    options[:0] = [option.body, option.orelse]
                elif option is not None and launched_name(option) in self.kernels:
                    found.append(self.kernels[launched_name(option)])
                else:
                    return None  # a local that may be anything else
            chosen.extend(found)
        return chosen[0] if chosen else None

    # -- one launch

    def site(
        self,
        fn: ast.FunctionDef,
        local: Local,
        call: ast.Call,
        kernel: KernelFacts,
        grid_expr: ast.expr | None,
    ) -> None:
        bound: list[tuple[str, ast.expr]] = []
        opaque = False  # a **mapping whose keys are unknown
        for index, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred) or index >= len(kernel.params):
                break
            bound.append((kernel.params[index], arg))
        for kw in call.keywords:
            if kw.arg is not None:
                bound.append((kw.arg, kw.value))
            elif isinstance(kw.value, ast.Name) and kw.value.id in local.dicts:
                bound.extend(local.dicts[kw.value.id].items())
            else:
                opaque = True
        grid = names_in(grid_expr) if grid_expr is not None else set()
        nested = {n.name: n for n in fn.body if isinstance(n, ast.FunctionDef)}
        for name in list(grid):  # through the launcher's own bindings of the grid
            for _, value in local.fresh.get(name, []):
                grid |= names_in(value) if value is not None else set()
            if name in nested:  # def grid(META): return (triton.cdiv(n, META["BLOCK"]),)
                grid |= names_in(nested[name])
        if kernel.autotune is not None and not isinstance(call.func, ast.Subscript):
            self.note(call, f"{kernel.name}.warmup(...) of an autotuned kernel is not tuned")
            return
        if kernel.autotune is not None:
            self.autotuned(call, kernel, grid)
        if kernel.heuristics is not None and kernel.foreign:
            self.note(
                call,
                f"{kernel.name} is imported and its @triton.heuristics live in its own module; "
                "they are not tuned here (register that module's launcher to tune them)",
            )
        heuristic: set[str] | None = set()  # what its heuristics set (None: unknown)
        if kernel.heuristics is not None and not kernel.foreign:
            heuristic = self.heuristics(kernel, grid)
            if heuristic is not None:
                self.heuristic_sets.setdefault(kernel.name, set()).update(heuristic)
        passed = {name for name, _ in bound}
        for name, expr in bound:
            if name in kernel.constexprs or name in _LAUNCH_OPTIONS:
                self.binding(fn, local, call, kernel, name, expr, grid)
        if kernel.autotune is None:
            wanted = ["num_warps", *(["num_stages"] if kernel.uses_dot else [])]
            for option in wanted:
                if option in passed or heuristic is None or option in heuristic:
                    continue  # a heuristic's value (or one unread, noted) overrides the launch's
                if opaque:
                    self.note(
                        call,
                        f"{kernel.name}[...] passes **kwargs discovery cannot read, so "
                        f"{option} is not added (it might be passed twice)",
                    )
                    continue
                use = self.use(("option", kernel.name, option), option, "option", kernel.name)
                use.nodes.append((call, False))
                use.value = OPTION_DEFAULTS[option]
                self.feed(use, kernel, option, grid)

    def use(self, key: tuple[str, ...], base: str, form: str, scope: str) -> _Use:
        if key not in self.uses:
            self.uses[key] = _Use(
                key=key, base=base, form=form, nodes=[], line=len(self.uses), scope=scope
            )
        return self.uses[key]

    def feed(self, use: _Use, kernel: KernelFacts, target: str, grid: set[str]) -> None:
        use.targets.add(target)
        use.kernels.add(kernel.name)
        use.dot = use.dot or kernel.uses_dot
        tiled = target in kernel.tiled or target in grid or use.base in grid
        use.shrink = use.shrink and tiled

    def performance(self, kernel: KernelFacts, target: str) -> bool:
        return target in _LAUNCH_OPTIONS or target in kernel.sized

    def binding(
        self,
        fn: ast.FunctionDef,
        local: Local,
        call: ast.Call,
        kernel: KernelFacts,
        target: str,
        expr: ast.expr,
        grid: set[str],
    ) -> None:
        if not self.performance(kernel, target):
            return
        ok, value = _literal(expr)
        if ok:  # a literal at the launch
            if _is_int(value) and knob_rule({target}, value) is not None:
                key = ("literal", kernel.name, target, str(value))
                use = self.use(key, target, "literal", kernel.name)
                use.nodes.append((expr, False))
                use.value = value
                self.feed(use, kernel, target, grid)
            return
        if not isinstance(expr, ast.Name):  # an expression at the launch
            if knob_rule({target}, 1) in ("block", "warps", "stages"):
                use = self.use(("wrap", kernel.name, target), target, "wrap", kernel.name)
                use.nodes.append((expr, False))
                self.feed(use, kernel, target, grid)
            return
        name = expr.id
        params = parameters(fn)
        shaped = returned_sizes(fn).get(name) if fn in self.launchers else None
        if shaped is not None and knob_rule({target, name}, 1) is not None:
            self.note(
                expr,
                f"{name} (passed as {target} to {kernel.name}) sizes {shaped[0]}, which "
                f"{fn.name} returns (line {shaped[1]}): part of the output's shape, not tuned",
            )
            return
        if name in local.tangled:
            if knob_rule({target, name}, 1) is not None:
                self.note(
                    expr,
                    f"{name} (passed as {target} to {kernel.name}) is rebound from itself, by a "
                    f"loop or a with statement in {fn.name}; discovery does not transform it",
                )
            return
        if name in local.fresh:
            values = [v for _, v in local.fresh[name]]
            literals = [_literal(v) for v in values]
            if all(ok and _is_int(v) for ok, v in literals) and len({v for _, v in literals}) == 1:
                value = literals[0][1]
                if knob_rule({target, name}, value) is None:
                    return
                use = self.use(("local", fn.name, name), name, "literal", fn.name)
                use.nodes = [(v, False) for v in values if v is not None]
                use.value = value
            else:
                if knob_rule({target, name}, 1) not in ("block", "warps", "stages"):
                    return
                if _caller_value(fn, values, launcher=fn in self.launchers):
                    return
                use = self.use(("local", fn.name, name), name, "rebind", fn.name)
                use.nodes = [(stmt, False) for stmt, _ in local.fresh[name]]
            self.feed(use, kernel, target, grid)
            return
        every = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        if name not in every:
            return  # a global or closure name: not the launcher's to change
        ok, value = _literal(params.get(name))
        if fn in self.launchers and ok and _is_int(value):
            if knob_rule({target, name}, value) is None:
                return
            use = self.use(("param", name), name, "param", fn.name)
            use.value = value
            self.feed(use, kernel, target, grid)
            return
        if fn in self.launchers and caller_input(fn, name):
            return  # an input that make_inputs passes (a quantizer's blocksize)
        if knob_rule({target, name}, 1) not in ("block", "warps", "stages"):
            return
        first = fn.body[0]
        if (
            len(fn.body) > 1
            and isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            first = fn.body[1]
        use = self.use(("local", fn.name, name), name, "rebind", fn.name)
        use.nodes = [(first, True)]
        self.feed(use, kernel, target, grid)

    # -- decorators

    def autotuned(self, call: ast.Call, kernel: KernelFacts, grid: set[str]) -> None:
        assert kernel.autotune is not None
        key = ("autotune", kernel.name)
        if key in self.uses:
            if kernel.foreign:  # pinned at each launch: `kernel.fn[grid](..., BLOCK=...)`
                self.uses[key].nodes.append((call, False))
            return
        module, tree, package = (self.module, self.tree, self.package)
        if kernel.foreign:  # read in its own module, which the copy leaves alone
            module, tree = self.origins.get(kernel.name, ("", None))
            package = ""
        if tree is not None:  # configs=helper() of a helper the module imports
            tree = with_imported_functions(tree, module, self.sources, package=package)
        space = autotune_space(kernel.name, kernel.autotune, tree)
        if kernel.foreign and not isinstance(space, str) and space.extra:
            space = (
                f"its configs pass {space.extra.lstrip(', ')}, which a launch-site pin of "
                "the imported kernel would lose"
            )
        if isinstance(space, str):
            self.note(
                call,
                f"{kernel.name}: {space}; declare knobs in kernel.yaml (each Config key, "
                "num_warps and num_stages, with the values to try)",
            )
            return
        use = self.use(key, kernel.name, "autotune", kernel.name)
        use.nodes = [(call if kernel.foreign else space.configs_node, False)]
        use.kernels.add(kernel.name)
        use.dot = kernel.uses_dot
        self.autotune_spaces[kernel.name] = space

    def heuristics(self, kernel: KernelFacts, grid: set[str]) -> set[str] | None:
        """Tune the values ``@triton.heuristics({...})`` (or ``values={...}``) computes; the
        names it sets, or None when its mapping is not a literal dict (a call, as FlagGems'
        ``runtime.get_heuristic_config("softmax_inner")``, which reads a table at import)."""
        assert kernel.heuristics is not None
        call = kernel.heuristics
        values = call.args[0] if call.args else None
        values = next((k.value for k in call.keywords if k.arg == "values"), values)
        shared = ""  # the module-level name of a dict several kernels may share
        if isinstance(values, ast.Name):  # HEURISTICS = {...} at module level
            bound = None if self.tree is None else _module_dict(self.tree, values.id)
            if bound is not None:
                shared, values = values.id, bound
        if not isinstance(values, ast.Dict):
            shown = ast.unparse(values)[:60] if values is not None else "nothing"
            self.note(
                call,
                f"{kernel.name}: its @triton.heuristics values could not be read without "
                f"running the module (discovery reads a literal dict of lambdas); they come "
                f"from `{shown}`, which discovery does not run: the values they set are not "
                "tuned, and no num_warps or num_stages is added to its launch (a heuristic "
                "may set it, and would override the launch's)",
            )
            return None
        names: set[str] = set()
        for k, v in zip(values.keys, values.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                continue
            target = k.value
            names.add(target)
            rule = knob_rule({target}, 1)
            if rule not in ("block", "warps") or not self.performance(kernel, target):
                continue
            # A lambda's body is transformed in place; any other value (a function of the
            # module or imported, `functools.partial(...)`) is called by a wrapping lambda.
            form = "heuristic" if isinstance(v, ast.Lambda) else "heuristic_call"
            key = ("heuristic", shared or kernel.name, target)
            use = self.use(key, target, form, kernel.name)
            use.nodes = [(v.body if isinstance(v, ast.Lambda) else v, False)]
            self.feed(use, kernel, target, grid)
        return names

    # -- naming and values

    def finish(self) -> None:
        taken: set[str] = set()
        several = len({k for u in self.uses.values() for k in u.kernels}) > 1
        blocks: dict[str, int] = {}  # kernel -> how many block-sized values reach it
        for use in self.uses.values():
            if use.form != "autotune" and knob_rule({use.base, *use.targets}, 1) == "block":
                for kernel_name in use.kernels:
                    blocks[kernel_name] = blocks.get(kernel_name, 0) + 1
        for use in sorted(self.uses.values(), key=lambda u: (u.form != "param", u.line)):
            if use.form == "param" and self.launchers:
                order = list(parameters(self.launchers[0]))
                use.line = order.index(use.base) if use.base in order else use.line
            if use.form == "autotune":
                self.autotune_knobs(use, taken, several)
                continue
            rule = knob_rule({use.base, *use.targets}, use.value if use.value is not None else 1)
            if rule is None:
                continue
            name = use.base
            if use.key[0] != "local" and use.form != "param" and several:
                name = f"{sorted(use.kernels)[0]}.{use.base}"
            if use.form == "rebind" and rule in ("group", "split"):
                continue  # a computed group / split count is part of the math
            if use.form != "param":
                name = _unique(name, taken, use.scope)
            taken.add(name)
            scale = use.form in ("rebind", "wrap", "heuristic", "heuristic_call")
            if use.form in ("rebind", "wrap") and rule == "block" and not use.shrink:
                read = _dimension_read(use)
                if read:  # BLOCK_DMODEL=Lk with Lk = k.shape[-1]: the dimension itself
                    self.note(
                        use.nodes[0][0],
                        f"{use.base} is a dimension itself (`{read}`) and the block it feeds "
                        f"({', '.join(sorted(use.targets))}) covers it in one pass: not tuned "
                        "(a larger block reads past it where the kernel does not mask)",
                    )
                    continue
            if scale:
                values: tuple[KnobValue, ...] = scale_values(rule, shrink=use.shrink)
                baseline: KnobValue = "x1"
            else:
                assert use.value is not None
                if rule == "split" and not use.shrink:
                    continue  # a split the grid does not follow would lose work
                lone = all(blocks.get(k, 0) == 1 for k in use.kernels)
                values = candidate_values(
                    rule, use.value, uses_dot=use.dot, shrink=use.shrink, lone=lone
                )
                baseline = use.value
            if len(values) < 2 and not (len(values) == 1 and values[0] != baseline):
                continue
            self.result.knobs[name] = values
            self.result.reach[name] = frozenset(use.kernels)
            if use.form == "param":
                continue  # a launcher parameter: passed by keyword, never injected
            self.result.baseline[name] = baseline
            limits = bounds(rule, use.dot)
            if not use.shrink and rule == "block" and not scale:
                limits = (int(use.value or 1), limits[1])
            target = use.base if use.form in ("rebind", "option") else next(iter(use.targets))
            self.result.sites[name] = [
                Site(
                    knob=name,
                    form=use.form,
                    node=node,
                    target=target,
                    rule=rule,
                    scale=scale,
                    bounds=limits,
                    before=before,
                )
                for node, before in use.nodes
            ]

    def autotune_knobs(self, use: _Use, taken: set[str], several: bool) -> None:
        kernel = next(iter(use.kernels))
        space = self.autotune_spaces[kernel]
        overridden = self.heuristic_sets.get(kernel, set())
        for key in space.keys:
            if key in overridden:  # a heuristic sets it after the config: a dead knob
                continue
            seen = [c[key] for c in space.configs]
            rule = knob_rule({key}, seen[0])
            if rule == "block":
                lo, hi = DOT_BLOCK_BOUNDS if use.dot else BLOCK_BOUNDS
                rungs: tuple[int, ...] | None = ladder(lo, hi)
            elif rule == "warps":
                rungs = (*WARPS, 32)
            elif rule == "stages":
                rungs = STAGES
            elif rule in ("group", "split"):
                rungs = GROUPS
            else:
                rungs = None
            values = autotune_values(key, seen, rungs)
            if len(values) < 2:
                continue
            name = _unique(f"{kernel}.{key}" if several else key, taken, kernel)
            taken.add(name)
            self.result.knobs[name] = values
            self.result.reach[name] = frozenset({kernel})
            self.result.baseline[name] = AUTO
            self.result.sites[name] = [
                Site(
                    knob=name,
                    form="autotune_launch" if node is not space.configs_node else "autotune",
                    node=node,
                    target=key,
                    rule="config",
                    scale=False,
                    autotune=space,
                )
                for node, _ in use.nodes
            ]


def _caller_value(
    fn: ast.FunctionDef, values: list[ast.expr | None], *, launcher: bool = False
) -> bool:
    """True when every binding of a local is a bare parameter of ``fn`` that has no literal
    default and is not named as a performance parameter (``BT = chunk_size``): the caller's
    value, a chunk size or a head dimension the result depends on (a chunked cumsum sums
    within chunks of it), which no transform may change. ``B = BLOCK_SIZE`` and
    ``B = next_power_of_2(n)`` stay knobs, but not copies of a ``launcher``'s input
    (:func:`~tuned.registry.bindings.caller_input`)."""
    if not values or not all(isinstance(v, ast.Name) for v in values):
        return False
    params = parameters(fn)
    for value in values:
        assert isinstance(value, ast.Name)
        if launcher and caller_input(fn, value.id):
            continue
        if value.id not in params or _literal(params[value.id])[0]:
            return False
        if knob_rule({value.id}, 1) is not None:
            return False
    return True


def _module_dict(tree: ast.Module, name: str) -> ast.Dict | None:
    """The literal dict ``name`` is bound to once at module level (``HEURISTICS = {...}``),
    or None (bound otherwise, or more than once)."""
    found = module_bound(tree, name)
    return found[0] if len(found) == 1 and isinstance(found[0], ast.Dict) else None


def _dimension_read(use: _Use) -> str:
    """The binding (as written) when every statement that binds ``use`` binds it to one
    dimension of a tensor, as read (``Lk = k.shape[-1]``, ``D = x.size(1)``, or that element
    of a tuple assignment), not a value computed from it (``triton.next_power_of_2(D)``);
    "" otherwise."""
    shown = ""
    for node, _ in use.nodes:
        value = _bound_value(node, use.base)
        is_dim = (
            isinstance(value, ast.Subscript)
            and isinstance(value.value, ast.Attribute)
            and value.value.attr == "shape"
        ) or (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "size"
            and len(value.args) == 1
        )
        if not is_dim or value is None:
            return ""
        shown = shown or (
            ast.unparse(value)
            if isinstance(node, ast.expr)
            else f"{use.base} = {ast.unparse(value)}"
        )
    return shown


def _bound_value(stmt: ast.AST, name: str) -> ast.expr | None:
    """What ``stmt`` binds ``name`` to: an assignment's value, or the element of a tuple
    assignment (``Lq, Lk = q.shape[-1], k.shape[-1]``) in ``name``'s place; an expression
    written at the launch (``BLOCK=x.shape[-1]``) is its own value."""
    if isinstance(stmt, ast.expr):
        return stmt
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    target = stmt.targets[0]
    if isinstance(target, ast.Name):
        return stmt.value if target.id == name else None
    if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple):
        for element, value in zip(target.elts, stmt.value.elts, strict=False):
            if isinstance(element, ast.Name) and element.id == name:
                return value
    return None


def _unique(name: str, taken: set[str], scope: str) -> str:
    if name not in taken:
        return name
    scoped = f"{scope}.{name}" if scope else name
    n, candidate = 2, scoped
    while candidate in taken:
        candidate, n = f"{scoped}_{n}", n + 1
    return candidate


#: Set while :func:`launches_knobs` discovers a callee: its own notes follow nothing further.
_FOLLOWING: contextvars.ContextVar[bool] = contextvars.ContextVar("following", default=False)


def launches_knobs(dotted: str) -> bool | None:
    """Whether the function at ``dotted`` (a module on the import path, read, never imported)
    launches kernels with a discovered knob itself or through its module's functions; None
    when its module cannot be read (not on the path, too large, not text)."""
    if _FOLLOWING.get():
        return None
    found_source = located_source(dotted)
    if found_source is None:
        return None
    module, qualname, _, text = found_source
    token = _FOLLOWING.set(True)
    try:
        found = discover_source(text, qualname, module)
    finally:
        _FOLLOWING.reset(token)
    return found is not None and bool(found.knobs)


def discover_knobs(
    outline: ModuleOutline,
    launcher: ast.FunctionDef,
    module: str,
    *,
    source: str | None = None,
    sources: Mapping[str, str] | None = None,
    backward: bool = True,
) -> Discovery:
    """The knobs of ``launcher`` (a top-level function of the module outlined by ``outline``)
    and of the module's functions it calls, and notices of what was left out. With the
    module's ``source``, kernels it imports are found too (:func:`imported_kernels`, looking
    in ``sources``, the entry's other files, first). Without ``backward`` (the entry never
    runs the backward pass), knobs that reach only backward kernels are left out
    (:func:`_forward_only`)."""
    functions: Mapping[str, ast.FunctionDef] = outline.functions
    imported: dict[str, ast.FunctionDef] = {}
    origins: dict[str, tuple[str, ast.Module]] = {}
    tree = None
    if source is not None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = ast.Module(body=[], type_ignores=[])
        functions = {**module_functions(tree), **outline.functions}  # `if has_triton():` too
        imported = imported_kernels(tree, sources, origins=origins)
    found = _Finder(functions, [launcher], module, imported, tree, True, origins, sources).run()
    if backward:
        return found
    finder = _Finder(functions, [launcher], module, imported, tree, False, origins, sources)
    forward = finder.run()
    return _forward_only(found, forward, finder.scanned)


def discover_source(
    source: str,
    launcher: str,
    module: str = "module",
    *,
    sources: Mapping[str, str] | None = None,
    backward: bool = True,
    package: str = "",
) -> Discovery | None:
    """Discovery on ``source`` for the launcher named ``launcher`` (see
    :func:`launcher_functions`); None when the source does not parse or lacks the launcher.
    ``sources``: the entry's other files (relative path -> text), for imported kernels.
    ``module`` (an installed module's dotted name) or ``package`` (the package a copy of the
    source is imported in) resolve its relative imports. Without ``backward``, as
    :func:`discover_knobs`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    launchers = launcher_functions(tree, launcher)
    if not launchers:
        return None
    functions = module_functions(tree)
    origins: dict[str, tuple[str, ast.Module]] = {}
    imported = imported_kernels(tree, sources, module=module, package=package, origins=origins)
    found = _Finder(
        functions, launchers, module, imported, tree, True, origins, sources, package
    ).run()
    if backward:
        return found
    forward_only = launcher_functions(tree, launcher, backward=False)
    finder = _Finder(
        functions, forward_only, module, imported, tree, False, origins, sources, package
    )
    forward = finder.run()
    return _forward_only(found, forward, finder.scanned)


def _saved_for_backward(defs: Sequence[ast.FunctionDef]) -> dict[str, str]:
    """Names an autograd Function's ``forward`` saves on ``ctx`` (its first parameter, named
    ``ctx``), with the attribute each goes to: ``ctx.BLOCK_SIZE = BLOCK_SIZE`` gives
    ``{"BLOCK_SIZE": "ctx.BLOCK_SIZE"}``; what its backward reads back."""
    saved: dict[str, str] = {}
    for fn in defs:
        args = [*fn.args.posonlyargs, *fn.args.args]
        if not args or args[0].arg != "ctx":
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "ctx"
                ):
                    for name in names_in(node.value):
                        saved.setdefault(name, f"ctx.{target.attr}")
    return saved


def _forward_only(
    found: Discovery, forward: Discovery, defs: Sequence[ast.FunctionDef] = ()
) -> Discovery:
    """``found`` without the knobs that reach only kernels ``forward`` (the same discovery,
    following autograd Functions into ``forward`` only) never launches: an entry that does
    not run the backward pass does not tune its kernels (every such candidate would time the
    baseline again). The names and sites stay ``found``'s, which the generated copies
    (:func:`tuned.registry.injection.materialize`, discovering in full) are written from."""
    launched = frozenset().union(*forward.reach.values()) if forward.reach else frozenset()
    keep = {k for k in found.knobs if k not in found.reach or found.reach[k] & launched}
    notices = list(found.notices)
    notices += [n for n in forward.notices if all(n.reason != m.reason for m in notices)]
    dropped = sorted(k for k in found.knobs if k not in keep)
    if dropped:
        kernels = sorted(set().union(*(found.reach[k] for k in dropped)))
        notices.append(
            Notice(
                line=defs[0].lineno if defs else 0,
                reason=f"{', '.join(dropped)} reach only kernels the backward pass launches "
                f"({', '.join(kernels)}) and this entry checks the forward only, so they are "
                "not tuned; set `backward: true` to tune them",
            )
        )
    saved = _saved_for_backward(defs)
    for knob in sorted(keep):
        names = {knob.rpartition(".")[2], *(site.target for site in found.sites.get(knob, ()))}
        where = next((saved[n] for n in sorted(names) if n in saved), None)
        if where is not None:
            notices.append(
                Notice(
                    line=defs[0].lineno,
                    reason=f"{knob} is saved for the backward pass ({where}) and this entry "
                    "checks the forward only: a variant can change the gradients unseen; "
                    "set `backward: true` to check them",
                )
            )
    return Discovery(
        knobs={k: v for k, v in found.knobs.items() if k in keep},
        notices=notices,
        baseline={k: v for k, v in found.baseline.items() if k in keep},
        sites={k: v for k, v in found.sites.items() if k in keep},
        reach={k: v for k, v in found.reach.items() if k in keep},
    )
