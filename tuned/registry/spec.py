"""The validated, immutable form of one registry entry (``kernel.yaml`` plus its module).

A :class:`KernelSpec` is built by :mod:`tuned.registry.loader` without executing any user
code; the module is only imported inside an evaluation worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuned.registry.problems import Problem

__all__ = [
    "DTYPE_NAMES",
    "KernelSpec",
    "KnobValue",
    "ReplaySource",
    "Roofline",
    "Shape",
    "Tolerance",
]

KnobValue = int | float | str | bool

#: Canonical dtype names accepted in ``dtypes`` (aliases are mapped onto these by the loader).
DTYPE_NAMES: tuple[str, ...] = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
)


@dataclass(frozen=True)
class Tolerance:
    """Elementwise closeness: ``|out - ref| <= atol + rtol * |ref|``."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class Shape:
    """One problem size: named dimensions (all positive ints) and whether it is timed."""

    dims: Mapping[str, int]
    perf: bool = False

    def label(self) -> str:
        return "x".join(f"{k}={v}" for k, v in self.dims.items())

    def size(self) -> int:
        """Product of the dimensions: a rough measure of the work at this shape."""
        n = 1
        for v in self.dims.values():
            n *= v
        return n


@dataclass(frozen=True)
class Roofline:
    """Expressions over the shape's dimensions and ``elem`` (bytes per element)."""

    bytes: str | None = None
    flops: str | None = None


@dataclass(frozen=True)
class ReplaySource:
    """What a replay entry (``kind: replay``) evaluates against: a Kernel Tuner cache file.

    ``noise`` is ``"none"`` (each configuration's median recorded run) or ``"recorded"``
    (draws from its recorded runs, seeded by ``seed``); ``device`` and ``kernel`` are the
    cache's ``device_name`` and ``kernel_name``.
    """

    cache: Path
    sha256: str
    noise: str
    seed: int
    device: str
    kernel: str


@dataclass(frozen=True)
class KernelSpec:
    """A registry entry, validated.

    ``generation`` is the SHA-256 of every file of the entry (``kernel.yaml`` and all ``*.py``),
    so any change starts a new generation. ``baseline_knobs`` are the launcher's literal
    defaults for the declared knobs: the baseline is the original module called with them.
    ``knobs_declared`` is False when the knobs were discovered from the source
    (:mod:`tuned.registry.discovery`); ``notices`` then say what discovery left out and why.
    A replay entry (``replay`` set) has no module: its knobs, baseline and times come from a
    recorded cache (:class:`ReplaySource`), ``module_source`` only describes it.
    A reference entry (``kind == "reference"``) has a PyTorch ``reference`` and an ``inputs``
    maker in ``module_source`` but no Triton launcher yet: ``launcher`` names the function
    the LLM proposer writes (docs/registry.md, "Reference-only entries"); it has no knobs of
    its own until a correct LLM-written module exists.
    """

    name: str
    directory: Path
    module: str
    launcher: str
    inputs: str
    reference: str | None
    shapes: tuple[Shape, ...]
    dtypes: tuple[str, ...]
    tolerance: Mapping[str, Tolerance]
    knobs: Mapping[str, tuple[KnobValue, ...]]
    knobs_declared: bool
    baseline_knobs: Mapping[str, KnobValue]
    weight: float
    roofline: Roofline | None
    module_source: str
    generation: str
    extra_files: Mapping[str, str] = field(default_factory=dict)
    notices: tuple[Problem, ...] = ()
    replay: ReplaySource | None = None
    #: ``"triton"`` (the default), ``"reference"`` (no Triton module yet) or ``"replay"``.
    kind: str = "triton"
    #: How the launcher is called (docs/registry.md, "Launchers"): the arguments it writes
    #: (positions or parameter names), the inputs whose gradients are compared (``("*",)``:
    #: every floating-point tensor input), constructor arguments of a class launcher, and the
    #: name of a ``grad_outputs(outputs, seed)`` function of the module.
    outputs: tuple[int | str, ...] = ()
    backward: tuple[int | str, ...] = ()
    init: Mapping[str, KnobValue] = field(default_factory=dict)
    grad_outputs: str | None = None
    #: Launcher parameters that the last inputs fill by keyword, in order (keyword-only ones).
    keywords: tuple[str, ...] = ()
    #: A launcher imported from an installed package (tuned.registry.installed): the dotted
    #: name of the module it is defined in and that module's package. ``module_source`` is
    #: then that module's source (what candidates copy), ``launcher`` its qualified name
    #: there, and ``entry_source`` the entry's own module (inputs, reference, eager).
    installed_module: str = ""
    package: str = ""
    entry_source: str = ""

    def call_payload(self) -> dict[str, object]:
        """The call fields as the worker reads them (``tuned.evaluation.invoke.CallFields``)."""
        return {
            "outputs": list(self.outputs),
            "backward": list(self.backward),
            "init": dict(self.init),
            "grad_outputs": self.grad_outputs,
            "keywords": list(self.keywords),
        }

    @property
    def reference_only(self) -> bool:
        """A reference entry: its Triton module is still to be written (by the LLM)."""
        return self.kind == "reference"

    @property
    def module_path(self) -> Path:
        return self.directory / self.module

    @property
    def perf_shapes(self) -> tuple[Shape, ...]:
        return tuple(s for s in self.shapes if s.perf)

    def space_size(self) -> int:
        n = 1
        for values in self.knobs.values():
            n *= len(values)
        return n
