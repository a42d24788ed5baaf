"""Reading the module out of a reply, and the prompt that asks for it."""

from __future__ import annotations

from tests.conftest import ADD_SOURCE
from tuned.llm.parse import parse_reply
from tuned.llm.prompts import Attempt, PromptContext, bottleneck, build_messages
from tuned.store.ledger import estimate_prompt_tokens

BLOCK = f"```python\n{ADD_SOURCE}```"


def test_one_block_with_prose() -> None:
    p = parse_reply(f"Sure! Here it is:\n\n{BLOCK}\n\nThis is faster because...", "stop", "add")
    assert p.status == "ok" and p.source is not None and "def add(" in p.source


def test_several_blocks_take_the_last_that_defines_the_launcher() -> None:
    usage = "```python\nout = add(x, y)\n```"
    final = BLOCK.replace("BLOCK=256", "BLOCK=512")
    p = parse_reply(f"Usage:\n{usage}\nFirst try:\n{BLOCK}\nBetter:\n{final}\n", "stop", "add")
    assert p.status == "ok" and p.blocks == 3 and p.source is not None
    assert "BLOCK=512" in p.source


def test_other_languages_and_tildes() -> None:
    p = parse_reply(f"```bash\npip install x\n```\n~~~py\n{ADD_SOURCE}~~~\n", "stop", "add")
    assert p.status == "ok" and p.blocks == 2


def test_truncated_replies() -> None:
    p = parse_reply(f"Here:\n```python\n{ADD_SOURCE[:200]}", "length", "add")
    assert p.status == "truncated" and "max_tokens" in p.reason
    p = parse_reply(f"```python\n{ADD_SOURCE[:200]}", "stop", "add")  # unclosed fence
    assert p.status == "truncated"


def test_no_code_and_bare_module() -> None:
    assert parse_reply("I cannot help with that.", "stop", "add").status == "no_code"
    assert parse_reply("```python\nx = 1\n```", "stop", "add").status == "no_code"
    assert parse_reply("   ", "stop", "add").status == "empty"
    bare = parse_reply(ADD_SOURCE, "stop", "add")
    assert bare.status == "ok" and bare.source == ADD_SOURCE


def test_a_block_that_does_not_parse_is_still_handed_to_the_gate() -> None:
    broken = BLOCK.replace("def add(x, y, BLOCK=256, num_warps=4):", "def add(x, y, BLOCK=256")
    p = parse_reply(broken, "stop", "add")
    assert p.status == "ok"  # the gate records the syntax error as rejected_static


def test_the_prompt_holds_what_the_model_needs_and_is_deterministic() -> None:
    ctx = PromptContext(
        kernel="add",
        launcher="add",
        signature="add(x, y, BLOCK=256, num_warps=4)",
        parent_source=ADD_SOURCE,
        parent_knobs={"BLOCK": 256, "num_warps": 4},
        strategy="tiling",
        instruction="Retile the computation.",
        gpu={"gpu_model": "NVIDIA H100 80GB HBM3", "mode": "gpu", "cuda": "12.8"},
        parent_time_s=12.5e-6,
        baseline_time_s=20e-6,
        timing_kind="gpu",
        profile={"sol_dram": 0.82, "sol_sm": 0.2},
        shapes=[{"N": 3000}],
        dtypes=["float16"],
        history=[Attempt("llm:fusion", "rejected_static", "syntax: line 3: invalid syntax")],
    )
    messages = build_messages(ctx)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert "add(x, y, BLOCK=256, num_warps=4)" in system and "ONE fenced" in system
    for needle in ("NVIDIA H100", "12.5 us", "20.0 us", "memory-bound (DRAM at 82% of peak)",
                   "Retile the computation.", "llm:fusion: rejected_static: syntax",
                   "add(*inputs, BLOCK=256, num_warps=4)", ADD_SOURCE.strip()[:40]):  # fmt: skip
        assert needle in user, needle
    assert build_messages(ctx) == messages  # the cache key depends on it
    assert estimate_prompt_tokens(messages) >= len((system + user).encode())


def test_bottleneck_classes() -> None:
    assert bottleneck({}) is None
    assert bottleneck({"sol_sm": 0.9, "sol_dram": 0.3}) == "compute-bound (SM at 90% of peak)"
    assert bottleneck({"sol_sm": 0.3})
    assert "latency-bound" in str(bottleneck({"sol_sm": 0.3, "sol_l2": 0.2}))
