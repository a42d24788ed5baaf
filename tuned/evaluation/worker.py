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
import importlib.util
import json
import math
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds

# Exception type names that mean "the Triton compiler refused this kernel/config".
_COMPILE_ERROR_NAMES = frozenset(
    {
        "CompilationError",
        "CompileTimeAssertionFailure",
        "OutOfResources",
        "PTXASError",
        "UnsupportedLanguageConstruct",
        "InterpreterError",
    }
)


class CaseFailure(Exception):
    """A candidate failed a case; carries the outcome name and reason."""

    def __init__(self, outcome: str, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True)
class Case:
    dims: Mapping[str, int]
    dtype: str
    seed: int
    perf: bool

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


# ----------------------------------------------------------------------------- modules


class ModuleLoader:
    """Imports module sources written to the worker's directory, under unique names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, ModuleType] = {}

    def load(
        self, source: str, *, directory_key: str, extra_files: Mapping[str, str]
    ) -> ModuleType:
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        key = f"{directory_key}:{digest}"
        if key in self._loaded:
            return self._loaded[key]
        directory = self.root / f"entry_{directory_key}"
        directory.mkdir(parents=True, exist_ok=True)
        for rel, text in extra_files.items():
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        name = f"ktuned_candidate_{digest}"
        path = directory / f"{name}.py"
        path.write_text(source, encoding="utf-8")
        # Sibling modules of the entry resolve from its own directory only.
        sys.path[:] = [p for p in sys.path if not p.startswith(str(self.root))]
        sys.path.insert(0, str(directory))
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


# ----------------------------------------------------------------------------- checking


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def compare_outputs(out: Any, ref: Any, atol: float, rtol: float) -> None:
    """Raise :class:`CaseFailure` (``nan`` or ``incorrect``) unless ``out`` matches ``ref``."""
    import torch

    outs, refs = _as_tuple(out), _as_tuple(ref)
    if len(outs) != len(refs):
        raise CaseFailure("incorrect", f"returned {len(outs)} outputs, the reference {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if o != r:
                raise CaseFailure("incorrect", f"output {i}: {o!r} != reference {r!r}")
            continue
        if not isinstance(o, torch.Tensor):
            raise CaseFailure("incorrect", f"output {i} is {type(o).__name__}, not a tensor")
        if tuple(o.shape) != tuple(r.shape):
            raise CaseFailure(
                "incorrect", f"output {i} has shape {tuple(o.shape)}, reference {tuple(r.shape)}"
            )
        if o.dtype != r.dtype:
            raise CaseFailure("incorrect", f"output {i} has dtype {o.dtype}, reference {r.dtype}")
        of, rf = o.double(), r.double()
        nans = torch.isnan(of)
        if bool(nans.any()):
            count = int(nans.sum())
            first = tuple(int(j) for j in torch.nonzero(nans)[0].tolist())
            raise CaseFailure("nan", f"output {i}: {count} NaN elements, first at {first}")
        bad = ~torch.isclose(of, rf, rtol=rtol, atol=atol, equal_nan=False)
        if bool(bad.any()):
            err = (of - rf).abs()
            err = torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))
            count = int(bad.sum())
            first = tuple(int(j) for j in torch.nonzero(bad)[0].tolist())
            raise CaseFailure(
                "incorrect",
                f"output {i}: {count}/{o.numel()} elements outside atol={atol} rtol={rtol}, "
                f"max abs error {float(err.max()):.3g}, first at {first}",
            )


def _check_inputs_unchanged(before: Sequence[Any], after: Sequence[Any]) -> None:
    import torch

    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(b, torch.Tensor) and not torch.equal(b, a):
            raise CaseFailure("cheat", f"the candidate modified its input {i}")


def classify_exception(exc: BaseException, phase: str) -> CaseFailure:
    """Map an exception raised by candidate code to an outcome.

    Triton's own errors while the first launch compiles are ``compile_error``; a CUDA fault
    is ``crash`` and fatal (the context is lost); anything else is ``runtime_error``.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = f"{type(exc).__name__}: {exc}".strip()
    first_line = text.splitlines()[0] if text else type(exc).__name__
    if "AcceleratorError" in names or "CUDA error" in text or "illegal memory access" in text:
        return CaseFailure("crash", f"CUDA fault in {phase}: {first_line}", fatal=True)
    from_triton = type(exc).__module__.startswith("triton")
    if phase == "compile" and (names & _COMPILE_ERROR_NAMES or from_triton):
        return CaseFailure("compile_error", _short(text))
    return CaseFailure("runtime_error", f"{phase}: {_short(text)}")


def _short(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2 :]


# ----------------------------------------------------------------------------- evaluation


class Evaluation:
    """One request: load, compile (first launch), correctness on every case, benchmark."""

    def __init__(
        self,
        request: Mapping[str, Any],
        loader: ModuleLoader,
        device: str,
        send: Callable[[Mapping[str, Any]], None],
    ) -> None:
        self.kernel = request["kernel"]
        self.candidate = request["candidate"]
        self.options = request["options"]
        self.loader = loader
        self.device = device
        self.send = send
        self.phase = "load"
        self.phase_started = time.monotonic()
        self.phase_seconds: dict[str, float] = {}
        self.knobs: dict[str, Any] = dict(self.candidate["knobs"])

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
        for shape in self.kernel["shapes"]:
            dims = dict(shape["dims"])
            size = math.prod(dims.values())
            for dtype in self.kernel["dtypes"]:
                if cap and size > cap:
                    skipped.append(Case(dims, dtype, 0, bool(shape["perf"])).label)
                    continue
                for seed in self.options["seeds"]:
                    cases.append(Case(dims, dtype, int(seed), bool(shape["perf"])))
        return cases, skipped

    def timed_cases(self, cases: Sequence[Case]) -> list[Case]:
        first_seed = [c for c in cases if c.seed == cases[0].seed]
        perf = [c for c in first_seed if c.perf]
        if perf or self.device == "cuda":
            return perf
        # Interpreter: no perf shape fits under the size cap; time the largest that does.
        largest = max(math.prod(c.dims.values()) for c in first_seed)
        return [c for c in first_seed if math.prod(c.dims.values()) == largest]

    def run(self) -> dict[str, Any]:
        import torch

        key = hashlib.sha256(self.kernel["original_source"].encode()).hexdigest()[:16]
        extra = self.kernel.get("extra_files", {})
        original = self.loader.load(
            self.kernel["original_source"], directory_key=key, extra_files=extra
        )
        module = self.loader.load(self.candidate["source"], directory_key=key, extra_files=extra)
        launcher = getattr(module, self.kernel["launcher"], None)
        if not callable(launcher):
            raise CaseFailure("rejected_static", f"no callable {self.kernel['launcher']!r}")
        make_inputs = getattr(original, self.kernel["inputs"])
        if self.kernel.get("reference"):
            reference = getattr(original, self.kernel["reference"])
        else:
            base = getattr(original, self.kernel["launcher"])
            baseline_knobs = dict(self.kernel["baseline_knobs"])
            reference = lambda *xs: base(*xs, **baseline_knobs)

        cases, skipped = self.cases()
        if not cases:
            raise CaseFailure(
                "runtime_error",
                "every shape is above the interpreter size cap; declare a smaller shape",
            )

        def call(case: Case) -> tuple[list[Any], Any]:
            inputs = make_inputs(
                dict(case.dims), getattr(torch, case.dtype), self.device, case.seed
            )
            out = launcher(*inputs, **self.knobs)
            if self.device == "cuda":
                torch.cuda.synchronize()
            return list(inputs), out

        self.enter("compile")
        try:
            first_inputs, first_out = call(cases[0])
        except CaseFailure:
            raise
        except Exception as exc:
            raise classify_exception(exc, "compile") from exc

        self.enter("correctness")
        for index, case in enumerate(cases):
            try:
                if index == 0:
                    inputs, out = first_inputs, first_out
                else:
                    inputs, out = call(case)
                fresh = make_inputs(
                    dict(case.dims), getattr(torch, case.dtype), self.device, case.seed
                )
                _check_inputs_unchanged(fresh, inputs)
                ref = reference(*_clone_inputs(fresh))
                tol = self.kernel["tolerance"][case.dtype]
                compare_outputs(out, ref, float(tol[0]), float(tol[1]))
            except CaseFailure as failure:
                failure.reason = f"{case.label} seed {case.seed}: {failure.reason}"
                raise
            except Exception as exc:
                classified = classify_exception(exc, "correctness")
                classified.reason = f"{case.label} seed {case.seed}: {classified.reason}"
                raise classified from exc
        del first_inputs, first_out

        self.enter("benchmark")
        settings = TimingSettings(**self.options.get("timing", {}))
        timings: dict[str, float] = {}
        for case in self.timed_cases(cases):
            inputs = make_inputs(
                dict(case.dims), getattr(torch, case.dtype), self.device, case.seed
            )
            fn = lambda: launcher(*inputs, **self.knobs)  # noqa: B023
            try:
                if self.device == "cuda":
                    median, _ = gpu_median_seconds(fn, settings)
                else:
                    median, _ = wall_median_seconds(fn, settings)
            except Exception as exc:
                raise classify_exception(exc, "benchmark") from exc
            timings[case.label] = median
        self.enter("done")
        objective = math.exp(sum(math.log(max(t, 1e-12)) for t in timings.values()) / len(timings))
        return {
            "outcome": "ok",
            "time_s": objective,
            "timings": timings,
            "timing_kind": "gpu" if self.device == "cuda" else "interpreter",
            "phase_seconds": self.phase_seconds,
            "checked_cases": len(cases),
            "skipped_cases": skipped,
        }


def _serve(channel: Channel, device: str, loader: ModuleLoader) -> None:
    while True:
        request = channel.receive()
        if request is None or request.get("op") == "exit":
            return
        evaluation = Evaluation(request, loader, device, channel.send)
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
                "reason": _short("".join(traceback.format_exception_only(type(exc), exc))),
                "phase_seconds": evaluation.phase_seconds,
            }
        channel.send({"type": "result", "result": result, "fatal": fatal})
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
    channel.send({"type": "ready", "fingerprint": fingerprint(device), "pid": os.getpid()})
    _serve(channel, device, ModuleLoader(workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
