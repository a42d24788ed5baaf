"""Launchers as people write them (docs/registry.md, "Launchers"), through a real worker.

Each entry is a real Triton kernel run in the interpreter; each form is also shown failing
when its kernel is wrong, so a pass is never vacuous.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import has_gpu
from tuned.errors import RegistryError
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import KernelSpec, load_entry

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def axpy_into(x, y, out, alpha=1.0, BLOCK=64):
    n = x.numel()
    _axpy[(triton.cdiv(n, BLOCK),)](x, y, out, n, alpha, BLOCK=BLOCK)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape["N"], generator=g).to(dtype)
    y = torch.randn(shape["N"], generator=g).to(dtype)
    return x.to(device), y.to(device)
"""

HEAD = "module: ops.py\ninputs: make_inputs\nshapes: [{N: 200, perf: true}, {N: 7}]\n"
HEAD += "dtypes: [float32]\n"

# name -> (module source after KERNEL, kernel.yaml lines after HEAD)
FORMS: dict[str, tuple[str, str]] = {
    "autograd": (
        """
class Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, BLOCK=64):
        out = torch.empty_like(x)
        axpy_into(x, y, out, 1.0, BLOCK=BLOCK)
        return out

    @staticmethod
    def backward(ctx, grad):
        g = torch.empty_like(grad)
        axpy_into(grad, torch.zeros_like(grad), g, 1.0)  # d/dx
        return g, grad, None


def reference(x, y):
    return x + y
""",
        "launcher: Add.apply\nreference: reference\nbackward: true\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "staticmethod": (
        """
class Ops:
    @staticmethod
    def add(x, y, BLOCK=64):
        out = torch.empty_like(x)
        axpy_into(x, y, out, 1.0, BLOCK=BLOCK)
        return out


def reference(x, y):
    return x + y
""",
        "launcher: Ops.add\nreference: reference\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "classmethod": (
        """
class Ops:
    ALPHA = 2.0

    @classmethod
    def axpy(cls, x, y, BLOCK=64):
        out = torch.empty_like(x)
        axpy_into(x, y, out, cls.ALPHA, BLOCK=BLOCK)
        return out


def reference(x, y):
    return 2.0 * x + y
""",
        "launcher: Ops.axpy\nreference: reference\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "module": (
        """
class Scaled(torch.nn.Module):
    def __init__(self, n, alpha=1.0):
        super().__init__()
        self.shift = torch.nn.Parameter(torch.randn(n))
        self.alpha = alpha

    def forward(self, x, y, BLOCK=64):
        out = torch.empty_like(x)
        axpy_into(x, y + self.shift, out, self.alpha, BLOCK=BLOCK)
        return out


class ScaledReference(torch.nn.Module):
    def __init__(self, n, alpha=1.0):
        super().__init__()
        self.shift = torch.nn.Parameter(torch.randn(n))
        self.alpha = alpha

    def forward(self, x, y):
        return self.alpha * x + y + self.shift
""",
        "launcher: Scaled\nreference: ScaledReference\ninit: {n: N, alpha: 3.0}\n"
        "knobs: {BLOCK: [32, 64]}\n",
    ),
    # PyTorch's factory keywords with a GPU default (attorch's layers: `device='cuda'`): built
    # on the inputs' device; a default that never works here ("meta") shows it is passed.
    "module_device": (
        """
class Shifted(torch.nn.Module):
    def __init__(self, n, device="meta", dtype=torch.float32):
        super().__init__()
        self.shift = torch.nn.Parameter(torch.randn(n, device=device, dtype=dtype))

    def forward(self, x, y, BLOCK=64):
        out = torch.empty_like(x)
        axpy_into(x, y + self.shift, out, 1.0, BLOCK=BLOCK)
        return out


class ShiftedReference(torch.nn.Module):
    def __init__(self, n, device="meta"):
        super().__init__()
        self.shift = torch.nn.Parameter(torch.randn(n, device=device))

    def forward(self, x, y):
        return x + y + self.shift
""",
        "launcher: Shifted\nreference: ShiftedReference\ninit: {n: N}\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "keyword_only": (
        """
def add(x, y, *, BLOCK=64, alpha=1.0):
    out = torch.empty_like(x)
    axpy_into(x, y, out, alpha, BLOCK=BLOCK)
    return out


def reference(x, y):
    return x + y
""",
        "launcher: add\nreference: reference\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "in_place": (
        """
def add_(x, y, BLOCK=64):
    axpy_into(x, y, x, 1.0, BLOCK=BLOCK)


def reference(x, y):
    return x + y
""",
        "launcher: add_\nreference: reference\noutputs: [x]\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "out_argument": (
        """
def make_buffers(shape, dtype, device, seed):
    x, y = make_inputs(shape, dtype, device, seed)
    return x, y, torch.zeros_like(x)


def reference(x, y, out):
    out.copy_(x + y)
""",
        "launcher: axpy_into\nreference: reference\noutputs: [2]\ninputs: make_buffers\n"
        "knobs: {BLOCK: [32, 64]}\n",
    ),
    "keyword_input": (  # FlagGems: the output buffer keyword-only, passed by `keywords:`
        """
def make_buffers(shape, dtype, device, seed):
    x, y = make_inputs(shape, dtype, device, seed)
    return x, y, torch.zeros_like(x)


def add_into(x, y, *, out0, BLOCK=64):
    axpy_into(x, y, out0, 1.0, BLOCK=BLOCK)
    return out0


def reference(x, y, out0):  # an entry's own reference takes every input by position
    return x + y
""",
        "launcher: add_into\nreference: reference\nkeywords: [out0]\noutputs: [out0]\n"
        "inputs: make_buffers\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "keyword_kwargs": (  # the buffer taken through **kwargs: any name goes
        """
def make_buffers(shape, dtype, device, seed):
    x, y = make_inputs(shape, dtype, device, seed)
    return x, y, torch.zeros_like(x)


def add_into(x, y, BLOCK=64, **options):
    axpy_into(x, y, options["out0"], 1.0, BLOCK=BLOCK)


def reference(x, y, buffer):
    return x + y
""",
        "launcher: add_into\nreference: reference\nkeywords: [out0]\noutputs: [out0]\n"
        "inputs: make_buffers\nknobs: {BLOCK: [32, 64]}\n",
    ),
    "helpers_package": (
        """
from helpers import inputs as _inputs  # the entry's own package


def reference(x, y):
    return x + y
""",
        "launcher: helpers.ops.add\nreference: reference\ninputs: helpers.inputs.make\n"
        "knobs: {BLOCK: [32, 64]}\n",
    ),
}

HELPERS = {
    "helpers/__init__.py": "",
    "helpers/inputs.py": "from helpers.ops import make_inputs as make\n",
    "helpers/ops.py": KERNEL + "\n\ndef add(x, y, BLOCK=64):\n    out = torch.empty_like(x)\n"
    "    axpy_into(x, y, out, 1.0, BLOCK=BLOCK)\n    return out\n",
}

# A wrong kernel for each form: the same edit of the shared kernel (y's sign flipped) must fail.
WRONG = ("alpha * x + y, mask=mask)", "alpha * x - y, mask=mask)")


def write(root: Path, name: str, source: str, yaml: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "ops.py").write_text(source)
    (directory / "kernel.yaml").write_text(f"name: {name.replace('_', '-')}\n" + yaml)
    return directory


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerClient]:
    settings = EvaluationSettings(
        interpreter=True, compile_timeout_s=20.0, correctness_timeout_s=60.0
    )
    with WorkerClient(workdir=tmp_path_factory.mktemp("worker"), settings=settings) as c:
        yield c


def _candidate(spec: KernelSpec, source: str, knobs: dict[str, int]) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs=knobs,
        provenance=Provenance.PARAMETRIC,
    )


def _entry(tmp_path: Path, form: str) -> KernelSpec:
    extra, yaml = FORMS[form]
    head = HEAD.replace("inputs: make_inputs\n", "") if "inputs:" in yaml else HEAD
    directory = write(tmp_path, form, KERNEL + extra, head + yaml)
    if form == "helpers_package":
        for rel, text in HELPERS.items():
            (directory / rel).parent.mkdir(exist_ok=True)
            (directory / rel).write_text(text)
    return load_entry(directory)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_launcher_form_is_checked_for_real(
    client: WorkerClient, tmp_path: Path, form: str
) -> None:
    spec = _entry(tmp_path, form)
    good = client.evaluate(spec, _candidate(spec, spec.module_source, {"BLOCK": 32}))
    assert good.outcome is Outcome.OK, good.reason
    assert good.checked_cases and good.checked_cases >= 4
    wrong = spec.module_source.replace(*WRONG)
    assert wrong != spec.module_source
    if form == "helpers_package":  # its kernel lives in the helper, not in the candidate:
        return  # test_a_launcher_outside_the_module_counts_its_kernels shows it checked
    bad = client.evaluate(spec, _candidate(spec, wrong, {"BLOCK": 32}))
    assert bad.outcome is Outcome.INCORRECT, bad.reason


def test_backward_compares_input_gradients(client: WorkerClient, tmp_path: Path) -> None:
    spec = _entry(tmp_path, "autograd")
    assert spec.backward == ("*",)
    # The forward is right, the gradient of x is doubled: only the backward check sees it.
    wrong_grad = spec.module_source.replace(
        "axpy_into(grad, torch.zeros_like(grad), g, 1.0)",
        "axpy_into(grad, torch.zeros_like(grad), g, 2.0)",
    )
    assert wrong_grad != spec.module_source
    result = client.evaluate(spec, _candidate(spec, wrong_grad, {}))
    assert result.outcome is Outcome.INCORRECT
    assert "output 1" in result.reason  # the first gradient, after the one forward output


def test_in_place_kernels_run_on_fresh_copies(client: WorkerClient, tmp_path: Path) -> None:
    spec = _entry(tmp_path, "in_place")
    assert spec.outputs == ("x",)
    # Written in place, the inputs still compare unchanged: each call got its own copy of x.
    result = client.evaluate(spec, _candidate(spec, spec.module_source, {"BLOCK": 64}))
    assert result.outcome is Outcome.OK, result.reason
    # A kernel that writes only part of its in-place output is caught.
    partial = spec.module_source.replace("mask = offs < n\n", "mask = offs < n - 1\n", 1)
    assert partial != spec.module_source
    assert client.evaluate(spec, _candidate(spec, partial, {})).outcome is Outcome.INCORRECT


def test_a_launcher_outside_the_module_counts_its_kernels(
    client: WorkerClient, tmp_path: Path
) -> None:
    spec = _entry(tmp_path, "helpers_package")
    # The launcher and its kernel live in the entry's helper package: its launches count as the
    # launcher's own, and a wrong helper is caught just as a wrong module would be.
    helper = spec.extra_files["helpers/ops.py"]
    (spec.directory / "helpers/ops.py").write_text(helper.replace(*WRONG))
    changed = load_entry(spec.directory)
    result = client.evaluate(changed, _candidate(changed, changed.module_source, {}))
    assert result.outcome is Outcome.INCORRECT, result.reason


def test_a_launcher_that_returns_nothing_without_outputs_is_invalid(tmp_path: Path) -> None:
    extra, yaml = FORMS["in_place"]
    directory = write(
        tmp_path, "no_outputs", KERNEL + extra, HEAD + yaml.replace("outputs: [x]\n", "")
    )
    with pytest.raises(RegistryError) as info:
        load_entry(directory)
    text = str(info.value)
    assert "kernel.yaml" in text and "outputs" in text and "returns nothing" in text


def test_an_imported_launcher_that_returns_nothing_is_rejected_at_run_time(
    client: WorkerClient, tmp_path: Path
) -> None:
    # The loader cannot read a launcher defined elsewhere; the worker refuses the empty result.
    source = KERNEL + "\nfrom helpers.ops import add_ as launch\n\n\ndef reference(x, y):\n"
    source += "    return x + y\n"
    yaml = HEAD + "launcher: launch\nreference: reference\nknobs: {}\n"
    directory = write(tmp_path, "imported", source, yaml)
    (directory / "helpers").mkdir()
    (directory / "helpers/__init__.py").write_text("")
    (directory / "helpers/ops.py").write_text(
        KERNEL + "\n\ndef add_(x, y):\n    axpy_into(x, y, x)\n"
    )
    spec = load_entry(directory)
    result = client.evaluate(spec, _candidate(spec, spec.module_source, {}))
    assert result.outcome is Outcome.REJECTED_STATIC
    assert "kernel.yaml, field outputs" in result.reason and "returned nothing" in result.reason


def test_call_fields_are_validated(tmp_path: Path) -> None:
    extra, yaml = FORMS["in_place"]
    bad = yaml.replace("outputs: [x]", "outputs: [x, 1.5]\nbackward: [1.5]\ninit: [1]")
    directory = write(tmp_path, "bad_fields", KERNEL + extra, HEAD + bad)
    with pytest.raises(RegistryError) as info:
        load_entry(directory)
    text = str(info.value)
    for field in ("outputs[1]", "backward[0]", "init"):
        assert f"field '{field}'" in text, text
    extra, yaml = FORMS["keyword_input"]
    for bad, field, says in (
        (yaml.replace("keywords: [out0]", "keywords: [out0, 3]"), "keywords[1]", "keyword"),
        (yaml.replace("keywords: [out0]", "keywords: [out0, BLOCK]"), "keywords", "is a knob"),
        (yaml.replace("keywords: [out0]", "keywords: [out0, out0]"), "keywords", "twice"),
    ):
        head = HEAD.replace("inputs: make_inputs\n", "")
        directory = write(
            tmp_path, f"bad_{len(list(tmp_path.iterdir()))}", KERNEL + extra, head + bad
        )
        with pytest.raises(RegistryError) as info:
            load_entry(directory)
        assert f"field '{field}'" in str(info.value) and says in str(info.value), info.value


def test_keywords_that_the_launcher_cannot_take_are_an_invalid_entry(
    client: WorkerClient, tmp_path: Path
) -> None:
    """A name that is no parameter of the launcher, or keywords for an autograd Function's
    ``apply`` (positional only), end in an error naming the field, not a TypeError."""
    extra, yaml = FORMS["keyword_input"]
    typo = yaml.replace("out0]", "out1]")  # keywords and outputs
    directory = write(
        tmp_path, "kw_typo", KERNEL + extra, HEAD.replace("inputs: make_inputs\n", "") + typo
    )
    spec = load_entry(directory)
    result = client.evaluate(spec, _candidate(spec, spec.module_source, {"BLOCK": 32}))
    assert result.outcome is Outcome.REJECTED_STATIC, result.reason
    assert "field keywords" in result.reason and "'out1' is not a parameter" in result.reason
    extra, yaml = FORMS["autograd"]
    directory = write(tmp_path, "kw_apply", KERNEL + extra, HEAD + yaml + "keywords: [y]\n")
    spec = load_entry(directory)
    result = client.evaluate(spec, _candidate(spec, spec.module_source, {"BLOCK": 32}))
    assert result.outcome is Outcome.REJECTED_STATIC, result.reason
    assert "field keywords" in result.reason and "by position only" in result.reason


_WARMUP_ENTRY = """
import torch
import triton
import triton.language as tl


@triton.jit
def _row_scale(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask)
    tl.store(out_ptr + row * n_cols + offs, x * 3.0, mask=mask)


def run(x):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 8
    y = torch.empty_like(x)
    kernel = _row_scale.warmup(
        x, y, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, grid=(1,)
    )
    kernel._init_handles()
    kernel[(n_rows, 1, 1)](x, y, n_cols, BLOCK_SIZE)  # constexprs too, as the tutorial
    return y


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g, device=device).to(dtype),)
"""


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_a_kernel_compiled_with_warmup_and_launched_compiled_is_checked(tmp_path: Path) -> None:
    """Triton's fused-softmax tutorial compiles with ``kernel.warmup(...)`` and launches the
    ``CompiledKernel``: those launches count as the candidate's (the guard refused the
    original as launching no kernel), its knobs are the warmup's, and a wrong kernel is
    caught."""
    directory = tmp_path / "reg" / "rows"
    directory.mkdir(parents=True)
    (directory / "rows.py").write_text(_WARMUP_ENTRY)
    (directory / "kernel.yaml").write_text(
        "name: rows\nmodule: rows.py\nlauncher: run\ninputs: make_inputs\n"
        "shapes:\n  - {M: 64, N: 1000, perf: true}\n  - {M: 3, N: 17}\ndtypes: [float32]\n"
    )
    spec = load_entry(directory)
    assert {"BLOCK_SIZE", "num_warps"} <= set(spec.knobs)
    settings = EvaluationSettings(interpreter=False)
    with WorkerClient(workdir=tmp_path / "w", settings=settings) as client:
        original = Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=spec.module_source,
            knobs=dict(spec.baseline_knobs),
            provenance=Provenance.ORIGINAL,
        )
        result = client.evaluate(spec, original)
        assert result.outcome is Outcome.OK, result.reason
        moved = _candidate(spec, spec.module_source, {**spec.baseline_knobs, "num_warps": 4})
        assert client.evaluate(spec, moved).outcome is Outcome.OK
        wrong = _candidate(spec, spec.module_source.replace("x * 3.0", "x * 2.0"), {})
        assert client.evaluate(spec, wrong).outcome is Outcome.INCORRECT
