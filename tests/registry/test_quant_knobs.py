"""Knob discovery on the shapes quantization code takes: a quantizer's block size passed in
by the caller is an input, not a knob; a ``SPLIT_SIZE`` is a size; a count's ladder holds
its baseline."""

from __future__ import annotations

from pathlib import Path

import torch

from tuned.registry.discovery import discover_source
from tuned.registry.knob_values import candidate_values, knob_rule

QUANTIZER = """
import torch
import triton
import triton.language as tl


@triton.jit
def _absmax(x_ptr, s_ptr, n, BLOCK_SIZE: tl.constexpr, SPLIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(s_ptr + tl.program_id(0), tl.max(tl.abs(x), axis=0))


def run(x, blocksize):
    blocks = triton.cdiv(x.numel(), blocksize)
    s = torch.empty(blocks, device=x.device, dtype=torch.float32)
    _absmax[(blocks,)](x, s, x.numel(), BLOCK_SIZE=blocksize, SPLIT=1)
    return s
"""


def test_a_required_launcher_parameter_is_an_input_not_a_knob() -> None:
    """bitsandbytes-style ``quantize(A, code, blocksize)``: the block size is the caller's
    (the scales' layout depends on it); transforming it (``x2``) failed every candidate and
    got an innocent knob retired with it."""
    found = discover_source(QUANTIZER, "run")
    assert found is not None
    assert "blocksize" not in found.knobs and "BLOCK_SIZE" not in found.knobs, found.knobs
    # through a local copy too
    copied = QUANTIZER.replace(
        "def run(x, blocksize):\n", "def run(x, blocksize):\n    BLOCK = blocksize\n"
    ).replace("BLOCK_SIZE=blocksize", "BLOCK_SIZE=BLOCK")
    found = discover_source(copied, "run")
    assert found is not None
    assert "BLOCK" not in found.knobs, found.knobs
    # with a default it is still what sizes the returned scales (`s = torch.empty(blocks)`):
    # every other value changed the output's shape, so not a knob either, with a note
    defaulted = QUANTIZER.replace("def run(x, blocksize):", "def run(x, blocksize=64):")
    found = discover_source(defaulted, "run")
    assert found is not None
    assert "blocksize" not in found.knobs, found.knobs
    assert any(
        "blocksize (passed as BLOCK_SIZE to _absmax) sizes s" in n.reason for n in found.notices
    )
    # a default that only tiles the launch (the scales are one per row) is a knob, as before
    per_row = defaulted.replace("s = torch.empty(blocks,", "s = torch.empty(x.shape[0],")
    found = discover_source(per_row, "run")
    assert found is not None
    # (the kernel's only block size: its ladder reaches LONE_BLOCK_REACH, 1024)
    assert found.knobs.get("blocksize") == (8, 16, 32, 64, 128, 256, 512, 1024), found.knobs


def test_a_split_named_as_a_size_is_a_block_and_counts_keep_their_baseline() -> None:
    """``SPLIT_SIZE = 256`` (elements per program) got the split-count ladder 1..16, which
    did not even hold its baseline 256."""
    assert knob_rule({"SPLIT_SIZE"}, 256) == "block"
    assert knob_rule({"SPLIT_NUM_BLOCKS"}, 1) == "split"
    assert knob_rule({"SPLIT_K"}, 1) == "split"
    assert 256 in candidate_values("block", 256, uses_dot=False)
    assert candidate_values("split", 4, uses_dot=False) == (1, 2, 4, 8, 16)
    assert candidate_values("group", 64, uses_dot=False) == (8, 16, 32, 64, 128, 256, 512)
    source = QUANTIZER.replace("SPLIT: tl.constexpr", "SPLIT_SIZE: tl.constexpr").replace(
        "SPLIT=1", "SPLIT_SIZE=SPLIT_SIZE"
    )
    source = source.replace(
        "    blocks = triton.cdiv", "    SPLIT_SIZE = 256\n    blocks = triton.cdiv"
    ).replace("tl.max(tl.abs(x), axis=0)", "tl.max(tl.abs(x), axis=0) + SPLIT_SIZE * 0")
    found = discover_source(source, "run")
    assert found is not None
    assert 256 in found.knobs["SPLIT_SIZE"], found.knobs


def test_autotune_configs_unpacked_from_a_rebound_list_of_tuples(tmp_path: Path) -> None:
    """The inductor-style ``configs = [(BLOCK, warps), ...]`` rebound to
    ``[triton.Config(dict(BLOCK=BLOCK), num_warps=warps) for BLOCK, warps in configs]``
    (torchao's int8 matmul): discovery stopped at "the name `configs`"."""
    from tests.registry.test_autotune_knobs import AUTOTUNED, _import
    from tuned.registry.injection import materialize

    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    rebound = (
        "configs = [(128, 4, 3), (512, 8, 2)]\n"
        "configs = [\n"
        "    triton.Config(dict(BLOCK=BLOCK), num_warps=num_warps, num_stages=num_stages)\n"
        "    for BLOCK, num_warps, num_stages in configs\n"
        "]\n\n\n"
    )
    source = AUTOTUNED.replace(configs, "configs").replace(
        "@triton.autotune(", rebound + "@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None
    assert found.knobs["BLOCK"] == (64, 128, 256, 512, 1024), found.notices
    assert found.knobs["num_stages"] == (1, 2, 3, 4)
    variant, _ = materialize(source, "run", {"BLOCK": 64, "num_warps": 2, "num_stages": 1})
    assert "configs=[triton.Config({'BLOCK': 64}, num_warps=2, num_stages=1)]," in variant
    x = torch.randn(100)
    copy = _import(tmp_path, variant, "ktuned_autotune_rebound")
    torch.testing.assert_close(copy.run(x), x * 3)
