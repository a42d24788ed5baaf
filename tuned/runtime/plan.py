"""What to run for a kernel on a fingerprint: the variants, and which one per timed shape.

A :class:`Plan` is read from the store (no kernel code runs): the kernel's current generation,
its original module, the incumbent on the chosen fingerprint, the bests per timed shape
(:mod:`tuned.runtime.shapes`) and the acceptance intervals of the incumbent. ``load`` turns
it into a callable; ``ktuned export`` writes it to a directory; ``ktuned status`` shows
kernels whose best differs by shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tuned.errors import BadInputError
from tuned.registry.spec import KnobValue
from tuned.runtime.shapes import DEFAULT_SHAPE_SETTINGS, ShapeBest, ShapeSettings, shape_bests
from tuned.runtime.standalone import differences, equivalent, same_device
from tuned.store.api import Store
from tuned.store.base import BestRow

__all__ = ["Plan", "VariantRef", "describe_device", "plan_for", "plan_on"]


@dataclass(frozen=True)
class VariantRef:
    """A validated candidate to run: its stored source (by hash) and knobs."""

    candidate_id: str
    source_hash: str
    knobs: Mapping[str, KnobValue]
    provenance: str


@dataclass(frozen=True)
class Plan:
    """The runtime's view of one kernel (see the module docstring).

    ``status``: ``tuned`` (a validated variant beats the original somewhere), ``original``
    (tuned here, and the original at its declared knobs stayed best), ``none`` (no result for
    this device and software), ``stale`` (results only under older software of this device).
    ``variants[default]`` is the incumbent; ``shape_variant[i]`` is the variant index of
    ``shapes[i]``. Both are empty unless the status is ``tuned`` or ``original``.
    """

    kernel: str
    generation: str
    launcher: str
    inputs: str
    original_hash: str
    baseline_knobs: Mapping[str, KnobValue]
    status: str
    reason: str
    fingerprint_id: str | None = None
    fingerprint: Mapping[str, str] = field(default_factory=dict)
    timing_kind: str = ""
    variants: tuple[VariantRef, ...] = ()
    default: int = 0
    shapes: tuple[ShapeBest, ...] = ()
    shape_variant: tuple[int, ...] = ()
    best: BestRow | None = None
    acceptances: tuple[Mapping[str, Any], ...] = ()

    @property
    def differs_by_shape(self) -> bool:
        return len(set(self.shape_variant) | {self.default}) > 1

    def shape_summary(self) -> str:
        """One line per timed shape whose best is not the overall best ("" if none)."""
        lines = []
        for s, v in zip(self.shapes, self.shape_variant):
            if v != self.default:
                speedup = f"{s.speedup:.2f}x vs original" if s.speedup else "-"
                lines.append(
                    f"  {s.label}: {dict(self.variants[v].knobs)} ({speedup}, "
                    f"candidate {s.candidate_id[:12]})"
                )
        return "\n".join(lines)


def _base(store: Store, name: str) -> tuple[str, Plan]:
    kernel = store.kernel(name)
    if kernel is None:
        names = ", ".join(k.name for k in store.kernels()) or "none yet"
        raise BadInputError(
            f"no kernel {name!r} in the store {store.location} (known: {names}); tune it first "
            "(ktuned tune / ktuned run) or pass the state directory it was tuned into"
        )
    info = store.generation_info(kernel.generation)
    if info is None:  # pragma: no cover - sync_kernel writes both in one transaction
        raise BadInputError(f"the store {store.location} lacks generation {kernel.generation}")
    original_hash, summary = info
    plan = Plan(
        kernel=name,
        generation=kernel.generation,
        launcher=str(summary["launcher"]),
        inputs=str(summary["inputs"]),
        original_hash=original_hash,
        baseline_knobs=dict(summary.get("baseline_knobs", {})),
        status="none",
        reason="",
    )
    return kernel.generation, plan


def plan_on(
    store: Store,
    name: str,
    fingerprint_id: str,
    settings: ShapeSettings = DEFAULT_SHAPE_SETTINGS,
) -> Plan:
    """The plan of kernel ``name`` (current generation) on the fingerprint ``fingerprint_id``."""
    generation, plan = _base(store, name)
    fp = store.fingerprint(fingerprint_id)
    best = store.best(name, fingerprint_id)
    if best is None:
        return replace(
            plan,
            status="none",
            reason=f"the original has no successful evaluation on {describe_device(fp)} yet",
            fingerprint_id=fingerprint_id,
            fingerprint=fp,
        )
    rows = store.case_timings(name, generation, fingerprint_id)
    comparisons = store.comparisons(name, generation, fingerprint_id)
    shapes = shape_bests(rows, best.candidate_id, settings, comparisons=comparisons)
    by_id = {r.candidate_id: r for r in rows}
    order = [best.candidate_id] + [
        s.candidate_id for s in shapes if s.candidate_id != best.candidate_id
    ]
    ids = list(dict.fromkeys(order))
    variants = tuple(
        VariantRef(
            candidate_id=cid,
            source_hash=by_id[cid].source_hash,
            knobs=dict(by_id[cid].knobs),
            provenance=by_id[cid].provenance.value,
        )
        for cid in ids
    )
    tuned = any(v.provenance != "original" for v in variants)
    accepted = tuple(
        a
        for a in store.acceptances(name)
        if a["generation"] == generation
        and a["fingerprint"] == fingerprint_id
        and a["candidate_id"] == best.candidate_id
    )
    return replace(
        plan,
        status="tuned" if tuned else "original",
        reason=(
            f"tuned on {describe_device(fp)}"
            if tuned
            else f"tuned on {describe_device(fp)}: the original at its declared knobs is best"
        ),
        fingerprint_id=fingerprint_id,
        fingerprint=fp,
        timing_kind=best.timing_kind,
        variants=variants,
        default=0,
        shapes=tuple(shapes),
        shape_variant=tuple(ids.index(s.candidate_id) for s in shapes),
        best=best,
        acceptances=accepted,
    )


def plan_for(
    store: Store,
    name: str,
    current: Mapping[str, str],
    settings: ShapeSettings = DEFAULT_SHAPE_SETTINGS,
) -> Plan:
    """The plan for a process whose fingerprint is ``current``: the newest equivalent
    fingerprint's results (:func:`~tuned.runtime.standalone.equivalent`), else a fallback
    plan saying whether results are stale (same device, older software) or absent."""
    generation, plan = _base(store, name)
    known = store.known_fingerprints()
    evaluated = [fid for fid, _ in store.evaluated_fingerprints(name, generation)]
    fresh = [fid for fid in evaluated if equivalent(known.get(fid, {}), current)]
    if fresh:
        return plan_on(store, name, fresh[0], settings)
    older = [fid for fid in evaluated if same_device(known.get(fid, {}), current)]
    if older:
        fp = known[older[0]]
        return replace(
            plan,
            status="stale",
            reason=f"its bests are stale ({differences(fp, current)}) until the daemon "
            "re-validates them",
            fingerprint_id=older[0],
            fingerprint=fp,
        )
    if evaluated:
        devices = sorted({describe_device(known.get(fid, {})) for fid in evaluated})
        reason = (
            f"tuned only on {', '.join(devices)}; this process runs on {describe_device(current)}"
        )
    else:
        reason = f"generation {generation[:12]} has no successful evaluation yet"
    return replace(plan, status="none", reason=reason)


def describe_device(fp: Mapping[str, str]) -> str:
    """A fingerprint's device in words: the GPU model, or the Triton interpreter."""
    if fp.get("mode") == "interpreter":
        return "the Triton interpreter (CPU)"
    return str(fp.get("gpu_model", "an unknown device"))
