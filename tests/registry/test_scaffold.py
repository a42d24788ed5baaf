"""``ktuned registry add``: an entry for existing code, in one command, that then runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ADD_SOURCE

ROOT = Path(__file__).resolve().parents[2]


def ktuned(
    *args: str | Path, path: Path, state: Path | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tuned.cli", *map(str, args)]
    if state is not None:
        cmd += ["--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(path)])}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=path)


def user_package(root: Path, package: str, module: str, source: str) -> None:
    """The user's own package under ``root`` (importable: on PYTHONPATH), never copied into
    an entry."""
    directory = root / package
    directory.mkdir()
    (directory / "__init__.py").write_text("")
    (directory / f"{module}.py").write_text(source)


def assert_tunes(entry: Path, name: str, root: Path) -> None:
    """``ktuned tune`` of ``entry`` succeeds and ``status`` shows ``name`` tuned, not failed."""
    state = root / "state"
    run = ktuned("tune", entry, "--budget", "1", path=root, state=state)
    assert run.returncode == 0, run.stderr
    status = ktuned("status", path=root, state=state)
    row = next(line for line in status.stdout.splitlines() if line.startswith(name))
    assert "failed" not in row and row.split()[1] != "-", status.stdout


def test_add_writes_an_entry_that_checks_and_runs(tmp_path: Path) -> None:
    user_package(tmp_path, "userkernels", "add", ADD_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "userkernels.add.add",
        "--shape",
        "N=3000",
        "--shape",
        "N=7",
        "--dtype",
        "float32",
        "--out",
        tmp_path / "registry",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    entry = tmp_path / "registry" / "add"
    yaml = (entry / "kernel.yaml").read_text()
    assert "launcher: userkernels.add.add" in yaml and "reference" not in yaml.split("\n", 5)[-1]
    assert "{N: 3000, perf: true}" in yaml and "{N: 7}" in yaml
    inputs = (entry / "entry.py").read_text()
    assert 'x = rand(shape["N"])' in inputs and 'y = rand(shape["N"])' in inputs
    assert "NotImplementedError" not in inputs

    check = ktuned("registry", "check", entry, path=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok       add:" in check.stdout
    # the launcher's knobs are found in the user's package (the entry does not import it)
    assert "knob   BLOCK:" in check.stdout and "knob   num_warps:" in check.stdout, check.stdout

    # The original runs in a worker, imported from the user's package, and is the reference.
    assert_tunes(entry, "add", tmp_path)


def test_add_writes_a_stub_that_check_reports(tmp_path: Path) -> None:
    (tmp_path / "modal.py").write_text(
        ADD_SOURCE.replace("def add(x, y, BLOCK=256", "def add(x, y, mode: str, BLOCK=256")
    )
    added = ktuned(
        "registry",
        "add",
        "modal.add",
        "--shape",
        "N=64",
        "--out",
        tmp_path / "reg",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    assert "TODO" in added.stdout and "mode" in added.stdout
    check = ktuned("registry", "check", tmp_path / "reg", path=tmp_path)
    assert check.returncode == 2
    assert "field 'inputs'" in check.stdout and "still a stub" in check.stdout
    assert "mode (a flag or mode" in check.stdout


def test_add_reads_a_custom_op_s_function_and_stubs_a_bare_star_args(tmp_path: Path) -> None:
    """A ``torch.library.custom_op`` (or ``triton_op``: torchao's ops) is an object whose
    signature is ``(*args, **kwargs)``: its inputs are its function's. A launcher that says
    only ``*args`` gets a stub, never a ``make_inputs`` that returns ``()``."""
    source = ADD_SOURCE + textwrap.dedent(
        """

        @torch.library.custom_op("ktuned_scaffold::add_op", mutates_args=())
        def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return add(x, y)


        @torch.library.triton_op("ktuned_scaffold::add_triton_op", mutates_args=())
        def add_triton_op(x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
            return add(x, y)


        def add_any(*args, **kwargs):
            return add(*args, **kwargs)
        """
    )
    (tmp_path / "ops.py").write_text(source)
    for launcher in ("add_op", "add_triton_op", "add_any"):
        added = ktuned(
            "registry", "add", f"ops.{launcher}", "--shape", "N=64", "--out",
            tmp_path / "reg", path=tmp_path,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
    inputs = (tmp_path / "reg" / "add_op" / "entry.py").read_text()
    assert "return (x, y)" in inputs and "NotImplementedError" not in inputs, inputs
    inputs = (tmp_path / "reg" / "add_triton_op" / "entry.py").read_text()
    assert "Its parameters: x, y, n." in inputs and "n (an int scalar)" in inputs, inputs
    stub = (tmp_path / "reg" / "add_any" / "entry.py").read_text()
    assert 'NotImplementedError("TODO(ktuned registry add): make the inputs for *args' in stub


def test_add_refuses_what_it_cannot_import(tmp_path: Path) -> None:
    added = ktuned("registry", "add", "no_such_pkg.mod.fn", "--shape", "N=4", path=tmp_path)
    assert added.returncode == 2
    assert "cannot import" in added.stderr
    bad = ktuned("registry", "add", "os.path.join", "--shape", "N", path=tmp_path)
    assert bad.returncode == 2 and "NAME=SIZE" in bad.stderr


def test_add_says_when_the_launcher_writes_into_arguments(tmp_path: Path) -> None:
    (tmp_path / "inplace.py").write_text(ADD_SOURCE + "\n\ndef add_(x, y):\n    add(x, y)\n")
    added = ktuned(
        "registry",
        "add",
        "inplace.add_",
        "--shape",
        "N=64",
        "--out",
        tmp_path / "reg",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    assert "TODO" in added.stdout and "returns nothing" in added.stdout
    assert "# outputs: [out]" in (tmp_path / "reg" / "add_" / "kernel.yaml").read_text()


def test_registry_check_prints_the_space(tmp_path: Path) -> None:
    from tests.conftest import ADD_YAML

    entry = tmp_path / "add"
    entry.mkdir()
    (entry / "add.py").write_text(ADD_SOURCE)
    (entry / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    check = ktuned("registry", "check", entry, path=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "knob   BLOCK: 64, 128, 256, 512, 1024 (baseline 256)" in check.stdout
    assert "knob   num_warps: 1, 2, 4 (baseline 4)" in check.stdout


SCALE_MODULE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


class Scale(torch.nn.Module):
    def __init__(self, hidden_size, groups, bias=False):
        super().__init__()
        self.hidden_size = hidden_size

    def forward(self, x):
        y = torch.empty_like(x)
        BLOCK = min(4096, triton.next_power_of_2(self.hidden_size))
        _scale[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y
"""


def test_add_fills_a_modules_constructor_arguments(tmp_path: Path) -> None:
    """An nn.Module launcher: the constructor's size argument becomes `init:` (the last
    dimension), one it cannot read is a TODO said by add and a problem of `registry check`
    (an installed class: its module is read); with it filled, the entry tunes."""
    user_package(tmp_path, "usermods", "scale", SCALE_MODULE)
    out = tmp_path / "registry"
    added = ktuned(
        "registry", "add", "usermods.scale.Scale", "--shape", "M=4,N=96", "--dtype", "float32",
        "--out", out, path=tmp_path,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "init.groups" in added.stdout + added.stderr
    yaml_path = out / "scale" / "kernel.yaml"
    yaml = yaml_path.read_text()
    assert "init: {hidden_size: N}" in yaml, yaml
    unfilled = ktuned("registry", "check", out / "scale", path=tmp_path)  # not tuned as it is
    assert unfilled.returncode != 0, unfilled.stdout
    assert "requires groups, which init does not give" in unfilled.stdout + unfilled.stderr
    yaml_path.write_text(
        yaml.replace("init: {hidden_size: N}", "init: {hidden_size: N, groups: 1}")
    )
    check = ktuned("registry", "check", out / "scale", path=tmp_path)
    assert check.returncode == 0 and "knob   BLOCK:" in check.stdout, check.stdout + check.stderr
    state = tmp_path / "state"
    run = ktuned("tune", out / "scale", "--budget", "2", path=tmp_path, state=state)
    assert run.returncode == 0, run.stderr
    status = ktuned("status", path=tmp_path, state=state)
    row = next(line for line in status.stdout.splitlines() if line.startswith("scale"))
    assert "original fails" not in row and "none" in row, status.stdout


PICK_SOURCE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _pick_kernel(x_ptr, t_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    t = tl.load(t_ptr + row)
    tl.store(out_ptr + row, tl.sum(tl.where(cols == t, x, 0.0), axis=0))


def pick(logits, target):
    """The logit of each row's target class (an index into the last dimension)."""
    rows, cols = logits.shape
    out = torch.empty(rows, device=logits.device, dtype=logits.dtype)
    _pick_kernel[(rows,)](logits, target, out, cols, BLOCK=triton.next_power_of_2(cols))
    return out
'''


def test_add_makes_class_indices_for_a_target_and_the_entry_runs(tmp_path: Path) -> None:
    """A label parameter (`target`, as in a cross-entropy) is an integer index into the last
    dimension, one per row: float `rand` made every check fail (a float pointer where the
    kernel loads an index)."""
    user_package(tmp_path, "userpick", "pick", PICK_SOURCE)
    added = ktuned(
        "registry",
        "add",
        "userpick.pick.pick",
        "--shape",
        "M=64,V=100",
        "--dtype",
        "float32",
        "--out",
        tmp_path / "registry",
        path=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    inputs = (tmp_path / "registry" / "pick" / "entry.py").read_text()
    assert 'target = index(shape["M"], high=shape["V"])' in inputs, inputs
    assert 'logits = rand(shape["M"], shape["V"])' in inputs
    assert_tunes(tmp_path / "registry" / "pick", "pick", tmp_path)


def test_add_names_inputs_apart_from_make_inputs_own_names() -> None:
    """An input named like the generator or a helper of make_inputs (flash-linear-attention's
    gate ``g``: ``rms_norm_gated(x, g, weight, bias)``) once replaced the generator, and the
    inputs after it failed (``randn() received an invalid combination of arguments``)."""
    import inspect

    import torch

    from tuned.registry.scaffold import _module_text

    def launcher(x, g, weight, rand, shape, g_, seed):  # type: ignore[no-untyped-def]
        raise AssertionError

    params = list(inspect.signature(launcher).parameters.values())
    text, todo = _module_text("pkg.mod.launcher", params, {"T": 4, "D": 8})
    assert not todo
    scope: dict[str, object] = {}
    exec(compile(text, "entry.py", "exec"), scope)
    make_inputs = scope["make_inputs"]
    assert callable(make_inputs)
    inputs = make_inputs({"T": 4, "D": 8}, torch.float32, "cpu", 0)
    # the gate `g` beside a spelled-out `weight`: of the input's shape, not gamma's
    assert [tuple(t.shape) for t in inputs] == [(4, 8), (4, 8), (8,), (4, 8), (4, 8), (8,), (4, 8)]
    again = make_inputs({"T": 4, "D": 8}, torch.float32, "cpu", 0)
    for a, b in zip(inputs, again, strict=True):
        torch.testing.assert_close(a, b)


_FUNCTIONS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _scale(X, Y, n, factor, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(Y + offs, tl.load(X + offs, mask=mask) * factor, mask=mask)


    def _launch(x, factor, BLOCK):
        y = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), factor, BLOCK=BLOCK)
        return y


    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            BLOCK = 256
            ctx.BLOCK = BLOCK  # the backward launches with the forward's block
            return _launch(x, 2.0, BLOCK)

        @staticmethod
        def backward(ctx, dy):
            return _launch(dy, 2.0, ctx.BLOCK)


    class Inference(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            BLOCK = 256
            return _launch(x, 2.0, BLOCK)
    """
)


def test_add_checks_an_autograd_functions_gradients(tmp_path: Path) -> None:
    """``Fn.apply`` of an autograd Function with its own backward: the entry checks the input
    gradients too (``backward: true``), so a knob the forward saves on ``ctx`` for the
    backward is never tuned blind to it; a Function without a backward stays forward-only."""
    user_package(tmp_path, "userfns", "ops", _FUNCTIONS)
    for launcher, name in (
        ("userfns.ops.Double.apply", "double"),
        ("userfns.ops.Inference.apply", "inference"),
    ):
        added = ktuned(
            "registry",
            "add",
            launcher,
            "--shape",
            "N=3000",
            "--dtype",
            "float32",
            "--out",
            tmp_path / "registry",
            "--name",
            name,
            path=tmp_path,
        )
        assert added.returncode == 0, added.stderr
    double = (tmp_path / "registry" / "double" / "kernel.yaml").read_text()
    assert "\nbackward: true\n" in double, double
    inference = (tmp_path / "registry" / "inference" / "kernel.yaml").read_text()
    assert "\nbackward:" not in inference, inference
    check = ktuned("registry", "check", tmp_path / "registry" / "double", path=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "knob   BLOCK:" in check.stdout, check.stdout
    assert_tunes(tmp_path / "registry" / "double", "double", tmp_path)


_FUNCTIONAL = textwrap.dedent(
    """
    import torch

    import userfns.ops as ops
    from userfns.ops import Double


    def double(x):
        \"\"\"The public op: the Function's apply, arguments unchanged.\"\"\"
        return Double.apply(x)


    def double_twice(x):
        return Double.apply(Double.apply(x))


    def triple(x, BLOCK=128):
        return ops._launch(x, 3.0, BLOCK)


    def scaled(x, factor=3.0, BLOCK=128):
        return ops._launch(x, factor, BLOCK)


    def halved(x, factor=0.5):
        return ops.scale_by(x, factor)
    """
)


def test_add_registers_the_launcher_a_thin_wrapper_hands_its_arguments_to(tmp_path: Path) -> None:
    """Liger's functional API (``liger_rms_norm`` returns ``LigerRMSNormFunction.apply(X, W,
    eps, ...)``, imported from its ops module): the wrapper's entry found no knob, since its
    kernels are launched in another module. A wrapper that passes its arguments unchanged is
    registered as the launcher it calls; anything more stays the wrapper, with the note."""
    scale_by = "\n\ndef scale_by(x, factor):\n    return _launch(x, factor, 256)\n"
    user_package(tmp_path, "userfns", "ops", _FUNCTIONS + scale_by)
    (tmp_path / "userfns" / "functional.py").write_text(_FUNCTIONAL)
    said = {}
    for launcher in ("double", "double_twice", "triple", "scaled", "halved"):
        added = ktuned(
            "registry",
            "add",
            f"userfns.functional.{launcher}",
            "--shape",
            "N=3000",
            "--dtype",
            "float32",
            "--out",
            tmp_path / "registry",
            path=tmp_path,
        )
        assert added.returncode == 0, added.stderr
        said[launcher] = added.stdout
    assert (
        "note: userfns.functional.double passes its arguments unchanged to "
        "userfns.ops.Double.apply, whose module launches the kernels" in said["double"]
    ), said["double"]
    double = (tmp_path / "registry" / "double" / "kernel.yaml").read_text()
    assert "launcher: userfns.ops.Double.apply\n" in double, double
    assert double.startswith(
        "# Written by `ktuned registry add userfns.functional.double`.\n"
        "# userfns.functional.double hands its arguments unchanged to userfns.ops.Double.apply,"
    ), double
    assert "\nbackward: true\n" in double, double
    check = ktuned("registry", "check", tmp_path / "registry" / "double", path=tmp_path)
    assert check.returncode == 0 and "knob   BLOCK:" in check.stdout, check.stdout
    # A default of the wrapper that the callee lacks is passed by make_inputs, its own value.
    halved = (tmp_path / "registry" / "halved" / "kernel.yaml").read_text()
    assert "launcher: userfns.ops.scale_by\n" in halved, halved
    assert (
        "factor = 0.5  # the default of the wrapper registered"
        in (tmp_path / "registry" / "halved" / "entry.py").read_text()
    )
    assert "make_inputs passes the wrapper's defaults factor=0.5" in said["halved"]
    # Not a pass-through: the wrapper composes calls, or passes a literal of its own, or
    # a default of its own for a knob (the tuner's to pass).
    for name in ("double_twice", "triple", "scaled"):
        yaml = (tmp_path / "registry" / name / "kernel.yaml").read_text()
        assert f"launcher: userfns.functional.{name}\n" in yaml, yaml
        assert "passes its arguments unchanged" not in said[name]


KEYWORD_OUT_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + 2 * y, mask=m)


def axpy(x, y, *, out0):
    n = x.numel()
    BLOCK = 256
    _axpy[(triton.cdiv(n, BLOCK),)](x, y, out0, n, BLOCK=BLOCK)
    return out0


def axpy_into(x, y, *, out0):
    n = x.numel()
    _axpy[(triton.cdiv(n, 128),)](x, y, out0, n, BLOCK=128)
"""


def test_add_passes_a_keyword_only_output_buffer_by_keyword_and_the_entry_tunes(
    tmp_path: Path,
) -> None:
    """FlagGems' launchers take their output buffer keyword-only (``def add(x, y, *,
    out0)``): inputs are passed by position, so it was a TODO. ``keywords: [out0]`` passes the
    last input by keyword; written in place and returned (or returned nothing), it is an
    ``outputs:`` argument, called on a fresh copy each time and compared."""
    user_package(tmp_path, "flaggy", "ops", KEYWORD_OUT_SOURCE)
    for launcher in ("axpy", "axpy_into"):
        added = ktuned(
            *("registry", "add", f"flaggy.ops.{launcher}", "--shape", "N=3000"),
            *("--dtype", "float32", "--out", tmp_path / "registry"),
            path=tmp_path,
        )
        assert added.returncode == 0, added.stderr
        assert "TODO" not in added.stdout, added.stdout
        entry = tmp_path / "registry" / launcher
        yaml = (entry / "kernel.yaml").read_text()
        assert "keywords: [out0]" in yaml and "outputs: [out0]" in yaml, yaml
        inputs = (entry / "entry.py").read_text()
        assert "return (x, y, out0)" in inputs and "out0=inputs[-1]" in inputs, inputs
        assert_tunes(entry, launcher, tmp_path)


def test_a_number_annotation_wins_over_a_weight_like_name_and_labels_are_indices() -> None:
    """Liger's JSD primitive, ``jsd_loss_and_grad_triton(student_prob, teacher_prob,
    shift_labels: Optional[Tensor], beta: float, ignore_index: int, n_non_ignore: float)``:
    ``beta`` (the mixing weight, annotated ``float``) was drawn as a LayerNorm-style weight
    tensor and ``shift_labels`` (read as ``shift``, a weight) as a float vector of the
    vocabulary; the labels are one index per row, the numbers scalars to choose."""
    import inspect
    from typing import Optional

    import torch

    from tuned.registry.scaffold import infer_inputs

    kinds = inspect.Parameter
    po = kinds.POSITIONAL_OR_KEYWORD
    params = [
        kinds("student_prob", po, annotation=torch.Tensor),
        kinds("teacher_prob", po, annotation=torch.Tensor),
        kinds("shift_labels", po, annotation=Optional[torch.Tensor]),  # noqa: UP045
        kinds("beta", po, annotation=float),
        kinds("ignore_index", po, annotation=int),
        kinds("n_non_ignore", po, annotation="float"),  # a postponed annotation
        kinds("gamma", po),  # unannotated: still a weight by its name
    ]
    lines, todo = infer_inputs(params, {"BT": 64, "V": 512})
    assert 'shift_labels = index(shape["BT"], high=shape["V"])' in lines, lines
    assert not any(line.startswith("beta =") for line in lines), lines
    assert 'gamma = rand(shape["V"])' in lines, lines
    assert todo == [
        "beta (a float scalar)",
        "ignore_index (an int scalar)",
        "n_non_ignore (a float scalar)",
    ], todo
