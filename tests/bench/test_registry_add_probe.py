"""bench/registry_add_probe.py: which launcher a TritonBench-style perf harness times."""

from __future__ import annotations

from pathlib import Path

from bench.registry_add_probe import harness_launchers

HARNESS = """import sys
from typing import Union
import torch
from TritonBench_v1.relu_strided_buffer import relu_forward_wrapper_rank_1, helper
from performance_utils import Performance_Metrics, do_bench_config


class performance_metrics(Performance_Metrics):
    def call_op(self, input_tensor):
        return relu_forward_wrapper_rank_1(input_tensor, out0=torch.empty_like(input_tensor))

    def get_gbps(self, input_tensor, runtime):
        return 0
"""


def test_the_launcher_is_the_import_call_op_uses_not_the_first_import(tmp_path: Path) -> None:
    """``from typing import Union`` came first in one harness of TritonBench-G: the probe
    registered ``typing.Union`` as its launcher."""
    (tmp_path / "relu_strided_buffer_perf.py").write_text(HARNESS)
    (tmp_path / "apply_perf.py").write_text(
        HARNESS.replace("relu_forward_wrapper_rank_1(", "Fn.apply(").replace(
            "relu_forward_wrapper_rank_1, helper", "Fn"
        )
    )
    assert harness_launchers(tmp_path) == [
        "TritonBench_v1.relu_strided_buffer.Fn.apply",
        "TritonBench_v1.relu_strided_buffer.relu_forward_wrapper_rank_1",
    ]
