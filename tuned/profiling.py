"""Hardware feedback for campaigns: Nsight Compute profiles and roofline fractions, cached.

:class:`HardwareFeedback` is what a :class:`~tuned.search.Campaign` asks, after each
step, to profile the candidates whose profile matters (the incumbent and each cluster's
representative: the profile that decides a cluster's masks, see :mod:`policies.masks`), and
to give the policy what is known (``Trial.metrics``: ``sol_sm``, ``sol_dram``, ``sol_l2`` ...).

* Profiles are cached per (candidate, generation, GPU model) in the store; a candidate whose
  profiling failed or timed out is not profiled again. At most ``per_step`` profiling runs
  happen per step, so profiling never starves evaluation.
* A profile is taken on the entry's first perf shape and first dtype, with the candidate run
  by :mod:`tuned.evaluation.profile_target` under ``ncu`` (the worker's scrubbed environment,
  its own process group, a deadline).
* Roofline fractions (:mod:`profilers.classify`) need the entry's ``roofline`` and the GPU
  model's peaks, measured once (:mod:`profilers.peaks`) and stored; they do not need ``ncu``.

States (``state``): ``enabled``; ``disabled`` (``profiling.enabled: false``);
``interpreter`` (no GPU: ncu profiles GPUs only); ``unavailable`` (``ncu`` missing, or the
driver refuses counters with ``ERR_NVGPUCTRPERM``). Leaving ``enabled`` is logged once, with
the reason; tuning goes on without masks.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from profilers.classify import RooflinePoint, roofline_point
from profilers.ncu import NcuProfiler, NcuSettings, Profile, ProfileStatus, kernel_regex
from profilers.peaks import PeakMeasurementError, Peaks, measure_in_subprocess
from tuned.evaluation.client import _kernel_payload, worker_environment
from tuned.outcomes import Outcome
from tuned.registry.spec import KernelSpec
from tuned.settings import ProfilingConfig
from tuned.store.api import Store
from tuned.store.base import TrialRow

__all__ = ["HardwareFeedback", "case_label", "jit_kernel_names", "merge_metrics"]

log = logging.getLogger(__name__)

#: ``Trial.metrics`` keys a profile supplies that compile metadata, when present, overrides
#: (static facts of the compiled kernel); the measured ones (SOL, occupancy, hit rates) win.
STATIC_KEYS = frozenset({"registers", "shared_bytes"})


def jit_kernel_names(source: str) -> list[str]:
    """Names of the functions decorated with ``triton.jit`` (or ``jit``) in ``source``.

    Read from the syntax tree, nothing executed: the names ``ncu --kernel-name`` filters on,
    so the launches of other kernels (PyTorch's, in the launcher) are not profiled.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "jit":
                names.append(node.name)
    return names


def case_label(dims: Mapping[str, int], dtype: str) -> str:
    """The label of a timed case in ``EvalResult.timings`` (the worker's ``Case.label``)."""
    return "x".join(f"{k}={v}" for k, v in dims.items()) + f"/{dtype}"


class HardwareFeedback:
    """Profiles and roofline figures of one daemon (or ``ktuned tune`` run), on one GPU."""

    def __init__(
        self,
        *,
        store: Store,
        config: ProfilingConfig,
        workdir: Path,
        interpreter: bool,
        python: str = sys.executable,
    ) -> None:
        self.store = store
        self.config = config
        self.workdir = workdir
        self.python = python
        self.gpu_model = ""
        self.profiler = NcuProfiler(
            settings=NcuSettings(
                executable=config.ncu,
                deadline_s=config.deadline_s,
                launch_count=config.launch_count,
            )
        )
        self.reason = ""
        self._peaks: Peaks | None = None
        self._peaks_error: str | None = None
        if interpreter:
            self.state = "interpreter"
            self.reason = "no GPU: Nsight Compute profiles GPUs only"
        elif not config.enabled:
            self.state = "disabled"
            self.reason = "profiling.enabled is false"
        elif self.profiler.executable() is None:
            self._turn_off(
                f"Nsight Compute ({config.ncu!r}) was not found; install the CUDA toolkit's "
                "ncu or set profiling.ncu to its path"
            )
        else:
            self.state = "enabled"
        self._interpreter = interpreter

    @property
    def enabled(self) -> bool:
        """Whether ``ncu`` profiles are being taken."""
        return self.state == "enabled"

    def set_fingerprint(self, fingerprint: Mapping[str, str]) -> None:
        """The worker's fingerprint: its GPU model keys the caches."""
        model = str(fingerprint.get("gpu_model", ""))
        if model != self.gpu_model:
            self.gpu_model, self._peaks, self._peaks_error = model, None, None

    def _turn_off(self, reason: str) -> None:
        self.state, self.reason = "unavailable", reason
        log.warning("profiling is off: %s; tuning continues without hardware masking", reason)

    # -- what the policy sees

    def metrics(self, spec: KernelSpec) -> dict[str, dict[str, float]]:
        """Candidate id -> profile metrics (``Profile.metrics()``) of a generation on this
        GPU model; read from the store, so profiles of earlier runs count too."""
        if not self.gpu_model or self._interpreter:
            return {}
        return {
            cid: Profile.from_dict(d).metrics()
            for cid, d in self.store.profiles(spec.name, spec.generation, self.gpu_model).items()
        }

    # -- after a step

    def refresh(self, spec: KernelSpec, fingerprint: str, wanted: Sequence[TrialRow]) -> None:
        """Roofline fractions and profiles for ``wanted`` (most important first) that lack them."""
        if self.state in ("interpreter", "disabled") or not self.gpu_model:
            return
        good = [t for t in wanted if t.result.outcome is Outcome.OK and t.result.timings]
        if self.config.roofline and spec.roofline is not None:
            done = self.store.rooflines(spec.name, spec.generation, fingerprint)
            for trial in good:
                if trial.candidate_id not in done:
                    self._roofline(spec, fingerprint, trial)
        if not self.enabled or self.config.per_step < 1:
            return
        attempted = self.store.profiling_attempted(spec.name, spec.generation, self.gpu_model)
        todo = [t for t in good if t.candidate_id not in attempted]
        for candidate_id in list(dict.fromkeys(t.candidate_id for t in todo))[
            : self.config.per_step
        ]:
            self.profile(spec, candidate_id)
            if not self.enabled:
                return

    def profile(self, spec: KernelSpec, candidate_id: str) -> ProfileStatus | None:
        """Profile one stored candidate now and record the run; ``None`` if it is unknown."""
        candidate = self.store.candidate(candidate_id, spec.generation)
        if candidate is None:
            return None
        shape = (spec.perf_shapes or spec.shapes)[0]
        workdir = self.workdir / "profiling"
        workdir.mkdir(parents=True, exist_ok=True)
        request = workdir / "request.json"
        request.write_text(
            json.dumps(
                {
                    "kernel": _kernel_payload(spec),
                    "candidate": {"source": candidate.source, "knobs": dict(candidate.knobs)},
                    "case": {"dims": dict(shape.dims), "dtype": spec.dtypes[0]},
                    "warmup": 2,
                    "calls": 3,
                }
            ),
            encoding="utf-8",
        )
        env = worker_environment(
            os.environ, interpreter=False, cache_dir=workdir / "triton-cache", memory_limit=None
        )
        started = time.time()
        result = self.profiler.profile(
            [
                self.python,
                "-m",
                "tuned.evaluation.profile_target",
                str(request),
                str(workdir / "modules"),
            ],
            env=env,
            cwd=workdir,
            kernel_filter=kernel_regex(jit_kernel_names(candidate.source)),
        )
        self.store.record_profiling_run(
            kernel=spec.name,
            generation=spec.generation,
            candidate_id=candidate_id,
            gpu_model=self.gpu_model,
            status=result.status.value,
            reason=result.reason,
            wall_s=result.wall_s,
            started_at=started,
            profile=None if result.profile is None else result.profile.to_dict(),
        )
        if result.status is ProfileStatus.UNAVAILABLE:
            self._turn_off(result.reason)
        elif not result.ok:
            log.warning(
                "%s: profiling %s %s: %s",
                spec.name,
                candidate_id[:12],
                result.status.value,
                result.reason,
            )
        else:
            log.info("%s: profiled %s in %.1f s", spec.name, candidate_id[:12], result.wall_s)
        return result.status

    # -- roofline

    def peaks(self) -> Peaks | None:
        """This GPU model's peaks: stored, else measured now (once per process and model)."""
        if self._peaks is not None or self._peaks_error is not None or not self.gpu_model:
            return self._peaks
        stored = self.store.peaks(self.gpu_model)
        if stored is not None:
            self._peaks = Peaks.from_dict(stored)
            return self._peaks
        env = worker_environment(
            os.environ,
            interpreter=False,
            cache_dir=self.workdir / "peaks" / "triton-cache",
            memory_limit=None,
        )
        try:
            peaks = measure_in_subprocess(python=self.python, env=env, deadline_s=600.0)
        except PeakMeasurementError as exc:
            self._peaks_error = str(exc)
            log.warning("no roofline figures: %s", exc)
            return None
        if peaks.gpu_model != self.gpu_model:
            log.warning("peaks measured on %r, expected %r", peaks.gpu_model, self.gpu_model)
        self.store.record_peaks(self.gpu_model, peaks.to_dict())
        log.info(
            "%s peaks: %.0f GB/s, %.0f TFLOP/s (fp16 matmul)",
            self.gpu_model,
            peaks.bytes_per_s / 1e9,
            peaks.flops_per_s / 1e12,
        )
        self._peaks = peaks
        return peaks

    def _roofline(self, spec: KernelSpec, fingerprint: str, trial: TrialRow) -> None:
        assert spec.roofline is not None
        peaks = self.peaks()
        if peaks is None:
            return
        points: dict[str, RooflinePoint] = {}
        for shape in spec.perf_shapes or spec.shapes:
            for dtype in spec.dtypes:
                label = case_label(shape.dims, dtype)
                seconds = trial.result.timings.get(label)
                if seconds is None or not seconds > 0:
                    continue
                point = roofline_point(
                    bytes_expr=spec.roofline.bytes,
                    flops_expr=spec.roofline.flops,
                    dims=shape.dims,
                    dtype=dtype,
                    time_s=seconds,
                    peak_bytes_per_s=peaks.bytes_per_s,
                    peak_flops_per_s=peaks.flops_per_s,
                )
                if point is not None:
                    points[label] = point
        if not points:
            return
        fraction = sum(p.fraction for p in points.values()) / len(points)
        figures: dict[str, Any] = {
            "cases": {
                label: {
                    "bandwidth_fraction": p.bandwidth_fraction,
                    "flops_fraction": p.flops_fraction,
                    "fraction": p.fraction,
                    "bound": p.bound.value,
                }
                for label, p in points.items()
            },
            "peaks": peaks.to_dict(),
        }
        self.store.record_roofline(
            kernel=spec.name,
            generation=spec.generation,
            fingerprint=fingerprint,
            candidate_id=trial.candidate_id,
            fraction=fraction,
            figures=figures,
        )


def merge_metrics(
    compile_metrics: Mapping[str, float], profile_metrics: Mapping[str, float]
) -> dict[str, float]:
    """One candidate's ``Trial.metrics``: compile metadata and profile, without duplicates.

    Static facts (registers, shared memory) come from compile metadata when it has them;
    what only a profile measures (SOL fractions, achieved occupancy, hit rates) from the
    profile.
    """
    out = {k: v for k, v in profile_metrics.items() if k in STATIC_KEYS}
    out.update(compile_metrics)
    out.update({k: v for k, v in profile_metrics.items() if k not in STATIC_KEYS})
    return out
