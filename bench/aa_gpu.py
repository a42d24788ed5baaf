"""A/A test of the acceptance rule on a GPU: identical code timed as if it were a new candidate.

    python bench/aa_gpu.py [--registry examples/registry] [--comparisons 35] [--seed 0]
                           [--out aa_gpu.json] [--small] [--busy 15]

For every example kernel, a copy of the original (the same source plus a comment, so it is
imported and launched as a distinct module, the way a new candidate is) is compared with the
original through the worker's own timing path (:meth:`Evaluation.time_case`: interleaved
timing, two alternating input sets, L2 flushed, outputs verified). The acceptance rule of
:mod:`tuned.acceptance` then decides exactly as the campaign does: when the first interval
clears the bar, the copy is re-measured through a real fresh worker
(:class:`~tuned.evaluation.client.WorkerClient`, correctness included) and accepted only if
that agrees. Every acceptance is a false improvement.

It prints, per kernel, the comparisons, first-stage passes, false acceptances, the
coefficient of variation of the samples within one measurement (median over cases and
comparisons) and of the medians across comparisons, and writes everything as JSON to
``--out``. Only meaningful on a GPU (the worker's interpreter timings are not GPU results).

``--small`` times each kernel at its smallest shape of at least 4096 elements (launch-bound,
a few microseconds); ``--busy N`` runs the comparisons again beside N CPU-spinning processes
(the compile pool's size: what host load does to the judge's figures) and prints, per case,
the original's median time idle and busy and their ratio, with each condition's false
accepts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.aa_busy import busy_cpu
from bench.harness import ROOT, bench_parser, interpreter_for_smoke
from profilers.timing import TimingSettings
from tuned.acceptance import AcceptanceSettings, decide, speedup_interval
from tuned.evaluation.client import (
    EvaluationSettings,
    WorkerClient,
    _kernel_payload,
)
from tuned.evaluation.invoke import entry_call
from tuned.evaluation.runners import RunnerPool
from tuned.evaluation.timing_judge import JudgedTiming
from tuned.evaluation.worker import Case, Evaluation, ModuleLoader
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import scan_registry


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def small_shapes(spec: Any) -> Any:
    """``spec`` timed at its smallest declared shape of at least 4096 elements alone (a
    launch-bound call of a few microseconds on an H100 or H200: what host load moves)."""
    fitting = [s for s in spec.shapes if s.size() >= 4096] or list(spec.shapes)
    small = min(fitting, key=lambda s: s.size())
    shapes = tuple(dataclasses.replace(s, perf=s is small) for s in spec.shapes)
    return dataclasses.replace(spec, shapes=shapes)


def run_kernel(
    spec: Any,
    comparisons: int,
    seed: int,
    workdir: Path,
    device: str = "cuda",
    busy: Sequence[int] = (0,),
) -> dict[str, Any]:
    """``comparisons`` A/A comparisons of ``spec`` under each count of CPU-spinning
    processes in ``busy`` (0: idle), in that order, through one judge."""
    settings = AcceptanceSettings()
    eval_settings = EvaluationSettings(interpreter=device == "cpu")
    options = WorkerClient(workdir=workdir / "unused", settings=eval_settings)._options()
    copy_source = spec.module_source + "\n# A/A copy: identical code\n"
    knobs = dict(spec.baseline_knobs)
    request = {
        "kernel": _kernel_payload(spec),
        "candidate": {"id": "aa-copy", "source": copy_source, "knobs": knobs},
        "options": {**options, "incumbent": {"source": spec.module_source, "knobs": knobs}},
    }
    loader = ModuleLoader(workdir / f"modules_{spec.name}")
    # The judge's path: the reference and inputs here, the two launchers in runner processes
    # (the copy's source differs from the user's: a fresh runner; the original: the own one).
    pool = RunnerPool(workdir / f"runners_{spec.name}", device)
    evaluation = Evaluation(request, loader, device, lambda _m: None, pool)
    original = loader.load(spec.module_source, directory_key="aa", extra_files=spec.extra_files)
    make_inputs = getattr(original, spec.inputs)
    evaluation._reference = entry_call(original, evaluation.kernel, role="reference")
    target_copy = evaluation.load(evaluation._runner(False), "candidate", evaluation.candidate)
    target_orig = evaluation.load(
        evaluation._runner(True), "incumbent", evaluation.options["incumbent"]
    )

    import torch

    cache: dict[tuple[Any, ...], list[Any]] = {}

    def inputs_of(case: Case) -> list[Any]:
        key = (tuple(case.dims.items()), case.dtype, case.seed)
        if key not in cache:
            dtype = getattr(torch, case.dtype)
            cache[key] = list(make_inputs(dict(case.dims), dtype, device, case.seed))
        return cache[key]

    cases, _ = evaluation.cases()
    timed = evaluation.timed_cases(cases)
    for case in timed:  # compile both before timing
        evaluation.call(target_copy, case, inputs_of(case), None)
        evaluation.call(target_orig, case, inputs_of(case), None)
    timing = JudgedTiming(evaluation, TimingSettings(**evaluation.options.get("timing", {})))

    rows = []
    within_cv: list[float] = []
    medians: dict[str, list[float]] = {c.label: [] for c in timed}
    by_load: dict[int, dict[str, list[float]]] = {n: {c.label: [] for c in timed} for n in busy}
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=copy_source,
        knobs=knobs,
        provenance=Provenance.PARAMETRIC,
        strategy="config",
    )
    baseline = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs=knobs,
        provenance=Provenance.ORIGINAL,
        strategy="original",
    )
    plan = [(n, k) for n in busy for k in range(comparisons)]
    load: contextlib.ExitStack | None = None
    for index, (spinning, k) in enumerate(plan):
        if k == 0:  # this condition's spinning processes, for its comparisons
            if load is not None:
                load.close()
            load = contextlib.ExitStack()
            load.enter_context(busy_cpu(spinning))
        samples: dict[str, list[float]] = {}
        incumbent: dict[str, list[float]] = {}
        reps: dict[str, list[int]] = {}
        for case in timed:
            mine, theirs, _ = timing.time_case(case, target_copy, target_orig, inputs_of)
            reps[case.label] = list(timing.last_reps)
            samples[case.label], incumbent[case.label] = mine, theirs
            within_cv.extend([_cv(mine), _cv(theirs)])
            if spinning == busy[0]:  # the spread across measurements: the first condition's
                medians[case.label].append(statistics.median(theirs))
            by_load[spinning][case.label].append(statistics.median(theirs))
        rng = np.random.default_rng([seed, index])  # distinct across conditions
        first = speedup_interval(samples, incumbent, rng, settings)
        status = decide(first, settings)
        second = None
        if status == "remeasure":
            fresh_dir = workdir / f"fresh_{spec.name}_{index}"
            with WorkerClient(workdir=fresh_dir, settings=eval_settings) as fresh:
                again = fresh.evaluate(spec, candidate, baseline)
            if again.outcome is Outcome.OK:
                second = speedup_interval(
                    again.metadata["samples"],
                    again.metadata["incumbent_samples"],
                    np.random.default_rng([seed, index, 1]),
                    settings,
                )
                status = decide(first, settings, second)
            else:
                status = f"not_confirmed ({again.outcome.value})"
        rows.append(
            {
                "comparison": k,
                "busy": spinning,
                "first": first.to_dict(),
                "second": None if second is None else second.to_dict(),
                "status": status,
                # Each case's samples (seconds per call) of the copy and the original, and
                # the repetitions per timed call of each: where a comparison's interval
                # comes from.
                "samples": {
                    c: {"copy": samples[c], "original": incumbent[c], "reps": reps[c]}
                    for c in samples
                },
            }
        )
        print(
            f"  {spec.name} #{k} (busy {spinning}): speedup {first.speedup:.4f} "
            f"[{first.low:.4f}, {first.high:.4f}] -> {status}",
            flush=True,
        )
    if load is not None:
        load.close()
    across = [_cv(v) for v in medians.values() if len(v) > 1]
    evaluation.discard_runners()
    pool.close()
    conditions = {
        n: {
            "comparisons": sum(1 for r in rows if r["busy"] == n),
            "false_accepts": sum(1 for r in rows if r["busy"] == n and r["status"] == "accepted"),
            # The original's time per case: the median over comparisons of each one's median.
            "median_s": {label: statistics.median(v) for label, v in by_load[n].items() if v},
        }
        for n in busy
    }
    return {
        "conditions": conditions,
        "kernel": spec.name,
        "timed_cases": [c.label for c in timed],
        "comparisons": rows,
        "first_stage_passes": sum(1 for r in rows if r["second"] is not None),
        "false_accepts": sum(1 for r in rows if r["status"] == "accepted"),
        "held": sum(1 for r in rows if r["status"] == "held"),
        "within_cv_median": statistics.median(within_cv) if within_cv else 0.0,
        "across_cv_median": statistics.median(across) if across else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__, smoke=False)
    parser.add_argument("--registry", type=Path, default=ROOT / "examples" / "registry")
    parser.add_argument("--comparisons", type=int, default=None, help="per kernel (35)")
    parser.add_argument("--kernels", default="", help="comma-separated subset (all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="also compare with this many CPU-spinning processes (the compile pool's size)",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="time each kernel at its smallest shape of >= 4096 elements (launch-bound)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="run in Triton's interpreter on the CPU (checks the script works; no GPU figures)",
    )
    args = parser.parse_args(argv)
    interpreter_for_smoke(args.smoke)
    if args.comparisons is None:  # a smoke run: two comparisons of vector_add unless told
        args.comparisons = 2 if args.smoke else 35
    if args.smoke and not args.kernels:
        args.kernels = "vector_add"

    import torch

    device = "cuda"
    if args.smoke:
        device = "cpu"
    elif not torch.cuda.is_available():
        print("aa_gpu.py needs a CUDA GPU (use bench/aa_replay.py on a CPU machine, or --smoke)")
        return 2
    wanted = {k for k in args.kernels.split(",") if k}
    specs = [s for s in scan_registry(args.registry).entries if not wanted or s.name in wanted]
    if args.small:
        specs = [small_shapes(s) for s in specs]
    busy = (0, args.busy) if args.busy > 0 else (0,)
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="ktuned-aa-") as tmp:
        for spec in specs:
            print(f"{spec.name}:", flush=True)
            r = run_kernel(spec, args.comparisons, args.seed, Path(tmp), device, busy)
            results.append(r)
            print(  # per kernel as it ends, so a run cut short keeps what it measured
                f"{spec.name}: {len(r['comparisons'])} comparisons, {r['false_accepts']} false "
                f"accepts, CV within {100 * r['within_cv_median']:.2f} %, across "
                f"{100 * r['across_cv_median']:.2f} %",
                flush=True,
            )
            if args.out is not None:
                args.out.write_text(json.dumps({"results": results}, indent=1))
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (interpreter smoke run)"
    total = sum(len(r["comparisons"]) for r in results)
    false = sum(r["false_accepts"] for r in results)
    print()
    print(f"A/A on {name} ({datetime.date.today()}), {time.monotonic() - started:.0f} s")
    print(
        "| kernel | comparisons | first-stage passes | false accepts | held "
        "| CV within a measurement | CV of medians across measurements |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['kernel']} | {len(r['comparisons'])} | {r['first_stage_passes']} "
            f"| {r['false_accepts']} | {r['held']} | {100 * r['within_cv_median']:.2f} % "
            f"| {100 * r['across_cv_median']:.2f} % |"
        )
    rate = false / total if total else 0.0
    print(
        f"| all | {total} | {sum(r['first_stage_passes'] for r in results)} | {false} "
        f"| {sum(r['held'] for r in results)} | | |"
    )
    print(f"false-improvement rate: {100 * rate:.2f} % ({false}/{total})")
    if len(busy) > 1:
        print(
            f"\n| kernel | case | idle | busy ({busy[1]} spinning) | busy / idle "
            "| false accepts idle, busy |"
        )
        print("|---|---|---|---|---|---|")
        for r in results:
            idle, loaded = r["conditions"][0], r["conditions"][busy[1]]
            for label, t in idle["median_s"].items():
                other = loaded["median_s"].get(label)
                ratio = f"{other / t:.3f}" if other else "-"
                print(
                    f"| {r['kernel']} | {label} | {t * 1e6:.2f} us | "
                    f"{'-' if other is None else f'{other * 1e6:.2f} us'} | {ratio} | "
                    f"{idle['false_accepts']}, {loaded['false_accepts']} |"
                )
    if args.out is not None:
        args.out.write_text(json.dumps({"device": name, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
