"""The throughput benchmark's summary and its printed table (``bench/throughput.py``).

:func:`summarize` turns the serial sweep (a), the pipelined sweep (b), the referee and the
default policy's run (c) into one flat dict (the JSON's ``summary``); :func:`print_table`
prints it.
"""

from __future__ import annotations

import json
from typing import Any

from bench.harness import fmt_s
from bench.referee import key, print_referee, referee_table, referee_times

#: (c)'s criteria of "found": the referee's best, (a)'s table's best, the incumbent's interval.
CRITERIA = ("referee", "serial_table", "incumbent")


def summarize(
    serial: dict[str, Any], piped: dict[str, Any], referee: dict[str, Any], policy: dict[str, Any]
) -> dict[str, Any]:
    n = len(serial["rows"])
    s_times = {key(r["knobs"]): r["time_s"] for r in serial["rows"] if r["time_s"] is not None}
    p_times = {key(r["knobs"]): r["time_s"] for r in piped["rows"] if r["time_s"] is not None}
    r_times = referee_times(referee)
    s_best = min(s_times, key=s_times.__getitem__) if s_times else None
    p_best = min(p_times, key=p_times.__getitem__) if p_times else None
    r_best = min(r_times, key=r_times.__getitem__) if r_times else None
    phases: dict[str, float] = {}
    for r in piped["rows"]:
        for phase, seconds in r["phases"].items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    worker = sum(phases.get(p, 0.0) for p in ("load", "compile", "correctness", "benchmark"))
    out: dict[str, Any] = {
        "configurations": n,
        "serial_wall_s": serial["wall_s"],
        "serial_compile_s": sum(r["compile_s"] for r in serial["rows"]),
        "serial_bench_s": sum(r["bench_s"] for r in serial["rows"]),
        "serial_configs_per_min": 60.0 * n / serial["wall_s"],
        "pipelined_wall_s": piped["wall_s"],
        "pipelined_configs_per_min": 60.0 * n / piped["wall_s"],
        "speedup": serial["wall_s"] / piped["wall_s"],
        "serial_best": None if s_best is None else json.loads(s_best),
        "serial_best_s": None if s_best is None else s_times[s_best],
        "pipelined_best": None if p_best is None else json.loads(p_best),
        "pipelined_best_s": None if p_best is None else p_times[p_best],
        "pipelined_best_by_serial_ratio": None
        if p_best is None or s_best is None or p_best not in s_times
        else s_times[p_best] / s_times[s_best],
        "same_best": s_best == p_best,
        "pipelined_phase_seconds": phases,
        "gpu_busy_benchmark_fraction": phases.get("benchmark", 0.0) / piped["wall_s"],
        "gpu_worker_busy_fraction": worker / piped["wall_s"],
        "nvml_utilization": piped["nvml_utilization"],
        "referee_rounds": referee["rounds"],
        "referee_configurations": len(referee["rows"]),
        "referee_wall_s": referee["process_wall_s"],
        "referee_new_cache_files": referee["new_cache_files"],
        "referee_best": None if r_best is None else json.loads(r_best),
        "referee_best_s": None if r_best is None else r_times[r_best],
        "serial_best_is_referee_best": s_best == r_best,
        "pipelined_best_is_referee_best": p_best == r_best,
        "referee_table": referee_table(referee, s_times, p_times),
        "policy_final_incumbent_referee_ratio": policy["incumbent_referee_ratio"],
        "policy_evaluations": policy["evaluations"],
        "policy_speculation_hits": policy["speculation_hits"],
        "policy_speculated": policy["speculated"],
        "policy_spare_takeovers": policy["spare_takeovers"],
        "policy_worker_starts": policy["worker_starts"],
        "policy_phase_seconds": _summed(p["phases"] for p in policy["steps"]),
        "policy_worker_calls": len(policy["worker_calls"]),
        "policy_worker_s": sum(c["wall_s"] for c in policy["worker_calls"]),
        "policy_new_process_calls": [
            c["wall_s"] for c in policy["worker_calls"] if c["new_process"]
        ],
    }
    # (c)'s three criteria: None where not met before the loop stopped.
    for name in CRITERIA:
        hit = policy["reached"][name]
        out[f"policy_{name}_s"] = None if hit is None else hit["s"]
        out[f"policy_{name}_fraction"] = None if hit is None else hit["s"] / serial["wall_s"]
        out[f"policy_{name}_evaluations"] = None if hit is None else hit["evaluations"]
        out[f"policy_{name}_knobs"] = None if hit is None else hit["knobs"]
    return out


def _summed(phases: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for one in phases:
        for k, v in one.items():
            out[k] = out.get(k, 0.0) + v
    return out


def print_table(s: dict[str, Any], device: str) -> None:
    print(f"\nDevice: {device}; {s['configurations']} configurations of the matmul knob space")
    print(f"{'sweep':<28} {'wall':>9} {'configs/min':>12} {'best':>10}  best knobs")
    print("-" * 100)
    print(
        f"{'(a) serial, autotuner-style':<28} {fmt_s(s['serial_wall_s']):>9} "
        f"{s['serial_configs_per_min']:>12.1f} {fmt_s(s['serial_best_s']):>10}  {s['serial_best']}"
    )
    print(
        f"{'(b) ktuned pipelined':<28} {fmt_s(s['pipelined_wall_s']):>9} "
        f"{s['pipelined_configs_per_min']:>12.1f} {fmt_s(s['pipelined_best_s']):>10}  "
        f"{s['pipelined_best']}"
    )
    ratio = s["pipelined_best_by_serial_ratio"]
    print(
        f"\n(b)/(a) configurations per minute: {s['speedup']:.2f}x; same best: {s['same_best']}"
        + (
            ""
            if ratio is None
            else f" ((b)'s best is {100 * (ratio - 1):.2f} % from (a)'s best in (a)'s table)"
        )
    )
    print(
        f"(a) split: compile {fmt_s(s['serial_compile_s'])}, benchmark {fmt_s(s['serial_bench_s'])}"
    )
    nvml = s["nvml_utilization"]
    print(
        f"GPU busy during (b): benchmark phases {100 * s['gpu_busy_benchmark_fraction']:.0f} % of "
        f"the wall, all worker phases {100 * s['gpu_worker_busy_fraction']:.0f} %"
        + ("" if nvml is None else f", NVML utilization {100 * nvml:.0f} %")
    )
    phases = ", ".join(f"{k} {fmt_s(v)}" for k, v in sorted(s["pipelined_phase_seconds"].items()))
    print(f"(b) phase seconds, summed: {phases}")
    print_referee(s)
    labels = {
        "referee": "evaluated a configuration within 1 % of the referee's best (the criterion)",
        "incumbent": "held it: the store's incumbent within 1 % of the referee's best",
        "serial_table": "old criterion: evaluated one within 1 % of (a)'s best in (a)'s table",
    }
    for name, label in labels.items():
        frac = s[f"policy_{name}_fraction"]
        print(
            f"(c) {label}: "
            + (
                ("not by the loop's end" if name == "incumbent" else "not reached")
                if frac is None
                else f"after {fmt_s(s[f'policy_{name}_s'])}, {s[f'policy_{name}_evaluations']} "
                f"evaluations = {100 * frac:.1f} % of (a)'s wall"
            )
        )
    held = s["policy_final_incumbent_referee_ratio"]
    print(
        f"(c) the loop stopped after {s['policy_evaluations']} evaluations; its incumbent then: "
        + ("outside the referee set" if held is None else f"{held:.3f} of the referee's best")
    )
    print(
        f"(c) speculative compiles {s['policy_speculated']}, proposed candidates already "
        f"compiled {s['policy_speculation_hits']}; worker starts {s['policy_worker_starts']} "
        f"({s['policy_spare_takeovers']} by the waiting spare)"
    )
    phases = ", ".join(f"{k} {fmt_s(v)}" for k, v in sorted(s["policy_phase_seconds"].items()))
    print(f"(c) phase seconds, summed: {phases}")
    fresh = s["policy_new_process_calls"]
    print(
        f"(c) worker calls {s['policy_worker_calls']} ({fmt_s(s['policy_worker_s'])}); "
        f"first in a new process: {len(fresh)} ({', '.join(fmt_s(w) for w in fresh)})"
    )
