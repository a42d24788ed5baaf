"""What an evaluation checks and times, and its deadlines: :class:`EvaluationSettings`.

Defined here, below the worker client (:mod:`tuned.evaluation.client`) that enforces them and
the configuration (:mod:`tuned.daemon.config`) and commands that build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from profilers.timing import TimingSettings
from tuned.evaluation.sandbox import SandboxSettings

__all__ = ["JUDGE_TIMING", "PHASES", "REFEREE_TIMING", "EvaluationSettings"]

#: How the judge times a candidate by default: 50 ms of kernel time per target and case (in
#: 10 interleaved rounds). Measured on the H100 against 100 ms (bench/RESULTS.md, eleventh
#: session): the example registry's median candidate 0.98 s instead of 1.40 s, every
#: per-shape claim still confirmed by the referee, no false accept in the A/A benchmark.
#: Repetitions per timed call are capped at 10,000, not the 1,000 of direct timing
#: (:mod:`profilers.timing`): a call costs the judge a fixed ~1 ms (the request, checks,
#: copies) whose jitter is taken off every sample, and a 1 us kernel's 1,000 repetitions
#: were 1 ms of kernel time, not the round's 5 (in A/A comparisons of 1-5 us kernels on the
#: H200, bench/aa_gpu.py --small, the same code measured from 0.12x to 1.46x of itself at
#: the old cap; the new one is not yet measured there). A call past 64 repetitions replays
#: one graph of 64 calls (tuned.evaluation.runner), so a longer call costs no longer capture.
JUDGE_MAX_REPS = 10_000
JUDGE_TIMING = TimingSettings(target_ms=50.0, max_reps=JUDGE_MAX_REPS)
#: How the referee (and a campaign's settling) times: 200 ms of kernel time per target and
#: case in 20 rounds. At the campaign's 50 ms, two idle re-measurements of the same claims on
#: the H100 differed by more than 2 % on 3 of 15 (bench/RESULTS.md, fourteenth session); the
#: referee's figures are the ones shown, and it measures a few candidates, not hundreds.
REFEREE_TIMING = TimingSettings(target_ms=200.0, graph_rounds=20, max_reps=JUDGE_MAX_REPS)


@dataclass(frozen=True)
class EvaluationSettings:
    """Deadlines (seconds, per phase) and what an evaluation checks and times."""

    interpreter: bool
    startup_timeout_s: float = 180.0
    load_timeout_s: float = 60.0
    compile_timeout_s: float = 300.0
    correctness_timeout_s: float = 300.0
    benchmark_timeout_s: float = 300.0
    seeds: tuple[int, ...] = (0, 1)
    interpreter_max_size: int = 1 << 22  # shapes above this product of dims skip the interpreter
    memory_limit_bytes: int | None = None  # address-space cap, interpreter mode only
    timing: TimingSettings = JUDGE_TIMING
    #: Inputs and reference outputs a worker keeps across evaluations (tuned.evaluation.case_cache).
    case_cache_bytes: int = 0  # 0: sized from the free device memory (resident), then spilled
    #: The host-level sandbox of every worker (tuned.evaluation.sandbox, docs/security.md).
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    #: One hard deadline per candidate, from its request to its result, that no message of
    #: the worker extends (``None``: the sum of the phase deadlines).
    candidate_timeout_s: float | None = None
    #: Whether a worker and its spares take turns on the GPU (tuned.evaluation.gpu_turn);
    #: ``None``: on a GPU, not in the interpreter (:attr:`turn`). On the H100, Liger's entries
    #: timed while spares made their neighbours' case data came out up to 5x slow, and one
    #: original could not be timed at all (bench/RESULTS.md, fifteenth session).
    gpu_turn: bool | None = None
    #: Seconds the benchmark phase waits for the GPU turn while a spare makes case data on
    #: the same GPU, before it times without it.
    turn_wait_s: float = 30.0

    @staticmethod
    def turn_choice(choice: str) -> bool | None:
        """``gpu_turn`` for the ``auto|yes|no`` of ``ktuned tune --gpu-turn`` and the
        daemon's ``evaluation.gpu_turn``."""
        return None if choice == "auto" else choice == "yes"

    @property
    def turn(self) -> bool:
        """Whether the worker and its spares take turns (``gpu_turn``, or on a GPU)."""
        return (not self.interpreter) if self.gpu_turn is None else self.gpu_turn

    def deadline(self, phase: str) -> float:
        return {
            "load": self.load_timeout_s,
            "compile": self.compile_timeout_s,
            "correctness": self.correctness_timeout_s,
            "benchmark": self.benchmark_timeout_s,
        }.get(phase, self.load_timeout_s)

    @property
    def candidate_deadline(self) -> float:
        """Seconds one candidate may take in all, whatever its worker says."""
        if self.candidate_timeout_s is not None:
            return self.candidate_timeout_s
        return sum(self.deadline(p) for p in PHASES)


#: The phases a worker goes through, in order; announcing one resets only its own deadline,
#: once, and only forward (a repeated or earlier phase changes nothing).
PHASES = ("load", "compile", "correctness", "benchmark")
