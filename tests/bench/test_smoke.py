"""Every benchmark script runs: ``python bench/<name>.py --smoke`` on the CPU, in Triton's
interpreter, as a user would run it (a subprocess), in a few seconds each.

A smoke run gives no figure worth quoting; what it proves is that the script still works
against today's ktuned (its imports, its arguments, its CPU path end to end), and that it
leaves nothing behind in the temporary directory. Scripts that cannot run without a GPU, and
modules that are not scripts, are listed with the reason; a new file in bench/ must be put
in one of the lists (the last test fails otherwise).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

#: script -> (extra arguments after ``--smoke``, a line fragment its output must hold).
SMOKE: dict[str, tuple[tuple[str, ...], str]] = {
    "aa_replay.py": ((), "| convolution_A6000_small | 32 |"),
    "fleet_replay.py": ((), "| convolution_A6000_small | 2 |"),
    "liger_discovery.py": ((), "kernels reached"),
    "lookahead_replay.py": ((), "| convolution_A6000_small |"),
    "masking_replay.py": ((), "evaluations to 95% of the best"),
    "registry_add_probe.py": ((), "# 2 launchers: valid, space 2"),
    "replay_loop.py": ((), "| **mean** |"),
    "scrape_1000.py": ((), "5 kernels"),
    "step_overhead.py": ((), "| main-process overhead per step | ms |"),
    "policy_overhead.py": ((), "per decision with 500 candidates"),
    "timed_replay.py": ((), "| default |"),
}

#: Scripts that load vector_add from a state directory: given one that a fixture tuned once
#: (without ``--state-dir`` each would tune vector_add itself first, ~20 s in the interpreter).
ON_TUNED_STATE: dict[str, tuple[tuple[str, ...], str]] = {
    "runtime_import.py": (("--state-dir", "{state}"), "heavy modules imported: none"),
    "runtime_overhead.py": (("--smoke", "--state-dir", "{state}"), "| wrapper, 1 variant |"),
    # Its command line unchanged: the store's figures of a tuned state, no tune, no referee
    # (`ktuned tune` and `ktuned referee` themselves are tested in tests/cli/).
    "tune_stats.py": (
        (
            *("{state}", "--state-dir", "{state}", "--referee-only", "--no-referee"),
            *("--out", "{tmp}/cwd/stats.json"),
        ),
        "median worker seconds per candidate",
    ),
}

#: Run with their own smoke mode by a test that checks more of what they print.
COVERED_ELSEWHERE = {
    "aa_gpu.py": "tests/shared/test_acceptance.py (--smoke, the JSON's comparisons)",
    "runtime_model.py": "tests/runtime/test_runtime_model.py (--smoke, the speedup table)",
    "unit_nvml.py": "tests/daemon/test_systemd_unit.py (--smoke, every check of the unit's)",
    "search_replay.py": "tests/policies/test_stalls.py and test_replay.py (its replay())",
    "peers.py": "tests/policies/test_peers.py (every peer and the command line, smoke)",
}

#: Slower smoke runs (tens of seconds in the interpreter): run by CI (slow tests run there).
SLOW_SMOKE: dict[str, tuple[tuple[str, ...], str]] = {
    "aa_busy.py": ((), "false acc"),
    "soak.py": ((), "soak: smoke run (no verdict)"),
    "tune_examples.py": ((), "| vector_add |"),
    "liger_bench.py": ((), "| same-size copy before / after |"),
    "sandbox_startup.py": (("--rounds", "1"), "sandbox adds"),
    "throughput.py": (("--out", "{tmp}/throughput.json", "--workdir", "{tmp}/work"), "(c)"),
}

#: Only meaningful on a GPU: no CPU path to smoke.
GPU_ONLY = {
    "graph_capture_cost.py": "captures and replays CUDA graphs of a Triton kernel",
    "multi_gpu.py": "one worker per GPU pinned by CUDA_VISIBLE_DEVICES, checked through NVML",
    "ncu_capture.py": "runs Nsight Compute (ncu) on CUDA kernels",
    "profile_examples.py": "runs Nsight Compute (ncu) through tuned.profiling",
    "sweep.py": "times every configuration with CUDA events; --compare reads a GPU sweep",
}

#: Not scripts: imported by the scripts above.
MODULES = {
    "__init__.py": "the package",
    "referee.py": "throughput.py's referee (run by throughput.py --smoke)",
    "stack_sampler.py": "throughput.py --sample-stacks",
    "throughput_report.py": "throughput.py's summary and table",
}


def _run(
    script: str, args: tuple[str, ...], tmp: Path, *, timeout: float, state: Path | None = None
) -> str:
    """Run ``bench/<script> args`` in ``tmp/cwd`` (where default outputs go), with the
    temporary directory at ``tmp/tmp`` (empty again afterwards: :func:`_leftovers`)."""
    (tmp / "cwd").mkdir()
    (tmp / "tmp").mkdir()
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp / "tmp"),  # what the script makes in the temporary directory
    }
    argv = [a.format(tmp=tmp, root=ROOT, state=state) for a in args]
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp / "cwd",
        env=env,
    )
    assert proc.returncode == 0, f"{script} {argv}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _leftovers(tmp: Path) -> list[str]:
    """What the run left in its temporary directory, but for PyTorch's compile cache
    (``torchinductor_<user>``: shared across runs by design, as Triton's in the home)."""
    return sorted(
        p.name for p in (tmp / "tmp").iterdir() if not p.name.startswith("torchinductor_")
    )


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_smoke(script: str, tmp_path: Path) -> None:
    args, expected = SMOKE[script]
    out = _run(script, ("--smoke", *args), tmp_path, timeout=240)
    assert expected in out, out[-3000:]
    assert _leftovers(tmp_path) == [], "the smoke run left files in the temporary directory"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SLOW_SMOKE))
def test_slow_smoke(script: str, tmp_path: Path) -> None:
    args, expected = SLOW_SMOKE[script]
    out = _run(script, ("--smoke", *args), tmp_path, timeout=600)
    assert expected in out, out[-3000:]
    assert _leftovers(tmp_path) == []


@pytest.fixture(scope="module")
def vector_add_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vector_add tuned (baseline + 2 candidates, Triton's interpreter) into a state
    directory, as bench/runtime_overhead.py does when given none."""
    from bench.runtime_overhead import tune_vector_add

    state = tmp_path_factory.mktemp("vector-add-state")
    tune_vector_add(state, interpreter=True)
    return state


@pytest.mark.parametrize("script", sorted(ON_TUNED_STATE))
def test_on_a_tuned_state(script: str, tmp_path: Path, vector_add_state: Path) -> None:
    args, expected = ON_TUNED_STATE[script]
    out = _run(script, args, tmp_path, timeout=300, state=vector_add_state)
    assert expected in out, out[-3000:]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("script", sorted(GPU_ONLY))
def test_gpu_only_scripts_parse_their_arguments(script: str, tmp_path: Path) -> None:
    """No CPU path: at least the script imports against today's ktuned and its command line
    is intact."""
    out = _run(script, ("--help",), tmp_path, timeout=120)
    assert "usage:" in out


def test_every_script_is_listed() -> None:
    listed = (
        set(SMOKE)
        | set(COVERED_ELSEWHERE)
        | set(SLOW_SMOKE)
        | set(GPU_ONLY)
        | set(ON_TUNED_STATE)
        | set(MODULES)
    )
    present = {p.name for p in BENCH.glob("*.py")}
    assert present - listed == set(), "new bench scripts: give them a --smoke and list them"
    assert listed - present == set(), "listed scripts that are gone"


def test_the_liger_bench_interrupts_an_evaluation_past_its_wall_limit(tmp_path: Path) -> None:
    """The wall limit is checked as results come in; an evaluation running past it (on the
    H100, an entry's first one ran for minutes and the device call ended with nothing
    re-measured) is interrupted after the grace, and the bench still prints its totals."""
    started = time.monotonic()
    out = _run(
        "liger_bench.py",
        ("--smoke", "--wall-limit", "0", "--wall-grace", "1", "--budget", "50"),
        tmp_path,
        timeout=240,
    )
    assert "not tuned (--wall-limit 0 s reached)" in out, out[-3000:]
    assert "geomean tuned speedup over shipped" in out
    assert time.monotonic() - started < 120


def test_the_liger_bench_watchdog_interrupts_a_blocking_wait(tmp_path: Path) -> None:
    """In a process of its own (pytest's must not get the signal), started with SIGINT
    ignored as a shell's background job is: the watchdog installs Python's handler."""
    code = (
        "import time\n"
        "from bench.liger_bench import interrupt_after\n"
        "interrupt_after(0.2)\n"
        "time.sleep(60)  # a wait in a system call, as for a worker's answer\n"
    )
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr, proc.stderr[-2000:]
    assert time.monotonic() - started < 50  # the sleep was cut short
