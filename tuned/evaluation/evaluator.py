"""The evaluator seam: what the search and the pipeline call on whatever evaluates candidates.

:class:`~tuned.evaluation.client.WorkerClient` (a worker process per GPU) and
:class:`~tuned.evaluation.replay.ReplayClient` (lookups in a recorded Kernel Tuner cache)
implement it, and so will the sandboxed evaluator; the campaign (:mod:`tuned.search`) and the
pipeline (:mod:`tuned.pipeline`) are annotated with :class:`Evaluator`, never with one of them.
What only a worker has (its Triton cache and compile target, for the compile pool; its
settings, for a reference entry's baseline) is asked of a
:class:`~tuned.evaluation.client.WorkerClient` by name where it is needed.

An evaluator may also offer ``admits(knobs) -> bool``: it knows which configurations exist
(a replay: those recorded), and the campaign restricts its search space to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tuned.outcomes import Candidate, EvalResult
from tuned.registry.spec import KernelSpec

__all__ = ["Evaluator"]


class Evaluator(Protocol):
    """Evaluates candidates of registry entries; one thread at a time."""

    def start(self) -> dict[str, str]:
        """Get ready (idempotent) and return the fingerprint of what measures: device and
        software, or the recorded device of a replay."""
        ...

    def evaluate(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        incumbent: Candidate | None = None,
        *,
        derived_skip: Sequence[str] = (),
        lenient_derived: bool = False,
    ) -> EvalResult:
        """Evaluate ``candidate`` of ``spec``: correctness, then timing; with ``incumbent``,
        both timed interleaved (samples in ``result.metadata``). Failures of the candidate
        come back as results, never raised. ``derived_skip``: derived shapes not checked;
        ``lenient_derived`` (the baseline): a failing derived shape is recorded, not fatal."""
        ...

    def fresh(self) -> None:
        """Make the next evaluation start from a clean state (a new worker process)."""
        ...

    def close(self) -> None:
        """Release what :meth:`start` took."""
        ...
