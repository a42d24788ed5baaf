"""Evaluating one candidate and judging it: record, measure against the incumbent, and the
acceptance rule (:mod:`tuned.acceptance`), re-measuring in a fresh worker when it asks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from profilers.classify import roofline_point
from profilers.peaks import Peaks
from tuned.acceptance import (
    AcceptanceSettings,
    Interval,
    comparable,
    decide,
    speedup_interval,
    speedup_point,
)
from tuned.evaluation.evaluator import Evaluator
from tuned.llm.gate import gate_result
from tuned.outcomes import Candidate, EvalResult, Outcome, Provenance
from tuned.profiling import case_label
from tuned.registry.spec import KernelSpec
from tuned.search.base import CampaignBase, trial_row
from tuned.store.base import TrialRow


@dataclass
class Prepared:
    """One candidate ready to measure (:meth:`Campaign.prepare`); :meth:`measure` is the part
    that may run on another thread: it touches nothing but the worker client it is given."""

    spec: KernelSpec
    candidate: Candidate
    incumbent: Candidate | None
    gate: EvalResult | None  # the static gate's rejection: nothing to measure
    derived_skip: tuple[str, ...]
    lenient_derived: bool
    remeasure: bool = False
    phases: dict[str, float] = field(default_factory=dict)
    #: What the compile pool did (``precompiled``, ``note``, ...), kept in the result.
    precompile: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0  # time.time() when measured
    wall_s: float = 0.0

    def keep_precompile(self, metadata: Mapping[str, Any] | None) -> None:
        """Keep the compile pool's account of the candidate (a few skipped shapes at most)."""
        metadata = metadata or {}
        keep = {k: metadata[k] for k in ("precompiled", "note", "specializations") if k in metadata}
        skipped = [str(s) for s in metadata.get("skipped", ())]
        if skipped:
            more = [f"... {len(skipped) - 4} more"] if len(skipped) > 4 else []
            keep["skipped"] = skipped[:4] + more
        self.precompile = keep

    def measure(self, client: Evaluator) -> EvalResult:
        self.started_at = time.time()
        t0 = time.monotonic()
        result = self.gate or client.evaluate(
            self.spec,
            self.candidate,
            self.incumbent,
            derived_skip=self.derived_skip,
            lenient_derived=self.lenient_derived,
        )
        self.wall_s = time.monotonic() - t0
        return result


class JudgingCampaign(CampaignBase):
    """Evaluation and acceptance of candidates."""

    def record(self, candidate: Candidate, result: EvalResult, *, wall_s: float) -> TrialRow:
        """Record ``result`` as ``candidate``'s evaluation without running it in the worker:
        the outcome of a failure found before the GPU (the compile pool's)."""
        self.store.add_candidate(candidate)
        self.store.record_evaluation(
            candidate, self.fingerprint, result, started_at=time.time() - wall_s, wall_s=wall_s
        )
        if self.on_result is not None:
            self.on_result(self.spec, candidate, result, self.summary())
        return trial_row(candidate, result, wall_s)

    def evaluate(
        self,
        candidate: Candidate,
        *,
        phases: Mapping[str, float] | None = None,
        precompile: Mapping[str, Any] | None = None,
    ) -> TrialRow:
        """Record, evaluate and store one candidate (the path every candidate takes).

        A correct candidate is timed interleaved with the incumbent; if it looks faster, the
        acceptance rule (:mod:`tuned.acceptance`) decides, re-measuring it in a fresh worker.
        ``phases``: seconds the candidate spent before the worker (compile pool, queue), kept
        with the worker's own in the result's ``phase_seconds``; ``precompile``: the compile
        pool's account (whether it compiled the candidate ahead, and if not why), kept in the
        result's ``metadata["precompile"]``.

        In three parts for a pipeline with several GPUs (:mod:`tuned.pipeline`): what needs
        the store before (:meth:`prepare`, this thread), the measurement on a GPU's worker
        (:meth:`Prepared.measure`, any thread: it touches its client alone), and what needs
        the store after (:meth:`finish`, this thread again).
        """
        prepared = self.prepare(candidate, phases=phases)
        prepared.keep_precompile(precompile)
        return self.finish(prepared, prepared.measure(self.client))

    def prepare(
        self, candidate: Candidate, *, phases: Mapping[str, float] | None = None
    ) -> Prepared:
        """Record ``candidate`` and fix what its measurement needs (the incumbent to time it
        against, the derived shapes to skip, the static gate's verdict)."""
        self.store.add_candidate(candidate)
        incumbent = None
        if candidate.provenance is not Provenance.ORIGINAL:
            incumbent = self._incumbent()
        return self._prepared(candidate, incumbent, phases=phases)

    def finish(
        self, prepared: Prepared, result: EvalResult, *, client: Evaluator | None = None
    ) -> TrialRow:
        """Store the measured ``result`` and apply the acceptance rule; a re-measurement
        runs on ``client`` (the worker of the GPU that measured it; default: the campaign's)."""
        result = self._record(prepared, result)
        incumbent = prepared.incumbent
        if incumbent is not None and result.outcome is Outcome.OK:
            client = client or self.client
            current = self._incumbent()
            if current is not None and current.id != incumbent.id:
                # Another GPU's candidate became the best while this one was measured: if
                # it looked faster than the old best, time it again against the new one.
                first = _interval(result, self.acceptance, self.settings.seed)
                if first is None or decide(first, self.acceptance) == "not_significant":
                    incumbent = None
                else:
                    incumbent = current
                    again = self._prepared(prepared.candidate, current, remeasure=True)
                    result = self._record(again, again.measure(client))
            if incumbent is not None and result.outcome is Outcome.OK:
                self._judge(prepared.candidate, incumbent, result, client)
        if self.on_result is not None:
            self.on_result(self.spec, prepared.candidate, result, self.summary())
        return trial_row(prepared.candidate, result, prepared.wall_s)

    def _prepared(
        self,
        candidate: Candidate,
        incumbent: Candidate | None,
        *,
        remeasure: bool = False,
        phases: Mapping[str, float] | None = None,
    ) -> Prepared:
        original = candidate.provenance is Provenance.ORIGINAL
        # LLM-written modules pass the full static gate first (tuned.llm.gate); a reference
        # entry's later modules keep its seed's launcher signature.
        seed = self._seed_of() if self.spec.reference_only else None
        original_source = None if seed is None else seed.source
        return Prepared(
            spec=self.spec,
            candidate=candidate,
            incumbent=incumbent,
            gate=gate_result(self.spec, candidate, original_source=original_source),
            derived_skip=() if original else tuple(self._derived_unusable()),
            lenient_derived=original,
            remeasure=remeasure,
            phases=dict(phases or {}),
        )

    def _record(self, prepared: Prepared, result: EvalResult) -> EvalResult:
        if prepared.remeasure:
            result = replace(result, metadata={**result.metadata, "remeasure": True})
        if prepared.incumbent is not None and result.metadata.get("incumbent_samples"):
            # What it was timed against: side-by-side claims per shape (tuned.runtime.confirmed)
            meta = {**result.metadata, "incumbent_id": prepared.incumbent.id}
            result = replace(result, metadata=meta)
        if prepared.phases:
            result = replace(result, phase_seconds={**prepared.phases, **result.phase_seconds})
        if prepared.precompile:
            meta = {**result.metadata, "precompile": prepared.precompile}
            result = replace(result, metadata=meta)
        self.store.record_evaluation(
            prepared.candidate,
            self.fingerprint,
            result,
            started_at=prepared.started_at,
            wall_s=prepared.wall_s,
        )
        return result

    def _derived_unusable(self) -> list[str]:
        """Derived shapes the original itself fails on: not checked for candidates."""
        for t in self._trials():
            if t.provenance is Provenance.ORIGINAL:
                return list(t.result.metadata.get("derived_unusable", ()))
        return []

    def _judge(
        self, candidate: Candidate, incumbent: Candidate, result: EvalResult, client: Evaluator
    ) -> None:
        first = _interval(result, self.acceptance, self.settings.seed)
        if first is None:
            return
        status = decide(first, self.acceptance)
        second = None
        first_record: dict[str, object] = dict(first.to_dict())
        if status in ("remeasure", "accepted"):
            floor = self._below_roofline_floor(result)
            if floor is not None:
                status, first_record["held_reason"] = "held", floor
        if status == "remeasure":
            client.fresh()  # the next evaluation runs in a fresh worker
            prepared = self._prepared(candidate, incumbent, remeasure=True)
            again = self._record(prepared, prepared.measure(client))
            # In full, even below the bar: a not_confirmed decision keeps both measurements.
            second = _interval(again, self.acceptance, self.settings.seed + 1, full=True)
            status = "not_confirmed" if second is None else decide(first, self.acceptance, second)
        if status == "not_significant":
            return
        self.store.record_acceptance(
            candidate,
            self.fingerprint,
            incumbent_id=incumbent.id,
            status=status,
            first=first_record,
            second=None if second is None else second.to_dict(),
        )
        if status == "accepted" and incumbent.provenance is not Provenance.ORIGINAL:
            self._versus_original(candidate, client)

    def _versus_original(self, candidate: Candidate, client: Evaluator) -> None:
        """Time a best accepted against an earlier best against the original too, twice: the
        speedup every display shows (:mod:`tuned.store.speedups`) and its per-shape claims
        (:mod:`tuned.runtime.confirmed`) then rest on side-by-side measurements against the
        original, not on a chain of acceptances."""
        original = self._baseline_candidate()
        intervals = []
        for i in range(2):
            prepared = self._prepared(candidate, original, remeasure=True)
            again = self._record(prepared, prepared.measure(client))
            interval = _interval(again, self.acceptance, self.settings.seed + 2 + i, full=True)
            if interval is None:
                return
            intervals.append(interval)
        self.store.record_acceptance(
            candidate,
            self.fingerprint,
            incumbent_id=original.id,
            status="vs_original",
            first=intervals[0].to_dict(),
            second=intervals[1].to_dict(),
        )

    def _below_roofline_floor(self, result: EvalResult) -> str | None:
        """Why a GPU timing is faster than the hardware allows (``None``: it is not, or no
        roofline/peaks are known): some timed case implies more than ``roofline_hold`` x the
        measured peak bandwidth or FLOP rate of this GPU model."""
        roof = self.spec.roofline
        if roof is None or result.timing_kind != "gpu":
            return None
        model = self.store.fingerprint(self.fingerprint).get("gpu_model", "")
        stored = self.store.peaks(model) if model else None
        if stored is None:
            return None
        peaks = Peaks.from_dict(stored)
        for shape in self.spec.shapes:
            for dtype in self.spec.dtypes:
                label = case_label(shape.dims, dtype)
                seconds = result.timings.get(label)
                if seconds is None or not seconds > 0:
                    continue
                point = roofline_point(
                    bytes_expr=roof.bytes,
                    flops_expr=roof.flops,
                    dims=shape.dims,
                    dtype=dtype,
                    time_s=seconds,
                    peak_bytes_per_s=peaks.bytes_per_s,
                    peak_flops_per_s=peaks.flops_per_s,
                )
                if point is not None and point.fraction > self.acceptance.roofline_hold:
                    return (
                        f"{label}: {seconds * 1e6:.3g} us is {point.fraction:.2f}x the "
                        f"{model} roofline (measured peaks), above the "
                        f"{self.acceptance.roofline_hold:g}x hold threshold"
                    )
        return None


def _interval(
    result: EvalResult, settings: AcceptanceSettings, seed: int, *, full: bool = False
) -> Interval | None:
    """The acceptance interval of ``result`` against the incumbent it was timed with;
    ``None`` when it was not timed against one, or (unless ``full``) when its point estimate
    is below the bar (not significant whatever its interval,
    :func:`~tuned.acceptance.decide`: the bootstrap is skipped)."""
    samples = result.metadata.get("samples") or {}
    incumbent = result.metadata.get("incumbent_samples") or {}
    if result.outcome is not Outcome.OK or not incumbent:
        return None
    if not comparable(samples, incumbent):  # no time to divide by: no comparison
        return None
    if not full and speedup_point(samples, incumbent) < 1.0 + settings.min_gain:
        return None
    return speedup_interval(samples, incumbent, np.random.default_rng(seed), settings)
