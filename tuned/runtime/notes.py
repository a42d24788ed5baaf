"""What ``ktuned status`` says about running the results: bests that differ by timed shape,
and bests made stale by a software change (relative to the newest fingerprint recorded)."""

from __future__ import annotations

from tuned.runtime.plan import plan_on
from tuned.runtime.stale import stale_bests
from tuned.store.api import Store
from tuned.text import printable

__all__ = ["status_notes"]


def status_notes(store: Store) -> str:
    """Lines to print under the status table ("" when there is nothing to say); stored names
    with their control characters escaped, so none starts a line of its own."""
    lines = []
    known = store.known_fingerprints()
    for k in store.kernels():
        if k.state != "active":
            continue
        evaluated = store.evaluated_fingerprints(k.name, k.generation)
        if not evaluated:
            continue
        plan = plan_on(store, k.name, evaluated[0][0])
        if plan.differs_by_shape:
            lines.append(
                f"{printable(k.name)}: the best differs by shape; besides "
                f"{dict(plan.variants[0].knobs)}:"
            )
            lines.append(plan.shape_summary())
    if known:
        newest = list(known.values())[-1]
        for name, ids in sorted(stale_bests(store, newest).items()):
            lines.append(
                f"{printable(name)}: {len(ids)} stale best(s): measured under older software "
                "of this device; the daemon re-validates them first"
            )
    return "\n".join(lines)
