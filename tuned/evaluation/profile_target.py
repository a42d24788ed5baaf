"""The process Nsight Compute profiles: one candidate launched on one perf case.

``python -m tuned.evaluation.profile_target REQUEST.json MODULES_DIR`` is what
:class:`tuned.profiling.HardwareFeedback` runs under ``ncu``. The request holds the kernel
payload the evaluation worker gets (:func:`tuned.evaluation.client.kernel_payload`), the
candidate (source and knobs), the case (dims, dtype) and how many calls to make. The modules
are imported with the worker's :class:`~tuned.evaluation.worker.ModuleLoader`, so the
candidate runs exactly as it was evaluated; the environment is the worker's scrubbed one.

``warmup`` calls (compilation, first-touch allocations) run before ``cudaProfilerStart``
and are never profiled; ``calls`` calls run inside the profiler range (``ncu
--profile-from-start off``). Only candidates that already passed evaluation (every integrity
check included) are profiled. Exit status 0 on success; candidate output goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tuned.evaluation.invoke import entry_call, resolve
from tuned.evaluation.worker import ModuleLoader, _limit_resources, entry_key
from tuned.registry.injection import runnable_request

__all__ = ["main", "run_request"]


def run_request(request: dict[str, Any], modules: Path) -> None:
    """Load the candidate and make the warm-up and the profiled calls (needs CUDA)."""

    import torch

    request = runnable_request(request)  # injected knobs written into the module
    kernel, candidate, case = request["kernel"], request["candidate"], request["case"]
    loader = ModuleLoader(modules)
    key = entry_key(kernel)
    extra = kernel.get("extra_files", {})
    original = loader.load(kernel["original_source"], directory_key=key, extra_files=extra)
    module = loader.load(candidate["source"], directory_key=key, extra_files=extra)
    launcher = entry_call(module, kernel, role="launcher").at(dict(case["dims"]))
    make_inputs = resolve(original, kernel["inputs"], "inputs")
    knobs = dict(candidate["knobs"])
    inputs = make_inputs(dict(case["dims"]), getattr(torch, case["dtype"]), "cuda", 0)
    for _ in range(int(request.get("warmup", 2))):
        launcher(*inputs, **knobs)
    cuda: Any = torch.cuda  # typed loosely: its stubs differ between PyTorch releases
    cuda.synchronize()
    cuda.profiler.start()  # cudaProfilerStart: ncu --profile-from-start off begins here
    for _ in range(int(request.get("calls", 3))):
        launcher(*inputs, **knobs)
    cuda.synchronize()
    cuda.profiler.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print(
            "usage: python -m tuned.evaluation.profile_target REQUEST.json MODULES_DIR",
            file=sys.stderr,
        )
        return 2
    _limit_resources()
    os.dup2(2, 1)  # candidate prints never mix with anything a caller reads on stdout
    request = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    run_request(request, Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
