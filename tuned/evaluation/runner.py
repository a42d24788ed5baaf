"""The runner: the only process that imports and runs candidate code. It decides nothing.

Forked by the zygote (:mod:`tuned.evaluation.zygote`) for the judge
(:mod:`tuned.evaluation.runners`), in the judge's process group (a deadline that kills the
worker kills its runners); ``python -m tuned.evaluation.runner IN_FD OUT_FD ARENA_FD DIR
WRITABLE`` starts one on its own. It imports candidate modules under the guard, and on each
``call`` runs the launcher on tensor views of the shared arena (:mod:`tuned.evaluation.shm`)
the judge filled, copies the outputs into the places the judge gave, and answers in JSON::

    <- {"type": "ready", "pid": ...}
    -> {"op": "arena", "size": ..., ["cuda": ...]}
    -> {"op": "load", "slot": "candidate", "kernel": {...}, "source": ..., "knobs": {...}}
    <- {"ok": true}  |  {"ok": false, "outcome": ..., "reason": ..., "fatal": ...}
    -> {"op": "call", "slot": ..., "dims": {...}, "inputs": [...], "outputs": [...],
        "poison": "nan"|"sentinel"|null, "reps": n, "stable": bool, "phase": ...}
    <- {"ok": true, "outputs": [{"kind": "tensor", "shape", "dtype"} | {"kind": "value",
        "value"} | {"kind": "bad", "reason"}], "compiled": [...]}
    -> {"op": "ping"} <- {"ok": true};  -> {"op": "warm"};  -> {"op": "reset"};  -> {"op": "exit"}

Everything it says is checked by the judge against memory the judge owns: outputs are read from
the arena and compared there, the inputs' places are compared with the pristine copies, and
timing is the judge's clock around ``call``. What it reports itself (guard refusals, no launch,
an output that is not a plain dense tensor, a view of an input) only names a failure sooner. A
runner that ran code other than the user's own is never used for another request."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuned.evaluation.checks import (
    CaseFailure,
    as_tuple,
    classify_exception,
    short,
)
from tuned.evaluation.guard import Guard, TimerSnapshot
from tuned.evaluation.invoke import EntryCall, entry_call, kernel_modules
from tuned.evaluation.modules import (
    Channel,
    ModuleLoader,
    import_candidate,
    limit_resources,
    release_unused,
)
from tuned.evaluation.shm import MappedArena, dtype_name

__all__ = ["main", "plain_problem"]

#: CUDA graphs a slot keeps for its current case, the least recently replayed dropped first:
#: above the timed length on each of the case's input sets (one per round, up to the
#: referee's 20) and the calibration's lengths, so a timed round never captures again (with
#: four, ten sets cycled through four graphs captured on every timed call). What they hold is
#: bounded by the case: more than two sets only while their inputs stay under 2 GiB
#: (:mod:`tuned.evaluation.timing_judge`).
_GRAPHS_PER_CASE = 32
#: A call of more repetitions than this, a multiple of it (the judge sizes timed calls so),
#: replays one graph of ``GRAPH_UNIT`` calls ``reps / GRAPH_UNIT`` times back to back: the
#: capture runs the launcher's Python once per captured call, and a short kernel's timed
#: length is hundreds of calls (on the H200, the capture calls were the largest part of
#: Liger's RMSNorm benchmark phase, 0.17 s per candidate against 0.12 s of timed rounds; how
#: much of it was the launcher's Python is not measured). A graph of 64 calls of a 2 us
#: kernel lasts 128 us, against a few microseconds to launch the next.
GRAPH_UNIT = 64


@dataclass
class Slot:
    """A loaded launcher: the candidate's, or the incumbent's."""

    launcher: EntryCall
    knobs: dict[str, Any]
    module: str
    modules: set[str] = field(default_factory=set)
    #: CUDA graphs of the current case only (see :meth:`Runner._graph_reps`), and its dims.
    graphs: dict[str, Any] = field(default_factory=dict)
    graph_case: str = ""
    #: Cases whose capture failed (the launcher synchronizes or reads on the host): eager.
    uncapturable: set[str] = field(default_factory=set)


def plain_problem(tensor: Any) -> str | None:
    """Why ``tensor`` is not a plain dense tensor with real storage, or ``None``."""
    import torch

    if type(tensor) is not torch.Tensor:
        return f"is a {type(tensor).__name__} (a tensor subclass), not a plain torch.Tensor"
    if tensor.layout != torch.strided or tensor.is_meta:
        return f"has no real storage (layout {tensor.layout}, meta {tensor.is_meta})"
    if tensor.is_conj() or tensor.is_neg():
        return "is a lazy (conjugate or negative) view"
    shape, strides = tuple(tensor.shape), tuple(tensor.stride())
    if tensor.numel() > 1:
        dims = sorted((s, n) for s, n in zip(strides, shape) if n > 1)
        step = 1
        for stride, size in dims:
            if stride != step:
                return f"is not dense (shape {shape}, strides {strides})"
            step *= size
    need = (tensor.storage_offset() + tensor.numel()) * tensor.element_size()
    if tensor.numel() and tensor.untyped_storage().nbytes() < need:
        return "has less storage than its elements"
    return None


class Runner:
    def __init__(self, arena: MappedArena, workdir: Path, writable: Path, device: str) -> None:
        self.arena = arena
        self.loader = ModuleLoader(workdir / "modules")
        self.writable = [writable]  # the worker's directory; TMPDIR lies inside
        self.device = device
        self.timers = TimerSnapshot()
        self.slots: dict[str, Slot] = {}
        self.stable: dict[str, list[Any]] = {}

    def reset(self) -> None:
        """Forget the loaded slots and their stable inputs; on a GPU (shared with the judge,
        the spares and their runners) give back what the allocator holds unused."""
        self.slots.clear()
        self.stable.clear()
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()

    def let_go(self) -> None:
        """Drop every view of the arena before exiting: memory the judge shared by CUDA IPC is
        freed there only once each process that mapped it has let go (a runner killed while
        mapped leaves it held in the judge for good)."""
        self.reset()
        self.arena.base = None
        if self.device == "cuda":  # a memfd goes with the process: nothing to wait for
            import gc

            import torch

            gc.collect()
            torch.cuda.synchronize()

    def guard(self, slot: Slot | None, poison: str | None) -> Guard:
        modules = slot.modules if slot is not None else set()
        return Guard(candidate_modules=modules, writable=self.writable, poison=poison)

    def check(self, guard: Guard, *, need_launch: bool) -> None:
        if guard.violations:
            raise CaseFailure("cheat", f"forbidden: {guard.violations[0]}")
        if need_launch and guard.launches == 0:
            extra = (
                f" with work ({guard.empty_launches} launches of zero work)"
                if guard.empty_launches
                else " (launch hook saw none)"
            )
            if guard.foreign_launches and not guard.empty_launches:
                extra = (
                    f" (it launched kernels of {', '.join(sorted(guard.foreign_launches))}: "
                    "a launcher in another module is not tuned through this entry; register "
                    "the function there that launches them)"
                )
            raise CaseFailure("cheat", f"no Triton kernel of the candidate launched{extra}")
        tampered = self.timers.tampered()
        if tampered:
            raise CaseFailure(
                "cheat", f"patched what measurement relies on: {', '.join(tampered)}", fatal=True
            )

    # -- operations

    def warm(self) -> None:
        if self.device == "cuda":
            import torch

            x = torch.ones(256, 256, device="cuda", dtype=torch.float16)
            (x @ x).float().sum().item()
            torch.cuda.synchronize()

    def load(self, message: Mapping[str, Any]) -> dict[str, Any]:
        kernel = message["kernel"]
        guard = self.guard(None, None)
        _, module = import_candidate(self.loader, kernel, str(message["source"]), guard)
        slot = Slot(
            entry_call(module, kernel, role="launcher"),
            dict(message.get("knobs") or {}),
            module.__name__,
        )
        slot.modules = kernel_modules(slot.launcher.target, module)
        self.check(guard, need_launch=False)
        self.slots[str(message["slot"])] = slot
        return {"ok": True}

    def _inputs(self, places: Sequence[dict[str, Any]], stable: bool) -> list[Any]:
        """Views of the inputs' places: new objects per call, or (``stable``, the timed calls)
        the same objects for the same places, as a timing loop would pass them."""
        if not stable:
            return [self.arena.value(p) for p in places]
        import json

        key = json.dumps(places, sort_keys=True)
        if key not in self.stable:
            self.stable[key] = [self.arena.value(p) for p in places]
        return self.stable[key]

    def call(self, message: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        slot = self.slots[str(message["slot"])]
        places = list(message["inputs"])
        inputs = self._inputs(places, bool(message.get("stable")))
        reps = max(1, int(message.get("reps", 1)))
        fn = slot.launcher.at(dict(message["dims"]))
        guard = self.guard(slot, message.get("poison"))
        out: Any = None
        replayed = captured = False
        try:
            with guard:
                if reps > 1 and self.device == "cuda":
                    case = json.dumps(message["dims"], sort_keys=True)
                    out, replayed, captured = self._graph_reps(slot, fn, inputs, reps, case)
                if not replayed:
                    for _ in range(reps):
                        out = fn(*inputs, **slot.knobs)
                if self.device == "cuda":
                    torch.cuda.synchronize()
        except CaseFailure:
            raise
        except Exception as exc:
            if guard.violations:
                raise CaseFailure("cheat", f"forbidden: {guard.violations[0]}") from exc
            raise
        # Python ran: the candidate must have launched. The incumbent need not: a reference
        # entry's is its PyTorch reference, and an incumbent was checked when it was accepted.
        candidate = str(message["slot"]) != "incumbent"
        self.check(guard, need_launch=candidate and (captured or not replayed))
        compiled = [f for (m, _), f in guard.compiled.items() if m == slot.module]
        outputs = self.deliver(out, places, list(message.get("outputs") or []))
        del out, inputs
        release_unused(self.device)  # what the call left cached, past a gibibyte
        return {"ok": True, "outputs": outputs, "compiled": compiled}

    def _graph_reps(
        self, slot: Slot, fn: Callable[..., Any], inputs: list[Any], reps: int, case: str
    ) -> tuple[Any, bool, bool]:
        """GPU: ``reps`` calls captured once into a CUDA graph and replayed (the host cannot
        open gaps between them; past :data:`GRAPH_UNIT`, a graph of that many calls replayed
        ``reps / GRAPH_UNIT`` times): the outputs, whether replayed, whether captured now;
        ``(None, False, False)`` when capture fails (then eager). A slot keeps the graphs of
        one case (``case``: its dims) at a time: the judge times case after case, and each
        graph holds its own memory pool (on the H200 a runner of Liger's cross entropy
        forward and backward held 83-106 GiB through one request's cases, and the judge ran
        out of memory for 7.8 GiB)."""
        import torch

        if case in slot.uncapturable:
            return None, False, False
        if case != slot.graph_case:
            slot.graphs.clear()
            slot.graph_case = case
        unit = GRAPH_UNIT if reps > GRAPH_UNIT and reps % GRAPH_UNIT == 0 else reps
        key = f"{id(inputs)}:{unit}"
        graph = slot.graphs.pop(key, None)  # back in last: the least recently used goes first
        if graph is not None:
            slot.graphs[key] = graph
        captured = graph is None
        if graph is None:
            while len(slot.graphs) >= _GRAPHS_PER_CASE:  # e.g. a calibration's other lengths
                slot.graphs.pop(next(iter(slot.graphs)))
            try:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(unit):
                        out = fn(*inputs, **slot.knobs)
                graph = slot.graphs[key] = (g, out)
            except Exception:  # noqa: BLE001 - it synchronizes or reads on the host: eager
                # Never tried again for this case: each attempt launches, fails and leaves
                # its pool to be collected (Liger's cross entropy reads a count with .item()).
                slot.uncapturable.add(case)
                torch.cuda.synchronize()
                return None, False, False
        for _ in range(reps // unit):
            graph[0].replay()
        return graph[1], True, captured

    def deliver(
        self, out: Any, inputs: Sequence[dict[str, Any]], places: Sequence[Any]
    ) -> list[dict[str, Any]]:
        """What each output is, the tensors copied into the judge's places when they fit."""
        import torch

        described: list[dict[str, Any]] = []
        for i, o in enumerate(as_tuple(out)):
            if isinstance(o, torch.Tensor):
                problem = plain_problem(o)
                owner = self.arena.owner_of(o, inputs) if problem is None else None
                if problem is not None:
                    described.append({"kind": "bad", "reason": f"output {i} {problem}"})
                    continue
                meta: dict[str, Any] = {
                    "kind": "tensor",
                    "shape": list(o.shape),
                    "dtype": dtype_name(o.dtype),
                }
                if owner is not None:  # the judge refuses it if the call changed that input
                    meta["input"] = owner
                place = places[i] if i < len(places) else None
                if place and place["shape"] == meta["shape"] and place["dtype"] == meta["dtype"]:
                    with torch.no_grad():
                        self.arena.view(place).copy_(o)
                described.append(meta)
            elif isinstance(o, (bool, int, float, str, type(None))):
                described.append({"kind": "value", "value": o})
            else:
                described.append({"kind": "bad", "reason": f"output {i} is a {type(o).__name__}"})
        if self.device == "cuda":
            torch.cuda.synchronize()
        return described


def _failure(exc: BaseException, phase: str) -> dict[str, Any]:
    if isinstance(exc, CaseFailure):
        failure = exc
    elif isinstance(exc, Exception):
        failure = classify_exception(exc, phase)
    else:
        failure = CaseFailure("runtime_error", f"{phase}: {type(exc).__name__}")
    return {
        "ok": False,
        "outcome": failure.outcome,
        "reason": short(failure.reason),
        "fatal": failure.fatal,
    }


def serve(channel: Channel, runner: Runner) -> None:
    while True:
        message = channel.receive()
        if message is None or message.get("op") == "exit":
            if message is not None:  # the judge waits (briefly) for this before its SIGKILL
                runner.let_go()
                channel.send({"ok": True, "id": message.get("id")})
            return
        op = message.get("op")
        try:
            if op == "arena":
                runner.arena.remap(message)
                answer: dict[str, Any] = {"ok": True}
            elif op == "load":
                answer = runner.load(message)
            elif op == "call":
                answer = runner.call(message)
            elif op == "warm":  # the CUDA context, before a first call's clock starts
                runner.warm()
                answer = {"ok": True}
            elif op == "reset":
                runner.reset()
                answer = {"ok": True}
            else:
                answer = {"ok": True}  # ping
        except BaseException as exc:  # reported; the judge decides
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if not isinstance(exc, CaseFailure):
                traceback.print_exc()
            answer = _failure(exc, str(message.get("phase", op)))
        answer["id"] = message.get("id")
        channel.send(answer)


def serve_fds(in_fd: int, out_fd: int, arena_fd: int, workdir: str, writable: str) -> None:
    """Be a runner on these descriptors (a child the zygote forked, or :func:`main`)."""
    channel = Channel(in_fd, out_fd)
    import torch  # noqa: F401 - imported already in a zygote's child
    import triton  # noqa: F401

    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    if device == "cpu":  # an autotuner with several configs runs its first one
        from tuned.evaluation.interpreted_autotune import first_config_autotuners

        first_config_autotuners()
    runner = Runner(MappedArena(arena_fd), Path(workdir), Path(writable), device)
    channel.send({"type": "ready", "pid": os.getpid()})
    serve(channel, runner)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    limit_resources()
    os.dup2(2, 1)  # candidate prints go to the stderr log, never into the protocol
    serve_fds(int(args[0]), int(args[1]), int(args[2]), args[3], args[4])
    return 0


if __name__ == "__main__":
    sys.exit(main())
