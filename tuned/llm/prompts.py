"""The rewrite prompt: everything the model needs to improve one kernel in one reply.

A system message states the contract (the whole module in one fenced Python block, the
launcher's signature kept, imports and torch use limited as the static gate enforces). The
user message gives the GPU, the parent's source with its measured time and, when profiled,
its speed-of-light figures and bottleneck class, the chosen strategy's instruction, and the
latest attempts on this kernel with their outcomes, so the model does not repeat a failure.

The text is deterministic for equal inputs: the response cache is keyed by it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuned.llm.gate import ALLOWED_IMPORTS, TORCH_ALLOWED

__all__ = [
    "Attempt",
    "PromptContext",
    "StrategyContext",
    "bottleneck",
    "build_messages",
    "build_strategy_messages",
]

SYSTEM = """\
You are an expert GPU performance engineer who writes Triton kernels.
You rewrite one Python module that holds Triton kernel(s) and a launcher so that it computes
exactly the same outputs, faster, on the GPU described.

Rules (a static checker enforces them; a module that breaks one is discarded unrun):
- Reply with the complete module in ONE fenced ```python block. Nothing is merged: every
  function the module needs must be in the block.
- Keep the launcher's name and parameters exactly ({signature}). Knob parameters are passed
  by keyword and must stay accepted, even if your code no longer needs them.
- The launcher must compute through @triton.jit kernel(s) launched as kernel[grid](...).
  In the launcher use torch only to allocate and reshape ({torch_allowed}); no torch compute
  (no torch.add, x.sum(), @, F.*, nor calling a reference implementation).
- Imports only from: {imports}.
- No module-level state or caches, no classes, no exec/eval/open, no os/sys/threads/streams,
  no monkey-patching.
- Name only triton, triton.language, math and torch tensor functions, and call them where
  you name them (no `f = torch.add`); no getattr/type/print, no `_private` or `__dunder__`
  attributes, no torch.cuda/_C/ops. Module level: imports, functions and literal constants;
  default arguments are literals; decorators only triton.jit/autotune/heuristics.
"""


#: The system message of a reference entry's first modules: no Triton code exists yet.
SYSTEM_FROM_REFERENCE = """\
You are an expert GPU performance engineer who writes Triton kernels.
You write one Python module holding Triton kernel(s) and a launcher that computes exactly
what a PyTorch reference computes, faster, on the GPU described.

Rules (a static checker enforces them; a module that breaks one is discarded unrun):
- Reply with the complete module in ONE fenced ```python block; it must be self-contained
  (the reference is not importable from it).
- The launcher is {signature}: the reference's parameters, in order, then optional
  tuning knobs as parameters with literal int defaults (e.g. BLOCK_SIZE: int = 1024,
  num_warps: int = 4) passed to the launch (kernel[grid](..., BLOCK_SIZE=BLOCK_SIZE,
  num_warps=num_warps)), so they can be tuned. It returns what the reference returns.
- The launcher must compute through @triton.jit kernel(s) launched as kernel[grid](...).
  In the launcher use torch only to allocate and reshape ({torch_allowed}); no torch compute
  (no torch.add, x.sum(), @, F.*, nor calling the reference).
- Imports only from: {imports}.
- No module-level state or caches, no classes, no exec/eval/open, no os/sys/threads/streams,
  no monkey-patching.
- Name only triton, triton.language, math and torch tensor functions, and call them where
  you name them (no `f = torch.add`); no getattr/type/print, no `_private` or `__dunder__`
  attributes, no torch.cuda/_C/ops. Module level: imports, functions and literal constants;
  default arguments are literals; decorators only triton.jit/autotune/heuristics.
"""


@dataclass(frozen=True)
class Attempt:
    """One earlier attempt on this kernel, as the history shows it."""

    strategy: str
    status: str  # the evaluation outcome, or why no candidate came out of the reply
    detail: str = ""
    speedup: float | None = None  # versus its parent, when it ran


@dataclass(frozen=True)
class PromptContext:
    """What one rewrite prompt is built from."""

    kernel: str
    launcher: str
    signature: str
    parent_source: str
    parent_knobs: Mapping[str, object]
    strategy: str
    instruction: str
    gpu: Mapping[str, str] = field(default_factory=dict)
    parent_time_s: float | None = None
    baseline_time_s: float | None = None
    timing_kind: str = ""
    profile: Mapping[str, float] = field(default_factory=dict)
    shapes: Sequence[Mapping[str, object]] = ()
    dtypes: Sequence[str] = ()
    history: Sequence[Attempt] = ()
    #: A reference entry's first modules: the entry's module with the PyTorch reference
    #: (``parent_source`` is then empty: there is no Triton code to rewrite yet).
    reference_source: str = ""
    reference: str = ""


@dataclass(frozen=True)
class StrategyContext:
    """What one request for new strategies is built from."""

    kernel: str
    existing: Sequence[tuple[str, str, str]]  # (name, target, instruction)
    wanted: int
    gpu: Mapping[str, str] = field(default_factory=dict)
    best_source: str = ""
    best_time_s: float | None = None
    baseline_time_s: float | None = None
    timing_kind: str = ""
    profile: Mapping[str, float] = field(default_factory=dict)
    shapes: Sequence[Mapping[str, object]] = ()
    dtypes: Sequence[str] = ()
    history: Sequence[Attempt] = ()
    #: Earlier requests for strategies on this kernel and what became of them.
    earlier: Sequence[Attempt] = ()


_SOL = (("sol_sm", "SM"), ("sol_dram", "DRAM"), ("sol_l2", "L2"))


def bottleneck(profile: Mapping[str, float]) -> str | None:
    """The bottleneck class from speed-of-light fractions: the most used resource, or
    ``latency-bound`` when none reaches 60 %; ``None`` without a profile."""
    known = [(float(profile[k]), name) for k, name in _SOL if k in profile]
    if not known:
        return None
    value, name = max(known)
    if value < 0.6:
        return f"latency-bound (no resource above 60 % of peak; highest {name} {value:.0%})"
    kind = "compute-bound" if name == "SM" else "memory-bound"
    return f"{kind} ({name} at {value:.0%} of peak)"


def _seconds(value: float) -> str:
    return f"{value * 1e6:.1f} us" if value < 1e-2 else f"{value * 1e3:.2f} ms"


def _gpu(gpu: Mapping[str, str]) -> str:
    if not gpu:
        return "unknown"
    model = gpu.get("gpu_model", "unknown")
    if gpu.get("mode") == "interpreter" or model == "none":
        return "none here: kernels run in Triton's CPU interpreter (fewer, larger programs win)"
    rest = ", ".join(f"{k}={v}" for k, v in sorted(gpu.items()) if k not in ("gpu_model",))
    return f"{model} ({rest})" if rest else model


def _torch_allowed() -> str:
    return ", ".join(f"torch.{n}" for n in sorted(TORCH_ALLOWED)[:8]) + ", views"


def _shapes(shapes: Sequence[Mapping[str, object]], dtypes: Sequence[str]) -> str:
    text = "; ".join(", ".join(f"{k}={v}" for k, v in s.items() if k != "perf") for s in shapes)
    return f"Shapes checked: {text}; dtypes: {', '.join(dtypes)}"


def _history(lines: list[str], history: Sequence[Attempt]) -> None:
    if history:
        lines.append("")
        lines.append("Recent attempts on this kernel (newest last):")
        for a in history:
            gain = "" if a.speedup is None else f", {a.speedup:.2f}x vs its parent"
            detail = f": {a.detail[:160]}" if a.detail else ""
            lines.append(f"- {a.strategy}: {a.status}{gain}{detail}")


def build_messages(ctx: PromptContext) -> list[dict[str, str]]:
    """The chat messages (system, user) of one rewrite request (or, for a reference entry
    without Triton code yet, of writing the first module from the reference)."""
    if ctx.reference_source:
        return _from_reference(ctx)
    system = SYSTEM.format(
        signature=ctx.signature,
        torch_allowed=_torch_allowed(),
        imports=", ".join(sorted(ALLOWED_IMPORTS)),
    )
    lines = [f"Kernel: {ctx.kernel}", f"GPU: {_gpu(ctx.gpu)}"]
    if ctx.parent_time_s is not None:
        timing = f"Measured time of this version: {_seconds(ctx.parent_time_s)}"
        if ctx.baseline_time_s:
            timing += f" (original: {_seconds(ctx.baseline_time_s)})"
        if ctx.timing_kind == "interpreter":
            timing += "; interpreter wall-clock, relative only"
        lines.append(timing)
    if ctx.shapes:
        lines.append(_shapes(ctx.shapes, ctx.dtypes))
    profile = bottleneck(ctx.profile)
    if profile:
        sol = ", ".join(f"{name} {ctx.profile[k]:.0%}" for k, name in _SOL if k in ctx.profile)
        lines.append(f"Profile: {profile}; speed of light: {sol}")
    knobs = ", ".join(f"{k}={v!r}" for k, v in ctx.parent_knobs.items())
    lines.append(f"It is launched as {ctx.launcher}(*inputs, {knobs}).")
    lines.append("")
    lines.append(f"Strategy to apply ({ctx.strategy}): {ctx.instruction}")
    _history(lines, ctx.history)
    lines.append("")
    lines.append("The current module:")
    lines.append(f"```python\n{ctx.parent_source.rstrip()}\n```")
    lines.append("")
    lines.append(
        f"Reply with the whole rewritten module in one ```python block, launcher "
        f"{ctx.signature} unchanged."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


def _from_reference(ctx: PromptContext) -> list[dict[str, str]]:
    system = SYSTEM_FROM_REFERENCE.format(
        signature=ctx.signature,
        torch_allowed=_torch_allowed(),
        imports=", ".join(sorted(ALLOWED_IMPORTS)),
    )
    lines = [f"Kernel: {ctx.kernel}", f"GPU: {_gpu(ctx.gpu)}"]
    if ctx.parent_time_s is not None:
        timing = (
            f"Time of the PyTorch reference (the baseline to beat): {_seconds(ctx.parent_time_s)}"
        )
        if ctx.timing_kind == "interpreter":
            timing += "; interpreter wall-clock, relative only"
        lines.append(timing)
    if ctx.shapes:
        lines.append(_shapes(ctx.shapes, ctx.dtypes))
    lines.append("")
    lines.append(f"Strategy to apply ({ctx.strategy}): {ctx.instruction}")
    _history(lines, ctx.history)
    lines.append("")
    lines.append(
        f"No Triton implementation exists yet. This module holds the PyTorch reference "
        f"{ctx.reference}() (and the input maker, which you do not need):"
    )
    lines.append(f"```python\n{ctx.reference_source.rstrip()}\n```")
    lines.append("")
    lines.append(
        f"Reply with the whole new module in one ```python block, defining {ctx.signature}."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


SYSTEM_STRATEGIES = """\
You are an expert GPU performance engineer who optimizes Triton kernels.
An automatic tuner applies optimization strategies to one kernel; each strategy is an
instruction given to an engineer who rewrites the kernel. Propose NEW strategies for this
kernel, different from the ones it has, suited to its profile and to what was tried.

Reply with ONE fenced ```json block and nothing else of substance:
{{"strategies": [{{"name": "<2 to 5 words>", "target": "<sm|dram|l2|latency>",
  "instruction": "<1 to 4 sentences: what to change in the code, concretely>"}}]}}
At most {wanted} entries. target is the hardware resource the strategy relieves: sm
(compute issue), dram (memory bandwidth), l2 (cache reuse), latency (launch overhead,
dependency stalls, too little parallelism).
"""


def build_strategy_messages(ctx: StrategyContext) -> list[dict[str, str]]:
    """The chat messages (system, user) of one request for new strategies."""
    lines = [f"Kernel: {ctx.kernel}", f"GPU: {_gpu(ctx.gpu)}"]
    if ctx.best_time_s is not None:
        timing = f"Time of its best version: {_seconds(ctx.best_time_s)}"
        if ctx.baseline_time_s:
            timing += f" (original: {_seconds(ctx.baseline_time_s)})"
        if ctx.timing_kind == "interpreter":
            timing += "; interpreter wall-clock, relative only"
        lines.append(timing)
    if ctx.shapes:
        lines.append(_shapes(ctx.shapes, ctx.dtypes))
    profile = bottleneck(ctx.profile)
    if profile:
        sol = ", ".join(f"{name} {ctx.profile[k]:.0%}" for k, name in _SOL if k in ctx.profile)
        lines.append(f"Profile of the best version: {profile}; speed of light: {sol}")
    else:
        lines.append("Profile: none taken yet")
    lines.append("")
    lines.append("Strategies it already has (do not repeat them):")
    for name, target, instruction in ctx.existing:
        lines.append(f"- {name} [{target}]: {instruction}")
    _history(lines, ctx.history)
    if ctx.earlier:
        lines.append("")
        lines.append("Earlier requests for strategies (newest last):")
        for a in ctx.earlier:
            lines.append(f"- {a.status}: {a.detail[:200]}")
    if ctx.best_source:
        source = ctx.best_source.rstrip()
        if len(source) > MAX_STRATEGY_SOURCE:
            source = source[:MAX_STRATEGY_SOURCE] + "\n# ... (cut)"
        lines.append("")
        lines.append("The best version's module:")
        lines.append(f"```python\n{source}\n```")
    lines.append("")
    lines.append(f"Reply with at most {ctx.wanted} new strategies in one ```json block.")
    system = SYSTEM_STRATEGIES.format(wanted=ctx.wanted)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)}]


#: Characters of the best module a strategy prompt shows, at most.
MAX_STRATEGY_SOURCE = 8000
