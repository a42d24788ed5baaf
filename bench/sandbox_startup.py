"""What the workers' sandbox (tuned/evaluation/sandbox.py) costs per worker start.

Two measurements, each with the sandbox (``bwrap``) and without (``none``), interleaved
(``--rounds`` pairs, the order alternating), medians and 90th percentiles printed:

(a) **bare start**: ``python -c pass`` started as a worker is (same environment, binds and
    seccomp filter) until it exits: what ``bwrap`` itself adds (namespaces, mounts).
(b) **worker start**: ``WorkerClient.start()`` until the worker's ``ready`` (PyTorch and Triton
    imported, the device warmed up: a CUDA context on a GPU) and then one evaluation of the
    example ``add`` kernel (load, compile, correctness, benchmark) in that fresh worker: what a
    fresh worker costs a candidate, the acceptance rule's re-measurement for example.

    python bench/sandbox_startup.py --smoke          # CPU, Triton's interpreter: a minute
    python bench/sandbox_startup.py --device cuda --rounds 10 --out sandbox.json   # the GPU

``--out`` gets every sample as JSON. Where ``bwrap`` cannot run, the script says why and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuned.errors import TunedError  # noqa: E402
from tuned.evaluation.client import EvaluationSettings, WorkerClient, worker_environment  # noqa: E402
from tuned.evaluation.sandbox import SandboxSettings, check_sandbox, sandboxed  # noqa: E402
from tuned.outcomes import Candidate, Outcome, Provenance  # noqa: E402
from tuned.registry import load_entry  # noqa: E402

ADD = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + tl.load(y_ptr + offs, mask=mask), mask=mask)


    def add(x, y, BLOCK=256):
        out = torch.empty_like(x)
        _add[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)
        return out


    def make_inputs(shape, dtype, device, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape["N"], generator=g).to(dtype)
        return x.to(device), torch.randn(shape["N"], generator=g).to(dtype).to(device)


    def reference(x, y):
        return x + y
    """
)
YAML = """name: add
module: add.py
launcher: add
reference: reference
inputs: make_inputs
shapes:
  - {{N: {n}, perf: true}}
dtypes: [float32]
knobs:
  BLOCK: [128, 256, 512]
"""


def _bare(mode: str, work: Path) -> float:
    env = worker_environment(
        os.environ, interpreter=True, cache_dir=work / "triton-cache", memory_limit=None
    )
    launch = sandboxed(
        [sys.executable, "-c", "pass"],
        settings=SandboxSettings(mode=mode),
        env=env,
        writable=[work / "modules"],
        cwd=work,
    )
    t0 = time.perf_counter()
    subprocess.run(launch.argv, env=launch.env, pass_fds=launch.pass_fds, check=True)
    wall = time.perf_counter() - t0
    launch.close()
    return wall


def _worker(mode: str, work: Path, entry: Path, interpreter: bool) -> tuple[float, float]:
    spec = load_entry(entry)
    settings = EvaluationSettings(interpreter=interpreter, sandbox=SandboxSettings(mode=mode))
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs={"BLOCK": 256},
        provenance=Provenance.PARAMETRIC,
    )
    with WorkerClient(workdir=work, settings=settings) as client:
        t0 = time.perf_counter()
        client.start()
        ready = time.perf_counter() - t0
        result = client.evaluate(spec, candidate)
        total = time.perf_counter() - t0
    if result.outcome is not Outcome.OK:
        raise SystemExit(f"the add kernel did not evaluate ({mode}): {result.reason}")
    return ready, total


def _summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1e3:8.1f} ms   p90 {p90 * 1e3:8.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="CPU, 3 rounds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rounds = 3 if args.smoke else args.rounds
    interpreter = args.device == "cpu"
    try:
        check_sandbox(SandboxSettings())
    except TunedError as exc:
        print(f"sandbox_startup: {exc}", file=sys.stderr)
        return 2
    samples: dict[str, dict[str, list[float]]] = {
        m: {"bare": [], "ready": [], "first_eval": []} for m in ("bwrap", "none")
    }
    with tempfile.TemporaryDirectory(prefix="ktuned-sandbox-bench-") as tmp:
        root = Path(tmp)
        entry = root / "registry" / "add"
        entry.mkdir(parents=True)
        (entry / "add.py").write_text(ADD)
        (entry / "kernel.yaml").write_text(YAML.format(n=4096 if interpreter else 1 << 24))
        for i in range(rounds):
            order = ("bwrap", "none") if i % 2 == 0 else ("none", "bwrap")
            for mode in order:
                work = root / f"{mode}-{i}"
                samples[mode]["bare"].append(_bare(mode, work / "bare"))
                ready, total = _worker(mode, work / "worker", entry, interpreter)
                samples[mode]["ready"].append(ready)
                samples[mode]["first_eval"].append(total)
    print(f"device {args.device}, {rounds} rounds, interleaved")
    for what, label in (
        ("bare", "(a) python -c pass        "),
        ("ready", "(b) worker start to ready "),
        ("first_eval", "(b) + first evaluation    "),
    ):
        for mode in ("none", "bwrap"):
            print(f"{label} {mode:5s}  {_summary(samples[mode][what])}")
        extra = statistics.median(samples["bwrap"][what]) - statistics.median(samples["none"][what])
        print(f"{label} sandbox adds {extra * 1e3:+.1f} ms (medians)")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
