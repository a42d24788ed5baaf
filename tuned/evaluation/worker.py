"""The evaluation worker: the only process that imports and runs candidate code.

Started by :class:`tuned.evaluation.client.WorkerClient` as ``python -m tuned.evaluation.worker
IN_FD OUT_FD`` in its own process group with a scrubbed environment. It speaks JSON lines on
two inherited pipes (never stdout, which candidate code may print to: stdout is sent to the
stderr log). For every request it reports each phase as it enters it, so the parent can apply
that phase's deadline, then one result::

    <- {"type": "ready", "fingerprint": {...}}
    -> {"op": "evaluate", "kernel": {...}, "candidate": {...}, "options": {...}}
    <- {"type": "phase", "phase": "load"} ... {"type": "phase", "phase": "benchmark"}
    <- {"type": "result", "result": {...EvalResult.to_dict()...}, "fatal": false}

``fatal`` asks the parent to replace the worker (after a CUDA fault the context is unusable).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from profilers.graph_timing import poison_outputs
from profilers.timing import TimingSettings, interleaved_timing
from tuned.evaluation.case_cache import DEFAULT_CAPACITY_BYTES, CaseCache
from tuned.evaluation.checks import (
    CaseFailure,
    check_aliasing,
    check_inputs_unchanged,
    classify_exception,
    clone_inputs,
    compare_outputs,
    output_signature,
    short,
    unwritten_elements,
)
from tuned.evaluation.guard import Guard, TimerSnapshot
from tuned.evaluation.invoke import entry_call, kernel_modules, resolve
from tuned.registry.injection import runnable_request

# In the interpreter, timing only ranks candidates on this CPU: keep it cheap.
INTERPRETER_TIMING_SIZE = 1 << 16


@dataclass(frozen=True)
class Case:
    dims: Mapping[str, int]
    dtype: str
    seed: int
    perf: bool
    derived: bool = False

    @property
    def label(self) -> str:
        dims = "x".join(f"{k}={v}" for k, v in self.dims.items())
        return f"{dims}/{self.dtype}"


class Channel:
    """JSON lines over a pair of pipe file descriptors."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self._in: IO[str] = os.fdopen(in_fd, "r", encoding="utf-8")
        self._out: IO[str] = os.fdopen(out_fd, "w", encoding="utf-8")

    def send(self, message: Mapping[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()

    def receive(self) -> dict[str, Any] | None:
        line = self._in.readline()
        if not line:
            return None
        message: dict[str, Any] = json.loads(line)
        return message


# ----------------------------------------------------------------------------- environment


def _limit_resources() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit = os.environ.get("KTUNED_WORKER_MEMORY_BYTES")
    if limit:  # address-space cap: only in interpreter mode (CUDA reserves huge VA ranges)
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))


def fingerprint(device: str) -> dict[str, str]:
    import torch
    import triton

    fp = {
        "torch": str(torch.__version__),
        "triton": str(triton.__version__),
        "python": platform.python_version(),
    }
    if device == "cuda":
        fp["gpu_model"] = torch.cuda.get_device_name()
        fp["cuda"] = str(torch.version.cuda)
        fp["driver"] = _driver_version()
        fp["mode"] = "gpu"
    else:
        fp["gpu_model"] = "none"
        fp["cpu"] = platform.machine()
        fp["mode"] = "interpreter"
    return fp


def warm_up(device: str) -> None:
    """Start, before the first request, what a first evaluation would otherwise start on its
    own clock: Triton's cache key, the CUDA context, cuBLAS (references are mostly PyTorch
    operations), the caching allocator's blocks of the timing's L2 flush buffer. A spare worker
    (:class:`~tuned.evaluation.client.WorkerClient`) does this while it waits, so the
    acceptance rule's re-measurement starts warm; no candidate code has run yet."""
    if device != "cuda":
        return
    import torch

    from profilers.timing import TimingSettings

    for where in ("triton.runtime.cache", "triton.compiler.compiler"):  # Triton 3.9, 3.6
        key = getattr(importlib.import_module(where), "triton_key", None)
        if key is not None:
            key()  # hashes Triton's own files once per process: ~0.5 s of a first compile
            break
    x = torch.ones(256, 256, device="cuda", dtype=torch.float16)
    (x @ x).float().sum().item()
    flush = torch.empty(TimingSettings().flush_bytes // 4, dtype=torch.int32, device="cuda")
    flush.zero_()
    del flush, x
    torch.cuda.synchronize()


def compile_target(device: str) -> dict[str, Any] | None:
    """The GPU Triton compiles for in this worker and its shared memory per block: what the
    compile pool needs to compile ahead for it (``None`` in the interpreter, or when this
    Triton cannot say)."""
    if device != "cuda":
        return None
    try:
        from triton.runtime import driver

        active = driver.active
        target = active.get_current_target()
        props = active.utils.get_device_properties(active.get_current_device())
    except (ImportError, AttributeError, RuntimeError, KeyError):
        return None
    return {
        "backend": str(target.backend),
        "arch": target.arch,
        "warp_size": int(target.warp_size),
        "max_shared_bytes": int(props.get("max_shared_mem", 0)),
    }


def _driver_version() -> str:
    try:
        import pynvml
    except ImportError:
        return "unknown"
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except pynvml.NVMLError:
        return "unknown"


def summarize_compile_facts(facts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One candidate's compile metadata (``Trial.metrics`` keys): the largest registers,
    spills and shared memory over its kernels and specializations, with the warps and stages
    of the kernel that uses the most registers. Empty in the interpreter."""
    if not facts:
        return {}
    heaviest = max(facts, key=lambda f: f.get("registers", 0.0))
    out = dict(heaviest)
    for key in ("registers", "spills", "shared_bytes"):
        values = [f[key] for f in facts if key in f]
        if values:
            out[key] = max(values)
    return out


# ----------------------------------------------------------------------------- modules


class ModuleLoader:
    """Imports module sources written to the worker's directory, under unique names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, ModuleType] = {}

    def _enter(self, directory: Path) -> None:
        """Make ``directory`` the only entry directory imports resolve from. Helper modules
        another entry imported (its ``utils.py``, say) leave ``sys.modules``, so an entry's
        ``import utils`` finds its own file, never a namesake's that stayed cached."""
        root, own = str(self.root), str(directory)
        sys.path[:] = [p for p in sys.path if not p.startswith(root)]
        sys.path.insert(0, own)
        for name, mod in list(sys.modules.items()):
            where = getattr(mod, "__file__", None) or ""
            foreign = where.startswith(root) and not where.startswith(own + os.sep)
            if foreign and not name.rpartition(".")[2].startswith("ktuned_candidate_"):
                del sys.modules[name]

    def load(
        self,
        source: str,
        *,
        directory_key: str,
        extra_files: Mapping[str, str],
        package: str = "",
    ) -> ModuleType:
        """``source`` imported as ``ktuned_candidate_<hash>``, or inside ``package`` (a copy of
        an installed package's module: its imports resolve as the original's do)."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        key = f"{directory_key}:{package}:{digest}"
        directory = self.root / f"entry_{directory_key}"
        self._enter(directory)
        if key in self._loaded:
            return self._loaded[key]
        directory.mkdir(parents=True, exist_ok=True)
        for rel, text in extra_files.items():
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        name = f"ktuned_candidate_{digest}"
        path = directory / f"{name}.py"
        path.write_text(source, encoding="utf-8")
        if package:
            importlib.import_module(package)  # the installed package, as its module would be
            name = f"{package}.{name}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CaseFailure("runtime_error", f"cannot import the module from {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if len(self._loaded) > 64:  # keep memory bounded in a long-lived worker
            for old in list(self._loaded)[:32]:
                sys.modules.pop(self._loaded.pop(old).__name__, None)
        self._loaded[key] = module
        return module


def entry_key(kernel: Mapping[str, Any]) -> str:
    """The directory key of an entry's modules: the hash of its original source and its other
    files (a changed helper is a new directory, never a stale import)."""
    files = json.dumps(
        [kernel["original_source"], kernel.get("extra_files", {}), kernel.get("inputs_source")],
        sort_keys=True,
    )
    return hashlib.sha256(files.encode()).hexdigest()[:16]


def inputs_module(loader: ModuleLoader, kernel: Mapping[str, Any], original: ModuleType) -> Any:
    """The module of the entry's inputs and reference: ``original``, or the entry's own module
    when the launcher is an installed package's (``inputs_source``)."""
    if not kernel.get("inputs_source"):
        return original
    extra = kernel.get("extra_files", {})
    key = entry_key(kernel)
    return loader.load(kernel["inputs_source"], directory_key=key, extra_files=extra)


def import_candidate(
    loader: ModuleLoader, kernel: Mapping[str, Any], source: str, guard: Guard
) -> tuple[ModuleType, ModuleType]:
    """The entry's original module, then ``source`` imported under ``guard``, both from the
    entry's own directory with its extra files. Something the guard refused at import is a
    ``cheat``; the caller checks ``guard`` for refusals the module swallowed."""
    key, extra = entry_key(kernel), kernel.get("extra_files", {})
    package = str(kernel.get("package") or "")
    original = loader.load(
        kernel["original_source"], directory_key=key, extra_files=extra, package=package
    )
    try:
        with guard:
            module = loader.load(source, directory_key=key, extra_files=extra, package=package)
    except Exception as exc:
        if guard.violations:
            raise CaseFailure("cheat", f"forbidden at import: {guard.violations[0]}") from exc
        raise
    return original, module


# ----------------------------------------------------------------------------- checking


# ----------------------------------------------------------------------------- evaluation


class Evaluation:
    """One request: load, compile (first launch), correctness on every case, benchmark.

    Per correctness case (shape x dtype x seed), with the guard installed around every call
    of candidate code: the candidate runs into NaN-poisoned allocations, then the reference,
    then the candidate again into sentinel-poisoned allocations. The case passes when a Triton
    kernel of the candidate launched in both calls, nothing forbidden happened, the inputs are
    unchanged, no output aliases an input, both outputs match the reference within the
    dtype's tolerance, and every output element was written. Across seeds, outputs that stay
    identical while the reference's change do not depend on the inputs (``cheat``).
    """

    def __init__(
        self,
        request: Mapping[str, Any],
        loader: ModuleLoader,
        device: str,
        send: Callable[[Mapping[str, Any]], None],
        timers: TimerSnapshot,
        cache: CaseCache | None = None,
        *,
        correctness_only: bool = False,
    ) -> None:
        request = runnable_request(request)  # injected knobs written into the modules
        self.kernel = request["kernel"]
        self.correctness_only = correctness_only  # a spare's preparation: no benchmark
        self.candidate = request["candidate"]
        self.options = request["options"]
        self.loader = loader
        self.device = device
        self.send = send
        self.timers = timers
        self.phase = "load"
        self.phase_started = time.monotonic()
        self.phase_seconds: dict[str, float] = {}
        self.knobs: dict[str, Any] = dict(self.candidate["knobs"])
        self.candidate_modules: set[str] = set()
        self.module_name = ""  # the candidate's module, once loaded
        self._compiled: list[dict[str, float]] = []  # compile facts of its kernels (GPU)
        # Inputs and reference outputs outlive the request (see case_cache); without a cache
        # given (a one-off evaluation), one that lives as long as this request.
        self.cache = cache if cache is not None else CaseCache()
        self.cache.resize(int(self.options.get("case_cache_bytes", DEFAULT_CAPACITY_BYTES)))
        self.kernel_key = hashlib.sha256(
            json.dumps(
                [
                    self.kernel["original_source"],
                    self.kernel.get("extra_files", {}),
                    self.kernel["inputs"],
                    self.kernel.get("reference"),
                    self.kernel.get("baseline_knobs", {}),
                    self.kernel["launcher"],  # the reference may be the launcher's outputs,
                    self.kernel.get("call", {}),  # gradients included (invoke.CallFields)
                    self.kernel.get("inputs_source"),
                    device,
                ],
                sort_keys=True,
            ).encode()
        ).hexdigest()

    def case_key(self, case: Case) -> tuple[str, tuple[tuple[str, int], ...], str, int]:
        """What a case's inputs depend on: the kernel's original module and the case."""
        return (self.kernel_key, tuple(sorted(case.dims.items())), case.dtype, case.seed)

    def reference_outputs(
        self, case: Case, reference: Callable[..., Any], pristine: Sequence[Any]
    ) -> Any:
        """The reference's outputs for ``case`` (computed on a copy of ``pristine``, which are
        the case's inputs), kept in the worker's cache; only ever read."""
        return self.cache.reference(
            self.case_key(case), "reference", lambda: reference(*clone_inputs(pristine))
        )

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        self.phase_seconds[self.phase] = self.phase_seconds.get(self.phase, 0.0) + (
            now - self.phase_started
        )
        self.phase, self.phase_started = phase, now
        self.send({"type": "phase", "phase": phase})

    def cases(self) -> tuple[list[Case], list[str]]:
        cap = int(self.options["interpreter_max_size"]) if self.device == "cpu" else 0
        cases, skipped = [], []
        derived_skip = set(self.options.get("derived_skip", ()))
        for shape in self.kernel["shapes"]:
            dims = dict(shape["dims"])
            size = math.prod(dims.values())
            derived = bool(shape.get("derived"))
            for dtype in self.kernel["dtypes"]:
                label = Case(dims, dtype, 0, False).label
                if derived and label in derived_skip:
                    continue
                if cap and size > cap:
                    skipped.append(label)
                    continue
                for seed in self.options["seeds"]:
                    cases.append(Case(dims, dtype, int(seed), bool(shape["perf"]), derived))
        return cases, skipped

    def timed_cases(self, cases: Sequence[Case]) -> list[Case]:
        """GPU: the perf shapes x dtypes. Interpreter (timings that only rank candidates on
        this CPU): the largest declared shape of at most ``INTERPRETER_TIMING_SIZE`` elements,
        else the smallest, x dtypes."""
        first_seed = [c for c in cases if c.seed == cases[0].seed and not c.derived]
        if self.device == "cuda":
            return [c for c in first_seed if c.perf]
        sizes = sorted({math.prod(c.dims.values()) for c in first_seed})
        fitting = [n for n in sizes if n <= INTERPRETER_TIMING_SIZE]
        chosen = fitting[-1] if fitting else sizes[0]
        return [c for c in first_seed if math.prod(c.dims.values()) == chosen]

    # -- guarded execution of candidate code

    def guard(self, poison: str | None) -> Guard:
        writable = [self.loader.root.parent]  # the worker's directory; TMPDIR lies inside
        return Guard(candidate_modules=self.candidate_modules, writable=writable, poison=poison)

    def _check_guard(self, guard: Guard, *, need_launch: bool) -> None:
        for (module, _), facts in guard.compiled.items():
            if module == self.module_name:  # the candidate's kernels, not the incumbent's
                self._compiled.append(facts)
        if guard.violations:
            raise CaseFailure("cheat", f"forbidden: {guard.violations[0]}")
        if need_launch and guard.launches == 0:
            raise CaseFailure(
                "cheat", "no Triton kernel of the candidate launched (launch hook saw none)"
            )
        tampered = self.timers.tampered()
        if tampered:
            raise CaseFailure(
                "cheat", f"patched what measurement relies on: {', '.join(tampered)}", fatal=True
            )

    def guarded_call(self, launcher: Callable[..., Any], inputs: Sequence[Any], poison: str) -> Any:
        import torch

        guard = self.guard(poison)
        try:
            with guard:
                out = launcher(*inputs, **self.knobs)
                if self.device == "cuda":
                    torch.cuda.synchronize()
        except Exception as exc:
            if guard.violations:  # the refusal surfaced as an exception: name the cheat
                raise CaseFailure("cheat", f"forbidden: {guard.violations[0]}") from exc
            raise
        self._check_guard(guard, need_launch=True)
        return out

    # -- the phases

    def run(self) -> dict[str, Any]:
        import torch

        if self.candidate.get("injection_error"):
            raise CaseFailure("rejected_static", self.candidate["injection_error"])
        guard = self.guard(poison=None)
        original, module = import_candidate(
            self.loader, self.kernel, self.candidate["source"], guard
        )
        self.candidate_modules.add(module.__name__)
        self.module_name = module.__name__
        self._check_guard(guard, need_launch=False)
        # How the entry's launcher and reference are called: tuned.evaluation.invoke.
        launcher = entry_call(module, self.kernel, role="launcher")
        self.candidate_modules |= kernel_modules(launcher.target)
        entry = inputs_module(self.loader, self.kernel, original)
        make_inputs = resolve(entry, self.kernel["inputs"], "inputs")
        by_reference = entry if self.kernel.get("reference") else original
        reference = entry_call(by_reference, self.kernel, role="reference")

        cases, skipped = self.cases()
        if not cases:
            raise CaseFailure(
                "runtime_error",
                "every shape is above the interpreter size cap; declare a smaller shape",
            )

        def inputs_of(case: Case) -> list[Any]:
            """Fresh copies of the case's inputs (made once per worker, see case_cache)."""
            dtype = getattr(torch, case.dtype)
            return self.cache.inputs(
                self.case_key(case),
                lambda: make_inputs(dict(case.dims), dtype, self.device, case.seed),
            )

        self.enter("compile")
        first_inputs = inputs_of(cases[0])
        first_given = clone_inputs(first_inputs)
        try:
            first_out = self.guarded_call(launcher.at(cases[0].dims), first_given, "nan")
        except CaseFailure:
            raise
        except Exception as exc:
            raise classify_exception(exc, "compile") from exc

        self.enter("correctness")
        signatures: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]] = {}
        unusable: list[str] = []
        for index, case in enumerate(cases):
            if case.derived and case.label in unusable:
                continue
            try:
                if case.derived:
                    try:
                        pristine = inputs_of(case)
                    except Exception:  # noqa: BLE001 - the input maker refuses this derived shape
                        skipped.append(f"{case.label} (derived; refused by the input maker)")
                        continue
                else:
                    pristine = first_inputs if index == 0 else inputs_of(case)
                self.check_case(
                    case,
                    launcher.at(case.dims),
                    reference.at(case.dims),
                    pristine,
                    (first_given, first_out) if index == 0 else None,
                    signatures,
                )
            except Exception as exc:
                failure = (
                    exc if isinstance(exc, CaseFailure) else classify_exception(exc, "correctness")
                )
                if failure.fatal or not (case.derived and self.options.get("lenient_derived")):
                    where = "derived shape " if case.derived else ""
                    failure.reason = f"{where}{case.label} seed {case.seed}: {failure.reason}"
                    raise failure from exc
                unusable.append(case.label)  # the original fails here: not a usable check
        del first_inputs, first_given, first_out
        if self.correctness_only:
            self.enter("done")
            return {"outcome": "ok", "phase_seconds": self.phase_seconds}

        self.enter("benchmark")
        incumbent = None
        if self.options.get("incumbent"):
            inc = self.options["incumbent"]
            inc_module = self.loader.load(
                inc["source"],
                directory_key=entry_key(self.kernel),
                extra_files=self.kernel.get("extra_files", {}),
                package=str(self.kernel.get("package") or ""),
            )
            self.candidate_modules.add(inc_module.__name__)
            incumbent = entry_call(inc_module, self.kernel, role="launcher")
        samples: dict[str, list[float]] = {}
        incumbent_samples: dict[str, list[float]] = {}
        screened: list[str] = []
        for case in self.timed_cases(cases):
            try:
                mine, theirs, cut = self.time_case(
                    case,
                    launcher.at(case.dims),
                    incumbent.at(case.dims) if incumbent is not None else None,
                    reference.at(case.dims),
                    inputs_of,
                )
            except CaseFailure as failure:
                failure.reason = f"{case.label}: {failure.reason}"
                raise
            except Exception as exc:
                raise classify_exception(exc, "benchmark") from exc
            samples[case.label] = mine
            if cut:
                screened.append(case.label)
            if theirs:
                incumbent_samples[case.label] = theirs
        self.enter("done")
        timings = {label: statistics.median(v) for label, v in samples.items()}
        objective = math.exp(sum(math.log(max(t, 1e-12)) for t in timings.values()) / len(timings))
        return {
            "outcome": "ok",
            "time_s": objective,
            "timings": timings,
            "timing_kind": "gpu" if self.device == "cuda" else "interpreter",
            "phase_seconds": self.phase_seconds,
            "checked_cases": len(cases),
            "skipped_cases": skipped,
            "metadata": {
                "samples": samples,
                "incumbent_samples": incumbent_samples,
                "screened": screened,
                "derived_unusable": sorted(set(unusable)),
                "case_cache": self.cache.stats.to_dict(),
                "compile": summarize_compile_facts(self._compiled),
            },
        }

    def check_case(
        self,
        case: Case,
        launcher: Callable[..., Any],
        reference: Callable[..., Any],
        pristine: list[Any],
        first: tuple[list[Any], Any] | None,
        signatures: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]],
    ) -> None:
        atol, rtol = (float(v) for v in self.kernel["tolerance"][case.dtype])
        if first is None:
            given = clone_inputs(pristine)
            out = self.guarded_call(launcher, given, "nan")
        else:  # the compile phase's call, made on a clone of ``pristine``
            given, out = first
        check_aliasing(out, given)
        check_inputs_unchanged(pristine, given)
        ref = self.reference_outputs(case, reference, pristine)
        # Independence: identical candidate outputs for two seeds whose references differ.
        mine, theirs = output_signature(out), output_signature(ref)
        if case.label in signatures:
            seed, other_mine, other_ref = signatures[case.label]
            if mine == other_mine and theirs != other_ref:
                raise CaseFailure(
                    "cheat",
                    f"outputs identical for seeds {seed} and {case.seed} while the "
                    "reference's differ: they do not depend on the inputs",
                )
        else:
            signatures[case.label] = (case.seed, mine, theirs)
        again_inputs = clone_inputs(pristine)
        again = self.guarded_call(launcher, again_inputs, "sentinel")
        check_aliasing(again, again_inputs)
        check_inputs_unchanged(pristine, again_inputs)
        try:
            compare_outputs(out, ref, atol, rtol)
        except CaseFailure as failure:
            if failure.outcome == "nan":
                unwritten = unwritten_elements(out, again)
                if unwritten:
                    raise CaseFailure("incorrect", unwritten) from None
            raise
        try:
            compare_outputs(again, ref, atol, rtol)
        except CaseFailure as failure:
            raise CaseFailure(
                "incorrect", f"second call (after the reference) differs: {failure.reason}"
            ) from None

    def time_case(
        self,
        case: Case,
        launcher: Callable[..., Any],
        incumbent: Callable[..., Any] | None,
        reference: Callable[..., Any],
        inputs_of: Callable[[Case], list[Any]],
    ) -> tuple[list[float], list[float], bool]:
        """Samples of the candidate (and of the incumbent, interleaved), alternating two input
        sets, and whether the screening round ended the timing (the candidate clearly slower
        than the incumbent: :func:`profilers.timing.interleaved_timing`); the candidate's
        outputs made while timed are verified afterwards."""
        seeds = list(self.options["seeds"])[:2]
        sets = [inputs_of(Case(case.dims, case.dtype, s, case.perf)) for s in seeds]
        pristine = [clone_inputs(x) for x in sets]
        last: list[Any] = [None] * len(sets)
        calls = [0, 0]

        def candidate_fn() -> None:
            k = calls[0] % len(sets)
            last[k] = launcher(*sets[k], **self.knobs)
            calls[0] += 1

        fns = [candidate_fn]
        if incumbent is not None:
            incumbent_knobs = dict(self.options["incumbent"]["knobs"])

            def incumbent_fn() -> None:
                k = calls[1] % len(sets)
                incumbent(*sets[k], **incumbent_knobs)
                calls[1] += 1

            fns.append(incumbent_fn)
        settings = TimingSettings(**self.options.get("timing", {}))

        def poison() -> None:  # CUDA graphs: outputs the timed replays must write again
            for out in last:
                poison_outputs(out, [x for s in sets for x in s])

        guard = self.guard(poison=None)
        with guard:
            timed = interleaved_timing(
                fns,
                gpu=self.device == "cuda",
                settings=settings,
                screen=True,
                poison=poison,
            )
            samples = timed.samples
            while calls[0] < len(sets):  # too few timed calls to cover every set
                candidate_fn()
        self._check_guard(guard, need_launch=True)
        atol, rtol = (float(v) for v in self.kernel["tolerance"][case.dtype])
        for k, x in enumerate(pristine):
            seeded = Case(case.dims, case.dtype, seeds[k], case.perf)
            try:
                compare_outputs(last[k], self.reference_outputs(seeded, reference, x), atol, rtol)
            except CaseFailure as failure:
                raise CaseFailure(
                    "cheat", f"outputs computed while timed are wrong ({failure.reason})"
                ) from None
        return samples[0], samples[1] if incumbent is not None else [], timed.screened


def prepare(
    request: Mapping[str, Any],
    loader: ModuleLoader,
    device: str,
    timers: TimerSnapshot,
    cache: CaseCache,
) -> dict[str, Any]:
    """A spare's preparation for a kernel (:class:`tuned.evaluation.client.WorkerClient`): the
    kernel's original module, at its baseline knobs, through load, compile and correctness.
    That fills the case cache with every case's inputs and reference outputs and starts what
    PyTorch and Triton load lazily on a first call, so a re-measurement in this worker spends
    its time on the candidate. Nothing is timed; phases are not reported."""
    evaluation = Evaluation(
        request, loader, device, lambda message: None, timers, cache, correctness_only=True
    )
    try:
        evaluation.run()
    except CaseFailure as failure:
        return {"type": "prepared", "ok": False, "fatal": failure.fatal, "reason": failure.reason}
    except Exception as exc:  # noqa: BLE001 - reported; the spare is still fresh and usable
        what = "".join(traceback.format_exception_only(type(exc), exc))
        return {"type": "prepared", "ok": False, "fatal": False, "reason": short(what)}
    return {"type": "prepared", "ok": True, "seconds": sum(evaluation.phase_seconds.values())}


def _serve(channel: Channel, device: str, loader: ModuleLoader, timers: TimerSnapshot) -> None:
    cache = CaseCache()  # lives as long as the worker: inputs and references of every case
    while True:
        request = channel.receive()
        if request is None or request.get("op") == "exit":
            return
        if request.get("op") == "prepare":
            answer = prepare(request, loader, device, timers, cache)
            channel.send(answer)
            if answer.get("fatal"):
                return  # e.g. a CUDA fault: the context is unusable, the client starts another
            continue
        evaluation = Evaluation(request, loader, device, channel.send, timers, cache)
        fatal = False
        try:
            result = evaluation.run()
        except CaseFailure as failure:
            fatal = failure.fatal
            result = {
                "outcome": failure.outcome,
                "reason": failure.reason,
                "phase": evaluation.phase,
                "phase_seconds": evaluation.phase_seconds,
            }
        except Exception as exc:  # noqa: BLE001 - e.g. the module raised at import
            result = {
                "outcome": "runtime_error",
                "phase": evaluation.phase,
                "reason": short("".join(traceback.format_exception_only(type(exc), exc))),
                "phase_seconds": evaluation.phase_seconds,
            }
        # "request": the client's number of the request, echoed (a result must name its own).
        answer = {"type": "result", "request": request.get("request"), "result": result}
        channel.send({**answer, "fatal": fatal})
        if fatal:
            return


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    in_fd, out_fd, workdir = int(args[0]), int(args[1]), Path(args[2])
    _limit_resources()
    os.dup2(2, 1)  # candidate prints go to the stderr log, never into the protocol
    channel = Channel(in_fd, out_fd)
    import torch

    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        channel.send({"type": "error", "reason": "no CUDA device; set TRITON_INTERPRET=1"})
        return 3
    warm_up(device)
    channel.send(
        {
            "type": "ready",
            "fingerprint": fingerprint(device),
            "pid": os.getpid(),
            "target": compile_target(device),
        }
    )
    _serve(channel, device, ModuleLoader(workdir), TimerSnapshot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
