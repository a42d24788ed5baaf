"""The static gate for LLM-written modules: each rule, the examples, the adversarial corpus."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("edit", "rule"),
    [
        (("def add(x, y,", "def add(x, y"), "syntax"),
        (("import torch\n", "import torch\nimport os\n"), "imports"),
        (("import torch\n", "import torch\nfrom . import helper\n"), "imports"),
        (("    return out\n", "    return eval('out')\n"), "forbidden"),
        (
            (
                "    out = torch.empty_like(x)\n",
                "    out = torch.empty_like(x)\n    s = torch.cuda.Stream()\n",
            ),
            "forbidden",
        ),
        (("    return out\n", "    return out.__class__\n"), "forbidden"),
        (("    return out\n", "    return torch.compile(add)\n"), "forbidden"),
        (
            ("import triton.language as tl\n", "import triton.language as tl\n_CACHE = {}\n"),
            "module_state",
        ),
        (
            ("import triton.language as tl\n", "import triton.language as tl\nprint('hi')\n"),
            "module_state",
        ),
        (
            (
                "import triton.language as tl\n",
                "import triton.language as tl\nclass A:\n    pass\n",
            ),
            "module_state",
        ),
        (("    return out\n", "    global _X\n    return out\n"), "module_state"),
        (("    return out\n", "    torch.add = None\n    return out\n"), "monkey_patch"),
        (
            ("def add(x, y, BLOCK=256, num_warps=4):", "def add2(x, y, BLOCK=256, num_warps=4):"),
            "launcher",
        ),
        (("def add(x, y, BLOCK=256, num_warps=4):", "def add(x, y, BLOCK=256):"), "signature"),
        (
            ("def add(x, y, BLOCK=256, num_warps=4):", "def add(a, b, BLOCK=256, num_warps=4):"),
            "signature",
        ),
        (("@triton.jit\n", ""), "no_kernel"),
        ((LAUNCH, "    pass\n"), "not_launched"),
        (("    return out\n", "    return reference(x, y)\n"), "torch_compute"),
        (("    return out\n", "    return torch.add(x, y)\n"), "torch_compute"),
        (("    return out\n", "    return out + 0 * x\n"), "torch_compute"),
        (("    return out\n", "    return out.sum() * 0 + x @ y\n"), "torch_compute"),
        (("    return out\n", "    return torch.nn.functional.relu(out)\n"), "torch_compute"),
    ],
)
def test_each_rule(edit: tuple[str, str], rule: str) -> None:
    old, new = edit
    assert old in ADD_SOURCE
    assert gate(ADD_SOURCE.replace(old, new, 1)) == rule


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
