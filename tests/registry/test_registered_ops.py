"""Modules that register PyTorch operators at import time (``torch.library.Library(...)
.define(...)``, ``@triton_op``, ``@torch.library.custom_op``): every generated copy imports
the module's top level again. A second ``define`` failed ("registered ... multiple times"),
and a second ``triton_op`` took the original's operator over (the reference then ran the
candidate's kernels). Each copy now registers its operators under a private namespace."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from tuned.evaluation import EvaluationSettings
from tuned.evaluation.modules import ModuleLoader
from tuned.outcomes import Outcome
from tuned.registry import scan_registry
from tuned.registry.discovery import discover_source
from tuned.registry.injection import materialize
from tuned.search import TuneSettings
from tuned.store import SqliteStore
from tuned.tuning import tune_registry

#: ``_scale`` doubles x and writes the BLOCK it was launched with into ``blocks`` (one per
#: program), so a test sees which kernel ran with which value.
OPS_SOURCE = textwrap.dedent(
    '''
    import torch
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton


    @triton.jit
    def _scale(x_ptr, out_ptr, blocks_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
        tl.store(blocks_ptr + tl.program_id(0), BLOCK)


    lib = torch.library.Library("NS", "FRAGMENT")
    lib.define("double(Tensor x) -> (Tensor, Tensor)")


    def _double(x):
        n = x.numel()
        BLOCK = 32
        out = torch.empty_like(x)
        blocks = torch.zeros(triton.cdiv(n, 16), dtype=torch.int32, device=x.device)
        _scale[(triton.cdiv(n, BLOCK),)](x, out, blocks, n, BLOCK=BLOCK)
        return out, blocks


    lib.impl("double", _double, "CompositeExplicitAutograd")


    def run(x):
        """The op's Python entry point: dispatches to _double."""
        return torch.ops.NS.double.default(x)


    @triton_op("NS::double_op", mutates_args={})
    def run_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.numel()
        BLOCK = 32
        out = torch.empty_like(x)
        blocks = torch.zeros(triton.cdiv(n, 16), dtype=torch.int32, device=x.device)
        wrap_triton(_scale)[(triton.cdiv(n, BLOCK),)](x, out, blocks, n, BLOCK=BLOCK)
        return out, blocks


    def make_inputs(shape, dtype, device, seed):
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(shape["N"], generator=g, device=device, dtype=dtype),)
    '''
)


@pytest.mark.parametrize("launcher", ["run", "run_op"])
def test_a_copy_of_a_module_that_registers_ops_loads_and_runs_its_own_kernels(
    tmp_path: Path, launcher: str
) -> None:
    source = OPS_SOURCE.replace("NS", f"ktuned_test_ops_{launcher}")
    found = discover_source(source, launcher)  # `run` reaches _double through torch.ops
    assert found is not None and found.baseline.get("BLOCK") == 32, found
    copy, passed = materialize(source, launcher, {"BLOCK": 64})
    assert copy != source and passed == {}
    loader = ModuleLoader(tmp_path)
    original = loader.load(source, directory_key="k", extra_files={})
    variant = loader.load(copy, directory_key="k", extra_files={})  # raised: registered twice
    x = torch.randn(100)
    out, blocks = getattr(variant, launcher)(x)
    torch.testing.assert_close(out, x * 2)
    assert blocks.tolist() == [64, 64, 0, 0, 0, 0, 0]  # the copy's kernel, its injected BLOCK
    out, blocks = getattr(original, launcher)(x)
    torch.testing.assert_close(out, x * 2)
    assert blocks.tolist() == [32, 32, 32, 32, 0, 0, 0]  # the original's op is still its own


def test_an_entry_whose_module_defines_an_op_tunes_in_the_worker(tmp_path: Path) -> None:
    directory = tmp_path / "reg" / "ops"
    directory.mkdir(parents=True)
    source = OPS_SOURCE.replace("NS", "ktuned_test_ops_worker")
    (directory / "m.py").write_text(source + "\n\ndef first(x):\n    return run(x)[0]\n")
    doc = {
        "name": "ops",
        "module": "m.py",
        "launcher": "first",
        "inputs": "make_inputs",
        "shapes": [{"N": 100, "perf": True}],
        "dtypes": ["float32"],
    }
    (directory / "kernel.yaml").write_text(yaml.safe_dump(doc))
    spec = scan_registry(directory.parent).entries[0]
    assert "BLOCK" in spec.knobs
    store = SqliteStore(tmp_path / "s.sqlite")
    report = tune_registry(
        directory.parent,
        store=store,
        state_dir=tmp_path / "state",
        settings=TuneSettings(budget=2, seed=1),
        evaluation=EvaluationSettings(interpreter=True),
    )
    trials = store.trials(spec.name, spec.generation, store.record_fingerprint(report.fingerprint))
    assert len(trials) == 3
    assert any(t.knobs != spec.baseline_knobs for t in trials)
    for t in trials:  # every copy loaded (its op under a private namespace) and was correct
        assert t.result.outcome is Outcome.OK, t.result.reason
    store.close()


def test_a_copy_inside_a_package_whose_init_registers_its_ops_gets_private_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed package whose ``__init__`` imports the module that defines operators
    (``import torchao`` registers ``torchao::int_matmul``): the copy of that module was written
    before the package was imported, so it kept the operators' names and its import failed
    ("registered ... multiple times"). The package is now imported first."""
    ns = "ktuned_test_pkg_init_ops"
    source = OPS_SOURCE.replace("NS", ns)
    package = tmp_path / "site" / "initops"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import ops\n")
    (package / "ops.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert not hasattr(getattr(torch.ops, ns), "double")
    loader = ModuleLoader(tmp_path / "modules")
    copy = loader.load(source, directory_key="k", extra_files={}, package="initops")
    assert copy.__name__.startswith("initops.ktuned_candidate_")
    x = torch.randn(100)
    out, blocks = copy.run(x)
    torch.testing.assert_close(out, x * 2)
    assert blocks.tolist() == [32, 32, 32, 32, 0, 0, 0]
