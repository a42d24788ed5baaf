"""Knob discovery (``tuned.registry.discovery``) on small real Triton modules and the examples.

Each small module exercises one rule; the examples are loaded with their ``knobs`` removed and
the discovered space is compared with the declared one. The last test tunes an entry whose
knobs were discovered, end to end, in Triton's interpreter.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.evaluation import EvaluationSettings
from tuned.outcomes import Outcome, Provenance
from tuned.registry import KernelSpec, load_entry, scan_registry
from tuned.registry.discovery import discover_source
from tuned.search import TuneSettings
from tuned.store import SqliteStore
from tuned.tuning import tune_registry

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "registry"

HEADER = """\
import torch
import triton
import triton.language as tl
"""

COPY_KERNEL = """
@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""

DOT_KERNEL = """
@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))
"""

TAIL = """

def make_inputs(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape["N"], generator=g).to(dtype).to(device),)
"""


def entry(tmp_path: Path, body: str, *, kernel: str = COPY_KERNEL, knobs: object = None) -> Path:
    """An entry whose module is ``HEADER + kernel + body`` (the launcher is ``run``)."""
    directory = tmp_path / "e"
    directory.mkdir(exist_ok=True)
    (directory / "m.py").write_text(HEADER + kernel + "\n\n" + textwrap.dedent(body) + TAIL)
    doc: dict[str, object] = {
        "name": "e",
        "module": "m.py",
        "launcher": "run",
        "inputs": "make_inputs",
        "shapes": [{"N": 100, "perf": True}],
        "dtypes": ["float32"],
    }
    if knobs is not None:
        doc["knobs"] = knobs
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    return directory


def notices(spec: KernelSpec) -> str:
    return "\n".join(p.reason for p in spec.notices)


def test_block_warps_and_stages_from_launcher_parameters(tmp_path: Path) -> None:
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x, BLOCK: int = 1024, num_warps: int = 4, num_stages: int = 2):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), BLOCK),)](
                    x, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps, num_stages=num_stages
                )
                return out
            """,
        )
    )
    assert not spec.knobs_declared
    assert spec.knobs == {
        "BLOCK": (128, 256, 512, 1024, 2048, 4096, 8192),  # 3 octaves either side
        "num_warps": (1, 2, 4, 8, 16),
        "num_stages": (1, 2, 3, 4, 5),  # passed at the launch, so tuned
    }
    assert spec.baseline_knobs == {"BLOCK": 1024, "num_warps": 4, "num_stages": 2}
    assert spec.notices == ()


def test_positional_binding_renamed_parameter_and_off_ladder_default(tmp_path: Path) -> None:
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x, *, block=1000, warps=16):
                out = torch.empty_like(x)
                _copy[(1,)](x, out, x.numel(), block, num_warps=warps)
                return out
            """,
        )
    )
    # The knob is the launcher's parameter (what the tuner passes), named after it. One
    # program covers the whole input (grid (1,), no loop in the kernel): the block may grow
    # but never shrink below the baseline 1000, which stays the baseline.
    assert spec.knobs["block"] == (1024, 2048, 4096)
    assert spec.knobs["warps"] == (1, 2, 4, 8, 16, 32)  # 32 when the default is already 16
    assert spec.baseline_knobs == {"block": 1000, "warps": 16}


def test_dot_kernel_bounds_groups_and_added_stages_but_never_booleans(tmp_path: Path) -> None:
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(a, b, BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, even_k=True,
                    num_warps=4):
                c = torch.empty((a.shape[0], b.shape[1]))
                _mm[(1,)](a, b, c, 1, 1, 1, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                          GROUP_M=GROUP_M, EVEN_K=even_k, num_warps=num_warps)
                return c
            """,
            kernel=DOT_KERNEL,
        )
    )
    assert spec.knobs == {
        "BLOCK_M": (16, 32, 64, 128),  # tl.dot: 16..256; one tile, so never below the default
        "BLOCK_N": (64, 128, 256),
        "BLOCK_K": (32, 64, 128, 256),
        "num_warps": (1, 2, 4, 8, 16),
        "num_stages": (1, 2, 3, 4, 5),  # tl.dot without num_stages at the launch: added
    }
    # GROUP_M is named like a knob but this kernel never uses it: decided by use, not name.
    # A boolean is a switch of the math, never a knob; the added option's baseline is
    # Triton's default, so the baseline runs the source as written.
    assert spec.baseline_knobs == {
        "BLOCK_M": 16,
        "BLOCK_N": 64,
        "BLOCK_K": 32,
        "num_warps": 4,
        "num_stages": 3,
    }


def test_literals_at_the_launch_site_are_knobs_around_the_literal(tmp_path: Path) -> None:
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), 512),)](
                    x, out, x.numel(), BLOCK=512, num_warps=8, num_stages=3
                )
                return out
            """,
        )
    )
    # The grid is computed from its own 512, not from the knob: the block may only grow.
    assert spec.knobs == {
        "BLOCK": (512, 1024, 2048, 4096),
        "num_warps": (1, 2, 4, 8, 16),
        "num_stages": (1, 2, 3, 4, 5),
    }
    assert spec.baseline_knobs == {"BLOCK": 512, "num_warps": 8, "num_stages": 3}
    assert spec.notices == ()


def test_parameters_without_a_literal_default_are_transformed(tmp_path: Path) -> None:
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x, BLOCK, num_warps=2 ** 2, /, num_stages=None):
                out = torch.empty_like(x)
                _copy[(1,)](x, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
                return out
            """,
        )
    )
    # Whatever the caller passes, a candidate scales it (num_stages is not passed and the
    # kernel has no tl.dot: not added).
    assert spec.knobs == {"BLOCK": ("x1", "x2"), "num_warps": ("/4", "/2", "x1", "x2", "x4")}
    assert spec.baseline_knobs == {"BLOCK": "x1", "num_warps": "x1"}


def test_values_no_rule_covers_are_left_alone(tmp_path: Path) -> None:
    kernel = COPY_KERNEL.replace("BLOCK: tl.constexpr", "BLOCK: tl.constexpr, NUM_SM: tl.constexpr")
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x, BLOCK=256, num_sm=132, num_warps=4):
                out = torch.empty_like(x)
                _copy[(1,)](x, out, x.numel(), BLOCK, num_sm, num_warps=num_warps)
                return out
            """,
            kernel=kernel,
        )
    )
    assert set(spec.knobs) == {"BLOCK", "num_warps"}


def test_short_block_names_are_blocks_and_lower_case_or_long_ones_are_not(tmp_path: Path) -> None:
    """Many libraries name a block ``B`` and the dimension's letter (``BD``, ``BV``, ``BT``):
    such a constexpr used as a size is a block knob; ``bd``, ``BIAS`` or ``B1`` are not."""
    kernel = COPY_KERNEL.replace("BLOCK", "BD").replace(
        "n, BD: tl.constexpr", "n, BD: tl.constexpr, BIAS: tl.constexpr, bt: tl.constexpr"
    )
    kernel = kernel.replace("offs < n)", "offs < n + BIAS * bt)")
    spec = load_entry(
        entry(
            tmp_path,
            """
            def run(x):
                out = torch.empty_like(x)
                n = x.numel()
                BD = min(1024, triton.next_power_of_2(n))
                _copy[(triton.cdiv(n, BD),)](x, out, n, BD=BD, BIAS=0, bt=2, num_warps=4)
                return out
            """,
            kernel=kernel,
        )
    )
    assert set(spec.knobs) == {"BD", "num_warps"}, spec.knobs
    assert "/2" in spec.knobs["BD"]  # tiled by the grid: it may shrink


def test_an_op_calling_an_autograd_function_is_followed_into_its_forward() -> None:
    """``def op(x): return Fn.apply(x)`` (how libraries expose an autograd Function as a
    function): discovery follows the call into ``Fn.forward``."""
    source = (
        HEADER
        + COPY_KERNEL
        + textwrap.dedent(
            """

        class Copy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = torch.empty_like(x)
                BLOCK = 512
                _copy[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
                return out


        def copy_op(x):
            return Copy.apply(x)
        """
        )
    )
    found = discover_source(source, "copy_op")
    assert found is not None
    assert set(found.knobs) == {"BLOCK", "num_warps"} and found.baseline["BLOCK"] == 512
    assert not found.notices


def test_an_alias_of_apply_and_a_static_helper_method_are_followed() -> None:
    """``matmul = _matmul.apply`` (a module-level alias, as triton.ops' and torchao's matmul)
    names the Function's ``forward``, and ``forward`` calling ``_matmul._call(...)`` (a static
    method of the same class) leads to the launch there."""
    source = (
        HEADER
        + COPY_KERNEL
        + textwrap.dedent(
            """

        class _copy_fn(torch.autograd.Function):
            @staticmethod
            def _call(x):
                out = torch.empty_like(x)
                BLOCK = 512
                _copy[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
                return out

            @staticmethod
            def forward(ctx, x):
                return _copy_fn._call(x)


        copy = _copy_fn.apply
        """
        )
    )
    for launcher in ("copy", "_copy_fn.apply"):
        found = discover_source(source, launcher)
        assert found is not None, launcher
        assert set(found.knobs) == {"BLOCK", "num_warps"}, (launcher, found.notices)
        assert found.baseline["BLOCK"] == 512 and not found.notices


def test_a_launcher_calling_an_alias_of_apply_is_followed_into_forward() -> None:
    """``run = Copy.apply`` at module level, then ``def op(x): return run(x)`` (how
    flash-linear-attention's ``parallel_rebased`` reaches its kernels): the call of the alias
    leads into ``Copy.forward`` and ``Copy.backward``; it said "no launch" before."""
    source = (
        HEADER
        + COPY_KERNEL
        + textwrap.dedent(
            """

        class Copy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = torch.empty_like(x)
                BLOCK = 512
                _copy[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
                return out

            @staticmethod
            def backward(ctx, grad):
                out = torch.empty_like(grad)
                _copy[(triton.cdiv(grad.numel(), 256),)](grad, out, grad.numel(), BLOCK=256)
                return out


        run_copy = Copy.apply


        def copy_op(x, scale=1.0):
            return run_copy(x) * scale
        """
        )
    )
    found = discover_source(source, "copy_op")
    assert found is not None and not found.notices, found.notices
    assert {"BLOCK", "num_warps"} <= set(found.knobs)
    assert found.baseline["BLOCK"] == 512
    assert 256 in found.baseline.values()  # backward's launch too


def test_an_entry_whose_launcher_is_an_alias_of_apply_gets_its_knobs(tmp_path: Path) -> None:
    """``launcher: run`` where the module binds ``run = Copy.apply``: the loader finds
    ``forward`` behind the alias (it said "not defined ... no knobs discovered" before)."""
    body = """
        class Copy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
                return out


        run = Copy.apply
        """
    spec = load_entry(entry(tmp_path, body))
    assert set(spec.knobs) == {"BLOCK", "num_warps"}, notices(spec)
    assert spec.baseline_knobs["BLOCK"] == 256 and not spec.notices


TRITON_OP_SOURCE = (
    HEADER
    + "from torch.library import triton_op, wrap_triton\n"
    + COPY_KERNEL
    + textwrap.dedent(
        """

        @triton_op("ktuned_test::copy_op", mutates_args={})
        def run(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
            wrap_triton(_copy)[grid](x, out, x.numel(), BLOCK=256)
            return out
        """
    )
    + TAIL
)


def test_a_triton_op_launching_through_wrap_triton_gets_its_knobs(tmp_path: Path) -> None:
    """``wrap_triton(kernel)[grid](...)`` in a ``@triton_op`` (torch.library's way, as in
    torchao and torchtitan) is a launch of ``kernel``; it was not seen, and the note told
    the user to register ``torch.library.triton_op`` instead. The copies run in the worker."""
    found = discover_source(TRITON_OP_SOURCE, "run")
    assert found is not None
    assert set(found.knobs) == {"BLOCK", "num_warps"}, [n.reason for n in found.notices]
    assert found.baseline == {"BLOCK": 256, "num_warps": 4} and not found.notices
    directory = tmp_path / "reg" / "op"
    directory.mkdir(parents=True)
    (directory / "m.py").write_text(TRITON_OP_SOURCE)
    doc = {
        "name": "op",
        "module": "m.py",
        "launcher": "run",
        "inputs": "make_inputs",
        "shapes": [{"N": 100, "perf": True}],
        "dtypes": ["float32"],
    }
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        directory.parent,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=2, seed=1),
        evaluation=EvaluationSettings(interpreter=True),
    )
    spec = scan_registry(directory.parent).entries[0]
    trials = store.trials(spec.name, spec.generation, store.record_fingerprint(report.fingerprint))
    assert len(trials) == 3
    for t in trials:  # the generated copies registered their op again and launched
        assert t.result.outcome is Outcome.OK, t.result.reason
    store.close()


def test_a_stand_in_that_only_raises_does_not_hide_the_guarded_launcher() -> None:
    """``if has_triton(): def op ... else: def op(...): raise ...`` (torchao's mx_formats
    kernels): the stand-in, defined last, is not the launcher discovery reads."""
    source = HEADER + textwrap.dedent(
        """
        from torch.utils._triton import has_triton

        if has_triton():

            @triton.jit
            def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

            def run(x):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
                return out

        else:

            def run(x):
                '''Needs Triton.'''
                raise AssertionError("needs triton")
        """
    )
    found = discover_source(source, "run")
    assert found is not None
    assert set(found.knobs) == {"BLOCK", "num_warps"}, [n.reason for n in found.notices]


def test_backward_kernels_are_knobs_only_when_the_entry_runs_backward(tmp_path: Path) -> None:
    """An autograd Function's ``backward`` launches run only with ``backward: true``;
    without it, their knobs would only time the baseline again."""
    kernel = COPY_KERNEL + COPY_KERNEL.replace("_copy", "_copy_back")
    launcher = """
        class Copy(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=512)
                return out

            @staticmethod
            def backward(ctx, g):
                dx = torch.empty_like(g)
                _copy_back[(triton.cdiv(g.numel(), 256),)](g, dx, g.numel(), BLOCK=256)
                return dx


        def run(x):
            return Copy.apply(x)
        """
    directory = entry(tmp_path, launcher, kernel=kernel)
    forward = load_entry(directory)
    assert not forward.backward  # () : no backward pass
    assert all(not k.startswith("_copy_back") for k in forward.knobs), forward.knobs
    assert forward.knobs and len(forward.knobs) == 2, forward.knobs  # BLOCK, num_warps
    doc = yaml.safe_load((directory / "kernel.yaml").read_text())
    (directory / "kernel.yaml").write_text(yaml.safe_dump({**doc, "backward": True}))
    both = load_entry(directory)
    assert both.backward and len(both.knobs) == 4, both.knobs
    assert set(forward.knobs) < set(both.knobs)


def test_an_op_calling_a_launcher_of_another_module_is_told_which_to_register() -> None:
    source = HEADER + textwrap.dedent(
        """
        from pkg.kernels.act import act_launcher
        from .helpers import shape_of


        def act(x):
            out = torch.empty(shape_of(x), device=x.device)
            act_launcher(out, x)
            return out
        """
    )
    found = discover_source(source, "act", "pkg.ops.act")
    assert found is not None and found.knobs == {}
    reason = " ".join(n.reason for n in found.notices)
    assert "it calls act_launcher (from pkg.kernels.act), shape_of (from pkg.ops.helpers)" in reason
    assert "`ktuned registry add pkg.kernels.act.act_launcher`" in reason


def test_an_op_applying_an_imported_autograd_function_is_told_which_to_register() -> None:
    """Liger's functional API: ``liger_rms_norm`` only returns
    ``LigerRMSNormFunction.apply(...)``, imported from its ops module; the note said only
    "declare knobs". Also ``import pkg.kernels as K`` and ``K.launch(...)``."""
    source = HEADER + textwrap.dedent(
        """
        from pkg.ops.rms import RMSFunction
        import pkg.kernels.act as K


        def rms(x, w):
            return RMSFunction.apply(x, w)


        def act(x):
            return K.act_launcher(x)
        """
    )
    found = discover_source(source, "rms", "pkg.functional")
    assert found is not None and found.knobs == {}
    reason = " ".join(n.reason for n in found.notices)
    assert "it calls RMSFunction.apply (from pkg.ops.rms)" in reason, reason
    assert "`ktuned registry add pkg.ops.rms.RMSFunction.apply`" in reason, reason
    found = discover_source(source, "act", "pkg.functional")
    assert found is not None
    reason = " ".join(n.reason for n in found.notices)
    assert "`ktuned registry add pkg.kernels.act.act_launcher`" in reason, reason


def test_the_launcher_to_register_instead_is_never_torch_or_triton_s_own() -> None:
    """A decorator (``@triton_op``) and framework helpers (``triton.cdiv``) are no launcher
    to register instead: the note said ``ktuned registry add torch.library.triton_op`` and
    ``ktuned registry add triton.cdiv`` for torchao's ops."""
    source = HEADER + textwrap.dedent(
        """
        from torch.library import triton_op
        from triton import cdiv
        from pkg.kernels.act import act_launcher


        @triton_op("pkg::act", mutates_args={})
        def act(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty(cdiv(x.numel(), 2) * 2, device=x.device)
            act_launcher(out, x)
            return out
        """
    )
    found = discover_source(source, "act", "pkg.ops.act")
    assert found is not None and found.knobs == {}
    reason = " ".join(n.reason for n in found.notices)
    assert "it calls act_launcher (from pkg.kernels.act):" in reason, reason
    assert "triton_op" not in reason and "cdiv" not in reason


def test_unreadable_autotune_missing_launches_and_declared_empty_knobs(tmp_path: Path) -> None:
    autotuned = "\n@triton.autotune(configs=make_configs(), key=['n'])" + COPY_KERNEL
    launcher = """
        def run(x, BLOCK=256):
            out = torch.empty_like(x)
            _copy[(1,)](x, out, x.numel(), BLOCK=BLOCK)
            return out
        """
    spec = load_entry(entry(tmp_path, launcher, kernel=autotuned))
    assert "configs could not be read without running the module" in notices(spec)

    spec = load_entry(entry(tmp_path, "def run(x, BLOCK=256):\n    return x.clone()\n"))
    assert spec.knobs == {} and "no launch `kernel[grid](...)`" in notices(spec)

    # `knobs: {}` declares an empty space: nothing is discovered, nothing is noted.
    spec = load_entry(entry(tmp_path, launcher, knobs={}))
    assert spec.knobs_declared and spec.knobs == {} and spec.notices == ()


def test_discovery_never_executes_the_module(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    body = f"""
        open({str(marker)!r}, "w").write("ran")

        def run(x, BLOCK=256, num_warps=4):
            out = torch.empty_like(x)
            _copy[(1,)](x, out, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
            return out
        """
    spec = load_entry(entry(tmp_path, body))
    assert set(spec.knobs) == {"BLOCK", "num_warps"} and not marker.exists()


@pytest.mark.parametrize(
    "name", ["layer_norm", "matmul", "rms_norm", "softmax", "swiglu", "vector_add"]
)
def test_examples_without_knobs_discover_their_declared_space(tmp_path: Path, name: str) -> None:
    declared = load_entry(EXAMPLES / name)
    copy = tmp_path / name
    shutil.copytree(EXAMPLES / name, copy)
    doc = yaml.safe_load((copy / "kernel.yaml").read_text())
    del doc["knobs"]
    (copy / "kernel.yaml").write_text(yaml.safe_dump(doc))
    found = load_entry(copy)
    assert not found.knobs_declared
    assert list(found.knobs) == list(declared.knobs)  # same knobs, launcher order
    assert found.baseline_knobs == declared.baseline_knobs
    for knob, values in declared.knobs.items():
        assert set(values) <= set(found.knobs[knob]), (knob, values, found.knobs[knob])
        assert len(found.knobs[knob]) <= len(values) + 3, knob  # around, not everything


def test_tuning_an_entry_with_discovered_knobs(tmp_path: Path, write_entry: WriteEntry) -> None:
    yaml_text = textwrap.dedent(
        """
        name: add
        module: add.py
        launcher: add
        reference: reference
        inputs: make_inputs
        shapes:
          - {N: 3000, perf: true}
          - {N: 7}
        dtypes: [float32]
        """
    )
    registry = write_entry("add", source=ADD_SOURCE, yaml=yaml_text).parent
    spec = scan_registry(registry).entries[0]
    assert spec.knobs == {
        "BLOCK": (32, 64, 128, 256, 512, 1024, 2048),
        "num_warps": (1, 2, 4, 8, 16),
    }
    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        registry,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=2, seed=3),
        evaluation=EvaluationSettings(interpreter=True),
    )
    assert report.summaries[0].evaluations == 2
    trials = store.trials(spec.name, spec.generation, store.record_fingerprint(report.fingerprint))
    assert [t.provenance for t in trials] == [Provenance.ORIGINAL, *[Provenance.PARAMETRIC] * 2]
    assert trials[0].knobs == {"BLOCK": 256, "num_warps": 4}  # the launcher's defaults
    for t in trials:
        assert t.result.outcome is Outcome.OK, t.result.reason
        assert all(
            t.knobs[k] in spec.knobs[k] or t.provenance is Provenance.ORIGINAL for k in spec.knobs
        )
    assert len({t.candidate_id for t in trials}) == 3
    store.close()


ROWS_SOURCE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _rows(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + row * n + offs, tl.load(x_ptr + row * n + offs, mask=mask) * 2, mask=mask)


def settings(n):
    return triton.next_power_of_2(n), 4


def double_rows(x):
    BLOCK_SIZE, num_warps = settings(x.shape[1])
    out = torch.empty_like(x)
    _rows[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return out


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g).to(dtype).to(device),)
"""


def test_tuning_injected_knobs_runs_generated_copies(tmp_path: Path) -> None:
    """The launcher takes no knob: every candidate is a generated copy run by the worker."""
    directory = tmp_path / "reg" / "rows"
    directory.mkdir(parents=True)
    (directory / "rows.py").write_text(ROWS_SOURCE)
    doc = {
        "name": "rows",
        "module": "rows.py",
        "launcher": "double_rows",
        "inputs": "make_inputs",
        "shapes": [{"M": 4, "N": 100, "perf": True}, {"M": 3, "N": 37}],
        "dtypes": ["float32"],
    }
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    spec = scan_registry(directory.parent).entries[0]
    assert spec.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": ("/4", "/2", "x1", "x2", "x4")}
    assert spec.baseline_knobs == {"BLOCK_SIZE": "x1", "num_warps": "x1"}
    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        directory.parent,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=3, seed=1),
        evaluation=EvaluationSettings(interpreter=True),
    )
    trials = store.trials(spec.name, spec.generation, store.record_fingerprint(report.fingerprint))
    assert [t.provenance for t in trials] == [Provenance.ORIGINAL, *[Provenance.PARAMETRIC] * 3]
    assert trials[0].knobs == {"BLOCK_SIZE": "x1", "num_warps": "x1"}
    for t in trials:  # the copies ran (no "unexpected keyword" from the launcher) and passed
        assert t.result.outcome is Outcome.OK, t.result.reason
    assert len({t.candidate_id for t in trials}) == 4
    store.close()


CHUNKED = (
    HEADER
    + """
@triton.jit
def _chunk_sum(x_ptr, out_ptr, n, BT: tl.constexpr):
    offs = tl.program_id(0) * BT + tl.arange(0, BT)
    v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, tl.cumsum(v, 0), mask=offs < n)


def _chunked(x, chunk_size, block_size):
    n = x.numel()
    out = torch.empty_like(x)
    BT = chunk_size
    _chunk_sum[(triton.cdiv(n, BT),)](x, out, n, BT=BT)
    return out


def run(x, chunk_size, block_size):
    return _chunked(x, chunk_size, block_size)
"""
)


def test_a_block_that_is_the_caller_s_chunk_size_is_not_a_knob() -> None:
    """``BT = chunk_size`` (flash-linear-attention's chunked cumsum): the caller's value, which
    the result depends on (sums within chunks of it); doubling it was a knob whose every
    candidate was wrong. A block bound to a parameter named as one, or computed, stays a
    knob."""
    found = discover_source(CHUNKED, "run")
    assert found is not None
    assert "BT" not in found.knobs, found.knobs
    for binding in ("BT = block_size", "BT = min(64, triton.next_power_of_2(n))"):
        found = discover_source(CHUNKED.replace("BT = chunk_size", binding), "run")
        assert found is not None
        assert {"/2", "x1", "x2"} <= set(found.knobs.get("BT", ())), (binding, found.knobs)


# Triton's fused-softmax tutorial's way: compile ahead with `kernel.warmup(..., grid=...)`,
# keep the CompiledKernel, launch it with `compiled[grid](...)`.
WARMUP_SOURCE = (
    HEADER
    + """
@triton.jit
def _row_copy(x_ptr, out_ptr, n_cols, BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols)
    tl.store(out_ptr + row * n_cols + offs, x, mask=offs < n_cols)


def run(x):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    num_warps = 8
    num_stages = 4 if n_cols > 100000 else 2
    y = torch.empty_like(x)
    kernel = _row_copy.warmup(
        x, y, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_stages=num_stages, num_warps=num_warps,
        grid=(1,),
    )
    kernel._init_handles()
    kernel[(n_rows, 1, 1)](x, y, n_cols, BLOCK_SIZE, num_stages)
    return y
"""
)


def test_a_kernel_compiled_ahead_with_warmup_gets_its_knobs() -> None:
    """``k.warmup(..., BLOCK_SIZE=..., num_warps=..., grid=...)`` compiles the kernel that the
    launcher then launches as a ``CompiledKernel``: the warmup's arguments are the knobs (the
    note said there was no launch, and the space was empty), and the generated copy writes
    the candidate's values there."""
    from tuned.registry.injection import materialize

    found = discover_source(WARMUP_SOURCE, "run")
    assert found is not None
    assert {"BLOCK_SIZE", "num_warps", "num_stages"} <= set(found.knobs), [
        n.reason for n in found.notices
    ]
    assert found.baseline["num_warps"] == 8
    # A one-pass row kernel: its block never shrinks below the row.
    assert all(not str(v).startswith("/") for v in found.knobs["BLOCK_SIZE"]), found.knobs
    copy, rest = materialize(WARMUP_SOURCE, "run", {"num_warps": 4, "BLOCK_SIZE": "x2"})
    assert not rest
    assert "num_warps = 4" in copy or "num_warps=4" in copy, copy
    assert "BLOCK_SIZE" in copy and copy != WARMUP_SOURCE


SAVED_FOR_BACKWARD = (
    HEADER
    + COPY_KERNEL
    + """

class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        BLOCK = 256
        out = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK, num_warps=4)
        ctx.BLOCK = BLOCK
        return out

    @staticmethod
    def backward(ctx, dy):
        dx = torch.empty_like(dy)
        _copy[(triton.cdiv(dy.numel(), ctx.BLOCK),)](dy, dx, dy.numel(), BLOCK=ctx.BLOCK)
        return dx
"""
)


def test_a_forward_only_entry_is_told_which_knobs_the_backward_reads() -> None:
    """A knob the forward saves on ``ctx`` reaches the backward: an entry that checks the
    forward only (no ``backward:``) gets a note saying so; ``num_warps``, not saved, none."""
    forward_only = discover_source(SAVED_FOR_BACKWARD, "Copy.apply", backward=False)
    assert forward_only is not None and "BLOCK" in forward_only.knobs
    reasons = [n.reason for n in forward_only.notices]
    assert any(r.startswith("BLOCK is saved for the backward pass (ctx.BLOCK)") for r in reasons)
    assert not any(r.startswith("num_warps") for r in reasons), reasons
    checked = discover_source(SAVED_FOR_BACKWARD, "Copy.apply", backward=True)
    assert checked is not None and not any(
        "saved for the backward" in n.reason for n in checked.notices
    )


CHOSEN_KERNEL = (
    HEADER
    + COPY_KERNEL
    + COPY_KERNEL.replace("_copy", "_copy_again")
    + """

class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, again=False):
        BLOCK = 256
        out = torch.empty_like(x)
        fx = _copy_again if again else _copy
        fx[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK, num_warps=4)
        ctx.BLOCK = BLOCK
        return out

    @staticmethod
    def backward(ctx, dy):
        dx = torch.empty_like(dy)
        if dy.numel() > 4096:
            kernel = _copy
        else:
            kernel = _copy_again
        kernel[(triton.cdiv(dy.numel(), 1024),)](dy, dx, dy.numel(), BLOCK=1024, num_warps=8)
        return dx


def copy(x):
    return Copy.apply(x)


def other(x):
    fx = pick(x)
    out = torch.empty_like(x)
    fx[(1,)](x, out, x.numel(), BLOCK=1024)
    return out
"""
)


def test_a_kernel_chosen_into_a_local_is_a_launch_and_its_knobs_are_written_there() -> None:
    """``fx = _a if flag else _b; fx[grid](...)`` (Unsloth's RMS norm) and a local bound to a
    kernel in each branch of an ``if``: launches whose knobs are discovered and injected; a
    local bound to anything else is not a launch (and says so)."""
    from tuned.registry.injection import materialize

    found = discover_source(CHOSEN_KERNEL, "copy")
    assert found is not None
    warps = [k for k in found.knobs if k.endswith("num_warps")]
    assert "BLOCK" in found.knobs and len(warps) == 2, found.knobs  # forward and backward
    assert any(k.endswith(".BLOCK") for k in found.knobs), found.knobs  # the backward's 1024
    forward_warps = next(k for k in warps if found.baseline[k] == 4)
    copy, _ = materialize(CHOSEN_KERNEL, "copy", {"BLOCK": 512, forward_warps: 2})
    assert "BLOCK = 512" in copy and "num_warps=2" in copy, copy
    unknown = discover_source(CHOSEN_KERNEL, "other")
    assert unknown is not None and not unknown.knobs
    assert any("no launch" in n.reason for n in unknown.notices)


def test_a_forward_only_entry_says_which_knobs_only_the_backward_launches() -> None:
    """An entry that checks the forward only drops the backward's knobs, with a note naming
    them and what to set; before, the space was silently smaller (or empty)."""
    forward_only = discover_source(CHOSEN_KERNEL, "copy", backward=False)
    assert forward_only is not None
    assert len(forward_only.knobs) == 2 and "BLOCK" in forward_only.knobs, forward_only.knobs
    reasons = [n.reason for n in forward_only.notices]
    dropped = [r for r in reasons if "reach only kernels the backward pass launches" in r]
    assert len(dropped) == 1 and "set `backward: true` to tune them" in dropped[0], reasons
    assert "BLOCK is saved for the backward pass (ctx.BLOCK)" in " ".join(reasons), reasons


def test_a_kernels_only_block_size_reaches_a_thousand_from_a_small_literal() -> None:
    """``BLOCK_SIZE=4`` in an elementwise launcher (real code has it): three octaves up stop
    at 32, far from the ~1024 such kernels run fastest at; the kernel's only block size
    reaches LONE_BLOCK_REACH. Two block sizes of one kernel (a 2-D tile) keep three octaves
    each, so that no tile of a million elements is proposed."""
    from tuned.registry.knob_values import LONE_BLOCK_REACH

    lone = discover_source(
        HEADER
        + COPY_KERNEL
        + textwrap.dedent(
            """
            def copy(x):
                out = torch.empty_like(x)
                _copy[(triton.cdiv(x.numel(), 4),)](x, out, x.numel(), BLOCK=4)
                return out
            """
        ),
        "copy",
    )
    assert lone is not None
    assert lone.knobs["BLOCK"][-1] == LONE_BLOCK_REACH and 4 in lone.knobs["BLOCK"], lone.knobs
    tile = discover_source(
        HEADER
        + textwrap.dedent(
            """
            @triton.jit
            def _sum(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
                rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
                acc = tl.zeros([BLOCK_M], dtype=tl.float32)
                for start in range(0, N, BLOCK_N):
                    cols = start + tl.arange(0, BLOCK_N)
                    mask = (rows[:, None] < M) & (cols[None, :] < N)
                    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
                    acc += tl.sum(x, axis=1)
                tl.store(out_ptr + rows, acc, mask=rows < M)


            def row_sum(x):
                M, N = x.shape
                out = torch.empty(M, device=x.device, dtype=torch.float32)
                _sum[(triton.cdiv(M, 8),)](x, out, M, N, BLOCK_M=8, BLOCK_N=8)
                return out
            """
        ),
        "row_sum",
    )
    assert tile is not None
    assert max(tile.knobs["BLOCK_M"]) == 64 and max(tile.knobs["BLOCK_N"]) == 64, tile.knobs


def test_a_block_that_is_a_dimension_itself_is_not_grown() -> None:
    """``BLOCK_DMODEL=Lk`` with ``Lk = k.shape[-1]`` (attention's head dimension) in a kernel
    that covers the block in one pass: ``x2`` would read past the head dimension where the
    kernel does not mask; not a knob, with a note. A block computed from the dimension
    (``triton.next_power_of_2``) still is."""
    source = HEADER + textwrap.dedent(
        """
        @triton.jit
        def _rows(x_ptr, out_ptr, BLOCK_DMODEL: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_DMODEL + tl.arange(0, BLOCK_DMODEL)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs))


        def exact(q, k):
            Lq, Lk = q.shape[-1], k.shape[-1]
            out = torch.empty_like(q)
            _rows[(q.shape[0],)](q, out, BLOCK_DMODEL=Lk)
            return out


        def at_launch(q):
            out = torch.empty_like(q)
            _rows[(q.shape[0],)](q, out, BLOCK_DMODEL=q.shape[-1])
            return out


        def padded(q):
            D = triton.next_power_of_2(q.shape[-1])
            out = torch.empty_like(q)
            _rows[(q.shape[0],)](q, out, BLOCK_DMODEL=D)
            return out
        """
    )
    for launcher, read in (("exact", "`Lk = k.shape[-1]`"), ("at_launch", "`q.shape[-1]`")):
        found = discover_source(source, launcher)
        assert found is not None and set(found.knobs) == {"num_warps"}, found.knobs
        assert any(f"is a dimension itself ({read})" in n.reason for n in found.notices), [
            n.reason for n in found.notices
        ]
    padded = discover_source(source, "padded")
    assert padded is not None and padded.knobs.get("D") == ("x1", "x2"), padded.knobs


GROUP_QUANT_KERNEL = """
@triton.jit
def _quant(x_ptr, q_ptr, s_ptr, n, GROUP_SIZE: tl.constexpr, BLOCK_GROUP: tl.constexpr):
    g = tl.program_id(0) * BLOCK_GROUP + tl.arange(0, BLOCK_GROUP)
    offs = g[:, None] * GROUP_SIZE + tl.arange(0, GROUP_SIZE)[None, :]
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    s = tl.max(tl.abs(x), axis=1) / 127.0 + 1e-6
    tl.store(q_ptr + offs, (x / s[:, None]).to(tl.int8), mask=offs < n)
    tl.store(s_ptr + g, s, mask=g < n // GROUP_SIZE)
"""


@pytest.mark.parametrize("bound", ["local", "parameter", "strided"])
def test_a_size_of_a_returned_tensor_is_not_a_knob(bound: str) -> None:
    """gemlite's MXFP8 quantizer: ``group_size = 32`` also sizes the scales it returns
    (``torch.empty((M, K // group_size))``); tuned, every other value changed the shape of
    an output. A block that only tiles the launch stays a knob, and so does a block that
    sizes a workspace reduced before it is returned. ``strided``: the allocation given a
    column-major layout (torchao's ``x.new_empty(...).as_strided(...)``) was not seen as one."""
    signature = "x" if bound == "local" else "x, group_size=32"
    body = textwrap.dedent(
        """
        n = x.numel()
        pad = (group_size - n % group_size) % group_size
        q = torch.empty(n, dtype=torch.int8, device=x.device)
        scales = torch.empty((n + pad) // group_size, device=x.device)
        BLOCK_GROUP = 4
        grid = (triton.cdiv(n // group_size, BLOCK_GROUP),)
        _quant[grid](x, q, scales, n, GROUP_SIZE=group_size, BLOCK_GROUP=BLOCK_GROUP)
        partial = torch.empty(triton.cdiv(n, BLOCK_GROUP), device=x.device)
        return q, scales, partial.sum()
        """
    )
    if bound == "local":
        body = "group_size = 32\n" + body
    if bound == "strided":
        body = body.replace(
            "scales = torch.empty((n + pad) // group_size, device=x.device)",
            "scales = x.new_empty((n + pad) // group_size).as_strided(((n + pad) // group_size,),"
            " (1,))",
        )
    source = HEADER + GROUP_QUANT_KERNEL + f"\n\ndef quantize({signature}):\n"
    source += textwrap.indent(body, "    ")
    found = discover_source(source, "quantize")
    assert found is not None
    assert "group_size" not in found.knobs and "BLOCK_GROUP" in found.knobs, found.knobs
    assert any(
        "group_size (passed as GROUP_SIZE to _quant) sizes scales, which quantize returns"
        in n.reason
        for n in found.notices
    ), found.notices
