"""Profile every example kernel's baseline on a GPU, the way the daemon does (GPU only).

    python bench/profile_examples.py [--registry examples/registry] [--ncu ncu] [--json out.json]

For each entry: the baseline (the original at its declared knobs) is profiled through
:class:`tuned.profiling.HardwareFeedback` (``ncu`` around ``python -m
tuned.evaluation.profile_target`` on the first perf shape and dtype: the production path,
store and all), classified (:mod:`profilers.classify`), and placed under the roofline of this
GPU's peaks, measured once (:mod:`profilers.peaks`). The roofline fraction here uses the
profiled launch's own duration (``gpu__time_duration``, caches flushed by ncu, clocks
unlocked); the daemon uses its benchmark timings instead. Printed per kernel: SOL % (SM,
memory, DRAM, L2, L1), achieved occupancy, bottleneck class, roofline %, top stall reason and
the profiling wall time (ncu start to end: process start, compilation, replay passes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, require_gpu
from profilers.classify import classify, roofline_point
from profilers.ncu import Profile, ProfileStatus
from tuned.outcomes import Candidate, Provenance
from tuned.profiling import HardwareFeedback
from tuned.registry import scan_registry
from tuned.settings import ProfilingConfig
from tuned.store.sqlite import SqliteStore


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", type=Path, default=ROOT / "examples" / "registry")
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    model = require_gpu(parser, what="profile_examples.py")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ktuned-profile-") as tmp:
        store = SqliteStore(Path(tmp) / "ktuned.sqlite")
        hw = HardwareFeedback(
            store=store,
            config=ProfilingConfig(ncu=args.ncu),
            workdir=Path(tmp) / "hw",
            interpreter=False,
        )
        if not hw.enabled:
            print(f"profiling unavailable: {hw.reason}", file=sys.stderr)
            return 3
        hw.set_fingerprint({"gpu_model": model})
        peaks = hw.peaks()
        if peaks is not None:
            print(
                f"{model}: peaks {peaks.bytes_per_s / 1e9:.0f} GB/s (device copy), "
                f"{peaks.flops_per_s / 1e12:.0f} TFLOP/s (fp16 matmul)"
            )
        for spec in scan_registry(args.registry).entries:
            store.sync_kernel(spec)
            candidate = Candidate(
                kernel=spec.name,
                generation=spec.generation,
                source=spec.module_source,
                knobs=dict(spec.baseline_knobs),
                provenance=Provenance.ORIGINAL,
            )
            store.add_candidate(candidate)
            status = hw.profile(spec, candidate.id)
            run = store._query(
                "SELECT reason, wall_s FROM profiling_runs WHERE candidate_id=? ORDER BY seq DESC",
                (candidate.id,),
            )[0]
            row: dict[str, Any] = {
                "kernel": spec.name,
                "status": None if status is None else status.value,
                "wall_s": float(run["wall_s"]),
            }
            stored = store.profiles(spec.name, spec.generation, model).get(candidate.id)
            if status is ProfileStatus.OK and stored is not None:
                profile = Profile.from_dict(stored)
                shape = (spec.perf_shapes or spec.shapes)[0]
                point = None
                if spec.roofline is not None and peaks is not None and profile.duration_s:
                    point = roofline_point(
                        bytes_expr=spec.roofline.bytes,
                        flops_expr=spec.roofline.flops,
                        dims=shape.dims,
                        dtype=spec.dtypes[0],
                        time_s=profile.duration_s,
                        peak_bytes_per_s=peaks.bytes_per_s,
                        peak_flops_per_s=peaks.flops_per_s,
                    )
                bottleneck = classify(profile)
                row.update(
                    case=f"{shape.label()}/{spec.dtypes[0]}",
                    profile=stored,
                    bottleneck=None if bottleneck is None else bottleneck.value,
                    roofline=None if point is None else point.fraction,
                    roofline_bound=None if point is None else point.bound.value,
                )
            else:
                row["reason"] = str(run["reason"])
            rows.append(row)
        store.close()

    print(
        f"{'kernel':<11} {'SM%':>5} {'mem%':>5} {'DRAM%':>5} {'L2%':>5} {'L1%':>5} "
        f"{'occ%':>5} {'class':<8} {'roof%':>6} {'top stall':<18} {'wall s':>6}"
    )
    for r in rows:
        p = r.get("profile")
        if p is None:
            print(f"{r['kernel']:<11} {r['status']}: {r.get('reason', '')}  {r['wall_s']:.1f} s")
            continue
        stall = p["stalls"][0][0] if p["stalls"] else "-"
        roof = "-" if r["roofline"] is None else f"{100 * r['roofline']:.1f}"
        print(
            f"{r['kernel']:<11} {_pct(p['sol_sm']):>5} {_pct(p['sol_memory']):>5} "
            f"{_pct(p['sol_dram']):>5} {_pct(p['sol_l2']):>5} {_pct(p['sol_l1']):>5} "
            f"{_pct(p['occupancy']):>5} {r['bottleneck'] or '-':<8} {roof:>6} {stall:<18} "
            f"{r['wall_s']:>6.1f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "gpu_model": model,
                    "peaks": None if peaks is None else peaks.to_dict(),
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
