"""What to run for a kernel on a fingerprint: the variants, and which one per timed shape.

A :class:`Plan` is read from the store (no kernel code runs): the kernel's current generation,
its original module, the incumbent on the chosen fingerprint, the bests per timed shape
(:mod:`tuned.runtime.shapes`) and the acceptance intervals of the incumbent. ``load`` turns
it into a callable; ``ktuned export`` writes it to a directory; ``ktuned status`` shows
kernels whose best differs by shape.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tuned.errors import BadInputError
from tuned.outcomes import Provenance
from tuned.registry.spec import KnobValue
from tuned.runtime.shapes import DEFAULT_SHAPE_SETTINGS, ShapeBest, ShapeSettings, shape_bests
from tuned.runtime.standalone import differences, equivalent, same_device
from tuned.store.api import Store
from tuned.store.base import BestRow, CaseTimingRow
from tuned.text import printable

__all__ = [
    "Plan",
    "VariantRef",
    "describe_device",
    "knob_problem",
    "plan_for",
    "plan_on",
]

#: A generation id is the SHA-256 (hex) of the entry's files; anything else is not ours.
_GENERATION = re.compile(r"[0-9a-f]{64}")


def is_knob_name(name: object) -> bool:
    """A declared knob (an identifier) or a discovered one of a launcher of several kernels
    (``kernel.NAME``, :mod:`tuned.registry.discovery`): dotted identifiers."""
    return isinstance(name, str) and all(
        part.isidentifier() and not keyword.iskeyword(part) for part in name.split(".")
    )


def _scalar(value: object) -> bool:
    """A knob value as the registry allows it: a bool, int, finite float or string."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (bool, int, str))


def _same(a: object, b: object) -> bool:
    """Equal and of the same type (``True`` is not ``1``, ``1.0`` is not ``1``)."""
    return type(a) is type(b) and a == b


def knob_problem(
    knobs: object,
    space: Mapping[str, tuple[KnobValue, ...]],
    baseline: Mapping[str, KnobValue],
) -> str | None:
    """Why a stored variant's knobs may not run (``None`` when they may): each must be a knob
    of the generation's declared space (``spec_json`` ``knobs``) set to one of its declared
    values (or to its baseline). A generation without declared knobs (a reference entry,
    whose knobs are discovered in its LLM-written module) only gets the type check: identifier
    names and scalar, finite values."""
    if not isinstance(knobs, Mapping):
        return f"knobs_json is {type(knobs).__name__!r}, not an object"
    for name, value in knobs.items():
        if not is_knob_name(name):
            return f"knobs_json field {printable(repr(name))} is not a knob name"
        if not _scalar(value):
            return f"knobs_json field {name!r} = {printable(repr(value))} is not a knob value"
        if not space:
            continue
        if name not in space:
            return (
                f"knobs_json field {name!r} is not a declared knob "
                f"(declared: {printable(', '.join(space))})"
            )
        allowed = space[name]
        if not any(_same(value, a) for a in allowed) and not _same(value, baseline.get(name)):
            return (
                f"knobs_json field {name!r} = {printable(repr(value))} is not one of its "
                f"declared values {printable(list(allowed))}"
            )
    return None


def _declared(summary: Mapping[str, Any]) -> tuple[dict[str, tuple[KnobValue, ...]], str | None]:
    """The generation's declared knob space and baseline knobs, checked: ``(space, None)``,
    or ``({}, why)`` when ``spec_json`` does not hold a well-formed space."""
    raw = summary.get("knobs", {})
    if not isinstance(raw, Mapping) or not all(
        is_knob_name(k) and isinstance(v, list) for k, v in raw.items()
    ):
        return {}, "spec_json field 'knobs' is not a knob space"
    space = {k: tuple(x for x in v if _scalar(x)) for k, v in raw.items()}
    problem = knob_problem(summary.get("baseline_knobs", {}), {}, {})
    if problem is not None:
        return {}, f"spec_json field 'baseline_knobs': {problem}"
    return space, None


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
    #: The generation's declared knob space (``spec_json``), which stored knobs must fit.
    knob_space: Mapping[str, tuple[KnobValue, ...]] = field(default_factory=dict)
    #: Stored rows that were not used because they failed a check (one line each, naming
    #: the candidate and the field); ``load`` logs them, ``ktuned export`` refuses.
    notes: tuple[str, ...] = ()

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
                    f"  {printable(s.label)}: {dict(self.variants[v].knobs)} ({speedup}, "
                    f"candidate {printable(s.candidate_id[:12])})"
                )
        return "\n".join(lines)


def _base(store: Store, name: str) -> tuple[str, Plan]:
    kernel = store.kernel(name)
    if kernel is None:
        names = ", ".join(printable(k.name, 80) for k in store.kernels()) or "none yet"
        raise BadInputError(
            f"no kernel {printable(repr(name))} in the store {store.location} (known: {names}); "
            "tune it first (ktuned tune / ktuned run) or pass the state directory it was tuned into"
        )
    info = store.generation_info(kernel.generation)
    if info is None:  # pragma: no cover - sync_kernel writes both in one transaction
        raise BadInputError(f"the store {store.location} lacks generation {kernel.generation}")
    original_hash, summary = info
    space, corrupt = _declared(summary)
    plan = Plan(
        kernel=name,
        generation=kernel.generation,
        launcher=str(summary["launcher"]),
        inputs=str(summary["inputs"]),
        original_hash=original_hash,
        # Corrupt baseline knobs: the original runs as written (its launcher's own defaults).
        baseline_knobs={} if corrupt else dict(summary.get("baseline_knobs", {})),
        status="none",
        reason="",
        knob_space=space,
    )
    if not _GENERATION.fullmatch(kernel.generation):
        corrupt = f"its generation {printable(repr(kernel.generation[:80]))} is not a SHA-256"
    if corrupt is not None:
        why = f"the store's generation record is corrupt: {corrupt}"
        plan = replace(plan, status="refused", reason=why, notes=(why,))
    return kernel.generation, plan


def _refused(rows: list[CaseTimingRow], plan: Plan) -> dict[str, str]:
    """The candidates among ``rows`` whose stored knobs may not run, with why."""
    out = {}
    for r in rows:
        problem = knob_problem(r.knobs, plan.knob_space, plan.baseline_knobs)
        if problem is not None:
            out[r.candidate_id] = problem
    return out


def plan_on(
    store: Store,
    name: str,
    fingerprint_id: str,
    settings: ShapeSettings = DEFAULT_SHAPE_SETTINGS,
) -> Plan:
    """The plan of kernel ``name`` (current generation) on the fingerprint ``fingerprint_id``."""
    generation, plan = _base(store, name)
    fp = store.fingerprint(fingerprint_id)
    if plan.status == "refused":
        return replace(plan, fingerprint_id=fingerprint_id, fingerprint=fp)
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
    # Stored knobs are checked against the declared space before anything is chosen: a
    # candidate whose knobs fail never runs; the original runs at the declared baseline.
    refused = _refused(rows, plan)
    notes: list[str] = []
    if refused:
        chosen = {best.candidate_id} | {
            s.candidate_id
            for s in shape_bests(rows, best.candidate_id, settings, comparisons=comparisons)
        }
        for cid in sorted(chosen & refused.keys()):
            notes.append(f"candidate {printable(cid)} not run: {refused[cid]}")
        rows = [
            replace(r, knobs=dict(plan.baseline_knobs))
            if r.provenance is Provenance.ORIGINAL and r.candidate_id in refused
            else r
            for r in rows
            if r.provenance is Provenance.ORIGINAL or r.candidate_id not in refused
        ]
    by_id = {r.candidate_id: r for r in rows}
    if best.candidate_id not in by_id or best.provenance is Provenance.ORIGINAL:
        original = next((r for r in rows if r.provenance is Provenance.ORIGINAL), None)
        if original is None:
            why = notes[0] if notes else "the best has no stored measurement"
            return replace(
                plan,
                status="refused",
                reason=why,
                notes=tuple(notes) or (why,),
                fingerprint_id=fingerprint_id,
                fingerprint=fp,
            )
        if original.candidate_id != best.candidate_id or original.knobs != best.knobs:
            medians = [t for t in original.timings.values() if t > 0 and math.isfinite(t)]
            time_s = math.exp(sum(map(math.log, medians)) / len(medians)) if medians else 0.0
            best = replace(
                best,
                candidate_id=original.candidate_id,
                knobs=dict(original.knobs),
                source_hash=original.source_hash,
                provenance=Provenance.ORIGINAL,
                time_s=time_s,
                baseline_time_s=time_s,
                measured=None,
            )
    shapes = shape_bests(rows, best.candidate_id, settings, comparisons=comparisons)
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
    if tuned:
        status, reason = "tuned", f"tuned on {describe_device(fp)}"
    elif notes:  # the validated variants were refused: the original runs
        status, reason = "refused", notes[0]
    else:
        status = "original"
        reason = f"tuned on {describe_device(fp)}: the original at its declared knobs is best"
    return replace(
        plan,
        status=status,
        reason=reason,
        fingerprint_id=fingerprint_id,
        fingerprint=fp,
        timing_kind=best.timing_kind,
        variants=variants,
        default=0,
        shapes=tuple(shapes),
        shape_variant=tuple(ids.index(s.candidate_id) for s in shapes),
        best=best,
        acceptances=accepted,
        notes=tuple(notes),
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
    if plan.status == "refused":
        return plan
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
            reason=f"its bests are stale ({printable(differences(fp, current))}) until the daemon "
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
    return printable(fp.get("gpu_model", "an unknown device"), 80)
