"""Tune the example registry and print a per-kernel results table (markdown).

    python bench/tune_examples.py [--registry examples/registry] [--budget 20]
                                  [--state-dir DIR] [--policy random]
    python bench/tune_examples.py --smoke    # vector_add, 1 candidate, interpreter, scratch state

Runs exactly what ``ktuned tune`` runs (resumable: a second invocation with the same state
directory continues), then prints, per kernel: baseline time, best time, speedup, evaluations
(besides the baseline), failures by outcome, worker seconds spent on evaluations (compile,
correctness and timing; on a GPU box this is GPU-worker time), and the PyTorch eager time of
the reference at the same timed cases, measured with the same timer (CUDA events, L2 flushed,
median). Interpreter timings are labelled as such and never stand for GPU results.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import math
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, bench_parser, state_dir
from profilers.timing import TimingSettings, gpu_median_seconds, wall_median_seconds
from tuned.evaluation.client import EvaluationSettings
from tuned.registry import KernelSpec, scan_registry
from tuned.report import Progress, format_seconds
from tuned.search import CampaignSummary, TuneSettings
from tuned.store.sqlite import SqliteStore
from tuned.tuning import detect_interpreter, tune_registry


def eager_reference_seconds(spec: KernelSpec, timed: list[str], device: str) -> float | None:
    """Geometric mean over the timed cases of the reference's median time (trusted code)."""
    if not spec.reference:
        return None
    import torch

    path = spec.directory / spec.module
    module_spec = importlib.util.spec_from_file_location(f"bench_{spec.name}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    reference = getattr(module, spec.reference)
    make_inputs = getattr(module, spec.inputs)
    logs = []
    for label in timed:
        dims_text, dtype = label.split("/")
        dims = {k: int(v) for k, v in (part.split("=") for part in dims_text.split("x"))}
        inputs = make_inputs(dims, getattr(torch, dtype), device, 0)
        fn = lambda: reference(*inputs)  # noqa: B023
        fn()
        if device == "cuda":
            median, _ = gpu_median_seconds(fn, TimingSettings())
        else:
            median, _ = wall_median_seconds(fn, TimingSettings())
        logs.append(math.log(median))
    return math.exp(sum(logs) / len(logs)) if logs else None


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--registry", type=Path, default=ROOT / "examples" / "registry")
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--state-dir", type=Path, default=ROOT / "ktuned-state" / "bench")
    parser.add_argument("--policy", default="random")
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "interpreter"))
    args = parser.parse_args(argv)
    if args.smoke:  # vector_add alone, one candidate, in the interpreter, in a scratch state
        args.device, args.budget = "interpreter", 1
        args.registry = ROOT / "examples" / "registry" / "vector_add"
    with state_dir(None if args.smoke else args.state_dir, prefix="ktuned-tune-") as state:
        args.state_dir = state
        return _tune(args)


def _tune(args: argparse.Namespace) -> int:

    interpreter = detect_interpreter(args.device)
    store = SqliteStore(args.state_dir / "ktuned.sqlite")
    progress: list[Progress] = []

    def on_start(total: int):  # type: ignore[no-untyped-def]
        progress.append(Progress(total))
        return progress[0].update

    started = time.monotonic()
    report = tune_registry(
        args.registry,
        store=store,
        state_dir=args.state_dir,
        settings=TuneSettings(budget=args.budget, policy=args.policy),
        evaluation=EvaluationSettings(interpreter=interpreter),
        on_start=on_start,
    )
    if progress:
        progress[0].close()
    wall = time.monotonic() - started
    device = "cpu" if interpreter else "cuda"
    one_entry = (args.registry / "kernel.yaml").exists()  # --registry may name one entry
    specs = {
        s.name: s
        for s in scan_registry(args.registry.parent if one_entry else args.registry).entries
    }

    fp = report.fingerprint
    kind = "interpreter timings (CPU)" if interpreter else "GPU timings (CUDA events, L2 flushed)"
    print(
        f"\n{datetime.date.today()} · {fp.get('gpu_model')} · driver {fp.get('driver', '-')} · "
        f"CUDA {fp.get('cuda', '-')} · triton {fp.get('triton')} · torch {fp.get('torch')} · "
        f"{platform.node()} · {kind}"
    )
    print(
        f"command: python bench/tune_examples.py --budget {args.budget} --policy {args.policy}"
        f" (this invocation: {wall:.0f} s wall)\n"
    )
    print(
        "| kernel | timed cases | baseline | best | speedup | evaluations | failures | "
        "worker s | PyTorch eager | best vs eager |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in report.summaries:
        spec = specs[s.kernel]
        timed = _timed_labels(store, s)
        eager = eager_reference_seconds(spec, timed, device) if s.best_s else None
        vs = f"{eager / s.best_s:.2f}x" if eager and s.best_s else "-"
        failures = ", ".join(f"{k} {v}" for k, v in s.failures.items()) or "none"
        print(
            f"| {s.kernel} | {len(timed)} | {format_seconds(s.baseline_s)} | "
            f"{format_seconds(s.best_s)} | {f'{s.speedup:.2f}x' if s.speedup else '-'} | "
            f"{s.evaluations} | {failures} | {s.worker_seconds:.0f} | "
            f"{format_seconds(eager)} | {vs} |"
        )
    print(
        "\nTimes are geometric means over the timed cases (perf shapes x dtypes) of each "
        "case's median."
    )
    for s in report.summaries:
        print(f"- {s.kernel} best knobs: {s.best_knobs}")
    store.close()
    return 0


def _timed_labels(store: SqliteStore, summary: CampaignSummary) -> list[str]:
    best = store.best(summary.kernel)
    if best is None:
        return []
    kernel = store.kernel(summary.kernel)
    assert kernel is not None
    for t in store.trials(summary.kernel, kernel.generation, best.fingerprint):
        if t.candidate_id == best.candidate_id:
            return sorted(t.result.timings)
    return []


if __name__ == "__main__":
    sys.exit(main())
