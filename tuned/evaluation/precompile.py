"""A compile process of the compile pool: imports a candidate and compiles it ahead, no GPU.

Started by :class:`tuned.evaluation.compile_pool.CompilePool` as ``python -m
tuned.evaluation.precompile IN_FD OUT_FD WORKDIR``, isolated like an evaluation worker (own
process group, scrubbed environment, no core dumps, the worker's guard around candidate code)
and sharing the GPU worker's Triton cache directory. For one request it:

1. **load**: imports the entry's original module and the candidate's module, under the guard,
   and checks that the launcher is a callable (the checks the GPU worker's load phase makes);
2. **compile** (GPU mode): calls the launcher once per declared and derived shape x dtype on
   *meta* tensors (shape, dtype and strides without memory), with Triton switched to compiling
   only: its active driver answers with the GPU worker's target and every ``kernel[grid](...)``
   runs as ``warmup`` (compile, never launch). Triton writes each specialization into the
   shared cache directory under the key it would compute in the GPU worker (same source,
   specialization, options, target and environment), so the worker's first launch of each is
   a cache hit. A kernel needing more shared memory than the device has fails here exactly as
   Triton's loader would fail in the worker (``OutOfResources``).

In interpreter mode (``TRITON_INTERPRET=1``) nothing is compiled: the process makes the load
checks only. ``torch.cuda.get_device_properties`` answers with the GPU worker's device (sent
with the target). A launcher that cannot run on meta tensors (it reads values, or insists on CUDA
tensors) is not a failure of the candidate: the result says ``precompiled: false`` and the GPU
worker compiles it itself. Only Triton's own compile errors become ``compile_error``.

Protocol (JSON lines, as the worker's)::

    <- {"type": "ready", "pid": ..., "mode": "compile" | "import"}
    -> {"op": "compile", "kernel": {...}, "candidate": {...}, "target": {...} | null,
        "derived_skip": [...]}
    <- {"type": "phase", "phase": "load"} ... {"type": "phase", "phase": "compile"}
    <- {"type": "result", "result": {...EvalResult.to_dict()...}}
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tuned.evaluation.checks import CaseFailure, describe, short
from tuned.evaluation.guard import Guard
from tuned.evaluation.invoke import EntryCall, entry_call, kernel_modules, resolve
from tuned.evaluation.modules import inputs_module
from tuned.evaluation.worker import (
    Channel,
    ModuleLoader,
    _limit_resources,
    entry_key,
    import_candidate,
)
from tuned.registry.injection import runnable_request

__all__ = ["COMPILE_ERROR_NAMES", "CompileOnlyDriver", "main", "precompile_supported"]

#: Triton's exceptions that mean "this kernel/config does not compile" on any machine.
COMPILE_ERROR_NAMES = frozenset(
    {
        "CompilationError",
        "CompileTimeAssertionFailure",
        "UnsupportedLanguageConstruct",
        "OutOfResources",
        "PTXASError",
    }
)

#: What Triton's autotuner catches while it benchmarks a config (the config gets an infinite
#: time); any other error of a config fails the launch there as here.
_AUTOTUNER_SKIPS = frozenset({"OutOfResources", "CompileTimeAssertionFailure", "PTXASError"})


class CompileOnlyDriver:
    """Stands in for Triton's active driver where compiling needs one: a fixed target, device
    0 and stream 0, so no CUDA context is ever created in a compile process."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        """Only device 0 exists here."""


def precompile_supported() -> str | None:
    """``None`` when this Triton exposes what compiling ahead needs, else what is missing."""
    try:
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction
    except ImportError as exc:
        return f"triton lacks {exc.name}"
    if not hasattr(driver, "set_active"):
        return "triton.runtime.driver has no set_active"
    if "warmup" not in JITFunction.run.__code__.co_varnames:
        return "JITFunction.run takes no warmup argument"
    return None


class _Compiler:
    """Switches this process's Triton to compile-only for one target (once), and collects the
    kernels every launch compiled."""

    def __init__(self, target: Mapping[str, Any]) -> None:
        from triton.backends.compiler import GPUTarget
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        self.max_shared = int(target.get("max_shared_bytes") or 0)
        self.kernels: list[Any] = []
        driver.set_active(
            CompileOnlyDriver(
                GPUTarget(str(target["backend"]), target["arch"], int(target["warp_size"]))
            )
        )
        original = JITFunction.run
        compiled = self.kernels

        def compile_only(fn: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            kernel = original(fn, *args, grid=grid, warmup=True, **kwargs)
            if kernel is not None:
                compiled.append(kernel)
            return kernel

        JITFunction.run = compile_only
        self._compile_autotuned_configs()
        self._answer_device_queries(target.get("device_properties") or {})

    @staticmethod
    def _answer_device_queries(props: Mapping[str, Any]) -> None:
        """``torch.cuda.get_device_properties`` (and the capability and name) answered with
        the GPU worker's device, whatever device is asked about: launchers size persistent
        grids by ``multi_processor_count`` of their inputs' device, which is ``meta`` here
        (Liger's DyT backward stopped the pool: "Expected a cuda device, but got: meta").
        Nothing here can reach a GPU: the answers are the worker's, sent with the target."""
        if not props:
            return
        import types

        import torch

        answer = types.SimpleNamespace(**props)

        def get_device_properties(device: Any = None) -> Any:
            return answer

        def get_device_capability(device: Any = None) -> tuple[int, int]:
            return int(props.get("major", 0)), int(props.get("minor", 0))

        def get_device_name(device: Any = None) -> str:
            return str(props.get("name", ""))

        torch.cuda.get_device_properties = get_device_properties
        torch.cuda.get_device_capability = get_device_capability
        torch.cuda.get_device_name = get_device_name

    def _compile_autotuned_configs(self) -> None:
        """``@triton.autotune`` kernels: a launch compiles every config the autotuner would
        benchmark for that call (after its own pruning), launching none. The GPU worker's
        autotuner then finds each config in the cache and only benchmarks: Liger's DyT
        forward, 18 configs keyed on ``N``, compiled them one after another in the worker at
        its first launch of each ``N`` (its original's first evaluation on the H100 ended
        233 s after the previous one). A config the autotuner would skip (out of resources,
        e.g. more shared memory than the target has) is skipped; only when none compiles
        does the launch fail (a pinned candidate: its one config)."""
        try:
            from triton.runtime.autotuner import Autotuner
        except ImportError:  # no autotuner to switch: its kernels compile in the worker
            return
        compiler = self

        def compile_configs(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            tuner.nargs = dict(zip(tuner.arg_names, args))
            try:
                configs = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs
            except Exception:  # noqa: BLE001 - a pruning model that needs a device: all
                configs = tuner.configs
            first_error: BaseException | None = None
            compiled_any, last = False, None
            try:
                for config in configs:
                    before = len(compiler.kernels)
                    try:
                        last = tuner.fn.run(*args, **kwargs, **config.all_kwargs())
                        compiler.check_resources(compiler.kernels[before:])
                    except Exception as exc:
                        if type(exc).__name__ not in _AUTOTUNER_SKIPS:
                            raise
                        del compiler.kernels[before:]  # the worker's autotuner skips it
                        first_error = first_error or exc
                        continue
                    compiled_any = True
            finally:
                tuner.nargs = None
            if not compiled_any and first_error is not None:
                raise first_error
            return last

        Autotuner.run = compile_configs

    def check_resources(self, kernels: Sequence[Any] | None = None) -> None:
        """Raise Triton's ``OutOfResources`` where its loader would, on the target device."""
        from triton.runtime.errors import OutOfResources

        for kernel in self.kernels if kernels is None else kernels:
            shared = int(getattr(kernel.metadata, "shared", 0) or 0)
            if self.max_shared and shared > self.max_shared:
                raise OutOfResources(shared, self.max_shared, "shared memory")


class Precompile:
    """One request: the load checks, then (GPU mode) every specialization compiled."""

    def __init__(
        self,
        request: Mapping[str, Any],
        loader: ModuleLoader,
        send: Callable[[Mapping[str, Any]], None],
        compilers: dict[str, _Compiler],
        meta_inputs: dict[tuple[Any, ...], list[Any]],
    ) -> None:
        request = runnable_request(request)  # injected knobs written into the module
        self.kernel = request["kernel"]
        self.candidate = request["candidate"]
        self.target = request.get("target")
        self.derived_skip = set(request.get("derived_skip", ()))
        self.loader = loader
        self.send = send
        self.compilers = compilers
        self.meta_inputs = meta_inputs
        self.phase = "load"
        self.started = time.monotonic()
        self.modules: set[str] = set()

    def guard(self) -> Guard:
        cache = Path(os.environ.get("TRITON_CACHE_DIR", self.loader.root))
        return Guard(
            candidate_modules=self.modules,
            writable=[self.loader.root.parent, cache.parent],
            poison=None,
        )

    def run(self) -> dict[str, Any]:
        key = entry_key(self.kernel)
        guard = self.guard()
        original, module = import_candidate(
            self.loader, self.kernel, self.candidate["source"], guard
        )
        if guard.violations:
            raise CaseFailure("cheat", f"forbidden at import: {guard.violations[0]}")
        self.modules.add(module.__name__)
        entry = entry_call(module, self.kernel, role="launcher")  # tuned.evaluation.invoke
        self.modules |= kernel_modules(entry.target, module)
        if not self.target or os.environ.get("TRITON_INTERPRET") == "1":
            return self._done(precompiled=False, note="interpreter: nothing to compile")
        missing = precompile_supported()
        if missing:
            return self._done(precompiled=False, note=f"cannot compile ahead: {missing}")
        self.enter("compile")
        compiler = self._compiler()
        return self._compile_all(compiler, original, entry, key)

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.send({"type": "phase", "phase": phase})

    def _compiler(self) -> _Compiler:
        assert self.target is not None
        name = repr(sorted(self.target.items()))
        if name not in self.compilers:
            if self.compilers:  # a process serves one target: Triton's caches are per device
                raise CaseFailure("runtime_error", "compile process asked for a second target")
            self.compilers[name] = _Compiler(self.target)
        return self.compilers[name]

    def _compile_all(
        self, compiler: _Compiler, original: ModuleType, launcher: EntryCall, key: str
    ) -> dict[str, Any]:
        knobs = dict(self.candidate["knobs"])
        compiled: set[str] = set()
        skipped: list[str] = []

        def stopped(label: str, reason: str) -> dict[str, Any]:
            """A declared shape not compiled here: the GPU worker compiles what is left."""
            return self._done(
                precompiled=bool(compiled),
                note=f"stopped at {label}: {reason}",
                specializations=len(compiled),
                skipped=skipped,
            )

        for shape in self.kernel["shapes"]:
            dims = dict(shape["dims"])
            derived = bool(shape.get("derived"))
            for dtype in self.kernel["dtypes"]:
                label = "x".join(f"{k}={v}" for k, v in dims.items()) + f"/{dtype}"
                if derived and label in self.derived_skip:
                    continue
                try:
                    inputs = self._meta_inputs(original, key, dims, dtype)
                except Exception as exc:  # noqa: BLE001 - the input maker refuses (derived) shapes
                    reason = f"inputs: {short(f'{type(exc).__name__}: {exc}', 200)}"
                    if not derived:  # it needs the device: the GPU worker compiles the rest
                        return stopped(label, reason)
                    skipped.append(f"{label}: {reason}")
                    continue
                compiler.kernels.clear()
                guard = self.guard()
                try:
                    with guard:
                        launcher.at(dims)(*inputs, **knobs)
                    compiler.check_resources()
                except Exception as exc:  # classified just below
                    names = {cls.__name__ for cls in type(exc).__mro__}
                    if guard.violations:
                        raise CaseFailure("cheat", f"forbidden: {guard.violations[0]}") from exc
                    if names & COMPILE_ERROR_NAMES and not derived:
                        text = f"{type(exc).__name__}: {exc}".strip()
                        raise CaseFailure("compile_error", short(f"{label}: {text}")) from exc
                    # Not the candidate's failure as far as we can tell here: the GPU worker
                    # compiles what is left and judges it.
                    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    if not derived:
                        return stopped(label, short(reason, 300))
                    skipped.append(f"{label}: {short(reason, 200)}")
                    continue
                compiled.update(str(getattr(k, "hash", id(k))) for k in compiler.kernels)
        return self._done(precompiled=True, specializations=len(compiled), skipped=skipped)

    def _meta_inputs(
        self, original: ModuleType, key: str, dims: dict[str, int], dtype_name: str
    ) -> list[Any]:
        """The case's inputs as meta tensors (same shape, dtype and strides), per process."""
        import torch

        cache_key = (key, tuple(sorted(dims.items())), dtype_name)
        if cache_key in self.meta_inputs:
            return self.meta_inputs[cache_key]
        # The entry's own module when the launcher is an installed package's (the kernel
        # module is then the package's copy, without the input maker).
        entry = inputs_module(self.loader, self.kernel, original)
        make = resolve(entry, self.kernel["inputs"], "inputs")
        dtype = getattr(torch, dtype_name)
        try:
            made = list(make(dict(dims), dtype, "meta", 0))
        except Exception:  # noqa: BLE001 - the maker needs real memory: make on the CPU
            made = list(make(dict(dims), dtype, "cpu", 0))
        meta = [
            torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
            if isinstance(x, torch.Tensor)
            else x
            for x in made
        ]
        if len(self.meta_inputs) > 64:  # bounded; meta tensors hold no memory anyway
            self.meta_inputs.clear()
        self.meta_inputs[cache_key] = meta
        return meta

    def _done(self, *, precompiled: bool, note: str = "", **extra: Any) -> dict[str, Any]:
        return {
            "outcome": "ok",
            "phase": self.phase,
            "phase_seconds": {"precompile": time.monotonic() - self.started},
            "metadata": {"precompiled": precompiled, "note": note, **extra},
        }


def _serve(channel: Channel, loader: ModuleLoader) -> None:
    compilers: dict[str, _Compiler] = {}
    meta_inputs: dict[tuple[Any, ...], list[Any]] = {}
    while True:
        request = channel.receive()
        if request is None or request.get("op") == "exit":
            return
        job = Precompile(request, loader, channel.send, compilers, meta_inputs)
        try:
            result = job.run()
        except CaseFailure as failure:
            result = {"outcome": failure.outcome, "reason": failure.reason, "phase": job.phase}
        except Exception as exc:  # noqa: BLE001 - e.g. the module raised at import
            result = {
                "outcome": "runtime_error",
                "phase": job.phase,
                "reason": describe(exc),
            }
        result.setdefault("phase_seconds", {"precompile": time.monotonic() - job.started})
        channel.send({"type": "result", "result": result})


#: Added to a compile process's niceness (see :func:`main`).
COMPILE_NICENESS = 10


def idle_scheduling() -> bool:
    """Run this process (and the compilers it starts: ``ptxas`` inherits it) under
    ``SCHED_IDLE``: it gets a core only when no other process wants one, and a waking
    process of the normal class takes the core from it at once. The judge times each call
    by its own clock around a request to its runner, so every wake-up the compile pool
    delays is timed: with 15 processes compiling on 16 cores, niceness alone left the
    tuner's speedups below the referee's on an idle machine (bench/RESULTS.md, eleventh
    session). Needs no privilege; ``False`` where the kernel or a filter refuses it (the
    niceness above still applies)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    in_fd, out_fd, workdir = int(args[0]), int(args[1]), Path(args[2])
    _limit_resources()
    # Below the daemon and the GPU worker: with a process per core compiling (speculatively,
    # much of the time), the benchmark's launch loop and the next proposal come first.
    os.nice(COMPILE_NICENESS)
    idle_scheduling()
    os.dup2(2, 1)  # candidate prints go to the stderr log, never into the protocol
    channel = Channel(in_fd, out_fd)
    import torch  # noqa: F401 - imported once, before any request
    import triton  # noqa: F401

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    mode = "import" if interpreted or precompile_supported() else "compile"
    channel.send({"type": "ready", "pid": os.getpid(), "mode": mode})
    _serve(channel, ModuleLoader(workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
