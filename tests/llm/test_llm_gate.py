"""The static gate for LLM-written modules: each rule, the examples, the adversarial corpus."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ADD_SOURCE
from tuned.llm.gate import check_llm_module, launcher_signature

ROOT = Path(__file__).resolve().parents[2]


def gate(source: str) -> str | None:
    found = check_llm_module(
        source, launcher="add", original_source=ADD_SOURCE, reference="reference"
    )
    return None if found is None else found.rule


def test_the_original_passes() -> None:
    assert gate(ADD_SOURCE) is None


@pytest.mark.parametrize(
    "entry", sorted(p.name for p in (ROOT / "examples/registry").iterdir() if p.is_dir())
)
def test_every_example_passes_against_itself(entry: str) -> None:
    directory = ROOT / "examples/registry" / entry
    spec = yaml.safe_load((directory / "kernel.yaml").read_text())
    source = (directory / spec["module"]).read_text()
    found = check_llm_module(
        source, launcher=spec["launcher"], original_source=source, reference=spec.get("reference")
    )
    assert found is None, found


LAUNCH = "    _add[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)\n"
RET = "    return out\n"
TOP = "import triton.language as tl\n"
KERNEL_BODY = "    mask = offs < n\n"


def body(code: str) -> tuple[str, str]:
    """An edit putting ``code`` (indented lines) in the launcher, before its return."""
    return RET, "".join(f"    {line}\n" for line in code.splitlines()) + RET


def top(code: str) -> tuple[str, str]:
    """An edit putting ``code`` at module level, after the imports."""
    return TOP, TOP + code + "\n"


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (("def add(x, y,", "def add(x, y"), "syntax"),
        (("import torch\n", "import torch\nimport os\n"), "imports"),
        (("import torch\n", "import torch\nfrom . import helper\n"), "imports"),
        (body("eval('out')"), "forbidden"),
        (body("s = torch.cuda.Stream()"), "module_attr"),
        (body("k = out.__class__"), "dunder"),
        (body("torch.compile(add)"), "module_attr"),
        (top("_CACHE = {}"), "module_state"),
        (top("A = 1\nA += 1"), "module_state"),
        (top("class A:\n    pass"), "forbidden"),
        (body("global _X"), "module_state"),
        (body("torch.add = None"), "monkey_patch"),
        (
            ("def add(x, y, BLOCK=256, num_warps=4):", "def add2(x, y, BLOCK=256, num_warps=4):"),
            "launcher",
        ),
        (
            (
                "def add(x, y, BLOCK=256, num_warps=4):",
                "def add(x, y, BLOCK=256, num_warps=4, extra=1):",
            ),
            "signature",
        ),
        (
            ("def add(x, y, BLOCK=256, num_warps=4):", "def add(a, b, BLOCK=256, num_warps=4):"),
            "signature",
        ),
        (("@triton.jit\n", ""), "no_kernel"),
        ((LAUNCH, "    pass\n"), "not_launched"),
        ((RET, "    return reference(x, y)\n"), "torch_compute"),
        ((RET, "    return torch.add(x, y)\n"), "torch_compute"),
        ((RET, "    return out + 0 * x\n"), "torch_compute"),
        ((RET, "    return out.sum() * 0 + x @ y\n"), "torch_compute"),
        ((RET, "    return torch.nn.functional.relu(out)\n"), "torch_compute"),
    ],
)
def test_each_rule(edit: tuple[str, str], rule: str) -> None:
    old, new = edit
    assert old in ADD_SOURCE
    assert gate(ADD_SOURCE.replace(old, new, 1)) == rule


#: Hostile modules, one per escape class of issue 21 (and more): each is the add module with
#: one edit, refused under the rule that names the escape.
HOSTILE: dict[str, tuple[tuple[str, str], str]] = {
    # The standard library through torch's own module attributes.
    "torch_sys": (body("torch.sys.modules['os'].system('id')"), "module_attr"),
    "torch_os": (body("torch.os.system('id')"), "module_attr"),
    "torch_C": (body("torch._C._set_grad_enabled(False)"), "module_attr"),
    "torch_ops": (body("torch.ops.aten.add(x, y, out=out)"), "module_attr"),
    "torch_load": (body("w = torch.load('/var/lib/ktuned/ktuned.sqlite')"), "module_attr"),
    "torch_save": (body("torch.save(out, '/tmp/stolen.pt')"), "module_attr"),
    "torch_library": (body("torch.library.Library('aten', 'IMPL')"), "module_attr"),
    "tl_core_builtins": (body("tl.core.builtins.exec('1')"), "module_attr"),
    "triton_runtime": (body("triton.runtime.driver.active.get_current_device()"), "module_attr"),
    "triton_knobs": (body("c = triton.knobs.cache.dir"), "module_attr"),
    "math_is_clean": ((TOP, TOP + "import math\ndef _h():\n    return math.sys\n"), "module_attr"),
    # Imports outside the allowlist, however they are spelled.
    "import_ctypes": (top("import ctypes"), "imports"),
    "import_builtins": (top("import builtins"), "imports"),
    "import_importlib": (top("import importlib"), "imports"),
    "from_threading": (top("from threading import Thread"), "imports"),
    "from_torch_sys": (top("from torch import sys"), "imports"),
    "torch_submodule": (top("import torch.utils.cpp_extension"), "imports"),
    "star_import": (top("from triton.language import *"), "imports"),
    "import_in_function": (body("import subprocess"), "imports"),
    # Aliases that would hide a call from the compute rule.
    "alias_top_level": (top("ADD = torch.add"), "alias"),
    "alias_local": (body("f = torch.add\nf(x, y, out=out)"), "alias"),
    "alias_module": (body("t = torch\nt.add(x, y, out=out)"), "alias"),
    "alias_passed": (body("list(map(torch.add, [x], [y]))"), "alias"),
    "alias_tl_module": (body("m = tl"), "alias"),
    # Method chains on call results and objects that reach the interpreter.
    "dunder_class": (body("k = torch.empty(1).__class__.__subclasses__()"), "dunder"),
    "dunder_globals": (body("g = (lambda: 0).__globals__"), "dunder"),
    "dunder_builtins_key": (body("b = {}.get('__builtins__')"), "dunder"),
    "dunder_format": (body("s = '{0.__class__}'.format(x)"), "dunder"),
    "dunder_import": (body("__import__('os')"), "forbidden"),
    "module_getattr": (top("def __getattr__(name):\n    return 0"), "dunder"),
    "dunder_rebind": (top("import torch as __builtins__"), "dunder"),
    "str_format": (body("s = '{0.device}'.format(x)"), "forbidden"),
    "generator_frame": (body("g = (i for i in [1])\nf = g.gi_frame.f_back"), "introspection"),
    "traceback_frame": (
        body("try:\n    pass\nexcept ValueError as e:\n    e.with_traceback(None)"),
        "introspection",
    ),
    "private_attr": (body("p = x._cdata"), "private"),
    "private_chain": (body("out.untyped_storage()._share_filename_cpu_()"), "private"),
    "numpy_tofile": (body("x.numpy().tofile('/tmp/x')"), "forbidden"),
    # Builtins that reach everything.
    "getattr": (body("getattr(torch, 'sy' + 's')"), "forbidden"),
    "setattr": (body("setattr(torch, 'add', None)"), "forbidden"),
    "exec": (body("exec('import os')"), "forbidden"),
    "compile": (body("compile('1', 'f', 'eval')"), "forbidden"),
    "open": (body("open('/etc/passwd').read()"), "forbidden"),
    "globals": (body("globals()['torch']"), "forbidden"),
    "vars": (body("vars(torch)"), "forbidden"),
    "type": (body("type(x)"), "forbidden"),
    "print_forges_protocol": (body('print(\'{"result": "ok"}\')'), "forbidden"),
    "unknown_name": (body("os.system('id')"), "builtins"),
    "license_builtin": (body("license()"), "builtins"),
    "generator_yield": (top("def _g():\n    yield 1"), "forbidden"),
    "async_def": (top("async def _g():\n    return 1"), "forbidden"),
    # Monkey-patching anything.
    "patch_tl": (body("tl.load = None"), "monkey_patch"),
    "patch_tensor_class": (body("torch.Tensor.add = None"), "monkey_patch"),
    "patch_input": (body("x.data = y"), "monkey_patch"),
    "patch_kernel": (body("_add.fn = None"), "monkey_patch"),
    "delete_attr": (body("del torch.add"), "monkey_patch"),
    "patch_chain": (body("triton.knobs.cache.dir = '/tmp'"), "monkey_patch"),
    # Code run at import beyond definitions.
    "top_call": (top("_X = print"), "forbidden"),
    "top_if": (top("if True:\n    X = 1"), "module_state"),
    "top_list_multiply": (top("_X = [0] * 10"), "module_state"),
    "top_huge_power": (top("X = 10 ** 10 ** 10"), "module_state"),
    "top_huge_string": (top("X = 'a' * 10 ** 9"), "module_state"),
    "top_try": (top("try:\n    X = 1\nexcept ValueError:\n    X = 2"), "module_state"),
    "default_call": (
        top("def _h(v=_boom()):\n    return v\ndef _boom():\n    return 1"),
        "default",
    ),
    "default_comprehension": (
        top("def _h(v=[i for i in range(10 ** 9)]):\n    return v"),
        "default",
    ),
    "default_mutable_cache": (top("def _h(v, seen=[]):\n    return seen"), "default"),
    "top_level_list": (top("_SEEN = [1, 2]"), "module_state"),
    "kernel_hook": (body("_add.add_pre_run_hook(None)"), "forbidden"),
    "kernel_cache": (body("c = _add.cache"), "forbidden"),
    "default_huge_power": (top("def _h(v=2 ** 10 ** 9):\n    return v"), "default"),
    "decorator_function": (
        top("def _wrap(f):\n    return f\n@_wrap\ndef _h():\n    return 1"),
        "decorator",
    ),
    "decorator_argument": (
        ("@triton.jit\n", "def _n():\n    return 1\n@triton.jit(do_not_specialize=_n())\n"),
        "decorator",
    ),
    # Torch compute hidden where the launcher's rule did not look.
    "from_import_call": (
        (TOP, TOP + "from torch import add as plus\n"),
        "torch_compute",
    ),
    "heuristics_lambda": (
        (
            "@triton.jit\n",
            "@triton.heuristics({'D': lambda a: a['out'].copy_(a['x']) is None})\n@triton.jit\n",
        ),
        "torch_compute",
    ),
    "torch_in_kernel": (
        (KERNEL_BODY, KERNEL_BODY + "    torch.add(x_ptr, y_ptr)\n"),
        "torch_compute",
    ),
    "builtin_sum_of_inputs": ((RET, "    return sum((x, y))\n"), "torch_compute"),
    "builtin_abs_of_input": ((RET, "    return abs(x)\n"), "torch_compute"),
    "augmented_add_of_input": ((RET, "    out += y\n    return out\n"), "torch_compute"),
    "functional_alias": (
        (TOP, TOP + "import torch.nn.functional as F\n"),
        None,  # importing is fine; the call below is what is refused
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_module_is_refused_with_its_rule(name: str) -> None:
    (old, new), rule = HOSTILE[name]
    assert old in ADD_SOURCE
    source = ADD_SOURCE.replace(old, new, 1)
    if name == "from_import_call":
        source = source.replace(RET, "    return plus(x, y)\n")
    if name == "functional_alias":
        assert gate(source) is None
        source = source.replace(RET, "    return F.relu(out)\n")
        rule = "torch_compute"
    found = check_llm_module(
        source, launcher="add", original_source=ADD_SOURCE, reference="reference"
    )
    assert found is not None and found.rule == rule, (name, found)
    assert "line " in found.message or rule == "torch_compute", found.message


def test_the_hostile_corpus_covers_every_rule() -> None:
    rules = {rule for _, rule in HOSTILE.values()}
    assert {"imports", "forbidden", "dunder", "module_attr", "alias", "private",
            "introspection", "builtins", "monkey_patch", "module_state", "default",
            "decorator", "torch_compute"} <= rules  # fmt: skip
    assert len(HOSTILE) >= 25


def test_the_gate_ends_quickly_on_hostile_sizes() -> None:
    """Deep nesting and huge literals are refused without evaluating or recursing away."""
    deep = ADD_SOURCE.replace(RET, "    z = " + "(" * 5000 + "1" + ")" * 5000 + "\n" + RET)
    chain = ADD_SOURCE.replace(RET, "    z = 1" + " + 1" * 100_000 + "\n" + RET)
    big_default = ADD_SOURCE.replace(TOP, TOP + "def _h(v=" + "-" * 100_000 + "1):\n    pass\n")
    start = time.monotonic()
    for source in (deep, chain, big_default):
        found = check_llm_module(
            source, launcher="add", original_source=ADD_SOURCE, reference="reference"
        )
        assert found is None or found.rule in {"syntax", "default"}, found
    assert time.monotonic() - start < 20


#: What an LLM rewrite of the examples looks like: autotune and heuristics, a grid lambda,
#: libdevice and tl.math, annotations, typing, torch.nn.functional in the reference.
REALISTIC = textwrap.dedent(
    '''
    """Row softmax, autotuned."""
    from __future__ import annotations

    import math
    from typing import Optional

    import torch
    import torch.nn.functional as F
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    LOG2E: float = 1.4426950408889634
    MAX_FUSED = 65536
    DEFAULT_BLOCK = 1024
    WIDE_BLOCK = DEFAULT_BLOCK * 4
    VEC = tl.constexpr(4)


    def _prune(configs, named_args, **kwargs):
        return [c for c in configs if c.kwargs["BLOCK_SIZE"] <= MAX_FUSED]


    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_SIZE": DEFAULT_BLOCK}, num_warps=4, num_stages=2),
            triton.Config({"BLOCK_SIZE": WIDE_BLOCK}, num_warps=8),
            triton.Config({"BLOCK_SIZE": 2 ** 13}, num_warps=16),
        ],
        key=["N"],
        prune_configs_by={"early_config_prune": _prune},
    )
    @triton.heuristics({"EVEN_N": lambda args: args["N"] % args["BLOCK_SIZE"] == 0})
    @triton.jit
    def _softmax_kernel(x_ptr, out_ptr, N, stride, BLOCK_SIZE: tl.constexpr,
                        EVEN_N: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        m = tl.max(x, axis=0)
        e = libdevice.exp2((x - m) * LOG2E)
        s = tl.sum(tl.where(mask, e, 0.0), axis=0)
        y = e * tl.math.rsqrt(s * s)
        tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


    def softmax(x: torch.Tensor, BLOCK_SIZE: int = DEFAULT_BLOCK, num_warps: int = 4,
                num_stages: int = 3) -> torch.Tensor:
        assert x.dim() == 2 and x.is_contiguous(), "expects a contiguous matrix"
        M, N = x.shape
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        block = max(triton.next_power_of_2(N), 16)
        grid = lambda meta: (M,)  # noqa: E731
        with torch.no_grad():
            _softmax_kernel[grid](x, out, N, x.stride(0))
        if block > MAX_FUSED:
            raise ValueError(f"rows of {N} columns need {math.ceil(N / MAX_FUSED)} passes")
        return out


    def reference(x: torch.Tensor, dim: Optional[int] = None) -> torch.Tensor:
        return F.softmax(x.float(), dim=-1).to(x.dtype)


    def make_inputs(shape, dtype, device, seed):
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(shape["M"], shape["N"], generator=gen, dtype=torch.float32)
        return (x.to(dtype).to(device),)
    '''
)


def test_a_realistic_llm_rewrite_passes() -> None:
    source = (ROOT / "examples/registry/softmax/softmax.py").read_text()
    found = check_llm_module(
        REALISTIC, launcher="softmax", original_source=source, reference="reference"
    )
    assert found is None, found


def test_the_project_rewrites_pass() -> None:
    """The modules the LLM tests script as replies pass the gate."""
    from tests.llm.test_llm_proposals import FASTER
    from tests.llm.test_llm_reference import REF_SOURCE, TRITON_MODULE

    assert gate(FASTER) is None
    found = check_llm_module(
        TRITON_MODULE, launcher="launcher", original_source=REF_SOURCE, reference="reference"
    )
    assert found is None, found


def test_allowed_launcher_code_passes() -> None:
    """Allocation, shape arithmetic, helper functions and constants are fine."""
    helper = (
        "import math\n\nMIN_BLOCK: int = 64\nVEC = tl.constexpr(4)\n\n\n"
        "def _blocks(n, block):\n    return math.ceil(n / max(block, MIN_BLOCK))\n"
    )
    source = ADD_SOURCE.replace(
        "    out = torch.empty_like(x)\n",
        "    out = torch.empty_like(x)\n    assert _blocks(x.numel(), BLOCK) > 0\n",
    ).replace("import triton.language as tl\n", "import triton.language as tl\n" + helper)
    assert gate(source) is None


def test_the_adversarial_corpus_is_mostly_caught_before_running() -> None:
    """Modules that cheat through imports, module state or torch compute never reach a
    worker; the rest are left to the runtime checks."""
    caught = {}
    for path in sorted((ROOT / "tests/adversarial").glob("*.py")):
        found = check_llm_module(
            path.read_text(), launcher="add", original_source=ADD_SOURCE, reference="reference"
        )
        caught[path.stem] = None if found is None else found.rule
    for name in ("opens_socket", "spawns_process", "writes_outside", "patches_clock",
                 "side_stream", "caches_output", "calls_reference", "syntax_error",
                 "hang_at_import", "patches_timer"):  # fmt: skip
        assert caught[name] is not None, name


def test_launcher_signature() -> None:
    assert launcher_signature(ADD_SOURCE, "add") == "add(x, y, BLOCK=256, num_warps=4)"
    assert launcher_signature("def f(:", "add") is None


def test_candidate_check_applies_the_full_gate_to_llm_modules_only(tmp_path: Path) -> None:
    from tests.conftest import ADD_YAML
    from tuned.evaluation.static import candidate_check
    from tuned.outcomes import Candidate, Provenance
    from tuned.registry import load_entry

    entry = tmp_path / "add"
    entry.mkdir()
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    spec = load_entry(entry)
    cheat = ADD_SOURCE.replace("    return out\n", "    return torch.add(x, y)\n")
    knobs = {"BLOCK": 256, "num_warps": 4}

    def check(provenance: Provenance) -> str | None:
        candidate = Candidate("add", spec.generation, cheat, knobs, provenance)
        return candidate_check(spec, candidate)

    assert check(Provenance.PARAMETRIC) is None  # the minimal gate: runtime checks decide
    reason = check(Provenance.LLM)
    assert reason is not None and reason.startswith("torch_compute:")
