"""The evaluation worker's process: the judge, which never imports candidate code.

Started by :class:`tuned.evaluation.client.WorkerClient` as ``python -m tuned.evaluation.worker
IN_FD OUT_FD DIR`` in its own process group with a scrubbed environment. It speaks JSON lines on
two inherited pipes (never stdout, which a library may print to: stdout is sent to the stderr
log). For every request it reports each phase as it enters it, so the parent can apply that
phase's deadline, then one result::

    <- {"type": "ready", "fingerprint": {...}}
    -> {"op": "evaluate", "kernel": {...}, "candidate": {...}, "options": {...}}
    <- {"type": "phase", "phase": "load"} ... {"type": "phase", "phase": "benchmark"}
    <- {"type": "result", "result": {...EvalResult.to_dict()...}, "fatal": false}

``fatal`` asks the parent to replace the worker (after a CUDA fault the context is unusable).
The verdict is the judge's (:mod:`tuned.evaluation.judge`); candidate code runs in runner
processes it starts (:mod:`tuned.evaluation.runners`, :mod:`tuned.evaluation.runner`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import platform
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuned.evaluation.case_cache import CaseCache
from tuned.evaluation.checks import CaseFailure, describe, short
from tuned.evaluation.gpu_turn import GpuTurn
from tuned.evaluation.judge import INTERPRETER_TIMING_SIZE, Abandoned, Case, Evaluation
from tuned.evaluation.modules import (
    Channel,
    ModuleLoader,
    dump_stacks_on_signal,
    entry_key,
    import_candidate,
    inputs_module,
    limit_resources,
    refuse_tracing,
)
from tuned.evaluation.runners import RunnerPool

__all__ = [
    "INTERPRETER_TIMING_SIZE",
    "Case",
    "Channel",
    "Evaluation",
    "ModuleLoader",
    "entry_key",
    "fingerprint",
    "import_candidate",
    "inputs_module",
    "main",
    "summarize_compile_facts",
]

_limit_resources = limit_resources  # the name other modules import


# ----------------------------------------------------------------------------- environment


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
        answers = device_properties()
    except (ImportError, AttributeError, RuntimeError, KeyError):
        return None
    return {
        "backend": str(target.backend),
        "arch": target.arch,
        "warp_size": int(target.warp_size),
        "max_shared_bytes": int(props.get("max_shared_mem", 0)),
        "device_properties": answers,
    }


def device_properties() -> dict[str, Any]:
    """``torch.cuda.get_device_properties`` of the current device as plain values (name,
    ``multi_processor_count``, ``total_memory``, ``major``, ...): what launchers read to size
    a persistent grid, for the compile pool to answer with (it has no GPU)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    out: dict[str, Any] = {}
    for name in dir(props):
        if name.startswith("_"):
            continue
        try:
            value = getattr(props, name)
        except (AttributeError, RuntimeError, TypeError, ValueError):  # a property that fails
            continue
        if isinstance(value, (bool, int, float, str)):
            out[name] = value
    return out


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


def prepare(
    request: Mapping[str, Any],
    loader: ModuleLoader,
    device: str,
    pool: RunnerPool,
    cache: CaseCache,
    turn: GpuTurn | None = None,
    abandon: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """A spare's preparation for a kernel (:class:`tuned.evaluation.client.WorkerClient`): the
    kernel's original module, at its baseline knobs, through load, compile and correctness.
    That fills the case cache with every case's inputs and reference outputs and warms the
    own runner (PyTorch and Triton load lazily on a first call), so a re-measurement in this
    worker spends its time on the candidate. Nothing is timed; phases are not reported.
    ``abandon`` is asked before each case; when it says so, the preparation ends there with
    the answer of one skipped (the cases made so far stay)."""
    holds = (turn.holds, turn.held_s) if turn is not None else (0, 0.0)
    evaluation = Evaluation(
        request,
        loader,
        device,
        lambda message: None,
        pool,
        cache,
        correctness_only=True,
        turn=turn,
        abandon=abandon,
    )
    try:
        evaluation.run()
    except Abandoned:
        evaluation.release()
        return dict(_SKIPPED)
    except CaseFailure as failure:
        evaluation.discard_runners()
        return {"type": "prepared", "ok": False, "fatal": failure.fatal, "reason": failure.reason}
    except Exception as exc:  # noqa: BLE001 - reported; the spare is still fresh and usable
        evaluation.discard_runners()
        return {"type": "prepared", "ok": False, "fatal": False, "reason": describe(exc)}
    evaluation.release()
    seconds = sum(evaluation.phase_seconds.values())
    if turn is not None and turn.fd is not None:  # what the worker's timing may wait for
        print(
            f"prepared {request['kernel'].get('name')} in {seconds:.2f} s: the GPU turn "
            f"held {turn.holds - holds[0]} times, {turn.held_s - holds[1]:.2f} s, "
            f"the longest so far {turn.longest_s:.3f} s",
            file=sys.stderr,
            flush=True,
        )
    return {"type": "prepared", "ok": True, "seconds": seconds}


#: Failures that are the judge's verdict on outputs the runner returned as asked: its own
#: runner (the user's source only) stays for the next candidate. Ending it cost the next one a
#: new runner, its CUDA context and the user's package imports again: 11-12 s a candidate
#: for Liger's fused add + RMSNorm on the H200, where most knob variants fail in bfloat16.
_VERDICTS = frozenset({"incorrect", "nan"})


def evaluate(
    request: Mapping[str, Any],
    loader: ModuleLoader,
    device: str,
    send: Any,
    pool: RunnerPool,
    cache: CaseCache,
    turn: GpuTurn | None = None,
) -> tuple[dict[str, Any], bool]:
    """One request's result and whether it is fatal for the worker. The runners it used end,
    but the own runner after a request that went well on the user's own source."""
    evaluation = Evaluation(request, loader, device, send, pool, cache, turn=turn)
    fatal = False
    try:
        result = evaluation.run()
        evaluation.release()
    except CaseFailure as failure:
        if failure.outcome in _VERDICTS and not failure.fatal:
            evaluation.release()  # the judge's verdict on outputs: the runners are sound
        else:
            evaluation.discard_runners()
        fatal = failure.fatal
        result = {
            "outcome": failure.outcome,
            "reason": failure.reason,
            "phase": evaluation.phase,
            "phase_seconds": evaluation.phase_seconds,
        }
    except Exception as exc:  # noqa: BLE001 - e.g. the module raised at import
        evaluation.discard_runners()
        result = {
            "outcome": "runtime_error",
            "phase": evaluation.phase,
            "reason": describe(exc),
            "phase_seconds": evaluation.phase_seconds,
        }
    return result, fatal


def retry_out_of_memory(
    first: tuple[dict[str, Any], bool],
    again: Callable[[], tuple[dict[str, Any], bool]],
    device: str,
    cache: CaseCache,
) -> tuple[dict[str, Any], bool]:
    """``first`` (an evaluation's result and whether it is fatal), or, when it ran out of GPU
    memory, ``again()`` after the case cache gave its device memory back, keeping its cases in
    host memory only for the retry: the memory was the cache's (or a spare's, or another
    process's on the device), not necessarily the candidate's fault, and an original failed
    so leaves its kernel untuned (on the H100, Liger's cross entropy forward and backward ran
    out of memory in the judge, 47 GiB allocated there, most of it cases, when its reference
    asked for 7.8 GiB more). Once only; the retry is said in the result's
    ``metadata.retried``. The kernel's cases then stay in host memory in this worker
    (:meth:`CaseCache.keep_on_host`): its next candidates would run out of memory likewise."""
    result, fatal = first
    if fatal or device != "cuda" or not _out_of_memory(result):
        return first
    freed = cache.release_device()
    cache.keep_on_host()
    import torch

    torch.cuda.empty_cache()
    print(f"out of GPU memory; retrying once, {freed >> 20} MiB of cases freed", file=sys.stderr)
    cache.resident = False
    try:
        retried, fatal = again()
    finally:
        cache.resident = True
    note = f"out of GPU memory on the first try ({memory_figures(str(result.get('reason', '')))})"
    retried["metadata"] = {**(retried.get("metadata") or {}), "retried": note}
    return retried, fatal


#: The figures of PyTorch's out-of-memory message: what was asked, what was free, and which
#: processes held the device (on the H200, who held it was the question).
_MEMORY_FIGURES = re.compile(
    r"Tried to allocate [^.]+\.\d* ?\w+|of which [^.]+\.\d* ?\w+ is free"
    r"|Process \d+ has [^.]+\.\d* ?\w+ memory in use"
    r"|this process has [^.]+\.\d* ?\w+ memory in use"
)


def memory_figures(reason: str, limit: int = 600) -> str:
    """An out-of-memory reason cut to its figures (``Tried to allocate 1.96 GiB; of which
    512.00 MiB is free; Process 4242 has 20.10 GiB memory in use; ...``), or its first 200
    characters when it has none: the message's advice takes the rest of a short note."""
    figures = _MEMORY_FIGURES.findall(reason)
    return short("; ".join(figures), limit) if figures else short(reason, 200)


def _out_of_memory(result: Mapping[str, Any]) -> bool:
    reason = str(result.get("reason", "")).lower()
    return result.get("outcome") == "runtime_error" and "out of memory" in reason


def _return_device_memory(device: str) -> None:
    """Give what PyTorch's allocator holds unused back to the device after each request: a
    worker, its spares and their runners share one GPU, and memory one process keeps cached
    is memory the next candidate elsewhere cannot have."""
    if device == "cuda":
        import torch

        with contextlib.suppress(RuntimeError):  # a broken context: the answer says so
            torch.cuda.empty_cache()


def _context_lost(device: str) -> str | None:
    """Why this process's CUDA context is unusable, or ``None`` when it still works. A fault
    is sticky: every later CUDA call of the process fails with it. The judge runs the
    original as the reference, and Triton reports a fault at its next launch as
    ``RuntimeError: Triton Error [CUDA]: ...``, which
    :func:`~tuned.evaluation.checks.classify_exception` does not take for one
    (``invalid argument`` there is a bad grid, not a lost context):
    on the H200, one TritonBench-G original's fault (``operation not supported on
    global/shared address space``) left its judge in place, and the originals of the next 22
    kernels failed there in 0.1 s each, as runtime errors of their own. So after every
    request the device is asked directly, whatever the request's outcome said."""
    if device != "cuda":
        return None
    import torch

    try:
        torch.cuda.synchronize()
        probe = torch.ones(1, device="cuda").add_(1)
        if probe.item() != 2.0:
            return "CUDA fault: the device computed 1 + 1 wrong; this worker retires"
    except Exception as exc:  # noqa: BLE001 - whatever the fault, the context is gone
        first = (f"{type(exc).__name__}: {exc}".strip().splitlines() or [""])[0]
        print(f"the CUDA context is lost ({first}); this worker retires", file=sys.stderr)
        return f"CUDA fault left the context unusable: {short(first)}"
    return None


#: Device memory a judge may hold between requests beyond its cached cases and its own
#: runner's arena before it retires (e.g. what runners killed while mapping an arena left).
STRAY_BYTES = 4 << 30


def _holds_stray_memory(device: str, cache: CaseCache, pool: RunnerPool) -> bool:
    if device != "cuda":
        return False
    import torch

    stray = torch.cuda.memory_allocated() - cache.held_bytes - pool.arena_bytes()
    if stray <= STRAY_BYTES:
        return False
    print(f"{stray >> 20} MiB of device memory held astray; this worker retires", file=sys.stderr)
    return True


#: A spare's answer to a request to prepare that it skipped: taken over first.
_SKIPPED = {
    "type": "prepared",
    "ok": False,
    "fatal": False,
    "skipped": True,
    "reason": "taken over",
}


def _taken_for_another(channel: Channel, kernel: object) -> bool:
    """Whether the client has taken this spare over (``{"op": "taken"}``, read without
    blocking) for a kernel other than ``kernel``."""
    if b'"taken"' not in channel.pending_bytes():
        return False  # (the usual answer, without parsing every queued request)
    taken = [m for m in channel.waiting() if m.get("op") == "taken"]
    return bool(taken) and taken[0].get("kernel") != kernel


def _serve(
    channel: Channel, device: str, loader: ModuleLoader, pool: RunnerPool, turn: GpuTurn
) -> None:
    cache = CaseCache()  # lives as long as the worker: inputs and references of every case
    while True:
        request = channel.receive()
        if request is None or request.get("op") == "exit":
            return
        if request.get("op") == "taken":
            continue  # said by the client when it takes this spare over (see below)
        if request.get("op") == "prepare":
            name = request.get("kernel", {}).get("name")
            if _taken_for_another(channel, name):
                # Taken over for another kernel before this preparation began: its cases are
                # made when (if ever) one of its candidates comes. On the H100 a
                # re-measurement waited 56 s for a spare making five kernels' cases first.
                channel.send(_SKIPPED)
                continue
            # Taken over while it prepares: it gives up before the next case.
            abandon = functools.partial(_taken_for_another, channel, name)
            answer = prepare(request, loader, device, pool, cache, turn, abandon)
            _return_device_memory(device)
            lost = None if answer.get("fatal") else _context_lost(device)
            if lost:  # what it made is on a device this process can no longer use
                answer = {**answer, "ok": False, "fatal": True, "reason": lost}
            channel.send(answer)
            if answer.get("fatal"):
                return  # e.g. a CUDA fault: the context is unusable, the client starts another
            continue
        once = functools.partial(evaluate, request, loader, device, channel.send, pool, cache, turn)
        result, fatal = retry_out_of_memory(once(), once, device, cache)
        _return_device_memory(device)
        lost = None if fatal else _context_lost(device)
        if lost:
            fatal = True  # this worker retires; a spare takes over
            if result.get("outcome") == "runtime_error":  # a CUDA fault: as classified
                result = {**result, "outcome": "crash", "reason": f"{lost}; {result['reason']}"}
        elif not fatal and _holds_stray_memory(device, cache, pool):
            fatal = True  # this worker retires; a spare takes over (the result stands)
        # "request": the client's number of the request, echoed (a result must name its own).
        answer = {"type": "result", "request": request.get("request"), "result": result}
        channel.send({**answer, "fatal": fatal})
        if fatal:
            return


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    in_fd, out_fd, workdir = int(args[0]), int(args[1]), Path(args[2])
    limit_resources()
    if not refuse_tracing():  # before any runner exists: candidates never reach this process
        print("cannot make the judge non-dumpable (prctl); runners may trace it", file=sys.stderr)
    os.dup2(2, 1)  # library prints go to the stderr log, never into the protocol
    dump_stacks_on_signal()
    channel = Channel(in_fd, out_fd)
    turn = GpuTurn.from_environment()  # before any runner starts: they never hold it
    import torch

    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    if device == "cpu":  # the judge runs the original as the reference: its first config
        from tuned.evaluation.interpreted_autotune import first_config_autotuners

        first_config_autotuners()
    if device == "cuda" and not torch.cuda.is_available():
        channel.send({"type": "error", "reason": "no CUDA device; set TRITON_INTERPRET=1"})
        return 3
    pool = RunnerPool(workdir / "runners", device, writable=workdir.parent)
    pool.start_ahead()  # they import PyTorch and Triton while this one warms up
    warm_up(device)
    pool.wait_ready()
    channel.send(
        {
            "type": "ready",
            "fingerprint": fingerprint(device),
            "pid": os.getpid(),
            "target": compile_target(device),
        }
    )
    try:
        _serve(channel, device, ModuleLoader(workdir / "judge"), pool, turn)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
