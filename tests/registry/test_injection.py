"""Knobs discovered where the code binds them, injected into a generated copy of the module.

Each test writes a small real Triton module (and, where the form needs it, a helper module
beside it), discovers its knobs, materializes a candidate (:func:`materialize`), checks with
:func:`binding_changes` that the copy differs from the original only in knob bindings, and
runs the copy in Triton's interpreter against PyTorch.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.registry.knob_diff import binding_changes
from tuned.registry.discovery import Discovery, discover_source
from tuned.registry.injection import InjectionError, materialize, runnable_request, variant_diff

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

ROW_KERNEL = '''
@triton.jit
def _row_copy(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """One program per row, the whole row in one block: needs BLOCK_SIZE >= n."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + row * n + offs, tl.load(x_ptr + row * n + offs, mask=mask) * 2, mask=mask)
'''

LOOP_KERNEL = """
@triton.jit
def _row_loop(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < n
        v = tl.load(x_ptr + row * n + offs, mask=mask)
        tl.store(out_ptr + row * n + offs, v * 2, mask=mask)
"""

FLAT_KERNEL = """
@triton.jit
def _flat(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)
"""

_counter = iter(range(10**6))
Loader = Callable[[str], ModuleType]


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Loader]:
    """Import a source text as a fresh module, with ``tmp_path`` on the import path."""
    sys.path.insert(0, str(tmp_path))
    names: list[str] = []

    def _load(source: str) -> ModuleType:
        name = f"ktuned_injected_{next(_counter)}"
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        names.append(name)
        spec.loader.exec_module(module)
        return module

    yield _load
    sys.path.remove(str(tmp_path))
    for name in names:
        sys.modules.pop(name, None)


def module(kernel: str, launcher: str) -> str:
    return HEADER + kernel + "\n\n" + textwrap.dedent(launcher)


def discovered(source: str, launcher: str = "run") -> Discovery:
    found = discover_source(source, launcher)
    assert found is not None
    return found


def test_tuple_unpacking_from_a_helper_module(tmp_path: Path, load: Loader) -> None:
    (tmp_path / "settings_helper.py").write_text(
        "import triton\n\n\ndef calculate_settings(n):\n"
        "    return triton.next_power_of_2(n), 4 if n < 2048 else 8\n"
    )
    source = module(
        ROW_KERNEL,
        """
        from settings_helper import calculate_settings


        def run(x):
            n_rows, n = x.shape
            BLOCK_SIZE, num_warps = calculate_settings(n)  # the helper's choice
            out = torch.empty_like(x)
            _row_copy[(n_rows,)](x, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
            return out
        """,
    )
    found = discovered(source)
    # A one-pass row kernel: BLOCK_SIZE = next_power_of_2(n) may grow, never shrink.
    assert found.knobs == {
        "BLOCK_SIZE": ("x1", "x2"),
        "num_warps": ("/4", "/2", "x1", "x2", "x4"),
    }
    assert found.baseline == {"BLOCK_SIZE": "x1", "num_warps": "x1"}
    variant, rest = materialize(source, "run", {"BLOCK_SIZE": "x2", "num_warps": "/2"})
    assert rest == {}
    assert binding_changes(source, variant) == ["rebind BLOCK_SIZE", "rebind num_warps"]
    assert "    BLOCK_SIZE = min(BLOCK_SIZE * 2, 65536)\n" in variant
    copy = load(variant)
    for n in (7, 100, 300):  # valid on every shape: the value follows n
        x = torch.randn(3, n)
        torch.testing.assert_close(copy.run(x), x * 2)
    # The baseline is the source as written, the same string.
    assert materialize(source, "run", found.baseline)[0] is source


def test_a_block_the_kernel_loops_over_may_shrink(load: Loader) -> None:
    source = module(
        LOOP_KERNEL,
        """
        def run(x):
            n_rows, n = x.shape
            BLOCK_SIZE = min(4096, triton.next_power_of_2(n))
            out = torch.empty_like(x)
            _row_loop[(n_rows,)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
            return out
        """,
    )
    found = discovered(source)
    assert found.knobs["BLOCK_SIZE"] == ("/8", "/4", "/2", "x1", "x2", "x4", "x8")
    assert "num_warps" in found.knobs and found.baseline["num_warps"] == 4  # not passed: added
    variant, _ = materialize(source, "run", {"BLOCK_SIZE": "/8", "num_warps": 2})
    assert binding_changes(source, variant) == ["rebind BLOCK_SIZE", "option num_warps=2"]
    copy = load(variant)
    x = torch.randn(2, 300)
    torch.testing.assert_close(copy.run(x), x * 2)


def test_the_grid_follows_a_knob_bound_in_a_local(load: Loader) -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x):
            n = x.numel()
            BLOCK = triton.next_power_of_2(min(n, 1024))
            grid = (triton.cdiv(n, BLOCK),)
            out = torch.empty_like(x)
            _flat[grid](x, out, n, BLOCK=BLOCK, num_warps=4)
            return out
        """,
    )
    found = discovered(source)
    # The grid tiles the block (cdiv(n, BLOCK)), so it may shrink; the literal num_warps=4
    # is a knob around 4.
    assert found.knobs["BLOCK"][0] == "/8" and found.knobs["num_warps"] == (1, 2, 4, 8, 16)
    variant, _ = materialize(source, "run", {"BLOCK": "/4", "num_warps": 8})
    assert sorted(binding_changes(source, variant)) == ["literal 4->8", "rebind BLOCK"]
    copy = load(variant)
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 2)  # 4x more programs: every element written


def test_an_expression_at_the_launch_and_a_meta_grid(load: Loader) -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x):
            n = x.numel()
            out = torch.empty_like(x)
            grid = lambda META: (triton.cdiv(n, META["BLOCK"]),)
            _flat[grid](x, out, n, BLOCK=min(1024, triton.next_power_of_2(n)), num_warps=4)
            return out
        """,
    )
    found = discovered(source)
    assert found.knobs["BLOCK"] == ("/8", "/4", "/2", "x1", "x2", "x4", "x8")  # META tiles it
    variant, _ = materialize(source, "run", {"BLOCK": "/8"})
    assert binding_changes(source, variant) == ["wrap min(1024, triton.next_power_of_2(n))"]
    assert "BLOCK=max((min(1024, triton.next_power_of_2(n))) // 8, 1)" in variant
    x = torch.randn(777)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_literals_and_omitted_options_at_the_launch(load: Loader) -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x):
            out = torch.empty_like(x)
            _flat[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
            return out
        """,
    )
    found = discovered(source)
    # The grid divides by its own literal 256: BLOCK may only grow (programs then overlap,
    # each masked), num_warps is not passed and is added.
    assert found.knobs == {"BLOCK": (256, 512, 1024, 2048), "num_warps": (1, 2, 4, 8, 16)}
    assert found.baseline == {"BLOCK": 256, "num_warps": 4}
    variant, _ = materialize(source, "run", {"BLOCK": 512, "num_warps": 2})
    assert binding_changes(source, variant) == ["option num_warps=2", "literal 256->512"]
    assert "x.numel(), BLOCK=512, num_warps=2)" in variant
    x = torch.randn(1000)
    torch.testing.assert_close(load(variant).run(x), x * 2)
    diff = variant_diff(source, variant, "m.py")
    assert diff.startswith("--- a/m.py\n+++ b/m.py\n")
    body = diff.splitlines()[2:]
    assert [line[0] for line in body if line[0] in "+-"] == ["-", "+"]  # one line changed


def test_semantic_arguments_are_never_knobs() -> None:
    kernel = """
@triton.jit
def _act(x_ptr, out_ptr, n, eps, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
         BLOCK_MODE: tl.constexpr, CAUSAL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    if HAS_BIAS:
        v = v + eps
    if ACT == "gelu":
        v = v * 0.5
    if BLOCK_MODE == 1:
        v = v + 1
    if CAUSAL:
        v = -v
    tl.store(out_ptr + offs, v, mask=offs < n)
"""
    source = module(
        kernel,
        """
        def run(x, eps=1e-5, causal=True, BLOCK_MODE=1):
            out = torch.empty_like(x)
            _act[(triton.cdiv(x.numel(), 128),)](
                x, out, x.numel(), eps, HAS_BIAS=True, ACT="gelu", BLOCK_MODE=BLOCK_MODE,
                CAUSAL=causal, BLOCK=128, num_warps=4,
            )
            return out
        """,
    )
    found = discovered(source)
    # Booleans, strings, floats and an int that is only ever tested (BLOCK_MODE, named like
    # a block but a switch of the math) stay inputs.
    assert set(found.knobs) == {"BLOCK", "num_warps"}


def test_several_kernels_get_their_own_knobs(load: Loader) -> None:
    second = FLAT_KERNEL.replace("_flat", "_flat2").replace("* 2", "+ 1")
    source = module(
        FLAT_KERNEL + second,
        """
        def run(x):
            n = x.numel()
            tmp, out = torch.empty_like(x), torch.empty_like(x)
            _flat[(triton.cdiv(n, 128),)](x, tmp, n, BLOCK=128)
            _flat2[(triton.cdiv(n, 128),)](tmp, out, n, BLOCK=128)
            return out
        """,
    )
    found = discovered(source)
    assert set(found.knobs) == {
        "_flat.BLOCK",
        "_flat.num_warps",
        "_flat2.BLOCK",
        "_flat2.num_warps",
    }
    variant, _ = materialize(source, "run", {"_flat2.BLOCK": 256, "_flat.num_warps": 8})
    assert sorted(binding_changes(source, variant)) == ["literal 128->256", "option num_warps=8"]
    lines = variant.splitlines()
    assert any("_flat[" in ln and "num_warps=8" in ln for ln in lines)
    assert any("_flat2[" in ln and "BLOCK=256" in ln for ln in lines)
    x = torch.randn(500)
    torch.testing.assert_close(load(variant).run(x), x * 2 + 1)


def test_a_helper_called_by_the_launcher_and_its_parameter(load: Loader) -> None:
    source = module(
        LOOP_KERNEL,
        '''
        def _launch(x, out, BLOCK_SIZE):
            """Launches with the block its caller chose."""
            _row_loop[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE, num_warps=4)


        def run(x):
            out = torch.empty_like(x)
            _launch(x, out, triton.next_power_of_2(x.shape[1]))
            return out
        ''',
    )
    found = discovered(source)
    assert found.knobs["BLOCK_SIZE"][0] == "/8"
    variant, _ = materialize(source, "run", {"BLOCK_SIZE": "/2"})
    assert binding_changes(source, variant) == ["rebind BLOCK_SIZE"]
    lines = variant.splitlines()
    at = lines.index('    """Launches with the block its caller chose."""')
    assert lines[at + 1] == "    BLOCK_SIZE = max(BLOCK_SIZE // 2, 1)"  # after the docstring
    x = torch.randn(2, 100)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_values_that_are_not_transforms_are_refused() -> None:
    source = module(
        ROW_KERNEL,
        """
        def run(x):
            BLOCK_SIZE = triton.next_power_of_2(x.shape[1])
            out = torch.empty_like(x)
            _row_copy[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE)
            return out
        """,
    )
    with pytest.raises(InjectionError, match="not a transform"):
        materialize(source, "run", {"BLOCK_SIZE": 4096})
    with pytest.raises(InjectionError, match="no longer finds"):  # e.g. an LLM rewrote it
        materialize(source, "run", {"_row_copy.num_warps": 8})
    request = {
        "kernel": {"launcher": "run", "original_source": source, "baseline_knobs": {}},
        "candidate": {"source": source, "knobs": {"BLOCK_SIZE": "big"}},
        "options": {},
    }
    assert "not a transform" in runnable_request(request)["candidate"]["injection_error"]


def test_runnable_request_materializes_candidate_incumbent_and_baseline() -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x, scale=1):
            out = torch.empty_like(x)
            _flat[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
            return out
        """,
    )
    request = {
        "kernel": {
            "launcher": "run",
            "original_source": source,
            "baseline_knobs": {"BLOCK": 256, "num_warps": 4},
        },
        "candidate": {"source": source, "knobs": {"BLOCK": 512, "num_warps": 4}},
        "options": {"incumbent": {"source": source, "knobs": {"BLOCK": 256, "num_warps": 8}}},
    }
    done = runnable_request(request)
    assert done["kernel"]["baseline_knobs"] == {}  # the original is called as written
    assert done["candidate"]["knobs"] == {} and "BLOCK=512" in done["candidate"]["source"]
    assert "num_warps=8" in done["options"]["incumbent"]["source"]
    assert request["candidate"]["source"] is source  # the request itself is left alone


def test_a_kernel_imported_from_another_file(tmp_path: Path, load: Loader) -> None:
    """Kernels in one file, launchers in another: the kernel is read from the entry's files
    (never imported by discovery) and its knobs injected into the launcher's copy."""
    kernels = HEADER + ROW_KERNEL
    source = textwrap.dedent(
        """
        import torch
        import triton
        from row_kernels import _row_copy


        def run(x):
            BLOCK_SIZE = triton.next_power_of_2(x.shape[1])
            out = torch.empty_like(x)
            _row_copy[(x.shape[0],)](x, out, x.shape[1], BLOCK_SIZE=BLOCK_SIZE)
            return out
        """
    )
    assert discover_source(source, "run", sources={}) is not None
    assert discovered(source).knobs == {}  # without the other file: nothing is known
    found = discover_source(source, "run", sources={"row_kernels.py": kernels})
    assert found is not None
    assert found.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": (1, 2, 4, 8, 16)}
    variant, _ = materialize(
        source, "run", {"BLOCK_SIZE": "x2", "num_warps": 2}, sources={"row_kernels.py": kernels}
    )
    assert binding_changes(source, variant) == ["rebind BLOCK_SIZE", "option num_warps=2"]
    (tmp_path / "row_kernels.py").write_text(kernels)  # on the import path (fixture `load`)
    x = torch.randn(2, 50)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_a_kernel_launched_through_an_imported_module(tmp_path: Path, load: Loader) -> None:
    kernels = HEADER + ROW_KERNEL
    source = textwrap.dedent(
        """
        import torch
        import triton
        import row_kernels2 as K


        def run(x):
            out = torch.empty_like(x)
            K._row_copy[(x.shape[0],)](
                x, out, x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1])
            )
            return out
        """
    )
    found = discover_source(source, "run", sources={"row_kernels2.py": kernels})
    assert found is not None
    assert found.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": (1, 2, 4, 8, 16)}
    variant, _ = materialize(
        source, "run", {"BLOCK_SIZE": "x2", "num_warps": 8}, sources={"row_kernels2.py": kernels}
    )
    assert sorted(binding_changes(source, variant)) == [
        "option num_warps=8",
        "wrap triton.next_power_of_2(x.shape[1])",
    ]
    (tmp_path / "row_kernels2.py").write_text(kernels)
    x = torch.randn(2, 70)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_knobs_passed_through_a_kwargs_dict(load: Loader) -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x):
            n = x.numel()
            meta = dict(BLOCK=128, num_warps=4)
            meta["num_stages"] = 2
            out = torch.empty_like(x)
            _flat[(triton.cdiv(n, meta["BLOCK"]),)](x, out, n, **meta)
            return out
        """,
    )
    found = discovered(source)
    assert found.baseline == {"BLOCK": 128, "num_warps": 4, "num_stages": 2}
    assert found.knobs["BLOCK"][0] == 16  # the grid reads it from the same dict: may shrink
    variant, _ = materialize(source, "run", {"BLOCK": 32, "num_warps": 2})
    assert sorted(binding_changes(source, variant)) == ["literal 128->32", "literal 4->2"]
    x = torch.randn(300)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_a_name_bound_in_a_nested_function_is_not_the_launchers(load: Loader) -> None:
    source = module(
        FLAT_KERNEL,
        """
        def run(x):
            n = x.numel()
            BLOCK = triton.next_power_of_2(min(n, 256))

            def grid(META):
                BLOCK = META["BLOCK"]  # another scope's BLOCK
                return (triton.cdiv(n, BLOCK),)

            out = torch.empty_like(x)
            _flat[grid](x, out, n, BLOCK=BLOCK, num_warps=4)
            return out
        """,
    )
    assert discovered(source).knobs["BLOCK"][0] == "/8"  # the grid function tiles it
    variant, _ = materialize(source, "run", {"BLOCK": "/2"})
    assert variant.count("BLOCK = max(BLOCK // 2, 1)") == 1  # after the launcher's own binding
    x = torch.randn(1000)
    torch.testing.assert_close(load(variant).run(x), x * 2)


def test_kernels_and_launchers_guarded_by_a_top_level_if(load: Loader) -> None:
    guarded = "HAS_TRITON = True\n\nif HAS_TRITON:\n" + textwrap.indent(
        FLAT_KERNEL
        + textwrap.dedent(
            """

            def run(x):
                out = torch.empty_like(x)
                _flat[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
                return out
            """
        ),
        "    ",
    )
    source = HEADER + guarded
    found = discovered(source)
    # BLOCK: the kernel's only block size, from 64 (it does not shrink: the grid is a
    # literal) to LONE_BLOCK_REACH
    assert found.knobs == {"BLOCK": (64, 128, 256, 512, 1024), "num_warps": (1, 2, 4, 8, 16)}
    variant, _ = materialize(source, "run", {"BLOCK": 128, "num_warps": 2})
    assert sorted(binding_changes(source, variant)) == ["literal 64->128", "option num_warps=2"]
    x = torch.randn(200)
    torch.testing.assert_close(load(variant).run(x), x * 2)
