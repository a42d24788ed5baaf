"""``ktuned referee``: re-measure every stored claim side by side with the original.

A claim is what ktuned displays or ships for a kernel on this device: the best's speedup over
the original (``ktuned status``, ``best``, the metrics, the report, the export manifest), and,
per timed shape, the variant ``tuned.runtime.load`` dispatches there with its speedup. The
referee re-measures each candidate behind a claim in a worker process started fresh for the
kernel (the evaluation worker: correctness on every case, then the judge's timing interleaved
with the original, exactly as the campaign's, :mod:`tuned.evaluation.timing_judge`), one
candidate at a time, and compares:

- per kernel: the claimed speedup against the measured one (the acceptance rule's statistic,
  the geometric mean over timed cases of the ratio of medians); they *agree* when within
  ``tolerance`` (2 %) of each other;
- per shape: the claimed speedup of the dispatched variant against the measured one on that
  case, and whether the case's measured interval still clears ``1 + min_gain`` (*confirmed*).

Each re-measurement is stored (an acceptance row with status ``refereed`` against the
original, with its per-case samples), so afterwards the displayed speedups are the referee's
(:mod:`tuned.store.speedups`) and a per-shape variant that the re-measurement refutes stops
being dispatched (:mod:`tuned.runtime.confirmed`: its last two measurements decide).

Only meaningful on an idle GPU; in Triton's interpreter it runs the same way on the CPU (the
figures then rank code on that CPU only).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tuned.acceptance import AcceptanceSettings, speedup_interval
from tuned.errors import BadInputError
from tuned.evaluation.client import EvaluationSettings, WorkerClient
from tuned.evaluation.settings import REFEREE_TIMING
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.runtime.plan import Plan, plan_for
from tuned.store.api import Store

__all__ = ["Claim", "RefereeReport", "referee"]

log = logging.getLogger(__name__)

#: Claimed and measured speedups agree when within this fraction of each other.
DEFAULT_TOLERANCE = 0.02


@dataclass
class Claim:
    """One claim and its re-measurement. ``label`` is ``None`` for the kernel's own claim."""

    kernel: str
    candidate_id: str
    label: str | None
    claimed: float | None
    measured: float | None = None
    low: float | None = None
    high: float | None = None
    error: str = ""

    def agrees(self, tolerance: float) -> bool | None:
        if self.claimed is None or self.measured is None:
            return None
        return abs(self.measured / self.claimed - 1.0) <= tolerance

    def confirmed(self, min_gain: float) -> bool | None:
        """The measured interval clears the bar (``None`` for the original or no figure)."""
        if self.low is None:
            return None
        return self.low >= 1.0 + min_gain

    def to_dict(self, tolerance: float, min_gain: float) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "candidate": self.candidate_id,
            "shape": self.label,
            "claimed": self.claimed,
            "measured": self.measured,
            "low": self.low,
            "high": self.high,
            "agrees": self.agrees(tolerance),
            "confirmed": self.confirmed(min_gain),
            "error": self.error,
        }


@dataclass
class RefereeReport:
    tolerance: float
    min_gain: float
    claims: list[Claim] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    device: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        rows = [c.to_dict(self.tolerance, self.min_gain) for c in self.claims]
        judged = [r for r in rows if r["agrees"] is not None]
        shapes = [r for r in rows if r["shape"] is not None and r["confirmed"] is not None]
        return {
            "device": dict(self.device),
            "tolerance": self.tolerance,
            "claims": rows,
            "skipped": self.skipped,
            "agreeing": sum(bool(r["agrees"]) for r in judged),
            "judged": len(judged),
            "shapes_confirmed": sum(bool(r["confirmed"]) for r in shapes),
            "shapes_judged": len(shapes),
            "wall_s": self.wall_s,
        }

    def _verdict(self, claim: Claim) -> str:
        agrees, confirmed = claim.agrees(self.tolerance), claim.confirmed(self.min_gain)
        words = ["-" if agrees is None else "agrees" if agrees else "DISAGREES"]
        if claim.label is not None and confirmed is not None:
            words.append("confirmed" if confirmed else "NOT CONFIRMED")
        return "; ".join(words)

    def table(self) -> str:
        def num(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}x"

        lines = [
            f"{'kernel':<16} {'shape':<28} {'candidate':<12} {'claimed':>9} {'measured':>9} "
            f"{'interval':>17}  verdict"
        ]
        for c in self.claims:
            verdict = c.error or self._verdict(c)
            interval = "-" if c.low is None else f"{c.low:.3f}..{c.high:.3f}"
            lines.append(
                f"{c.kernel:<16} {c.label or '(kernel)':<28} {c.candidate_id[:12]:<12} "
                f"{num(c.claimed):>9} {num(c.measured):>9} {interval:>17}  {verdict}"
            )
        d = self.to_dict()
        lines.append(
            f"{d['agreeing']}/{d['judged']} claims within {self.tolerance:.0%} of the referee; "
            f"{d['shapes_confirmed']}/{d['shapes_judged']} per-shape claims confirmed; "
            f"{self.wall_s:.1f} s"
        )
        for name, why in self.skipped.items():
            lines.append(f"skipped {name}: {why}")
        return "\n".join(lines)


def _claims(plan: Plan, name: str) -> list[Claim]:
    """What ``plan`` displays and dispatches: the best's speedup, and each timed shape's
    variant with its speedup (shapes where the original runs claim nothing)."""
    out: list[Claim] = []
    if plan.best is not None and plan.best.provenance is not Provenance.ORIGINAL:
        out.append(Claim(name, plan.best.candidate_id, None, plan.best.speedup))
    for shape, index in zip(plan.shapes, plan.shape_variant):
        variant = plan.variants[index]
        if variant.provenance == Provenance.ORIGINAL.value:
            continue
        out.append(Claim(name, shape.candidate_id, shape.label, shape.speedup))
    return out


def _measure(
    store: Store,
    client: WorkerClient,
    plan: Plan,
    candidate: Candidate,
    original: Candidate,
    spec: Any,
    derived_skip: Sequence[str],
    seed: int,
) -> tuple[dict[str, Any] | None, str]:
    """One side-by-side measurement in ``client``'s worker, stored; its record (``None``:
    failed)."""
    result = client.evaluate(spec, candidate, original, derived_skip=derived_skip)
    if result.outcome is not Outcome.OK:
        return None, f"{result.outcome.value}: {result.reason}"
    mine = dict(result.metadata.get("samples") or {})
    theirs = dict(result.metadata.get("incumbent_samples") or {})
    labels = sorted(set(mine) & set(theirs))
    if not labels:
        return None, "no timed case"
    rng = np.random.default_rng(seed)
    overall = speedup_interval(mine, theirs, rng)
    cases: dict[str, Any] = {}
    for label in labels:
        iv = speedup_interval({label: mine[label]}, {label: theirs[label]}, rng)
        cases[label] = {**iv.to_dict(), "candidate": mine[label], "incumbent": theirs[label]}
    record = {**overall.to_dict(), "cases": cases, "timing_kind": result.timing_kind}
    assert plan.fingerprint_id is not None
    store.record_acceptance(
        candidate,
        plan.fingerprint_id,
        incumbent_id=original.id,
        status="refereed",
        first=record,
        second=None,
    )
    return record, ""


def referee(
    store: Store,
    *,
    kernels: Sequence[str] = (),
    evaluation: EvaluationSettings,
    workdir: Path,
    tolerance: float = DEFAULT_TOLERANCE,
    acceptance: AcceptanceSettings | None = None,
) -> RefereeReport:
    """Re-measure the claims of ``kernels`` (default: every kernel in the store), timed
    for longer than a campaign's candidates (:data:`REFEREE_TIMING`)."""
    started = time.perf_counter()
    evaluation = dataclasses.replace(evaluation, timing=REFEREE_TIMING)
    acceptance = acceptance or AcceptanceSettings()
    report = RefereeReport(tolerance=tolerance, min_gain=acceptance.min_gain)
    known = {k.name: k for k in store.kernels()}
    names = list(kernels) or sorted(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadInputError(
            f"no kernel {', '.join(map(repr, unknown))} in the store {store.location} "
            f"(known: {', '.join(sorted(known)) or 'none yet'})"
        )
    with WorkerClient(workdir=workdir, settings=evaluation) as client:
        current = client.start()
        report.device = current
        # (spec, plan, claims, original, derived_skip) of each kernel with claims
        work: list[tuple[KernelSpec, Plan, list[Claim], Candidate, list[str]]] = []
        for name in names:
            kernel = known[name]
            spec = load_entry(Path(kernel.directory))
            if spec.generation != kernel.generation:
                report.skipped[name] = "its files changed since it was tuned (new generation)"
                continue
            if spec.replay is not None:
                report.skipped[name] = "a replay entry: nothing runs here"
                continue
            plan = plan_for(store, name, current)
            if plan.status not in ("tuned", "original") or plan.fingerprint_id is None:
                report.skipped[name] = plan.reason or plan.status
                continue
            claims = _claims(plan, name)
            original, derived_skip = _original(store, plan)
            if original is None:
                report.skipped[name] = "the original has no stored candidate"
                continue
            if not claims:
                report.skipped[name] = "no claim: the original is best everywhere"
                continue
            work.append((spec, plan, claims, original, derived_skip))
        if work:  # the spares make the first kernel's cases (the worker: none yet)
            client.prepare_ahead(work[0][0])
        for index, (spec, plan, claims, original, derived_skip) in enumerate(work):
            # One fresh worker per kernel, not per claimed candidate: its cases and the
            # original's calibration serve every claim of the kernel (each candidate still
            # runs in a runner of its own), and the spares make the next kernel's cases
            # meanwhile. On the H200, settling the example registry took 94 s for 11
            # candidates with a fresh worker per candidate, most of it starting workers and
            # making their cases.
            client.fresh()
            if index + 1 < len(work):
                client.prepare_ahead(work[index + 1][0])
            records: dict[str, tuple[dict[str, Any] | None, str]] = {}
            for i, claim in enumerate(claims):
                if claim.candidate_id not in records:
                    candidate = store.candidate(claim.candidate_id, plan.generation)
                    if candidate is None:  # pragma: no cover - claims come from the store
                        records[claim.candidate_id] = (None, "candidate missing from the store")
                    else:
                        records[claim.candidate_id] = _measure(
                            store, client, plan, candidate, original, spec, derived_skip, seed=i
                        )
                record, error = records[claim.candidate_id]
                if record is None:
                    claim.error = error
                elif claim.label is None:
                    claim.measured, claim.low, claim.high = (
                        record["speedup"],
                        record["low"],
                        record["high"],
                    )
                elif claim.label in record["cases"]:
                    case = record["cases"][claim.label]
                    claim.measured, claim.low, claim.high = (
                        case["speedup"],
                        case["low"],
                        case["high"],
                    )
                else:
                    claim.error = "shape not timed in the re-measurement"
                report.claims.append(claim)
    report.wall_s = time.perf_counter() - started
    return report


def _original(store: Store, plan: Plan) -> tuple[Candidate | None, list[str]]:
    """The generation's original candidate (the baseline), by its stored trials, and the
    derived shapes it fails on (not checked for candidates, as in the campaign)."""
    assert plan.fingerprint_id is not None
    for t in store.trials(plan.kernel, plan.generation, plan.fingerprint_id):
        if t.provenance is Provenance.ORIGINAL:
            skip = [str(x) for x in t.result.metadata.get("derived_unusable", ())]
            return store.candidate(t.candidate_id, plan.generation), skip
    return None, []


# -- the command line (``ktuned referee``; tuned.cli holds only the dispatch)


def add_parser(sub: Any, *options: Any) -> None:
    """Add ``referee`` to the ``ktuned`` subcommands; ``options`` add --state-dir/--store."""
    p = sub.add_parser(
        "referee",
        help="re-measure every stored claim against the original, side by side in a fresh "
        "process, and print agreement",
    )
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help="default: every kernel")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"claimed and measured agree within this fraction (default: {DEFAULT_TOLERANCE})",
    )
    p.add_argument(
        "--device",
        choices=("auto", "gpu", "interpreter"),
        default="auto",
        help="auto: the GPU if CUDA is usable, else Triton's interpreter",
    )
    for option in options:
        option(p)


def command(args: Any, store: Store, state: Path) -> int:
    """Run ``ktuned referee`` on an open store; prints the table (or JSON); exit code 0."""
    import json

    from tuned.tuning import detect_interpreter

    evaluation = EvaluationSettings(interpreter=detect_interpreter(args.device))
    report = referee(
        store,
        kernels=args.kernels,
        evaluation=evaluation,
        workdir=state / "workers" / "referee",
        tolerance=args.tolerance,
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.table())
    return 0
