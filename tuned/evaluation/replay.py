"""Evaluation by lookup: :class:`ReplayClient` answers from a recorded Kernel Tuner cache.

A replay entry (``kind: replay``, :mod:`tuned.registry.replay`) names a brute-forced cache
of real GPU measurements. Its client has the :class:`~tuned.evaluation.client.WorkerClient`
interface the campaign uses (``start``, ``evaluate``, ``close``) and returns the same
:class:`~tuned.outcomes.EvalResult`, so the store, the policies, the acceptance rule and the
reports run unchanged; only ``timing_kind`` (``"replay"``) tells the numbers apart.

How a configuration's recorded entry becomes an outcome:

=============================  ==================  =====================================
recorded                       outcome             phase
=============================  ==================  =====================================
times                          ``ok``              (time: see below)
``CompilationFailedConfig``    ``compile_error``   compile
``InvalidConfig``              ``compile_error``   compile (device limits exceeded, like
                                                   Triton's out-of-resources)
``RuntimeFailedConfig``        ``runtime_error``   benchmark
absent from the cache          ``rejected_static`` static (violates the kernel's
                                                   restrictions: not in the space)
=============================  ==================  =====================================

Times (seconds): with ``noise: none`` a candidate's sample is the median of its recorded
runs; with ``noise: recorded`` each measurement draws as many runs as were recorded, with
replacement, from a generator seeded by ``(seed, candidate id, measurement index)``, so a
run is reproducible and a re-measurement (the acceptance rule's) sees fresh draws. With an
incumbent, its samples are drawn the same way from ``(seed, incumbent id, candidate id,
measurement index)``: the interleaved pair the acceptance rule compares.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from tuned.errors import WorkerError
from tuned.outcomes import Candidate, EvalResult, Outcome
from tuned.registry.replay import CacheFormatError, Record, RecordedCache, read_cache
from tuned.registry.spec import KernelSpec, KnobValue, ReplaySource

__all__ = ["REPLAY_CASE", "ReplayClient"]

#: The label of the single timed case of a replay evaluation.
REPLAY_CASE = "recorded"

_FAILURES: dict[str, tuple[Outcome, str, str]] = {
    "CompilationFailedConfig": (Outcome.COMPILE_ERROR, "compile", "compilation failed"),
    "InvalidConfig": (
        Outcome.COMPILE_ERROR,
        "compile",
        "invalid on the device (its limits, e.g. threads per block, were exceeded)",
    ),
    "RuntimeFailedConfig": (Outcome.RUNTIME_ERROR, "benchmark", "the launch failed at run time"),
}


def _words(candidate_id: str) -> list[int]:
    """A hex candidate id as 32-bit words, for seeding a generator."""
    return [int(candidate_id[i : i + 8], 16) for i in range(0, len(candidate_id), 8)]


class ReplayClient:
    """The evaluation client of one replay entry: no worker, no GPU; lookups in its cache.

    An :class:`~tuned.evaluation.evaluator.Evaluator` (the campaign's seam), with ``admits``:
    it starts no process, and ``close`` has nothing to stop. Not thread-safe, like the worker
    client.
    """

    def __init__(self, spec: KernelSpec) -> None:
        if spec.replay is None:
            raise ValueError(f"{spec.name} is not a replay entry (kind: replay)")
        self.spec = spec
        self.source: ReplaySource = spec.replay
        self.fingerprint: dict[str, str] | None = None
        self.starts = 0
        self._cache: RecordedCache | None = None
        self._measurements: Counter[str] = Counter()

    # -- lifecycle

    def start(self) -> dict[str, str]:
        """Read the cache (once) and return the fingerprint: the recorded device and cache."""
        if self._cache is None:
            self._cache = self._read()
            self.starts += 1
        if self.fingerprint is None:
            self.fingerprint = {
                "mode": "replay",
                "gpu_model": self.source.device,
                "recorded_kernel": self.source.kernel,
                "cache_sha256": self.source.sha256[:16],
            }
        return self.fingerprint

    def close(self) -> None:
        """Nothing to stop."""

    def fresh(self) -> None:
        """Nothing to restart; a re-measurement simply draws again."""

    def _read(self) -> RecordedCache:
        path = self.source.cache
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise WorkerError(f"cannot read the replay cache {path}: {exc}") from exc
        try:
            cache, digest = read_cache(data)
        except CacheFormatError as exc:
            raise WorkerError(f"the replay cache {path} is no longer readable: {exc}") from exc
        if digest != self.source.sha256:
            raise WorkerError(
                f"the replay cache {path} changed after the registry was read; rescan the "
                "registry (a changed cache is a new generation)"
            )
        return cache

    def admits(self, knobs: Mapping[str, KnobValue]) -> bool:
        """Whether ``knobs`` are recorded in the cache (Kernel Tuner's restrictions hold): the
        ``is_valid`` a :class:`policies.SearchSpace` of this entry can take."""
        if self._cache is None:
            self.start()
        assert self._cache is not None
        return self._cache.lookup(knobs) is not None

    # -- evaluation

    def evaluate(
        self,
        spec: KernelSpec,
        candidate: Candidate,
        incumbent: Candidate | None = None,
        *,
        derived_skip: Sequence[str] = (),
        lenient_derived: bool = False,
    ) -> EvalResult:
        """Look ``candidate`` up; with ``incumbent``, draw its samples too (see the module).

        ``derived_skip`` and ``lenient_derived`` concern derived shapes, which a recorded
        space does not have; they are accepted for the interface and ignored."""
        if spec.replay is None or spec.replay.sha256 != self.source.sha256:
            raise WorkerError(
                f"the replay client of {self.spec.name} was asked to evaluate {spec.name}, "
                "which is another entry or generation; build one client per replay entry"
            )
        self.start()
        assert self._cache is not None
        knobs = dict(candidate.knobs)
        if self._cache.key(knobs) is None:
            return EvalResult(
                Outcome.REJECTED_STATIC,
                phase="static",
                reason=f"knobs {sorted(knobs)} are not the recorded parameters "
                f"{list(self._cache.keys)}",
                metadata={"replay": "mismatch"},
            )
        record = self._cache.lookup(knobs)
        if record is None:
            return EvalResult(
                Outcome.REJECTED_STATIC,
                phase="static",
                reason="not in the recorded space: the cache has no entry for this "
                "configuration, which violates the kernel's restrictions",
                metadata={"replay": "absent"},
            )
        if record.status != "ok":
            outcome, phase, what = _FAILURES.get(
                record.status, (Outcome.RUNTIME_ERROR, "benchmark", "failed")
            )
            return EvalResult(
                outcome,
                phase=phase,
                reason=f"recorded as {record.status}: {what}",
                metadata={"replay": record.status},
            )
        index = self._measurements[candidate.id]
        self._measurements[candidate.id] += 1
        samples = self._draw(record, [*_words(candidate.id), index, 0])
        metadata: dict[str, object] = {
            "replay": "ok",
            "noise": self.source.noise,
            "recorded_mean_s": (record.time_ms or 0.0) / 1e3,
            "samples": {REPLAY_CASE: samples},
            "incumbent_samples": {},
        }
        if incumbent is not None:
            theirs = self._cache.lookup(dict(incumbent.knobs))
            if theirs is not None and theirs.status == "ok":
                seed = [*_words(incumbent.id), *_words(candidate.id), index, 1]
                metadata["incumbent_samples"] = {REPLAY_CASE: self._draw(theirs, seed)}
        time_s = statistics.median(samples)
        return EvalResult(
            Outcome.OK,
            time_s=time_s,
            timings={REPLAY_CASE: time_s},
            timing_kind="replay",
            metadata=metadata,
        )

    def _draw(self, record: Record, stream: list[int]) -> list[float]:
        """One measurement's samples in seconds: the median run, or seeded draws of the runs."""
        runs = record.times_ms or ((record.time_ms or 0.0),)
        if self.source.noise == "none":
            return [float(np.median(runs)) / 1e3]
        rng = np.random.default_rng([self.source.seed, *stream])
        picks = rng.integers(len(runs), size=len(runs))
        return [runs[int(i)] / 1e3 for i in picks]
