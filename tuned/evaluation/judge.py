"""The judge: one evaluation request decided in a process that never imports candidate code.

The judge holds the entry's original module (the user's own code: inputs and reference), the
cases, the inputs and reference outputs (:mod:`tuned.evaluation.case_cache`), the comparison
(:mod:`tuned.evaluation.checks`) and the clock. Candidate code runs in a runner
(:mod:`tuned.evaluation.runner`) that receives inputs through shared memory and hands back
outputs the same way (:mod:`tuned.evaluation.shm`).

Per correctness case (shape x dtype x seed): the judge copies the pristine inputs into the
runner's arena, poisons the output places, asks for a call (the runner poisons its own
allocations with NaN), reads the outputs, checks the inputs' places are unchanged, then the
same with sentinel-poisoned allocations. The case passes when both outputs match the
reference within the dtype's tolerance and every element was written; across seeds, outputs
that stay identical while the reference's change do not depend on the inputs (``cheat``).

Timing (:meth:`Evaluation.time_case`): the judge's own clock around each ``call`` of ``reps``
repetitions (the runner synchronizes before answering), less the round trip of an empty
request, interleaved with the incumbent's runner. Timed calls get input contents no runner was
shown during correctness (a set per round, from seeds the judge draws at random per case once
per judge process); before each timed call the judge writes one set afresh and poisons the
output places, and afterwards checks the inputs and, on a sample of calls, the outputs against the
reference for that set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from profilers.timing import TimingSettings
from tuned.evaluation.case_cache import DEFAULT_CAPACITY_BYTES, CaseCache
from tuned.evaluation.checks import (
    ALIAS_HINT,
    CaseFailure,
    as_tuple,
    classify_exception,
    compare_outputs,
    output_signature,
    short,
    unwritten_elements,
)
from tuned.evaluation.gpu_turn import GpuTurn
from tuned.evaluation.invoke import entry_call, resolve
from tuned.evaluation.modules import ModuleLoader, entry_key, inputs_module, release_unused
from tuned.evaluation.runners import RunnerPool, RunnerProcess
from tuned.evaluation.settings import EvaluationSettings
from tuned.evaluation.shm import dtype_name, plan
from tuned.registry.injection import runnable_request

__all__ = ["INTERPRETER_TIMING_SIZE", "Abandoned", "Case", "Evaluation"]

# In the interpreter, timing only ranks candidates on this CPU: keep it cheap.
INTERPRETER_TIMING_SIZE = 1 << 16
#: Seconds a spare waits for the GPU turn for each set or case it makes (a worker's benchmark phase
#: holds it) before it goes ahead without it (tuned.evaluation.gpu_turn); the benchmark phase
#: waits ``EvaluationSettings.turn_wait_s``.
SPARE_TURN_WAIT_S = 120.0
_OUTCOMES = frozenset(
    {"cheat", "incorrect", "nan", "runtime_error", "compile_error", "crash", "rejected_static"}
)
_SECRET = random.SystemRandom()
_TIMING_SEEDS: dict[Any, list[int]] = {}  # per case, drawn once per judge process


def _modified(changed: int, described: Sequence[Any]) -> str:
    """The reason of a call that changed its input ``changed``. An output that is that input
    (a launcher writing into an argument and returning it, not declared in ``outputs``) says
    what to declare. An output that is an input the call left as it was is a pass-through
    (Liger's ``swiglu_forward`` returns ``a, b, c``, its rope ``q, k, cos, sin``): compared
    like any output, never refused for sharing memory."""
    for i, meta in enumerate(described):
        if isinstance(meta, dict) and meta.get("input") == changed:
            return (
                f"output {i} shares memory with input {changed}, which the call changed{ALIAS_HINT}"
            )
    return f"the candidate modified its input {changed}"


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


@dataclass
class Target:
    """A launcher in a runner: what a call goes to."""

    runner: RunnerProcess
    slot: str
    knobs: Mapping[str, Any]


class Abandoned(CaseFailure):
    """A spare's preparation given up between two cases: the spare was taken over for another
    kernel (on the H200 re-measurements waited 5 to 11 s for a spare finishing the
    preparation it had begun). The cases it made stay in its cache."""


class Evaluation:
    """One request: load, compile (first launch), correctness on every case, benchmark."""

    def __init__(
        self,
        request: Mapping[str, Any],
        loader: ModuleLoader,
        device: str,
        send: Callable[[Mapping[str, Any]], None],
        pool: RunnerPool,
        cache: CaseCache | None = None,
        *,
        correctness_only: bool = False,
        turn: GpuTurn | None = None,
        abandon: Callable[[], bool] | None = None,
    ) -> None:
        original = str(request["kernel"]["original_source"])
        raw_incumbent = (request.get("options") or {}).get("incumbent") or {}
        #: The user's own source (knob variants) may share the own runner; anything else not.
        self.own_candidate = str(request["candidate"]["source"]) == original
        self.own_incumbent = str(raw_incumbent.get("source", original)) == original
        request = runnable_request(request)  # injected knobs written into the modules
        self.kernel = request["kernel"]
        self.correctness_only = correctness_only  # a spare's preparation: no benchmark
        #: The client's GPU turn (tuned.evaluation.gpu_turn): the benchmark phase holds it,
        #: so do an original's checks, case by case, and a spare's preparation (shared).
        self.turn = turn or GpuTurn()
        self._turn_before = (self.turn.waited_s, self.turn.went_without)
        #: A spare's preparation asks before each case whether to give up (taken over for
        #: another kernel): :class:`Abandoned`.
        self.abandon = abandon
        self.candidate = request["candidate"]
        self.options = request["options"]
        #: The incumbent's identity (its code and knobs): what its timing calibration is kept by.
        self.incumbent_key = (
            hashlib.sha256(
                json.dumps(
                    [raw_incumbent.get("source"), raw_incumbent.get("knobs")],
                    sort_keys=True,
                    default=str,
                ).encode()
            ).hexdigest()
            if raw_incumbent
            else ""
        )
        self.loader = loader
        self.device = device
        self.send = send
        self.pool = pool
        self.phase = "load"
        self.phase_started = time.monotonic()
        self.phase_seconds: dict[str, float] = {}
        #: Where the benchmark phase's seconds went (:meth:`part`), for ``benchmark_parts``.
        self.part_seconds: dict[str, float] = {}
        self.knobs: dict[str, Any] = dict(self.candidate["knobs"])
        self._compiled: list[dict[str, float]] = []  # compile facts of its kernels (GPU)
        self._runners: list[tuple[RunnerProcess, bool]] = []
        self._reference: Any = None
        self.cache = cache if cache is not None else CaseCache()
        self.cache.resize(
            int(self.options.get("case_cache_bytes", DEFAULT_CAPACITY_BYTES)),
            share=float(self.options.get("case_cache_share", 1.0)),
        )
        # A spare preparing the next kernel ahead: only the room the others leave.
        self.cache.guest = bool(self.options.get("ahead", False))
        self._misses_before = self.cache.stats.misses
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

    def reference_outputs(self, case: Case, pristine: Sequence[Any]) -> Any:
        """The reference's outputs for ``case``, computed here on a copy of ``pristine``."""
        from tuned.evaluation.checks import clone_inputs

        reference = self._reference.at(case.dims)

        def compute() -> Any:
            outputs = reference(*clone_inputs(pristine))
            release_unused(self.device)
            return outputs

        return self.cache.reference(self.case_key(case), "reference", compute)

    def tolerance(
        self, case: Case, pristine: Sequence[Any]
    ) -> tuple[float | tuple[float, ...], float]:
        """``(atol, rtol)`` for ``case``: its dtype's, and where the reference is the original
        (no ``reference:`` declared), each output's atol widened to cover what two runs of the
        original on the same inputs differ by (:func:`~tuned.evaluation.checks.sampled_atol`:
        kernels with atomic adds are not reproducible to the bit). Found once per case and
        kept with its reference."""
        from tuned.evaluation.checks import clone_inputs, sampled_atol

        atol, rtol = (float(v) for v in self.kernel["tolerance"][case.dtype])
        if self.kernel.get("reference"):
            return atol, rtol

        def compute() -> float | tuple[float, ...]:
            def again() -> Any:
                outputs = self._reference.at(case.dims)(*clone_inputs(pristine))
                release_unused(self.device)
                return outputs

            return sampled_atol(self.reference_outputs(case, pristine), again, atol)

        return self.cache.reference(self.case_key(case), "atol", compute), rtol

    @contextlib.contextmanager
    def part(self, name: str) -> Any:
        """Adds the seconds of the block to ``part_seconds["PHASE.name"]`` (a nested part
        counts in both)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.add_part(name, time.monotonic() - started)

    def add_part(self, name: str, seconds: float) -> None:
        """``seconds`` more for ``part_seconds["PHASE.name"]`` (measured elsewhere)."""
        key = f"{self.phase}.{name}"
        self.part_seconds[key] = self.part_seconds.get(key, 0.0) + seconds

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

    # -- runners

    def _runner(self, own: bool) -> RunnerProcess:
        runner = self.pool.own() if own else self.pool.fresh()
        self._runners.append((runner, own))
        return runner

    def load(self, runner: RunnerProcess, slot: str, candidate: Mapping[str, Any]) -> Target:
        kernel = {k: v for k, v in self.kernel.items() if k != "shapes"}
        message = {
            "op": "load",
            "slot": slot,
            "kernel": kernel,
            "source": candidate["source"],
            "knobs": candidate["knobs"],
        }
        self._answered(runner.request(message, self.phase))
        return Target(runner, slot, candidate["knobs"])

    def _answered(self, answer: Mapping[str, Any]) -> Mapping[str, Any]:
        if answer.get("ok") is True:
            return answer
        outcome = str(answer.get("outcome"))
        if outcome not in _OUTCOMES:
            raise CaseFailure("crash", f"the runner reported an unknown outcome {outcome[:40]!r}")
        reason = short(str(answer.get("reason", "")))
        # The runner ends after any failure; only a CUDA fault (a crash) may have left the
        # device unusable for the judge too.
        fatal = bool(answer.get("fatal")) and outcome == "crash"
        raise CaseFailure(outcome, reason, fatal=fatal)

    def release(self) -> None:
        """End every runner this request used, but the own runner when only the user's
        source ran in it and nothing went wrong there."""
        for runner, own in self._runners:
            self.pool.release(runner, reusable=own and runner.alive)
        self._runners.clear()

    def discard_runners(self) -> None:
        for runner, _ in self._runners:
            self.pool.release(runner, reusable=False)
        self._runners.clear()

    # -- calls

    def call(
        self,
        target: Target,
        case: Case,
        pristine: Sequence[Any],
        poison: str | None,
        *,
        deferred: list[CaseFailure] | None = None,
    ) -> tuple[Any, ...]:
        """One request to ``target`` on fresh copies of ``pristine``; its outputs as read back
        from the arena, after the judge checked that the inputs were left unchanged (with
        ``deferred``, a failed check is put there instead: the compile phase's call leaves it
        to the correctness phase)."""
        outputs, _ = self.timed_call(target, case, pristine, poison, deferred=deferred)
        return outputs

    def timed_call(
        self,
        target: Target,
        case: Case,
        pristine: Sequence[Any],
        poison: str | None,
        *,
        reps: int = 1,
        stable: bool = False,
        read: bool = True,
        deferred: list[CaseFailure] | None = None,
        shaped_like: Any = None,
    ) -> tuple[tuple[Any, ...], float]:
        """:meth:`call`, and the judge's seconds around the request. ``shaped_like``: outputs
        of the reference's shapes (another input set's), so this set's reference is only
        computed where it is compared (the timed calls)."""
        ref = shaped_like if shaped_like is not None else self.reference_outputs(case, pristine)
        inputs, places, nbytes = plan(pristine, ref)
        runner = target.runner
        with self.part("write"):
            runner.grow(nbytes, self.phase)
            runner.arena.write(inputs, pristine)
            runner.arena.poison(places)
            runner.arena.sync()
        message = {
            "op": "call",
            "slot": target.slot,
            "dims": dict(case.dims),
            "inputs": inputs,
            "outputs": places,
            "poison": poison,
            "reps": reps,
            "stable": stable,
        }
        started = time.perf_counter()
        answer = runner.request(message, self.phase)
        seconds = time.perf_counter() - started
        self._answered(answer)
        if target.slot == "candidate":
            facts = answer.get("compiled") or []
            self._compiled.extend(f for f in facts if isinstance(f, dict))
        with self.part("inputs_kept"):
            changed = runner.arena.changed_input(inputs, pristine)
        described = answer.get("outputs")
        if not isinstance(described, list):
            raise CaseFailure("crash", "the runner's answer has no list of outputs")
        failures = [
            CaseFailure("cheat", short(str(meta.get("reason"))))
            for meta in described
            if isinstance(meta, dict) and meta.get("kind") == "bad"
        ]
        if changed is not None:
            failures.append(CaseFailure("cheat", _modified(changed, described)))
        if failures and deferred is None:
            raise failures[0]
        if failures and deferred is not None:
            deferred.append(failures[0])
            return (), seconds
        if not read:
            return (), seconds
        with self.part("collect"):
            return self._collect(runner, described, places, ref), seconds

    def _collect(
        self, runner: RunnerProcess, described: list[Any], places: list[Any], ref: Any
    ) -> tuple[Any, ...]:
        import torch

        refs = as_tuple(ref)
        if len(described) != len(refs):
            raise CaseFailure(
                "incorrect", f"returned {len(described)} outputs, the reference {len(refs)}"
            )
        outs: list[Any] = []
        for i, (meta, r, place) in enumerate(zip(described, refs, places)):
            kind = meta.get("kind") if isinstance(meta, dict) else None
            if not isinstance(r, torch.Tensor):
                if kind != "value":
                    raise CaseFailure("incorrect", f"output {i} is a tensor, reference {r!r}")
                outs.append(meta.get("value"))
                continue
            if kind != "tensor":
                what = type(meta.get("value")).__name__ if kind == "value" else "unknown"
                raise CaseFailure("incorrect", f"output {i} is {what}, not a tensor")
            shape = tuple(int(n) for n in meta.get("shape", ()))
            if shape != tuple(r.shape):
                raise CaseFailure(
                    "incorrect", f"output {i} has shape {shape}, reference {tuple(r.shape)}"
                )
            if meta.get("dtype") != dtype_name(r.dtype):
                raise CaseFailure(
                    "incorrect",
                    f"output {i} has dtype torch.{meta.get('dtype')}, reference {r.dtype}",
                )
            outs.append(runner.arena.read(place))
        return tuple(outs)

    # -- the phases

    def run(self) -> dict[str, Any]:
        import torch

        if self.candidate.get("injection_error"):
            raise CaseFailure("rejected_static", self.candidate["injection_error"])
        key = entry_key(self.kernel)
        extra = self.kernel.get("extra_files", {})
        original = self.loader.load(
            self.kernel["original_source"],
            directory_key=key,
            extra_files=extra,
            package=str(self.kernel.get("package") or ""),
        )
        entry = inputs_module(self.loader, self.kernel, original)
        make_inputs = resolve(entry, self.kernel["inputs"], "inputs")
        by_reference = entry if self.kernel.get("reference") else original
        self._reference = entry_call(by_reference, self.kernel, role="reference")
        candidate = self.load(self._runner(self.own_candidate), "candidate", self.candidate)

        cases, skipped = self.cases()
        if not cases:
            raise CaseFailure(
                "runtime_error",
                "every shape is above the interpreter size cap; declare a smaller shape",
            )

        def inputs_of(case: Case) -> list[Any]:
            """The case's inputs (made once per judge, see case_cache); only ever read."""
            dtype = getattr(torch, case.dtype)

            def make() -> list[Any]:
                made = make_inputs(dict(case.dims), dtype, self.device, case.seed)
                release_unused(self.device)
                return made  # type: ignore[no-any-return]

            return self.cache.inputs(self.case_key(case), make)

        self.enter("compile")
        deferred: list[CaseFailure] = []
        try:
            with self._case_turn():
                first_inputs = inputs_of(cases[0])
                first_out = self.call(candidate, cases[0], first_inputs, "nan", deferred=deferred)
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
                    with self._case_turn():
                        pristine = first_inputs if index == 0 else inputs_of(case)
                first = first_out if index == 0 else None
                if index == 0 and deferred:
                    raise deferred[0]
                with self._case_turn():
                    self.check_case(case, candidate, pristine, first, signatures)
            except Abandoned:
                raise
            except Exception as exc:
                failure = (
                    exc if isinstance(exc, CaseFailure) else classify_exception(exc, "correctness")
                )
                if failure.fatal or not (case.derived and self.options.get("lenient_derived")):
                    where = "derived shape " if case.derived else ""
                    failure.reason = f"{where}{case.label} seed {case.seed}: {failure.reason}"
                    raise failure from exc
                unusable.append(case.label)  # the original fails here: not a usable check
        del first_inputs, first_out
        from tuned.evaluation.timing_judge import JudgedTiming

        timing = JudgedTiming(self, TimingSettings(**self.options.get("timing", {})))
        if self.correctness_only:  # a spare: the timed inputs made ahead, nothing timed
            for case in self.timed_cases(cases):
                timing.prepare(case, inputs_of, hold=self._case_turn)
            self.enter("done")
            return {"outcome": "ok", "phase_seconds": self.phase_seconds}

        self.enter("benchmark")
        incumbent = None
        if self.options.get("incumbent"):
            inc = self.options["incumbent"]
            own = self.own_incumbent and self.own_candidate
            runner = candidate.runner if own else self._runner(self.own_incumbent)
            with self.part("load_incumbent"):
                incumbent = self.load(runner, "incumbent", inc)
        samples: dict[str, list[float]] = {}
        incumbent_samples: dict[str, list[float]] = {}
        screened: list[str] = []
        waited = self.turn.waited_s
        turn_asked = time.monotonic()
        with self.turn.hold(self._turn_wait_s()) as held:
            self.add_part("turn_wait", time.monotonic() - turn_asked)
            turn: dict[str, Any] = {"held": held, "waited_s": round(self.turn.waited_s - waited, 4)}
            if self.options.get("checks_hold_turn"):  # what its checks waited (_case_turn)
                turn["checks_waited_s"] = round(waited - self._turn_before[0], 4)
            for case in self.timed_cases(cases):
                try:
                    mine, theirs, cut = timing.time_case(case, candidate, incumbent, inputs_of)
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
        from tuned.evaluation.worker import summarize_compile_facts

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
                "case_cache": {  # the worker's counters, and the cases this one made
                    **self.cache.stats.to_dict(),
                    "misses_here": self.cache.stats.misses - self._misses_before,
                },
                "compile": summarize_compile_facts(self._compiled),
                "timed_by": "judge",
                "benchmark_parts": {k: round(v, 4) for k, v in self.part_seconds.items()},
                **({"gpu_turn": turn} if self.turn.fd is not None else {}),
            },
        }

    def _case_turn(self) -> contextlib.AbstractContextManager[bool]:
        """The GPU turn around one case's first call and check.

        A spare's preparation takes it shared, case by case; before each, it asks ``abandon``
        whether to give up (:class:`Abandoned`). The worker's checks take it only for a
        candidate whose own code may time itself (``checks_hold_turn``: an original, or an
        LLM-written module: ``@triton.autotune`` benchmarks every config on the first call
        of each key; a knob move pins one config). Outside the turn, spares making the next
        kernels' case data shared the GPU with those benchmarks: on the H200, Liger's DyT
        original took 113 s in the worker against 28 s alone, and its autotuner chose the
        baseline's config from times measured beside that work. Other candidates' checks
        need no turn (nothing in them is timed)."""
        if self.correctness_only:
            if self.abandon is not None and self.abandon():
                raise Abandoned("abandoned", "taken over for another kernel")
            return self.turn.hold(SPARE_TURN_WAIT_S, shared=True)
        if self.options.get("checks_hold_turn"):  # once a wait ran out, no more waits
            missed = self.turn.went_without > self._turn_before[1]
            return self.turn.hold(0.0 if missed else self._turn_wait_s())
        return contextlib.nullcontext(False)

    def _turn_wait_s(self) -> float:
        return float(self.options.get("turn_wait_s", EvaluationSettings.turn_wait_s))

    def check_case(
        self,
        case: Case,
        candidate: Target,
        pristine: list[Any],
        first: tuple[Any, ...] | None,
        signatures: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]],
    ) -> None:
        atol, rtol = self.tolerance(case, pristine)
        out = first if first is not None else self.call(candidate, case, pristine, "nan")
        ref = self.reference_outputs(case, pristine)
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
        again = self.call(candidate, case, pristine, "sentinel")
        try:
            compare_outputs(out, ref, atol, rtol, dtype=case.dtype)
        except CaseFailure as failure:
            if failure.outcome == "nan":
                unwritten = unwritten_elements(out, again)
                if unwritten:
                    raise CaseFailure("incorrect", unwritten) from None
            raise
        try:
            compare_outputs(again, ref, atol, rtol, dtype=case.dtype)
        except CaseFailure as failure:
            raise CaseFailure(
                "incorrect", f"second call (after the reference) differs: {failure.reason}"
            ) from None

    def timing_seeds(self, case: Case, count: int) -> list[int]:
        """``count`` seeds for the timed inputs of ``case``: drawn at random once per judge
        process (more appended when more are asked for), never a correctness seed, never sent
        to a runner."""
        key = self.case_key(Case(case.dims, case.dtype, 0, case.perf))
        seeds = _TIMING_SEEDS.setdefault(key, [])
        used = {int(s) for s in self.options["seeds"]}
        while len(seeds) < count:
            seed = _SECRET.randrange(1 << 20, 1 << 31)
            if seed not in used and seed not in seeds:
                seeds.append(seed)
        return seeds[:count]
