"""``ktuned registry check --json``: a registry scan as one JSON object for scripts (CI)."""

from __future__ import annotations

from tuned.registry.loader import RegistryScan

__all__ = ["registry_json"]


def registry_json(scan: RegistryScan) -> dict[str, object]:
    """``registry check --json``: the valid entries with their spaces, the invalid ones with
    every problem (file, field, reason), and the summary line's counts."""
    return {
        "entries": [
            {
                "name": spec.name,
                "module": spec.module,
                "shapes": len(spec.shapes),
                "dtypes": list(spec.dtypes),
                "knob_configurations": spec.space_size() if spec.knobs else 0,
                "knobs": {k: list(v) for k, v in spec.knobs.items()},
                "baseline": dict(spec.baseline_knobs),
                "discovered": bool(spec.knobs) and not spec.knobs_declared,
                "notices": list(spec.notices),
            }
            for spec in scan.entries
        ],
        "invalid": {
            directory: [
                {"file": str(p.file), "field": p.field, "reason": p.reason} for p in problems
            ]
            for directory, problems in scan.invalid.items()
        },
    }
