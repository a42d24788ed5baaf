"""Timing by the judge's clock: interleaved ``call`` requests of ``reps`` repetitions.

The runner (untrusted) only runs ``reps`` calls and synchronizes before it answers; the judge
times the round trip with its own ``time.perf_counter`` and takes off what every call costs
besides the repetitions (:meth:`JudgedTiming._calibrate`: the empty round trip in the
interpreter; on a GPU, the fixed part of a straight line through calls of 2 and 12
repetitions, the longer call made 8x longer while the two differ by less than the host's
noise, which also holds the runner's checks and the copy of its outputs). A patched
clock, a fake CUDA event or an invented sample inside the runner changes nothing the judge
reads.

- Interpreter: ``interpreter_reps`` rounds of one call each, candidate and incumbent
  alternating (ABAB, BABA), as :func:`profilers.timing.interleaved_timing` does.
- GPU: a warm call of each calibration length, then up to three calibration pairs (the
  incumbent's repetitions found once per judge and incumbent, then reused; the fixed cost is
  always the candidate's, measured now), an untimed call of each
  target's timed length (its graph captured there, not in the first timed round; a candidate
  within 4x of the incumbent's repetitions timed at the incumbent's, ``_shared``), then
  ``graph_rounds`` rounds of ``reps`` calls sized so a round lasts ``target_ms / graph_rounds``
  of kernel time; the runner replays them from a
  CUDA graph where it can capture one (no host gaps), eagerly otherwise. With an incumbent, the
  first rounds (``screen_ms``) screen: a candidate above ``screen_slower`` times the
  incumbent's median stops there. Calls are back to back (no L2 flush between them): the
  judge's clock cannot tell a flush from the kernel.

Inputs: sets the runners never saw (:meth:`~tuned.evaluation.judge.Evaluation.timing_seeds`),
one per round (fewer, cycled, when a round's sets would pass 2 GiB; at least two), written
afresh before every timed call; the output places are poisoned before each call. So a memo,
even one keyed on the inputs' contents, has nothing to return. The candidate's outputs are
compared with the reference for that set on the first two rounds and on a random third of
the others (in the interpreter, on every round: three), and the inputs' places after every
call: a memo keyed on the input tensors, or a graph that replays nothing, leaves outputs of
another set or poison behind (``cheat``: computed while timed).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from profilers.timing import TimingSettings
from tuned.evaluation.checks import CaseFailure, compare_outputs
from tuned.evaluation.runner import GRAPH_UNIT

if TYPE_CHECKING:
    from tuned.evaluation.judge import Case, Evaluation, Target

__all__ = ["JudgedTiming"]

_SHORT, _LONG = 2, 12  # repetitions of the calibration calls (the slope between them)
_PAIRS = 3
_LONG_KERNEL_S = 1e-3  # a repetition this long: one calibration pair
#: The long calibration call must outlast the short one by this much, else it is made longer:
#: the host's jitter on a round trip is up to ~0.2 ms on the H200, and a 1 us kernel's 10
#: repetitions more were 10 us of it (its repetitions came out 256 to 2,240 where 4,992 were
#: due, and a constant cost of timed calls that the calibration does not see, ~0.5 ms,
#: made the code look up to 3x slower than itself in A/A comparisons).
_SIGNAL_S = 0.5e-3
#: Targets whose calibrated repetitions are within this factor time the same number (``_shared``).
_SAME_SPEED = 4
_SETS_BYTES = 2 << 30  # at most this much input across a case's timed sets
_CHECK_SHARE = 1 / 3
#: Incumbents' calibrations kept per judge (see ``_incumbent_calibration``), at most this many.
_CALIBRATIONS: dict[tuple[str, Any, str], tuple[int, float]] = {}
_CALIBRATIONS_KEPT = 256


class JudgedTiming:
    def __init__(self, evaluation: Evaluation, settings: TimingSettings) -> None:
        self.evaluation = evaluation
        self.settings = settings
        self.gpu = evaluation.device == "cuda"
        self._rng = random.SystemRandom()
        #: Repetitions per timed call of each target (candidate first) in the last case timed.
        self.last_reps: list[int] = []

    def time_case(
        self,
        case: Case,
        candidate: Target,
        incumbent: Target | None,
        inputs_of: Callable[[Case], list[Any]],
    ) -> tuple[list[float], list[float], bool]:
        """Seconds per call of the candidate (and of the incumbent, interleaved), and whether
        screening ended the timing early."""

        ev = self.evaluation
        for attempt in range(2):
            candidate_s, incumbent_s, screened = self._time_case(
                case, candidate, incumbent, inputs_of, fresh=attempt > 0
            )
            timed = [s for s in (candidate_s, incumbent_s) if s]
            # A round shorter than the fixed cost (a sample of zero) says the calibration
            # overstated it, and every sample of the case by as much: timed again, afresh
            # (on the H100, 3 of 175 evaluations stored zeros). A second time only its
            # medians must be above zero.
            if all((min(s) if attempt == 0 else statistics.median(s)) > 0 for s in timed):
                if incumbent_s and attempt == 0 and self._miscalibrated(case, incumbent_s):
                    _CALIBRATIONS.pop(self._calibration_key(case), None)  # the next: afresh
                return candidate_s, incumbent_s, screened
            if incumbent is not None and ev.incumbent_key:  # a stale calibration: not again
                _CALIBRATIONS.pop(self._calibration_key(case), None)
        raise CaseFailure(  # not the candidate's doing: not measured (the judge adds the case)
            "gpu_busy",
            "timing: the median call was not longer than the calibrated fixed cost of a call, "
            "twice (noise on the host or the GPU hid the kernel's time)",
        )

    def _time_case(
        self,
        case: Case,
        candidate: Target,
        incumbent: Target | None,
        inputs_of: Callable[[Case], list[Any]],
        *,
        fresh: bool,
    ) -> tuple[list[float], list[float], bool]:
        ev = self.evaluation
        rounds = self.rounds
        with ev.part("sets"):
            cases, sets = self.timing_sets(case, inputs_of)
            atol, rtol = ev.tolerance(cases[0], sets[0])  # one for every timed set of the case
            shapes = ev.reference_outputs(cases[0], sets[0])  # the others' only when compared
        targets = [candidate] + ([incumbent] if incumbent is not None else [])
        with ev.part("calibrate"):
            calibrated = [self._calibrate(targets[0], cases[0], sets[0])]
            if incumbent is not None:
                calibrated.append(
                    self._calibrate(incumbent, cases[0], sets[0])
                    if fresh
                    else self._incumbent_calibration(incumbent, case, cases[0], sets[0])
                )
        reps = self.last_reps = _shared([r for r, _ in calibrated])
        if self.gpu:  # each target's graph of its timed length captured now, not in round 1
            with ev.part("capture"):
                for target, n in zip(targets, reps):
                    ev.timed_call(target, cases[0], sets[0], None, reps=n, stable=True, read=False)
        # One fixed cost for every target (the same request, checks and copies each way: a
        # per-target estimate's noise would be a bias between candidate and incumbent),
        # measured now: a reused calibration gives only the incumbent's repetitions (one
        # made while a neighbour loaded the GPU, reused as the fixed cost, made the H100's
        # short calls come out at zero).
        fixed = calibrated[0][1]
        screen_after = 0
        if self.gpu and incumbent is not None and self.settings.screen_ms > 0:
            share = self.settings.screen_ms / max(self.settings.target_ms, 1e-9)
            screen_after = max(2, round(rounds * share))
        samples: list[list[float]] = [[] for _ in targets]
        for r in range(rounds):
            k = r % len(sets)
            order = range(len(targets)) if r % 2 == 0 else reversed(range(len(targets)))
            for i in order:
                target = targets[i]
                sampled = r < 2 or not self.gpu or self._rng.random() < _CHECK_SHARE
                check = i == 0 and sampled
                with ev.part("rounds"):
                    outputs, seconds = ev.timed_call(
                        target,
                        cases[k],
                        sets[k],
                        None,
                        reps=reps[i],
                        stable=True,
                        read=check,
                        shaped_like=shapes,
                    )
                samples[i].append(max(seconds - fixed, 0.0) / reps[i])
                ev.add_part("kernel", samples[i][-1] * reps[i])
                if not check:
                    continue
                with ev.part("compare"):
                    reference = ev.reference_outputs(cases[k], sets[k])
                    try:
                        compare_outputs(outputs, reference, atol, rtol, dtype=cases[k].dtype)
                    except CaseFailure as failure:
                        raise CaseFailure(
                            "cheat", f"outputs computed while timed are wrong ({failure.reason})"
                        ) from None
            if screen_after and r + 1 == screen_after and _slower(samples, self.settings):
                return samples[0], samples[1], True
        return samples[0], samples[1] if incumbent is not None else [], False

    @property
    def rounds(self) -> int:
        return max(2, self.settings.graph_rounds if self.gpu else self.settings.interpreter_reps)

    def timing_sets(
        self, case: Case, inputs_of: Callable[[Case], list[Any]]
    ) -> tuple[list[Case], list[list[Any]]]:
        """The timed cases of ``case`` (one per timing seed) and their inputs: one set per
        round, fewer (at least two, cycled) when a round's sets would pass ``_SETS_BYTES``."""
        cases = self.timed_cases(case, inputs_of)
        return cases, [inputs_of(c) for c in cases]

    def timed_cases(self, case: Case, inputs_of: Callable[[Case], list[Any]]) -> list[Case]:
        """The timed cases of ``case``, as many as :meth:`timing_sets` makes inputs for."""
        from tuned.evaluation.judge import Case

        ev = self.evaluation
        first = inputs_of(Case(case.dims, case.dtype, ev.timing_seeds(case, 1)[0], case.perf))
        size = sum(int(x.numel()) * x.element_size() for x in first if hasattr(x, "numel"))
        count = max(2, min(self.rounds, _SETS_BYTES // max(size, 1)))
        return [Case(case.dims, case.dtype, s, case.perf) for s in ev.timing_seeds(case, count)]

    def prepare(
        self,
        case: Case,
        inputs_of: Callable[[Case], list[Any]],
        hold: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        """Make (and so cache) every timed input set of ``case`` and its reference outputs:
        what a spare does ahead so that its first re-measurement times at once (on the H100,
        making them took 9 to 14 s of a re-measurement at 16384x8192). One set at a time: a
        spare holds one set on the device while it prepares, not all of them (up to 2 GiB of
        inputs, and their copies, in each of four spares preparing at once; the H100 ran out
        of memory while the spares prepared). Each set inside ``hold()`` (a spare's share of
        the GPU turn, :mod:`tuned.evaluation.gpu_turn`): a worker about to time waits for one
        set, not a case (held per case, the H100's worker waited 0.6 s per candidate)."""
        with hold():
            timed_cases = self.timed_cases(case, inputs_of)
        for timed in timed_cases:
            with hold():
                inputs = inputs_of(timed)
                self.evaluation.reference_outputs(timed, inputs)
                del inputs

    def _incumbent_calibration(
        self, incumbent: Target, case: Case, timed: Case, inputs: Sequence[Any]
    ) -> tuple[int, float]:
        """The incumbent's calibration on ``case``: measured once per judge and incumbent (the
        same code at the same knobs runs as long in every evaluation), then reused; on the
        H100 its 8 calibration calls per case were a fifth of a candidate's round trips."""
        if not self.gpu or not self.evaluation.incumbent_key:
            return self._calibrate(incumbent, timed, inputs)
        key = self._calibration_key(case)
        known = _CALIBRATIONS.get(key)
        if known is None:
            if len(_CALIBRATIONS) >= _CALIBRATIONS_KEPT:
                _CALIBRATIONS.clear()
            known = _CALIBRATIONS[key] = self._calibrate(incumbent, timed, inputs)
        return known

    def _miscalibrated(self, case: Case, samples: list[float]) -> bool:
        """Whether the incumbent's reused repetitions made its rounds far (4x) from
        ``target_ms / graph_rounds`` of kernel time (a calibration made on a loaded GPU)."""
        known = _CALIBRATIONS.get(self._calibration_key(case))
        if known is None:
            return False
        reps = known[0]
        round_s = self.settings.target_ms / 1e3 / max(1, self.settings.graph_rounds)
        kernel_s = statistics.median(samples) * reps
        short = kernel_s < round_s / 4 and reps < self._most_reps  # (clamped: by design)
        long = kernel_s > 4 * round_s and reps > self.settings.min_reps
        return short or long

    def _calibration_key(self, case: Case) -> tuple[str, Any, str]:
        ev = self.evaluation
        return (ev.incumbent_key, ev.case_key(case), repr(self.settings))

    def _calibrate(self, target: Target, case: Case, inputs: Sequence[Any]) -> tuple[int, float]:
        """(repetitions per timed call, seconds every call costs besides them).

        In the interpreter: 1 repetition, and the empty round trip. On a GPU, every call also
        pays for the request, the runner's checks and the copy of its outputs back (about a
        millisecond on an H200, as much as ~200 repetitions of a 5 us kernel): the seconds
        per repetition are the slope between calls of ``_SHORT`` and ``_LONG`` repetitions
        (median of a few pairs), the fixed cost what is left at zero repetitions; the
        repetitions are sized so that a round lasts ``target_ms / graph_rounds`` of kernel
        time, past :data:`~tuned.evaluation.runner.GRAPH_UNIT` in whole multiples of it. All
        of it on the judge's clock."""
        ev = self.evaluation
        if not self.gpu:
            return 1, target.runner.overhead()
        longer = _LONG
        for n in (_SHORT, longer):  # compile, capture a graph of each length, warm up
            ev.timed_call(target, case, inputs, None, reps=n, stable=True, read=False)
        slopes: list[float] = []
        bases: list[float] = []
        while len(slopes) < _PAIRS:
            _, short = ev.timed_call(
                target, case, inputs, None, reps=_SHORT, stable=True, read=False
            )
            _, long = ev.timed_call(
                target, case, inputs, None, reps=longer, stable=True, read=False
            )
            if long - short < _SIGNAL_S and longer < self._most_reps:
                # The difference is the host's noise: a longer call (8x, in whole graphs
                # past GRAPH_UNIT), warmed up, and the pair again.
                longer = min(self._whole_graphs(8 * longer), self._most_reps)
                ev.timed_call(target, case, inputs, None, reps=longer, stable=True, read=False)
                continue
            per = max((long - short) / (longer - _SHORT), 1e-7)
            slopes.append(per)
            bases.append(short - _SHORT * per)
            if per > _LONG_KERNEL_S:  # the fixed cost is a small share: one pair will do
                break
        per_call = statistics.median(slopes)
        fixed = max(statistics.median(bases), 0.0)
        round_s = self.settings.target_ms / 1e3 / max(1, self.settings.graph_rounds)
        reps = max(self.settings.min_reps, min(self.settings.max_reps, int(round_s / per_call)))
        if reps > GRAPH_UNIT:  # whole graphs of GRAPH_UNIT calls (the runner replays one)
            whole = max(round(reps / GRAPH_UNIT), -(-self.settings.min_reps // GRAPH_UNIT))
            reps = min(whole * GRAPH_UNIT, self._most_reps)
        return reps, fixed

    @staticmethod
    def _whole_graphs(reps: int) -> int:
        """``reps``, past :data:`GRAPH_UNIT` rounded up to a multiple of it."""
        return reps if reps <= GRAPH_UNIT else -(-reps // GRAPH_UNIT) * GRAPH_UNIT

    @property
    def _most_reps(self) -> int:
        """``max_reps``; past :data:`GRAPH_UNIT`, the largest multiple of it not above."""
        most = self.settings.max_reps
        return most if most <= GRAPH_UNIT else most // GRAPH_UNIT * GRAPH_UNIT


def _shared(reps: list[int]) -> list[int]:
    """Each target's repetitions per timed call: the incumbent's for both when the two
    calibrated within ``_SAME_SPEED`` of each other. Timed rounds carry a constant per call
    that the calibration does not see (~0.5 ms on the H200, spread over the repetitions): on
    unequal repetitions it is a bias between the two, and the copy of a 1 us kernel measured
    1.05-1.08x slower than itself (3,136 against 5,568 repetitions). On equal ones it is the
    same share of both; a candidate that far from the incumbent is not near the rule's
    threshold, and each keeps its own (its rounds hold their share of kernel time)."""
    if len(reps) == 2 and max(reps) <= _SAME_SPEED * min(reps):
        return [reps[1], reps[1]]
    return reps


def _slower(samples: list[list[float]], settings: TimingSettings) -> bool:
    if len(samples) < 2 or not samples[0] or not samples[1]:
        return False
    mine = statistics.median(samples[0])
    return mine > settings.screen_slower * min(statistics.median(s) for s in samples[1:])
