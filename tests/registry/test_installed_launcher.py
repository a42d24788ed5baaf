"""Launchers of an installed package: knobs found in, and tuned in a copy of, that module.

An entry that imports ``LigerSoftmaxFunction`` from the installed liger-kernel and names
``LigerSoftmaxFunction.apply`` gets the knobs bound in ``liger_kernel/ops/softmax.py``
(``BLOCK_SIZE, num_warps = calculate_settings(n)``); candidates are generated copies of that
module, imported inside ``liger_kernel.ops`` so its imports resolve; the installed file and
the entry's files are never written.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.test_cli import ktuned
from tuned.evaluation.worker import ModuleLoader
from tuned.outcomes import Outcome, Provenance
from tuned.registry import load_entry
from tuned.registry.installed import absolute_path, find_installed
from tuned.store.sqlite import SqliteStore

LIGER = Path(__file__).resolve().parents[2] / "examples" / "liger"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_launcher_names_map_through_the_entrys_imports() -> None:
    import ast

    tree = ast.parse(
        "from pkg.mod import Fn as F\nimport pkg.other as o\nimport pkg\nfrom . import rel\n"
    )
    assert absolute_path(tree, "F.apply") == "pkg.mod.Fn.apply"
    assert absolute_path(tree, "o.launch") == "pkg.other.launch"
    assert absolute_path(tree, "pkg.deep.f") == "pkg.deep.f"
    assert absolute_path(tree, "rel.f") is None  # relative: the entry's own files
    rebound = ast.parse("from pkg.mod import Fn\nclass Fn: pass\n")
    assert absolute_path(rebound, "Fn.apply") is None


def _fake_package(root: Path, block: int) -> Path:
    """An installed-looking package whose launcher imports a helper relatively."""
    pkg = root / "fakeops"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def settings(n):\n    return 64, 4\n")
    (pkg / "kern.py").write_text(
        textwrap.dedent(f"""\
            import triton
            import triton.language as tl
            from .helpers import settings

            @triton.jit
            def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

            class Copy:
                @staticmethod
                def launch(x):
                    y = x.new_empty(x.shape)
                    BLOCK, num_warps = settings(x.numel())
                    BLOCK = {block}
                    _copy[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK,
                                                           num_warps=num_warps)
                    return y
            """)
    )
    return pkg / "kern.py"


def _fake_entry(root: Path) -> Path:
    entry = root / "entry"
    entry.mkdir(exist_ok=True)
    (entry / "kernel.yaml").write_text(
        "name: fake-copy\nmodule: copy_entry.py\nlauncher: K.launch\ninputs: make_inputs\n"
        "shapes:\n  - {N: 100, perf: true}\ndtypes: [float32]\n"
    )
    (entry / "copy_entry.py").write_text(
        "import torch\nfrom fakeops.kern import Copy as K\n\n"
        "def make_inputs(shape, dtype, device, seed):\n"
        "    g = torch.Generator().manual_seed(seed)\n"
        "    return (torch.randn(shape['N'], generator=g).to(dtype),)\n"
    )
    return entry


def test_an_installed_module_is_read_and_its_source_is_in_the_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    installed = _fake_package(site, 128)
    monkeypatch.syspath_prepend(str(site))
    entry = _fake_entry(tmp_path)
    found = find_installed((entry / "copy_entry.py").read_text(), "K.launch")
    assert found is not None and (found.module, found.qualname) == ("fakeops.kern", "Copy.launch")

    spec = load_entry(entry)
    assert "fakeops" not in sys.modules  # read, never imported by the loader
    assert spec.installed_module == "fakeops.kern" and spec.package == "fakeops"
    assert spec.launcher == "Copy.launch" and spec.module_source == installed.read_text()
    assert "make_inputs" in spec.entry_source
    assert spec.knobs and set(spec.knobs) <= set(spec.baseline_knobs)
    # a package upgrade (the installed file changes) is a new generation
    _fake_package(site, 256)
    assert load_entry(entry).generation != spec.generation

    # the copy imports inside the package: its relative import resolves, the file is untouched
    before = _sha(installed)
    loader = ModuleLoader(tmp_path / "modules")
    copy = loader.load(spec.module_source, directory_key="k", extra_files={}, package="fakeops")
    assert copy.__name__.startswith("fakeops.ktuned_candidate_")
    assert copy.settings(10) == (64, 4) and hasattr(copy, "Copy")
    assert _sha(installed) == before


@pytest.mark.slow
def test_a_liger_entry_tunes_copies_of_the_installed_module(tmp_path: Path) -> None:
    """Liger's softmax (runs in the interpreter in float32): a non-empty space, and a tune
    through the real worker evaluates non-original candidates as ok; the installed module
    and the entry's files are unchanged."""
    pytest.importorskip("liger_kernel")
    import liger_kernel.ops.softmax as installed_softmax

    installed = Path(installed_softmax.__file__)
    entry = tmp_path / "softmax"
    shutil.copytree(LIGER / "softmax", entry)
    yaml = (entry / "kernel.yaml").read_text()
    yaml = yaml.split("shapes:")[0] + "shapes:\n  - {M: 4, N: 64, perf: true}\ndtypes: [float32]\n"
    (entry / "kernel.yaml").write_text(yaml)
    files = {p.name: _sha(p) for p in entry.iterdir() if p.is_file()}
    before = _sha(installed)

    spec = load_entry(entry)
    assert spec.installed_module == "liger_kernel.ops.softmax"
    assert {"BLOCK_SIZE", "num_warps"} <= set(spec.knobs), spec.knobs
    assert spec.space_size() > 1

    state = tmp_path / "state"
    run = ktuned("tune", entry, "--budget", "4", "--device", "interpreter", state=state)
    assert run.returncode == 0, run.stderr
    store = SqliteStore(state / "ktuned.sqlite")
    try:
        k = store.kernel(spec.name)
        best = store.best(spec.name)
        assert k is not None and best is not None
        trials = store.trials(spec.name, k.generation, best.fingerprint)
    finally:
        store.close()
    original = [t for t in trials if t.provenance is Provenance.ORIGINAL]
    others = [t for t in trials if t.provenance is not Provenance.ORIGINAL]
    assert original and original[0].result.outcome is Outcome.OK, original
    ok = [t for t in others if t.result.outcome is Outcome.OK]
    assert ok, [(t.knobs, t.result.outcome, t.result.reason) for t in others]
    assert any(t.knobs != spec.baseline_knobs for t in ok)
    assert _sha(installed) == before
    assert {p.name: _sha(p) for p in entry.iterdir() if p.is_file()} == files


def test_a_full_dotted_launcher_the_entry_does_not_import_gets_its_knobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ktuned registry add pkg.mod.Cls.method` writes the full path and no import: the
    launcher is still found on the import path and its knobs discovered in a copy."""
    import ast

    assert absolute_path(ast.parse("import torch\n"), "fakeops.kern.Copy.launch") == (
        "fakeops.kern.Copy.launch"
    )
    assert absolute_path(ast.parse("def f(): pass\n"), "f") is None  # no dot: not a path
    site = tmp_path / "site"
    site.mkdir()
    _fake_package(site, 128)
    monkeypatch.syspath_prepend(str(site))
    entry = _fake_entry(tmp_path)
    yaml = (entry / "kernel.yaml").read_text().replace("K.launch", "fakeops.kern.Copy.launch")
    (entry / "kernel.yaml").write_text(yaml)
    spec = load_entry(entry)
    assert spec.installed_module == "fakeops.kern" and spec.launcher == "Copy.launch"
    assert spec.knobs and set(spec.knobs) <= set(spec.baseline_knobs)


def test_an_installed_launcher_that_returns_nothing_needs_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-place launcher of an installed package, registered without `outputs:`, is an
    invalid entry naming the field (never a vacuous pass); with `outputs:` it is valid."""
    from tuned.errors import RegistryError

    site = tmp_path / "site"
    site.mkdir()
    kern = _fake_package(site, 128)
    kern.write_text(kern.read_text() + "\n\ndef copy_into(x, y):\n    Copy.launch(x)\n")
    monkeypatch.syspath_prepend(str(site))
    entry = _fake_entry(tmp_path)
    yaml = (entry / "kernel.yaml").read_text().replace("K.launch", "fakeops.kern.copy_into")
    (entry / "kernel.yaml").write_text(yaml)
    with pytest.raises(RegistryError) as err:
        load_entry(entry)
    assert "field 'outputs'" in str(err.value) and "returns nothing" in str(err.value)
    (entry / "kernel.yaml").write_text(yaml.replace("dtypes:", "outputs: [y]\ndtypes:"))
    assert load_entry(entry).name == "fake-copy"


def _reexporting_package(site: Path) -> None:
    """``fakere``: its public names re-exported from the modules that define them, as
    flash-linear-attention's ``fla.ops.simple_gla.chunk_simple_gla`` is."""
    _fake_package(site, 128)  # fakeops.kern defines Copy.launch
    pkg = site / "fakere"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from .sub import launch\nfrom fakeops.kern import Copy as Public\n"
        "from .loop_a import looped\nfrom ._ext import native\n\ndef own():\n    return 1\n"
    )
    (pkg / "sub" / "__init__.py").write_text("from ..impl import launch\n")
    (pkg / "impl.py").write_text("from fakeops.kern import Copy\n\nlaunch = Copy.launch\n")
    (pkg / "loop_a.py").write_text("from .loop_b import looped\n")
    (pkg / "loop_b.py").write_text("from .loop_a import looped\n")


def test_a_re_exported_launcher_is_found_where_it_is_defined(tmp_path: Path) -> None:
    from tuned.registry.kernel_sources import locate_launcher

    site = tmp_path / "site"
    site.mkdir()
    _reexporting_package(site)
    search = [str(site)]
    # a package's own definition: its __init__.py (no module file of that name)
    assert locate_launcher("fakere.own", search)[:2] == ("fakere", "own")  # type: ignore[index]
    # absolute and aliased: fakere.Public.launch is fakeops.kern's Copy.launch
    found = locate_launcher("fakere.Public.launch", search)
    assert found is not None and found[:2] == ("fakeops.kern", "Copy.launch")
    assert found[2] == site / "fakeops" / "kern.py"
    # relative, two packages deep, to a module that binds it by assignment: stops there
    assert locate_launcher("fakere.launch", search)[:2] == ("fakere.impl", "launch")  # type: ignore[index]
    assert locate_launcher("fakere.loop_a.looped", search) is None  # a cycle ends
    # from a module that is no file here (a compiled extension): where it is imported
    assert locate_launcher("fakere.native", search)[:2] == ("fakere", "native")  # type: ignore[index]
    assert locate_launcher("nosuch.thing", search) is None


def test_an_entry_naming_a_re_exported_launcher_gets_its_knobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _reexporting_package(site)
    monkeypatch.syspath_prepend(str(site))
    entry = _fake_entry(tmp_path)  # as `ktuned registry add fakere.Public.launch` writes it
    (entry / "kernel.yaml").write_text(
        (entry / "kernel.yaml").read_text().replace("K.launch", "fakere.Public.launch")
    )
    spec = load_entry(entry)
    assert spec.installed_module == "fakeops.kern" and spec.launcher == "Copy.launch"
    assert "BLOCK" in spec.knobs or any(k.endswith("num_warps") for k in spec.knobs), spec.knobs


def test_a_launcher_whose_kernels_live_elsewhere_is_told_which_function_to_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The note used to name the first imported function the launcher calls, whatever it was:
    # for Liger's JSD, `liger_kernel.backends.dispatch`, a registry of implementations that
    # launches nothing itself. It now names the callees that do launch a kernel with a knob,
    # and says so when none does.
    from tuned.registry.discovery import discover_source

    site = tmp_path / "site"
    (site / "fakelayer").mkdir(parents=True)
    (site / "fakelayer" / "__init__.py").write_text("")
    (site / "fakelayer" / "kern.py").write_text(
        textwrap.dedent(
            """
            import triton
            import triton.language as tl

            @triton.jit
            def _add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = offs < n
                a = tl.load(x_ptr + offs, mask=m)
                tl.store(o_ptr + offs, a + tl.load(y_ptr + offs, mask=m), mask=m)

            def launch_add(x, y, out):
                n = x.numel()
                _add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
                return out
            """
        )
    )
    (site / "fakelayer" / "dispatch.py").write_text(
        "IMPLS = {}\n\ndef dispatch(name, *args):\n    return IMPLS[name](*args)\n"
    )
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    api = textwrap.dedent(
        """
        import torch
        from fakelayer.dispatch import dispatch
        from fakelayer.kern import launch_add

        def op(x, y):
            out = torch.empty_like(x)
            dispatch("log", x)
            return launch_add(x, y, out)

        def dispatched(x, y):
            return dispatch("add", x, y)
        """
    )
    found = discover_source(api, "op", "fakeapi")
    assert found is not None and not found.knobs
    (note,) = [n.reason for n in found.notices if "another module" in n.reason]
    assert "it calls dispatch (from fakelayer.dispatch), launch_add (from fakelayer.kern)" in note
    assert "`ktuned registry add fakelayer.kern.launch_add`" in note, note
    assert "fakelayer.dispatch.dispatch`" not in note, note

    found = discover_source(api, "dispatched", "fakeapi")
    assert found is not None
    (note,) = [n.reason for n in found.notices if "another module" in n.reason]
    assert "none of them launches a kernel with a knob" in note, note
    assert "registry add fakelayer.dispatch" not in note, note


def test_kernels_a_package_imports_relatively_are_discovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A library's layers import its kernels relatively (`from .act_kernels import ...`, as
    # attorch does): discovery skipped every relative import, so such layers had no launch
    # of a kernel it could see and no knob.
    from tuned.registry.discovery import discover_source

    site = tmp_path / "site"
    (site / "fakerel").mkdir(parents=True)
    (site / "fakerel" / "__init__.py").write_text("from .layers import scale\n")
    (site / "fakerel" / "kernels.py").write_text(
        textwrap.dedent(
            """
            import triton
            import triton.language as tl

            @triton.jit
            def _scale(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
            """
        )
    )
    layers = textwrap.dedent(
        """
        import torch
        import triton
        from .kernels import _scale
        from . import kernels as K

        def scale(x):
            out = torch.empty_like(x)
            _scale[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
            return out

        def scale_through_module(x):
            out = torch.empty_like(x)
            K._scale[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
            return out
        """
    )
    (site / "fakerel" / "layers.py").write_text(layers)
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    for launcher in ("scale", "scale_through_module"):
        found = discover_source(layers, launcher, "fakerel.layers")
        assert found is not None and "BLOCK" in found.knobs, (launcher, found.notices)
    # a package's __init__ imports relative to itself; the entry's own file (not a module
    # of the import path) has no package to resolve against
    init = "from .kernels import _scale\n\ndef op(x, o):\n    _scale[(1,)](x, o, 1, BLOCK=256)\n"
    found = discover_source(init, "op", "fakerel")
    assert found is not None and "BLOCK" in found.knobs, found.notices
    found = discover_source(init, "op", "entry.py")
    assert found is not None and not found.knobs
