"""``ktuned status``: one row per kernel with its state, from :func:`kernel_overview`.

The counts and states are those of ``ktuned report`` and of ``/metrics`` (the same function
reads them): ``evals`` is every evaluation of the kernel in the store (all generations and
fingerprints, the baseline and re-measurements included), ``failures`` splits the failed
ones by outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from tuned.report import format_seconds, rule
from tuned.store.overview import KernelOverview
from tuned.text import printable

__all__ = ["status_json", "status_table"]

_HEADER = ("kernel", "state", "baseline", "best", "speedup", "evals", "failures by outcome")


def status_table(
    kernels: Sequence[KernelOverview], original_failed: Mapping[str, str] | None = None
) -> str:
    """The table ``ktuned status`` prints; ``original_failed[kernel]`` says how the original
    failed, for kernels with nothing successful."""
    rows: list[tuple[str, ...]] = [_HEADER]
    for k in kernels:
        p = k.progress
        failures = ", ".join(f"{o}={n}" for o, n in sorted(k.outcomes.items()) if o != "ok")
        said = (original_failed or {}).get(k.name, "")
        failures = "; ".join(f for f in (failures, said) if f)
        rows.append(
            tuple(  # stored text: one line each, no control characters
                printable(cell)
                for cell in (
                    k.name,
                    k.state,
                    format_seconds(p.baseline_s),
                    format_seconds(p.best_s),
                    f"{p.speedup:.2f}x" if p.speedup else "-",
                    str(k.evaluations),
                    (failures or "none") + (f"; {k.reason}" if k.reason else ""),
                )
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER) - 1)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths)), r[-1]]) for r in rows]
    lines.insert(1, rule(lines))
    if any(k.progress.timing_kind == "interpreter" for k in kernels):
        lines.append(
            "Times are Triton interpreter timings on this CPU (no GPU): they rank "
            "candidates here and are not GPU results."
        )
    return "\n".join(lines)


def status_json(
    location: str, kernels: Sequence[KernelOverview], invalid: Mapping[str, str]
) -> str:
    """``ktuned status --json``: one object, kernels by name."""
    states: dict[str, int] = {}
    for k in kernels:
        states[k.state] = states.get(k.state, 0) + 1
    return json.dumps(
        {
            "store": location,
            "kernels": [k.to_dict() for k in kernels],
            "states": dict(sorted(states.items())),
            "evaluations": sum(k.evaluations for k in kernels),
            "invalid_entries": dict(invalid),
        },
        indent=2,
    )
