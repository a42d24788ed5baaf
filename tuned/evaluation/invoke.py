"""How to call an entry's launcher (or reference) as its author wrote it (runs inside a worker).

The entry names its launcher by a dotted path (docs/registry.md, "Launchers"), resolved first
inside the entry's module (``softmax``, ``SoftmaxFunction.apply``, ``Ops.fused``) and else as an
importable path (``liger_kernel.ops.rms_norm.LigerRMSNormFunction.apply``). What it resolves to
decides how it is called:

- a function, a static or class method, a bound method: ``fn(*inputs, **knobs)``;
- ``SomeFunction.apply`` of a ``torch.autograd.Function``: ``apply`` takes positional arguments
  only, so the knobs are placed by the parameter names of ``forward`` (after ``ctx``);
- a class (an ``nn.Module`` or any class whose instances are callable): constructed with the
  entry's ``init`` arguments (a string that names a shape dimension is that dimension's size)
  and, when its constructor takes ``device`` and ``init`` does not give it, the inputs'
  device, under a seeded RNG, moved to the inputs' device and floating dtype; ``instance(*inputs,
  **knobs)``, knobs the constructor takes going to the constructor instead.

What the call returns is a tuple of tensors (:func:`call`):

- ``outputs`` declared (argument positions or parameter names the launcher writes, in place or
  into a provided buffer): those arguments are fresh copies made for this call, and after the
  call they are the outputs, in the declared order (the launcher's return value is ignored; an
  entry's own reference may return its outputs instead, or write them the same way; the
  launcher standing in as the reference gives what it wrote);
- otherwise the return value (a tensor, or a tuple/list of them). ``None`` without declared
  outputs is an invalid entry (:class:`CaseFailure` ``rejected_static``), never a vacuous pass;
- ``backward`` declared: the listed floating-point inputs are fresh leaf copies that require
  gradients; after the forward, ``torch.autograd.grad`` with seeded ``grad_outputs`` (or the
  entry's own ``grad_outputs(outputs, seed)``) gives their gradients, appended after the
  forward outputs, detached.

A reference goes through the same rules (without knobs), so the two are compared output for
output. The public surface for the worker is :class:`EntryCall` (built by :func:`entry_call`)
and its :meth:`EntryCall.at`, which gives a plain ``fn(*inputs, **knobs) -> tuple``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tuned.evaluation.checks import CaseFailure

__all__ = ["CallFields", "EntryCall", "call", "entry_call", "kernel_modules", "resolve"]

#: The seed of default ``grad_outputs`` (the same for candidate and reference).
GRAD_SEED = 1234


@dataclass(frozen=True)
class CallFields:
    """The entry fields that shape a call (``kernel.yaml``: outputs, backward, init,
    grad_outputs), as sent to the worker in the kernel payload under ``"call"``."""

    outputs: tuple[int | str, ...] = ()
    #: ``()``: no backward; ``("*",)``: every floating-point tensor input; else positions/names.
    backward: tuple[int | str, ...] = ()
    init: Mapping[str, Any] = field(default_factory=dict)
    grad_outputs: str | None = None
    #: Parameters the last inputs fill by keyword, in order (``def add(x, y, *, out0)``).
    keywords: tuple[str, ...] = ()

    @classmethod
    def from_payload(cls, data: Mapping[str, Any] | None) -> CallFields:
        data = data or {}
        return cls(
            outputs=tuple(data.get("outputs", ())),
            backward=tuple(data.get("backward", ())),
            init=dict(data.get("init", {})),
            grad_outputs=data.get("grad_outputs"),
            keywords=tuple(str(k) for k in data.get("keywords", ())),
        )

    def to_payload(self) -> dict[str, Any]:
        return {
            "outputs": list(self.outputs),
            "backward": list(self.backward),
            "init": dict(self.init),
            "grad_outputs": self.grad_outputs,
            "keywords": list(self.keywords),
        }


def _invalid(field_name: str, reason: str) -> CaseFailure:
    where = f"invalid entry (kernel.yaml, field {field_name})"
    return CaseFailure("rejected_static", f"{where}: {reason}")


def resolve(namespace: ModuleType, path: str, field_name: str = "launcher") -> Any:
    """The object a dotted ``path`` names: looked up in ``namespace`` (the entry's module) when
    its first part is bound there, else imported (the longest importable prefix, then
    attributes)."""
    parts = path.split(".")
    if not all(p.isidentifier() for p in parts):
        raise _invalid(field_name, f"{path!r} is not a dotted Python path")
    if hasattr(namespace, parts[0]):
        obj: Any = namespace
        rest = parts
    else:
        obj, rest = None, parts
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            rest = parts[cut:]
            break
        if obj is None:
            raise _invalid(
                field_name,
                f"{parts[0]!r} is neither defined in the entry's module nor an importable "
                f"module; define or import it in the module, or write the full dotted path",
            )
    for i, part in enumerate(rest):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            where = ".".join(parts[: len(parts) - len(rest) + i]) or "the entry's module"
            raise _invalid(field_name, f"{where} has no attribute {part!r} ({path})") from None
    return obj


def _takes_device(cls: Any) -> bool:
    """Whether the constructor of ``cls`` has a parameter named ``device`` (PyTorch's factory
    keyword: ``nn.Linear(..., device=None, dtype=None)``; attorch's layers default it to
    ``'cuda'``, which fails on any other device)."""
    try:
        return "device" in inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def _is_autograd_apply(obj: Any) -> Any:
    """The ``torch.autograd.Function`` subclass whose ``apply`` ``obj`` is, else None."""
    import torch

    owner = getattr(obj, "__self__", None)
    if (
        isinstance(owner, type)
        and issubclass(owner, torch.autograd.Function)
        and getattr(obj, "__name__", "") == "apply"
    ):
        return owner
    return None


def kernel_modules(target: Any, module: ModuleType | None = None) -> set[str]:
    """Names of the modules whose Triton launches count as the launcher's own: where the
    resolved launcher (its function, class or autograd Function) is defined, and, given the
    candidate's ``module``, that module and the modules of the kernels it binds at top level
    (``from .kernels import _fwd``, or ``import pkg.kernels as K`` for ``K._fwd[grid]``): a
    launcher beside kernels imported from a kernels module launched them itself (its
    original was refused as launching none of its own)."""
    names: set[str] = set()
    owner = _is_autograd_apply(target) or getattr(target, "__self__", None)
    for obj in (target, owner, getattr(target, "__func__", None)):
        where = getattr(obj, "__module__", None)
        if isinstance(where, str):
            names.add(where)
    if module is not None:
        names.add(module.__name__)
        bound: set[str] = set()
        for value in list(vars(module).values()):
            if isinstance(value, ModuleType):
                if any(_kernel_module(v) for v in list(vars(value).values())):
                    bound.add(value.__name__)
            elif (where := _kernel_module(value)) is not None:
                bound.add(where)
        # Triton's own @jit helpers (`tl.sum`, `tl.cdiv`) are no kernel of the user's; in the
        # interpreter they run as Python, where the guard would take them for candidate code.
        names |= {n for n in bound if n.split(".")[0] not in ("triton", "torch")}
    return names


def _kernel_module(value: Any) -> str | None:
    """The module a Triton kernel (``@triton.jit``, wrapped in ``@triton.autotune`` or
    ``@triton.heuristics`` any number of times) is defined in; None for anything else."""
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:  # pragma: no cover - triton is always there in a worker
        return None
    for _ in range(8):  # autotune(heuristics(jit(f))): .fn down to the Python function
        if not isinstance(value, KernelInterface):
            return None
        inner = getattr(value, "fn", None)
        if not isinstance(inner, KernelInterface):
            where = getattr(inner, "__module__", None)
            return where if isinstance(where, str) else None
        value = inner
    return None


def _float_like(inputs: Sequence[Any]) -> tuple[Any, Any]:
    """(device, floating dtype) of the first floating-point tensor input, else (None, None)."""
    import torch

    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.device, x.dtype
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return x.device, None
    return None, None


def _positions(
    names: Sequence[int | str], params: Sequence[str], count: int, field_name: str
) -> list[int]:
    """Input positions of ``names`` (positions, or the launcher's parameter names)."""
    found: list[int] = []
    for item in names:
        if isinstance(item, int):
            index = item
        elif item in params:
            index = list(params).index(item)
        else:
            raise _invalid(
                field_name,
                f"{item!r} is not a parameter of the launcher (parameters: {', '.join(params)})",
            )
        if not 0 <= index < count:
            raise _invalid(field_name, f"position {index} is outside the {count} inputs")
        found.append(index)
    return found


def _input_names(
    params: Sequence[str], count: int, fields: CallFields, *, check: bool = True
) -> list[str]:
    """The launcher's parameter names in the order of its ``count`` inputs: the last ones are
    ``fields.keywords`` (so ``outputs: [out0]`` finds a keyword input), then the rest (a
    name there is past the inputs: :func:`_positions` says so). ``check``: each keyword must
    be one of ``params`` (not for a launcher with ``**kwargs``)."""
    keywords = list(fields.keywords)
    if not keywords:
        return list(params)
    missing = [k for k in keywords if check and params and k not in params]
    if missing:
        raise _invalid(
            "keywords",
            f"{', '.join(map(repr, missing))} is not a parameter of the launcher "
            f"(parameters: {', '.join(params)})",
        )
    positional = [p for p in params if p not in keywords][: max(0, count - len(keywords))]
    return positional + keywords + [p for p in params if p not in keywords + positional]


def _parameters(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


@functools.lru_cache(maxsize=256)
def _positional_parameters(target: Any) -> list[inspect.Parameter] | None:
    """``target``'s parameters, read once (the launcher is called on every timed repetition
    that is not in a CUDA graph); None when it has no signature to read."""
    try:
        return list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None


def _knobs_in_place(
    target: Any, inputs: Sequence[Any], knobs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``(args, keyword knobs)`` for ``target(*inputs, **knobs)`` where an input fills a knob's
    parameter by position: inputs are positional, so reaching a later parameter (a
    dequantizer's ``dtype`` after its ``quant_blocksize=64``) passes the ones before it, and
    the knob then takes that place (as a keyword it failed with "got multiple values for
    argument"). The input must be the parameter's default, the knob's baseline."""
    try:
        params = _positional_parameters(target) if knobs else None
    except TypeError:  # an unhashable callable: read it each time
        params = _positional_parameters.__wrapped__(target)
    if params is None:
        return list(inputs), dict(knobs)
    args, rest = list(inputs), dict(knobs)
    for i, p in enumerate(params[: len(args)]):
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break  # *args: the rest of the inputs go there
        if p.name not in rest:
            continue
        given = args[i]
        if p.default is p.empty or type(given) is not type(p.default) or given != p.default:
            raise _invalid(
                "inputs",
                f"input {i} ({given!r}) fills the launcher's parameter {p.name!r}, which is a "
                f"knob whose baseline is its default ({p.default!r}): return that default in "
                f"this place (the knob's value replaces it), or stop the inputs before it",
            )
        args[i] = rest.pop(p.name)
    return args, rest


@dataclass
class EntryCall:
    """One entry's launcher (``role="launcher"``) or reference, ready to call on inputs."""

    target: Any
    fields: CallFields
    role: str
    default_knobs: Mapping[str, Any] = field(default_factory=dict)
    namespace: ModuleType | None = None
    #: Parameter names that ``outputs``/``backward`` name (the launcher's, also for a
    #: reference whose own parameters are named otherwise); None: this target's.
    names: list[str] | None = None
    #: Whether the inputs ``fields.keywords`` names go by keyword (the launcher's; an entry's
    #: own ``reference`` takes every input by position).
    by_keyword: bool = True
    #: The launcher standing in as the reference (the entry has none): with ``outputs``
    #: declared it gives what it wrote, as the launcher does; a reference of its own may
    #: return its outputs instead.
    launcher_as_reference: bool = False
    _instances: dict[Any, Any] = field(default_factory=dict)

    def at(self, dims: Mapping[str, int] | None = None) -> Callable[..., tuple[Any, ...]]:
        """``fn(*inputs, **knobs) -> tuple`` for a case of dimensions ``dims``."""
        return lambda *inputs, **knobs: call(self, inputs, knobs, dims=dims)

    # -- how the resolved target is called

    def _instance(
        self, dims: Mapping[str, int], device: Any, dtype: Any, ctor: Mapping[str, Any]
    ) -> Any:
        import torch

        key = (tuple(sorted(dims.items())), str(device), str(dtype), tuple(sorted(ctor.items())))
        if key not in self._instances:
            args = {
                k: dims[v] if isinstance(v, str) and v in dims else v
                for k, v in self.fields.init.items()
            }
            if device is not None and "device" not in {*args, *ctor} and _takes_device(self.target):
                args["device"] = device  # PyTorch's factory keyword, whatever its default
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                instance = self.target(**args, **ctor)
            if isinstance(instance, torch.nn.Module):
                instance = instance.to(device=device) if device is not None else instance
                if dtype is not None:
                    instance = instance.to(dtype=dtype)
            if not callable(instance):
                raise _invalid("launcher", f"instances of {self.target.__name__} are not callable")
            if len(self._instances) > 16:
                self._instances.clear()
            self._instances[key] = instance
        return self._instances[key]

    def parameters(self) -> list[str]:
        """The launcher's parameter names, inputs first (``ctx``/``self`` left out)."""
        function_class = _is_autograd_apply(self.target)
        if function_class is not None:
            return _parameters(function_class.forward)[1:]
        if isinstance(self.target, type):
            return _parameters(self._called())[1:]
        return _parameters(self.target)

    def _called(self) -> Any:
        """What the inputs are passed to: the function, or a class's ``forward``."""
        if isinstance(self.target, type):
            return getattr(self.target, "forward", self.target.__call__)
        return self.target

    def takes_any_keyword(self) -> bool:
        """Whether what the inputs are passed to has a ``**kwargs`` (or no signature to read)."""
        try:
            params = inspect.signature(self._called()).parameters.values()
        except (TypeError, ValueError):
            return True
        return any(p.kind is p.VAR_KEYWORD for p in params)

    def invoke(
        self, inputs: Sequence[Any], knobs: Mapping[str, Any], dims: Mapping[str, int]
    ) -> Any:
        knobs = {**self.default_knobs, **knobs}
        function_class = _is_autograd_apply(self.target)
        named: dict[str, Any] = {}
        keywords = self.fields.keywords if self.by_keyword else ()
        if keywords:
            if function_class is not None:
                raise _invalid(
                    "keywords",
                    f"{function_class.__name__}.apply takes its inputs by position only",
                )
            cut = len(inputs) - len(keywords)
            if cut < 0:
                raise _invalid(
                    "keywords",
                    f"names {len(keywords)} keyword inputs, but the inputs are {len(inputs)}",
                )
            named = dict(zip(keywords, inputs[cut:], strict=True))
            inputs = inputs[:cut]
        if function_class is not None:
            if not knobs:
                return self.target(*inputs)
            params = self.parameters()
            args = list(inputs)
            for name in params[len(args) :]:
                if name in knobs:
                    args.append(knobs.pop(name))
                else:
                    default = inspect.signature(function_class.forward).parameters[name].default
                    if default is inspect.Parameter.empty:
                        raise _invalid("launcher", f"forward needs {name!r}, not among the inputs")
                    args.append(default)
            if knobs:
                raise _invalid("knobs", f"{', '.join(knobs)} are not parameters of forward")
            return self.target(*args)
        if isinstance(self.target, type):
            device, dtype = _float_like(inputs)
            takes = set(_parameters(self.target))  # the constructor's, without self
            ctor = {k: v for k, v in knobs.items() if k in takes}
            rest = {k: v for k, v in knobs.items() if k not in takes}
            return self._instance(dims, device, dtype, ctor)(*inputs, **named, **rest)
        args, rest = _knobs_in_place(self.target, inputs, knobs)
        return self.target(*args, **named, **rest)


def entry_call(namespace: ModuleType, kernel: Mapping[str, Any], *, role: str) -> EntryCall:
    """The launcher (``role="launcher"``) resolved in ``namespace`` (the candidate's module), or
    the reference (``role="reference"``, resolved in the original module): the entry's
    ``reference`` when given, else the launcher at the baseline knobs."""
    fields = CallFields.from_payload(kernel.get("call"))
    if role == "reference" and kernel.get("reference"):
        target = resolve(namespace, str(kernel["reference"]), "reference")
        names = None
        if fields.outputs or fields.backward or fields.keywords:  # the launcher's names
            launcher = resolve(namespace, str(kernel["launcher"]), "launcher")
            names = EntryCall(target=launcher, fields=fields, role="launcher").parameters()
        return EntryCall(
            target=target,
            fields=fields,
            role="reference",
            namespace=namespace,
            names=names,
            by_keyword=False,
        )
    target = resolve(namespace, str(kernel["launcher"]), "launcher")
    if not callable(target):
        raise _invalid("launcher", f"{kernel['launcher']!r} is not callable")
    defaults = dict(kernel.get("baseline_knobs", {})) if role == "reference" else {}
    return EntryCall(
        target=target,
        fields=fields,
        role=role,
        default_knobs=defaults,
        namespace=namespace,
        launcher_as_reference=role == "reference",
    )


def _as_outputs(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


#: Default incoming gradients by (shapes, dtypes, device): made once (on the CPU, seeded, so
#: the same on every device and call), copied for each call (a backward may write into them).
_GRADS: dict[tuple[Any, ...], list[Any]] = {}


def _grad_outputs(outs: Sequence[Any], namespace_fn: Any) -> list[Any]:
    import torch

    if namespace_fn is not None:
        return list(_as_outputs(namespace_fn(tuple(outs), GRAD_SEED)))
    key = tuple((tuple(o.shape), str(o.dtype), str(o.device)) for o in outs)
    if key not in _GRADS:
        if len(_GRADS) > 32:  # a long-lived worker sees many shapes
            _GRADS.clear()
        generator = torch.Generator().manual_seed(GRAD_SEED)
        _GRADS[key] = [
            torch.randn(o.shape, generator=generator, dtype=torch.float32).to(
                device=o.device, dtype=o.dtype
            )
            for o in outs
        ]
    return [g.clone() for g in _GRADS[key]]


def call(
    entry: EntryCall,
    inputs: Sequence[Any],
    knobs: Mapping[str, Any],
    *,
    dims: Mapping[str, int] | None = None,
) -> tuple[Any, ...]:
    """Call ``entry`` on ``inputs`` (never modified: written arguments are fresh copies) and
    return its outputs as a tuple (module docstring)."""
    import torch

    fields, args = entry.fields, list(inputs)
    params = _input_names(
        entry.names if entry.names is not None else entry.parameters(),
        len(args),
        fields,
        check=entry.by_keyword and not entry.takes_any_keyword(),  # the launcher's call
    )
    written = _positions(fields.outputs, params, len(args), "outputs")
    for i in written:
        if not isinstance(args[i], torch.Tensor):
            raise _invalid("outputs", f"input {i} is {type(args[i]).__name__}, not a tensor")
        args[i] = args[i].detach().clone()
    wanted: list[int] = []
    if fields.backward:
        if tuple(fields.backward) == ("*",):
            wanted = [
                i
                for i, x in enumerate(args)
                if isinstance(x, torch.Tensor) and x.is_floating_point()
            ]
        else:
            wanted = _positions(fields.backward, params, len(args), "backward")
        for i in wanted:
            x = args[i]
            if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
                raise _invalid("backward", f"input {i} is not a floating-point tensor")
            args[i] = x.detach().clone().requires_grad_(True)
    with torch.enable_grad() if wanted else torch.no_grad():
        returned = entry.invoke(args, knobs, dims or {})
    # The launcher as the reference follows the launcher's rule: a launcher that writes its
    # declared outputs and also returns other values (Liger's JSD primitive returns the loss
    # beside the gradient it wrote) was compared on what it wrote against what it returned.
    own_reference = entry.role == "reference" and not entry.launcher_as_reference
    if written and not (own_reference and returned is not None):
        outs: tuple[Any, ...] = tuple(args[i] for i in written)
    elif returned is None:
        if entry.role == "reference" and not wanted:
            raise _invalid("reference", "the reference returned nothing; return its outputs")
        raise _invalid(
            "outputs",
            f"the {entry.role} returned nothing and the entry declares no outputs; if it "
            "writes its results into arguments, list them, e.g. `outputs: [out]` (parameter "
            "names or positions)",
        )
    else:
        outs = _as_outputs(returned)
    if not wanted:
        return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs)
    # Gradients flow from what the call returned (written arguments are the leaves themselves
    # when written in place), else from written outputs that autograd recorded.
    sources = _as_outputs(returned) if returned is not None else outs
    differentiable = [o for o in sources if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    if not differentiable:
        raise _invalid("backward", f"no output of the {entry.role} requires a gradient")
    hook = None
    if fields.grad_outputs:
        hook = resolve(entry.namespace or ModuleType("entry"), fields.grad_outputs, "grad_outputs")
    grads = torch.autograd.grad(
        differentiable,
        [args[i] for i in wanted],
        grad_outputs=_grad_outputs(differentiable, hook),
        allow_unused=True,
    )
    tail = tuple(
        torch.zeros_like(args[i]) if g is None else g.detach()
        for i, g in zip(wanted, grads, strict=True)
    )
    return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs) + tail
