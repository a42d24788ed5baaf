"""The GPU's attainable peaks, measured once per GPU model: memory bandwidth and FLOP rate.

Datasheet numbers are not what a kernel can reach (boost clocks, ECC, power limits differ
per box), so ktuned measures its roofs the way kernels meet them:

* **bandwidth**: a device-to-device copy of ``copy_bytes`` (default 1 GiB, far above any L2)
  moves ``2 * copy_bytes`` per call (read + write); the fastest of ``reps`` calls counts;
* **FLOP rate**: a dense fp16 ``n x n x n`` matmul (default ``n = 8192``, cuBLAS on the
  tensor cores) does ``2 * n**3`` FLOPs; the fastest of ``reps`` calls counts.

Run in a subprocess (``python -m profilers.peaks``, which prints one JSON object) so the
daemon never imports torch; :func:`measure_in_subprocess` does that with a deadline. The
daemon stores the result per GPU model in its store (table ``gpu_peaks``) and measures
again only when the model has no row.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PeakMeasurementError", "Peaks", "measure_in_subprocess", "measure_peaks"]


class PeakMeasurementError(RuntimeError):
    """The peaks could not be measured (no GPU, out of memory, deadline); says why."""


@dataclass(frozen=True)
class Peaks:
    """Measured roofs of one GPU model (bytes/s and FLOP/s), and how they were measured."""

    gpu_model: str
    bytes_per_s: float
    flops_per_s: float
    copy_bytes: int
    matmul_n: int
    measured_at: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Peaks:
        return cls(
            gpu_model=str(d["gpu_model"]),
            bytes_per_s=float(d["bytes_per_s"]),
            flops_per_s=float(d["flops_per_s"]),
            copy_bytes=int(d.get("copy_bytes", 0)),
            matmul_n=int(d.get("matmul_n", 0)),
            measured_at=float(d.get("measured_at", 0.0)),
        )


def measure_peaks(*, copy_bytes: int = 1 << 30, matmul_n: int = 8192, reps: int = 10) -> Peaks:
    """Measure on the current CUDA device (imports torch; needs a GPU)."""
    import torch

    cuda: Any = torch.cuda  # typed loosely: its stubs differ between PyTorch releases
    if not cuda.is_available():
        raise PeakMeasurementError("no CUDA device: peaks are measured on a GPU only")

    def fastest(fn: Any) -> float:
        fn()  # warm-up (and cuBLAS heuristics)
        cuda.synchronize()
        best = float("inf")
        for _ in range(reps):
            start = cuda.Event(enable_timing=True)
            end = cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    def copy_seconds() -> float:
        src = torch.ones(copy_bytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return fastest(lambda: dst.copy_(src))

    def matmul_seconds() -> float:
        a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.float16)
        b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.float16)
        return fastest(lambda: torch.matmul(a, b))

    copy_s = copy_seconds()  # tensors freed on return, before the matmul's are allocated
    matmul_s = matmul_seconds()
    cuda.empty_cache()
    return Peaks(
        gpu_model=str(cuda.get_device_name()),
        bytes_per_s=2.0 * copy_bytes / copy_s,
        flops_per_s=2.0 * float(matmul_n) ** 3 / matmul_s,
        copy_bytes=copy_bytes,
        matmul_n=matmul_n,
        measured_at=time.time(),
    )


def measure_in_subprocess(
    *,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    deadline_s: float = 300.0,
    args: Sequence[str] = (),
) -> Peaks:
    """Run ``python -m profilers.peaks`` in its own process group, killed at the deadline."""
    proc = subprocess.Popen(
        [python, "-m", "profilers.peaks", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise PeakMeasurementError(
            f"measuring the GPU's peaks exceeded {deadline_s:g} s; the process was killed"
        ) from None
    lines = out.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = err.decode("utf-8", "replace").strip()[-600:]
        raise PeakMeasurementError(
            f"measuring the GPU's peaks failed (exit status {proc.returncode}): {tail}"
        )
    try:
        return Peaks.from_dict(json.loads(lines[-1]))
    except (ValueError, KeyError, TypeError) as exc:
        raise PeakMeasurementError(f"unreadable peak measurement {lines[-1][:200]!r}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m profilers.peaks", description=__doc__)
    parser.add_argument("--copy-bytes", type=int, default=1 << 30)
    parser.add_argument("--matmul-n", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        peaks = measure_peaks(copy_bytes=args.copy_bytes, matmul_n=args.matmul_n, reps=args.reps)
    except PeakMeasurementError as exc:
        print(str(exc), file=sys.stderr)
        return 3
    print(json.dumps(peaks.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
