"""A bounded tuning run over a registry: what ``ktuned tune`` does.

Scan the registry (invalid entries are recorded and reported, the rest go on), record every
valid entry's generation, start one evaluation worker (when a Triton entry needs one; a
replay entry gets its own :class:`~tuned.evaluation.replay.ReplayClient`), then run the
kernels' campaigns: with a compile pool, the Triton kernels' together, each keeping the GPU
while it has a compiled candidate and handing it to another while its next ones compile
(:meth:`~tuned.pipeline.CampaignPipeline.run_all`); else each in turn.

The store is any :class:`~tuned.store.Store`: the state directory's SQLite file, or a fleet's
PostgreSQL database (``ktuned tune --store URL``). There, each candidate is claimed before it
is evaluated (:mod:`tuned.store.claims`), so tuning runs on several boxes, and daemons, share
the work without evaluating a candidate twice for one fingerprint.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuned.errors import BadInputError
from tuned.evaluation.client import GPU_SPARES, EvaluationSettings, WorkerClient
from tuned.evaluation.evaluator import Evaluator
from tuned.evaluation.replay import ReplayClient
from tuned.registry import KernelSpec, Problem, scan_registry
from tuned.search import Campaign, CampaignSummary, OnResult, TuneSettings
from tuned.store.api import Store
from tuned.store.claims import ClaimSettings

__all__ = [
    "TuneReport",
    "detect_interpreter",
    "tune_claims",
    "tune_registry",
]

log = logging.getLogger(__name__)


def detect_interpreter(device: str) -> bool:
    """Resolve ``--device``: ``gpu``, ``interpreter`` or ``auto`` (GPU when CUDA is usable)."""
    if device == "interpreter":
        return True
    if device == "gpu":
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    import torch

    if torch.cuda.is_available():
        return False
    log.warning(
        "no CUDA GPU found: kernels run in Triton's interpreter on the CPU; "
        "correctness is real, timings are interpreter timings"
    )
    return True


def tune_claims(evaluation: EvaluationSettings) -> ClaimSettings:
    """How a bounded run claims candidates on a shared store: a lease longer than one
    evaluation may take (a worker start, then each phase's deadline, twice: a new best is
    re-measured), and waiting for other processes' claims at most one lease."""
    e = evaluation
    phases = e.compile_timeout_s + e.correctness_timeout_s + e.benchmark_timeout_s
    lease = 2 * (e.startup_timeout_s + phases + 60.0)
    return ClaimSettings(lease_s=lease, poll_s=1.0, max_wait_s=lease)


@dataclass
class TuneReport:
    summaries: list[CampaignSummary]
    problems: list[Problem]
    fingerprint: dict[str, str]


def tune_registry(
    path: Path,
    *,
    store: Store,
    state_dir: Path,
    settings: TuneSettings,
    evaluation: EvaluationSettings,
    on_start: Callable[[int], OnResult | None] | None = None,
    compile_workers: int = 0,
    claims: ClaimSettings | None = None,
) -> TuneReport:
    """Tune every valid entry under ``path`` (a registry directory or one entry).

    ``on_start(total_evaluations)`` is called once the work is known and may return a
    per-evaluation callback (the progress bar). ``compile_workers > 0``: Triton entries are
    evaluated through a compile pool of that many processes (:mod:`tuned.pipeline`).
    ``claims``: claim each candidate before evaluating it (a store shared with other
    processes, see :func:`tune_claims`); ``None``: this run is the store's only writer.
    """
    scan = scan_registry(path)
    for directory, problems in scan.invalid.items():
        store.record_invalid(directory, "\n".join(str(p) for p in problems))
    if not scan.entries:
        raise BadInputError(
            f"no valid registry entry under {path}"
            + (
                f" ({len(scan.problems)} problems; run `ktuned registry check {path}`)"
                if scan.problems
                else ": it holds no kernel.yaml, itself or in a subdirectory"
            )
        )
    specs: list[KernelSpec] = list(scan.entries)
    for spec in specs:
        if store.sync_kernel(spec):
            log.info("%s: generation %s", spec.name, spec.generation[:12])
        for notice in spec.notices:
            log.info("%s: %s", spec.name, notice)
    # One worker for the Triton entries (started only if there is one), and one replay
    # client per replay entry: each with its own fingerprint (replays record their device).
    with WorkerClient(
        workdir=state_dir / "workers" / "0",
        settings=evaluation,
        spares=0 if evaluation.interpreter else GPU_SPARES,  # a re-measurement need not wait
    ) as client:
        fingerprint: dict[str, str] = {}
        campaigns = []
        for spec in specs:
            own: Evaluator = client if spec.replay is None else ReplayClient(spec)
            started = own.start()
            if spec.replay is None or not fingerprint:
                fingerprint = started  # the worker's, else the first replay's
            fid = store.record_fingerprint(started)
            campaigns.append(
                Campaign(
                    spec=spec,
                    store=store,
                    client=own,
                    fingerprint=fid,
                    settings=settings,
                    claims=claims,
                )
            )
        callback = on_start(sum(c.remaining() for c in campaigns)) if on_start else None
        pipeline = None
        if compile_workers > 0 and any(c.spec.replay is None for c in campaigns):
            from tuned.pipeline import pipeline_for

            pipeline = pipeline_for(client, workers=compile_workers)
        summaries: list[CampaignSummary] = []
        kernels = [c for c in campaigns if c.spec.replay is None]
        following = {id(c): after.spec for c, after in itertools.pairwise(kernels)}

        def first_step(campaign: Campaign) -> None:
            campaign.on_result = callback
            if id(campaign) in following:  # the next kernel's cases made while this runs
                client.prepare_ahead(following[id(campaign)])

        try:
            together: dict[int, CampaignSummary] = {}
            if pipeline is not None:  # the Triton kernels together: the GPU never idles
                done = pipeline.run_all(
                    kernels, on_first_step=first_step, deadline=settings.deadline
                )
                together = {id(c): summary for c, summary in zip(kernels, done)}
            for campaign in campaigns:
                if id(campaign) in together:
                    summaries.append(together[id(campaign)])
                else:
                    first_step(campaign)
                    summaries.append(campaign.run())
        finally:
            if pipeline is not None:
                pipeline.close()
    return TuneReport(summaries=summaries, problems=list(scan.problems), fingerprint=fingerprint)
