"""Timing through CUDA graphs: the outputs check it relies on (CPU), and the timing (GPU)."""

from __future__ import annotations

import pytest
import torch

from profilers.graph_timing import poison_outputs
from profilers.timing import TimingSettings, interleaved_timing


def test_poisoned_outputs_differ_everywhere_and_inputs_written_in_place_are_kept() -> None:
    x = torch.arange(6, dtype=torch.float32)
    floats, ints, flags = torch.ones(4), torch.arange(5, dtype=torch.int32), torch.tensor([1, 0])
    flags = flags.bool()
    before = ints.clone()
    poison_outputs((floats, ints, flags, x[2:]), keep=[x])
    assert torch.isnan(floats).all()
    assert (ints != before).all()
    assert flags.tolist() == [False, True]
    assert torch.equal(x, torch.arange(6, dtype=torch.float32))  # shares storage with an input


@pytest.mark.gpu
def test_graph_timing_agrees_with_eager_on_an_idle_gpu_and_catches_a_capture_aware_cheat() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(4096, 4096, device="cuda")
    out: list[torch.Tensor] = []

    def matmul() -> None:
        out[:] = [a @ a]

    graphs = interleaved_timing([matmul, matmul], gpu=True, settings=TimingSettings())
    eager = interleaved_timing(
        [matmul, matmul], gpu=True, settings=TimingSettings(cuda_graphs=False)
    )
    assert graphs.graphs and not eager.graphs
    g, e = (sorted(t.samples[0])[len(t.samples[0]) // 2] for t in (graphs, eager))
    assert 0.9 < g / e < 1.1

    done = a @ a

    def cheat() -> None:  # computes nothing while captured, returns what it made before
        out[:] = [done if torch.cuda.is_current_stream_capturing() else a @ a]

    interleaved_timing(
        [cheat], gpu=True, settings=TimingSettings(), poison=lambda: poison_outputs(out[0])
    )
    assert torch.isnan(out[0]).all()
