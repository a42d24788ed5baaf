"""The baseline of a reference-only entry: the faster of eager PyTorch and ``torch.compile``.

A reference entry (``kind: reference``, docs/registry.md) has a PyTorch ``reference`` and
an input maker but no Triton module. Its baseline is what a user would run without ktuned:
the reference, eagerly or through ``torch.compile``, whichever is faster here. The
evaluation worker cannot measure it (it insists that a Triton kernel of the candidate runs),
so :func:`measure_reference` runs this module as a child process (``python -m
tuned.evaluation.reference``) in the worker's scrubbed environment, its own process group and a
deadline, on the worker's timed cases (same shapes, dtypes and seeds, same timing rule):

1. the reference runs eagerly on each timed case;
2. unless disabled (``llm.compile_reference: false``), ``torch.compile(reference)`` runs
   on the same inputs and must match the eager outputs within the dtype's tolerance; a
   compile error (no C++ compiler on a CPU box, an unsupported op, an old PyTorch) or a
   mismatch falls back to eager, with the reason recorded;
3. both are timed interleaved; the faster (geometric mean of the per-case medians) wins.

The result is the ``original`` candidate's evaluation: ``metadata["reference_baseline"]``
says which implementation was used (``impl``: ``eager`` or ``compile``), both times, and
``compile`` (``ok``, ``disabled``, ``unavailable: ...``, ``incorrect: ...``). The candidate's
source is :func:`baseline_source`: the entry's module plus a launcher that calls the chosen
implementation, so the worker can time it interleaved with LLM-written candidates, as the
incumbent, like any baseline.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuned.evaluation.sandbox import WORKDIR, SandboxSettings, check_sandbox, exit_status, sandboxed
from tuned.outcomes import EvalResult, Outcome
from tuned.registry.spec import KernelSpec

__all__ = ["baseline_source", "choose_impl", "measure_reference"]

IMPLS = ("eager", "compile")


def baseline_source(spec: KernelSpec, impl: str) -> str:
    """The ``original`` candidate's module of a reference entry: the entry's module and a
    launcher that runs the reference eagerly or compiled (``impl``)."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    ref, launcher = spec.reference, spec.launcher
    head = spec.module_source.rstrip() + "\n\n\n"
    if impl == "eager":
        return head + (
            f"# Added by ktuned: the baseline of this reference entry, {ref}() run eagerly.\n"
            f"def {launcher}(*inputs):\n    return {ref}(*inputs)\n"
        )
    return head + (
        f"# Added by ktuned: the baseline of this reference entry, torch.compile of {ref}().\n"
        "import torch as _ktuned_torch\n\n_KTUNED_COMPILED = []\n\n\n"
        f"def {launcher}(*inputs):\n"
        "    if not _KTUNED_COMPILED:\n"
        f"        _KTUNED_COMPILED.append(_ktuned_torch.compile({ref}))\n"
        "    return _KTUNED_COMPILED[0](*inputs)\n"
    )


def choose_impl(eager_s: float, compile_s: float | None) -> str:
    """``compile`` when it ran correctly and is faster than eager, else ``eager``."""
    return "compile" if compile_s is not None and compile_s < eager_s else "eager"


def measure_reference(
    spec: KernelSpec,
    *,
    workdir: Path,
    interpreter: bool,
    seeds: Sequence[int],
    interpreter_max_size: int,
    timing: Mapping[str, Any],
    compile_reference: bool,
    timeout_s: float,
    python: str = sys.executable,
    sandbox: SandboxSettings | None = None,
) -> tuple[EvalResult, float]:
    """Measure the baseline of reference entry ``spec`` in a child process; the result and
    the wall seconds it took. Failures (the reference raises, the deadline passes, the child
    dies) are results, never raised. The child runs in ``sandbox``
    (:mod:`tuned.evaluation.sandbox`; ``None``: the default, ``bwrap``) with ``workdir`` as
    its only writable directory."""
    from tuned.evaluation.client import kernel_payload, worker_environment

    sandbox = sandbox or SandboxSettings()
    check_sandbox(sandbox)

    workdir.mkdir(parents=True, exist_ok=True)
    request = {
        "kernel": kernel_payload(spec),
        "seeds": list(seeds),
        "interpreter_max_size": interpreter_max_size,
        "timing": dict(timing),
        "compile": compile_reference,
    }
    request_path, result_path = workdir / "request.json", workdir / "result.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    result_path.unlink(missing_ok=True)
    env = worker_environment(
        os.environ, interpreter=interpreter, cache_dir=workdir / "triton-cache", memory_limit=None
    )
    inside, cwd, writable = workdir, str(workdir), []
    if sandbox.enabled:  # its directory, at a path that says nothing of the host's
        inside, cwd, writable = Path(WORKDIR), WORKDIR, [(workdir, WORKDIR)]
        env.update(
            TRITON_CACHE_DIR=f"{WORKDIR}/triton-cache", TRITON_HOME=WORKDIR, TMPDIR=f"{WORKDIR}/tmp"
        )
    request_arg, result_arg = str(inside / "request.json"), str(inside / "result.json")
    launch = sandboxed(
        [python, "-m", "tuned.evaluation.reference", request_arg, result_arg],
        settings=sandbox,
        env=env,
        writable=writable,
        cwd=cwd,
    )
    t0 = time.monotonic()
    with open(workdir / "stderr.log", "wb") as log:
        try:
            proc = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=launch.env,
                pass_fds=launch.pass_fds,
                cwd=workdir,
                start_new_session=True,
            )
        finally:
            launch.close()
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return EvalResult(
                Outcome.TIMEOUT,
                phase="benchmark",
                reason=f"measuring the reference exceeded its {timeout_s:g} s deadline",
            ), time.monotonic() - t0
    wall = time.monotonic() - t0
    code = exit_status(code, sandbox)
    if code != 0 or not result_path.exists():
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        tail = (workdir / "stderr.log").read_bytes()[-800:].decode("utf-8", "replace").strip()
        return EvalResult(
            Outcome.CRASH,
            phase="benchmark",
            reason=f"the reference baseline process {how}"
            + (f"; stderr ends: {tail}" if tail else ""),
        ), wall
    return EvalResult.from_dict(json.loads(result_path.read_text(encoding="utf-8"))), wall


# ----------------------------------------------------------------------------- the child


def _timed_cases(
    kernel: Mapping[str, Any], device: str, cap: int
) -> list[tuple[dict[str, int], str]]:
    """The worker's timed cases (``Evaluation.timed_cases``): the perf shapes on a GPU; on a
    CPU the largest declared shape of at most ``INTERPRETER_TIMING_SIZE`` elements, else the
    smallest; every dtype."""
    from tuned.evaluation.worker import INTERPRETER_TIMING_SIZE

    shapes = [s for s in kernel["shapes"] if not s.get("derived")]
    if device == "cuda":
        chosen = [dict(s["dims"]) for s in shapes if s["perf"]]
    else:
        all_sizes = {math.prod(s["dims"].values()) for s in shapes}
        sizes = sorted(n for n in all_sizes if not cap or n <= cap)
        if not sizes:
            return []
        fitting = [n for n in sizes if n <= INTERPRETER_TIMING_SIZE]
        size = fitting[-1] if fitting else sizes[0]
        chosen = [dict(s["dims"]) for s in shapes if math.prod(s["dims"].values()) == size]
    return [(dims, dtype) for dims in chosen for dtype in kernel["dtypes"]]


def _label(dims: Mapping[str, int], dtype: str) -> str:
    return "x".join(f"{k}={v}" for k, v in dims.items()) + f"/{dtype}"


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-12)) for v in values) / len(values))


def _measure(request: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    import torch

    from profilers.timing import TimingSettings, interleaved_samples
    from tuned.evaluation.checks import CaseFailure, clone_inputs, compare_outputs, short
    from tuned.evaluation.worker import ModuleLoader

    kernel = request["kernel"]
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    if device == "cpu":  # an autotuner with several configs runs its first one
        from tuned.evaluation.interpreted_autotune import first_config_autotuners

        first_config_autotuners()
    source = kernel["original_source"]
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    module = ModuleLoader(workdir / "modules").load(
        source, directory_key=key, extra_files=kernel.get("extra_files", {})
    )
    reference: Callable[..., Any] = getattr(module, kernel["reference"])
    make_inputs = getattr(module, kernel["inputs"])
    cases = _timed_cases(
        kernel, device, int(request["interpreter_max_size"]) if device == "cpu" else 0
    )
    if not cases:
        reason = "every shape is above the interpreter size cap; declare a smaller shape"
        return {"outcome": "runtime_error", "phase": "benchmark", "reason": reason}
    seed = int(request["seeds"][0]) if request["seeds"] else 0
    inputs = {_label(d, t): make_inputs(dict(d), getattr(torch, t), device, seed) for d, t in cases}
    status = "disabled"
    compiled: Callable[..., Any] | None = None
    if request["compile"]:
        try:
            compiled = torch.compile(reference)
            status = "ok"
            for (_, dtype), xs in zip(cases, inputs.values(), strict=True):
                atol, rtol = (float(v) for v in kernel["tolerance"][dtype])
                compare_outputs(
                    compiled(*clone_inputs(xs)),
                    reference(*clone_inputs(xs)),
                    atol,
                    rtol,
                    dtype=dtype,
                )
        except CaseFailure as failure:
            compiled, status = None, f"incorrect: {short(failure.reason, 300)}"
        except Exception as exc:  # noqa: BLE001 - torch.compile's failures have no common base
            compiled = None
            what = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            status = f"unavailable: {short(what, 300)}"
    settings = TimingSettings(**request.get("timing", {}))
    medians: dict[str, list[float]] = {"eager": [], "compile": []}
    timings: dict[str, float] = {}
    for xs in inputs.values():
        fns: list[Callable[[], Any]] = [functools.partial(reference, *xs)]
        if compiled is not None:
            fns.append(functools.partial(compiled, *xs))
        samples = interleaved_samples(fns, gpu=device == "cuda", settings=settings)
        medians["eager"].append(statistics.median(samples[0]))
        if compiled is not None:
            medians["compile"].append(statistics.median(samples[1]))
    eager_s = _geomean(medians["eager"])
    compile_s = _geomean(medians["compile"]) if compiled is not None else None
    impl = choose_impl(eager_s, compile_s)
    for i, label in enumerate(inputs):
        timings[label] = medians[impl][i]
    return {
        "outcome": "ok",
        "time_s": compile_s if impl == "compile" else eager_s,
        "timings": timings,
        "timing_kind": "gpu" if device == "cuda" else "interpreter",
        "phase": "done",
        "checked_cases": 0,
        "metadata": {
            "reference_baseline": {
                "impl": impl,
                "eager_s": eager_s,
                "compile_s": compile_s,
                "compile": status,
            }
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    request_path, result_path = Path(args[0]), Path(args[1])
    os.dup2(2, 1)  # prints of the reference go to the log
    request = json.loads(request_path.read_text(encoding="utf-8"))
    try:
        result = _measure(request, request_path.parent)
    except Exception as exc:  # noqa: BLE001 - the reference or its input maker raised
        from tuned.evaluation.checks import short

        result = {
            "outcome": "runtime_error",
            "phase": "benchmark",
            "reason": "the reference failed: "
            + short("".join(traceback.format_exception_only(type(exc), exc)).strip()),
        }
    result_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
