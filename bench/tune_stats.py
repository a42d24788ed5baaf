"""``ktuned tune`` as a new user runs it, then where the time went, then the referee.

    python bench/tune_stats.py examples/registry --budget 40 --state-dir /tmp/ktuned-show
           [--device auto] [--no-referee | --referee-only] [--out tune_stats.json]
           [--tune-timeout S] [--referee-timeout S] [--time-limit S]

Runs ``ktuned tune REGISTRY --budget N --state-dir DIR`` (a subprocess: exactly the user's
command; the state directory should be fresh) and prints its output and total wall, then,
from the store, per kernel: evaluations (first measurements, re-measurements apart), the
median worker seconds per candidate with compilation excluded (the worker's ``load``,
``correctness`` and ``benchmark`` phases), and the case-data cache's hit rate (the worker's
counters, :mod:`tuned.evaluation.case_cache`, summed over the worker processes) and the
spread of the stored sample sets (interquartile range over median, 50th and 90th percentile
over every timed case of both sides). Unless
``--no-referee``, it then runs ``ktuned referee`` on the same state directory and prints its
table and wall. While each runs, GPU 0's state is sampled through NVML twice a second (SM
clock, power, temperature, clock-limiting reasons): the campaign's speedups and the
referee's, taken minutes apart, may differ because the GPU ran at other clocks (the H100's
matmul claims came out 2-6 % below the referee's while layer_norm's agreed). Everything also
goes to ``--out`` as JSON. ``--time-limit S`` bounds the run the way a user would
(``ktuned tune --time-limit``: it then settles, so the claims the referee checks are the
settled ones); ``--tune-timeout S`` stops it by SIGINT (unsettled: the campaign's figures).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # python bench/x.py: the checkout on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT

WORKER_PHASES = ("load", "correctness", "benchmark")  # the worker's, compilation excluded

#: NVML's clock-limiting reasons that change kernel speed (nvmlClocksEventReason* bits).
LIMITS = {0x4: "power cap", 0x8: "hw slowdown", 0x20: "sw thermal", 0x40: "hw thermal"}


@contextmanager
def gpu_state(into: dict[str, Any], period_s: float = 0.5) -> Iterator[None]:
    """Sample GPU 0 through NVML while the block runs; its summary goes to ``into``
    (``{"nvml": "..."}`` where there is none)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as exc:  # noqa: BLE001 - no package, no driver, no GPU: say so
        into["nvml"] = f"unavailable ({type(exc).__name__})"
        yield
        return
    reasons = (  # the newer name, else the older one (nvidia-ml-py renamed it)
        getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    samples: list[tuple[float, float, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            with suppress(pynvml.NVMLError):
                samples.append(
                    (
                        float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                        pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                        float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
                        int(reasons(handle)),
                    )
                )
            stop.wait(period_s)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with_limits = {name: sum(1 for *_, r in samples if r & bit) for bit, name in LIMITS.items()}
        into.update(
            samples=len(samples),
            sm_mhz_median=statistics.median(s[0] for s in samples) if samples else None,
            sm_mhz_min=min((s[0] for s in samples), default=None),
            power_w_median=statistics.median(s[1] for s in samples) if samples else None,
            temperature_c_max=max((s[2] for s in samples), default=None),
            limited_share={k: v / len(samples) for k, v in with_limits.items() if samples},
        )


def print_gpu_state(what: str, state: dict[str, Any]) -> None:
    if "nvml" in state:
        print(f"GPU during {what}: NVML {state['nvml']}")
        return
    if not state.get("samples"):
        print(f"GPU during {what}: no sample")
        return
    limited = ", ".join(f"{k} {v:.0%}" for k, v in state["limited_share"].items() if v) or "none"
    print(
        f"GPU during {what}: SM clock median {state['sm_mhz_median']:.0f} MHz (min "
        f"{state['sm_mhz_min']:.0f}), power median {state['power_w_median']:.0f} W, "
        f"temperature max {state['temperature_c_max']:.0f} C, clocks limited: {limited} "
        f"({state['samples']} samples)"
    )


def ktuned(
    *args: str, timeout: float | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``ktuned ARGS``; past ``timeout`` seconds it gets SIGINT (ktuned saves what it
    evaluated and stops its workers, exit 130), then SIGKILL 60 s later."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuned.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=ROOT,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    run = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return run, time.perf_counter() - t0


def dispersion(samples: list[float]) -> float:
    """Interquartile range over median (0 for fewer than four samples or a zero median)."""
    if len(samples) < 4:
        return 0.0
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / median if median > 0 else 0.0


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def store_stats(db_path: Path) -> dict[str, Any]:
    """Per kernel: evaluations, worker seconds per candidate (median), cache counters."""
    if not db_path.exists():
        return {
            "kernels": {},
            "cache": {"hits": 0, "misses": 0, "spill_hits": 0, "hit_rate": None},
            "median_worker_s": float("nan"),
        }
    db = sqlite3.connect(db_path)
    try:
        rows = db.execute(
            "SELECT kernel, outcome, result_json FROM evaluations ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    kernels: dict[str, dict[str, Any]] = {}
    last: dict[str, int] | None = None
    totals = {"hits": 0, "misses": 0, "spill_hits": 0}
    segment = dict.fromkeys(totals, 0)
    for kernel, outcome, text in rows:
        result = json.loads(text)
        meta = result.get("metadata") or {}
        k = kernels.setdefault(
            kernel,
            {"evaluations": 0, "remeasures": 0, "worker_s": [], "spread": [], "parts": {}},
        )
        for key in ("samples", "incumbent_samples"):
            for times in (meta.get(key) or {}).values():
                k["spread"].append(dispersion(times))
        if meta.get("remeasure"):
            k["remeasures"] += 1
        else:
            k["evaluations"] += 1
        phases = result.get("phase_seconds") or {}
        if outcome == "ok" and any(p in phases for p in WORKER_PHASES):
            k["worker_s"].append(sum(float(phases.get(p, 0.0)) for p in WORKER_PHASES))
            for part, seconds in (meta.get("benchmark_parts") or {}).items():
                k["parts"].setdefault(part, []).append(float(seconds))
        cache = meta.get("case_cache")
        if cache:
            # Counters are per worker process, cumulative: a drop means a new worker.
            if last is not None and cache.get("hits", 0) + cache.get("misses", 0) < last.get(
                "hits", 0
            ) + last.get("misses", 0):
                for key in totals:
                    totals[key] += segment[key]
            segment = {key: int(cache.get(key, 0)) for key in totals}
            last = cache
    for key in totals:
        totals[key] += segment[key]
    out = {}
    for name, k in sorted(kernels.items()):
        out[name] = {
            "evaluations": k["evaluations"],
            "remeasures": k["remeasures"],
            "median_worker_s": statistics.median(k["worker_s"]) if k["worker_s"] else None,
            "spread_p50": _quantile(k["spread"], 0.5),
            "spread_p90": _quantile(k["spread"], 0.9),
            # Median seconds of each part of the checks and timing (judge.Evaluation.part).
            "parts": {p: round(statistics.median(v), 4) for p, v in sorted(k["parts"].items())},
        }
    lookups = totals["hits"] + totals["misses"]
    return {
        "kernels": out,
        "cache": {**totals, "hit_rate": totals["hits"] / lookups if lookups else None},
        "median_worker_s": statistics.median(
            [s for k in kernels.values() for s in k["worker_s"]] or [float("nan")]
        ),
    }


def print_referee(report: dict[str, Any]) -> None:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}x"

    print(f"{'kernel':<16} {'shape':<28} {'claimed':>9} {'measured':>9}  agrees confirmed")
    for c in report["claims"]:
        print(
            f"{c['kernel']:<16} {c['shape'] or '(kernel)':<28} {x(c['claimed']):>9} "
            f"{x(c['measured']):>9}  {c['agrees']!s:>6} {c['confirmed']!s:>9} {c['error']}"
        )
    print(
        f"{report['agreeing']}/{report['judged']} claims within {report['tolerance']:.0%}; "
        f"{report['shapes_confirmed']}/{report['shapes_judged']} per-shape claims confirmed"
    )
    for name, why in report["skipped"].items():
        print(f"skipped {name}: {why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("registry", type=Path)
    parser.add_argument("--budget", default="40")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--device", default="auto", choices=("auto", "gpu", "interpreter"))
    parser.add_argument("--no-referee", action="store_true")
    parser.add_argument(
        "--referee-only", action="store_true", help="no tune: the store's figures and the referee"
    )
    parser.add_argument(
        "--tune-timeout", type=float, default=None, help="seconds; then SIGINT (saved so far)"
    )
    parser.add_argument("--referee-timeout", type=float, default=None, help="seconds")
    parser.add_argument(
        "--time-limit",
        default=None,
        help="ktuned tune --time-limit: no candidate after that many seconds, then its settling",
    )
    parser.add_argument(
        "--gpu-turn", choices=("auto", "yes", "no"), default="auto", help="ktuned tune --gpu-turn"
    )
    parser.add_argument("--out", type=Path, default=Path("tune_stats.json"))
    args = parser.parse_args()
    state = str(args.state_dir)
    result: dict[str, Any] = {}
    if not args.referee_only:
        tuning_gpu: dict[str, Any] = {}
        result["gpu_during_tune"] = tuning_gpu
        with gpu_state(tuning_gpu):
            tune, wall = ktuned(
                "tune",
                str(args.registry),
                "--budget",
                args.budget,
                "--device",
                args.device,
                "--state-dir",
                state,
                f"--gpu-turn={args.gpu_turn}",
                *(["--time-limit", args.time_limit] if args.time_limit else []),
                timeout=args.tune_timeout,
            )
        print(tune.stdout)
        if tune.returncode != 0:
            print(tune.stderr[-4000:], file=sys.stderr)
        result.update(tune_wall_s=wall, tune_rc=tune.returncode)
        print(f"ktuned tune: {wall:.1f} s wall (exit {tune.returncode})")
    stats = store_stats(args.state_dir / "ktuned.sqlite")
    result.update(stats)
    print(
        f"{'kernel':<20} {'evaluations':>11} {'re-measures':>11} {'median worker s':>16} "
        f"{'spread p50/p90':>15}"
    )
    for name, k in stats["kernels"].items():
        median = "-" if k["median_worker_s"] is None else f"{k['median_worker_s']:.2f}"
        spread = "-" if k["spread_p50"] is None else f"{k['spread_p50']:.1%}/{k['spread_p90']:.1%}"
        print(f"{name:<20} {k['evaluations']:>11} {k['remeasures']:>11} {median:>16} {spread:>15}")
        if k["parts"]:
            print("    median s: " + ", ".join(f"{p} {v:.3f}" for p, v in k["parts"].items()))
    c = stats["cache"]
    rate = "-" if c["hit_rate"] is None else f"{c['hit_rate']:.1%}"
    print(
        f"median worker seconds per candidate (compilation excluded): "
        f"{stats['median_worker_s']:.2f}; case-data hits {c['hits']}, misses {c['misses']} "
        f"({rate} hits, {c['spill_hits']} from pinned host memory)"
    )
    if not args.no_referee:
        refereeing_gpu: dict[str, Any] = {}
        result["gpu_during_referee"] = refereeing_gpu
        with gpu_state(refereeing_gpu):
            referee, r_wall = ktuned(
                "referee",
                "--json",
                "--device",
                args.device,
                "--state-dir",
                state,
                timeout=args.referee_timeout,
            )
        result["referee_wall_s"] = r_wall
        result["referee_rc"] = referee.returncode
        if referee.returncode == 0:
            result["referee"] = report = json.loads(referee.stdout)
            print_referee(report)
        else:
            print(referee.stderr[-4000:], file=sys.stderr)
        print(f"ktuned referee: {r_wall:.1f} s wall (exit {referee.returncode})")
    for what in ("tune", "referee"):
        if f"gpu_during_{what}" in result:
            print_gpu_state(what, result[f"gpu_during_{what}"])
    args.out.write_text(json.dumps(result, indent=1))
    print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
