"""``@triton.autotune`` and ``@triton.heuristics`` kernels: their values become knobs.

A candidate pins one configuration (the decorator's ``configs`` becomes that single
``Config``, so Triton's autotuner runs it without benchmarking); the baseline (``auto``) is
the source as written: the autotuner's own pick.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.registry.knob_diff import binding_changes
from tuned.registry.autotune import AUTO, nvidia_branch
from tuned.registry.discovery import discover_source
from tuned.registry.injection import materialize

AUTOTUNED = """
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ],
    key=["n"],
)
@triton.jit
def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)


def run(x):
    out = torch.empty_like(x)
    n = x.numel()
    _scale[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
    return out
"""


def _import(tmp_path: Path, source: str, name: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def _without_decorators(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    return ast.dump(tree)


def test_autotune_space_is_the_configs_their_neighbours_and_the_ladder() -> None:
    found = discover_source(AUTOTUNED, "run")
    assert found is not None
    assert found.knobs == {
        "BLOCK": (64, 128, 256, 512, 1024),  # 128 and 512, the rung between, one either side
        "num_warps": (2, 4, 8, 16),
        "num_stages": (1, 2, 3, 4),  # 3 is Triton's default for the first config
    }
    assert found.baseline == {"BLOCK": AUTO, "num_warps": AUTO, "num_stages": AUTO}
    # The baseline is the autotuner's own pick: the source unchanged.
    assert materialize(AUTOTUNED, "run", found.baseline)[0] is AUTOTUNED


def test_a_candidate_pins_one_config(tmp_path: Path) -> None:
    variant, rest = materialize(AUTOTUNED, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    assert rest == {}
    # Only the decorator's configs changed.
    assert _without_decorators(variant) == _without_decorators(AUTOTUNED)
    assert "configs=[triton.Config({'BLOCK': 256}, num_warps=2, num_stages=1)]," in variant
    copy = _import(tmp_path, variant, "ktuned_autotune_pinned")
    (config,) = copy._scale.configs
    assert config.kwargs == {"BLOCK": 256} and config.num_warps == 2 and config.num_stages == 1
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 3)


def test_configs_from_a_comprehension_over_literal_lists() -> None:
    source = AUTOTUNED.replace(
        """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]""",
        '[triton.Config({"BLOCK": b}, num_warps=w) for b in [32, 64] for w in (2, 4)]',
    )
    found = discover_source(source, "run")
    assert found is not None
    assert found.knobs["BLOCK"] == (16, 32, 64, 128)
    assert found.knobs["num_warps"] == (1, 2, 4, 8)
    assert found.knobs["num_stages"] == (2, 3, 4)  # Triton's default 3, and its neighbours


HEURISTIC = """
import torch
import triton
import triton.language as tl


@triton.heuristics(
    {
        "BLOCK_SIZE": lambda args: triton.next_power_of_2(args["n"]),
        "EVEN": lambda args: args["n"] % 2 == 0,
    }
)
@triton.jit
def _row(x_ptr, out_ptr, n, EVEN: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    v = tl.load(x_ptr + row * n + offs, mask=mask)
    if EVEN:
        v = v + 0.0
    tl.store(out_ptr + row * n + offs, v * 3, mask=mask)


def run(x):
    out = torch.empty_like(x)
    _row[(x.shape[0],)](x, out, x.shape[1])
    return out
"""


def test_a_heuristic_value_is_a_transform_knob_and_a_flag_is_not(tmp_path: Path) -> None:
    found = discover_source(HEURISTIC, "run")
    assert found is not None
    # BLOCK_SIZE covers the row in one pass: it may grow only. EVEN is a flag.
    assert found.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": (1, 2, 4, 8, 16)}
    variant, _ = materialize(HEURISTIC, "run", {"BLOCK_SIZE": "x2", "num_warps": 4})
    assert binding_changes(HEURISTIC, variant) == [
        'wrap triton.next_power_of_2(args["n"])'.replace('"', "'")
    ]
    assert '"BLOCK_SIZE": lambda args: min((triton.next_power_of_2(args["n"])) * 2, 65536),' in (
        textwrap.dedent(variant)
    )
    x = torch.randn(2, 37)
    torch.testing.assert_close(_import(tmp_path, variant, "ktuned_heuristic").run(x), x * 3)


def test_heuristics_given_as_values_are_read_and_a_call_gets_a_note(tmp_path: Path) -> None:
    """``@triton.heuristics(values={...})`` is Triton's keyword form: it was not read at all.
    Values computed by a call (FlagGems' ``runtime.get_heuristic_config("softmax_inner")``,
    a table read at import, whose entries set ``num_warps`` too) cannot be read: a note says
    so, and no ``num_warps`` is added to the launch (Triton's ``Heuristics`` would override
    it, so every such candidate was the baseline again)."""
    keyword = HEURISTIC.replace("@triton.heuristics(\n", "@triton.heuristics(\n    values=")
    found = discover_source(keyword, "run")
    assert found is not None
    assert found.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": (1, 2, 4, 8, 16)}
    variant, _ = materialize(keyword, "run", {"BLOCK_SIZE": "x2", "num_warps": 4})
    x = torch.randn(2, 37)
    torch.testing.assert_close(_import(tmp_path, variant, "ktuned_heur_kw").run(x), x * 3)

    table = """
HEURISTICS = {
    "row": {
        "BLOCK_SIZE": lambda args: triton.next_power_of_2(args["n"]),
        "EVEN": lambda args: args["n"] % 2 == 0,
        "num_warps": lambda args: 2,
    }
}


def heuristic_config(op):
    return HEURISTICS[op]
"""
    start = HEURISTIC.index("@triton.heuristics(")
    end = HEURISTIC.index("@triton.jit")
    called = (
        HEURISTIC[:start]
        + table
        + '\n\n@triton.heuristics(values=heuristic_config("row"))\n'
        + HEURISTIC[end:]
    )
    found = discover_source(called, "run")
    assert found is not None
    assert found.knobs == {}
    (note,) = [n.reason for n in found.notices]
    assert "_row: its @triton.heuristics values could not be read" in note, note
    assert "`heuristic_config('row')`, which discovery does not run" in note, note
    torch.testing.assert_close(_import(tmp_path, called, "ktuned_heur_call").run(x), x * 3)


def test_heuristics_from_a_module_dict_and_named_functions_are_tuned(tmp_path: Path) -> None:
    """``@triton.heuristics(HEURISTICS)`` of a module-level dict, and values that are functions
    rather than lambdas (``"BLOCK_SIZE": _block``): they were left with a note, untuned. A
    function is called by a wrapping lambda that transforms what it returns."""
    start = HEURISTIC.index("@triton.heuristics(")
    end = HEURISTIC.index("@triton.jit")
    named = (
        HEURISTIC[:start]
        + textwrap.dedent(
            """
            def _block(args):
                return triton.next_power_of_2(args["n"])


            HEURISTICS = {"BLOCK_SIZE": _block, "EVEN": lambda args: args["n"] % 2 == 0}


            @triton.heuristics(HEURISTICS)
            """
        )
        + HEURISTIC[end:]
    )
    found = discover_source(named, "run")
    assert found is not None
    assert found.knobs == {"BLOCK_SIZE": ("x1", "x2"), "num_warps": (1, 2, 4, 8, 16)}
    assert not found.notices
    assert materialize(named, "run", found.baseline)[0] is named
    variant, _ = materialize(named, "run", {"BLOCK_SIZE": "x2", "num_warps": 4})
    assert (
        '{"BLOCK_SIZE": (lambda _ktuned_f: lambda _ktuned_args: '
        "min(_ktuned_f(_ktuned_args) * 2, 65536))(_block)," in variant
    )
    copy = _import(tmp_path, variant, "ktuned_heur_named")
    assert copy._row.values["BLOCK_SIZE"]({"n": 37}) == 128  # next_power_of_2(37) * 2
    assert copy._row.values["EVEN"]({"n": 37}) is False
    x = torch.randn(2, 37)
    torch.testing.assert_close(copy.run(x), x * 3)


SHARED_HEURISTICS = """
import torch
import triton
import triton.language as tl

HEURISTICS = {"BLOCK_SIZE": lambda args: triton.next_power_of_2(args["n"])}


@triton.heuristics(HEURISTICS)
@triton.jit
def _a(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    v = tl.load(x_ptr + row * n + offs, mask=offs < n)
    tl.store(out_ptr + row * n + offs, v * 3, mask=offs < n)


@triton.heuristics(HEURISTICS)
@triton.jit
def _b(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    v = tl.load(x_ptr + row * n + offs, mask=offs < n)
    tl.store(out_ptr + row * n + offs, v * 2, mask=offs < n)


def run(x):
    out = torch.empty_like(x)
    out2 = torch.empty_like(x)
    _a[(x.shape[0],)](x, out, x.shape[1])
    _b[(x.shape[0],)](out, out2, x.shape[1])
    return out2
"""


def test_a_heuristics_dict_two_kernels_share_is_one_knob_reaching_both(tmp_path: Path) -> None:
    """One dict, one site: a knob per kernel would edit the same lambda twice."""
    found = discover_source(SHARED_HEURISTICS, "run")
    assert found is not None
    assert found.knobs["_a.BLOCK_SIZE"] == ("x1", "x2")
    assert found.reach["_a.BLOCK_SIZE"] == {"_a", "_b"}
    assert "_b.BLOCK_SIZE" not in found.knobs
    variant, _ = materialize(SHARED_HEURISTICS, "run", {"_a.BLOCK_SIZE": "x2"})
    assert variant.count('min((triton.next_power_of_2(args["n"])) * 2, 65536)') == 1
    copy = _import(tmp_path, variant, "ktuned_heur_shared")
    x = torch.randn(3, 21)
    torch.testing.assert_close(copy.run(x), x * 6)


def test_a_pinned_config_keeps_the_configs_hooks(tmp_path: Path) -> None:
    source = AUTOTUNED.replace(
        'triton.Config({"BLOCK": 128}, num_warps=4)',
        'triton.Config({"BLOCK": 128}, num_warps=4, pre_hook=_hook)',
    ).replace(
        "@triton.autotune(",
        "CALLS = []\n\n\ndef _hook(nargs):\n    CALLS.append(1)\n\n\n@triton.autotune(",
        1,
    )
    variant, _ = materialize(source, "run", {"BLOCK": 64, "num_warps": 2, "num_stages": 1})
    assert "num_warps=2, num_stages=1, pre_hook=_hook)]" in variant
    copy = _import(tmp_path, variant, "ktuned_autotune_hooked")
    x = torch.randn(300)
    torch.testing.assert_close(copy.run(x), x * 3)
    assert copy.CALLS  # the hook ran before the pinned launch


def test_an_imported_autotuned_kernel_is_pinned_at_its_launch(tmp_path: Path) -> None:
    kernels = AUTOTUNED[: AUTOTUNED.index("def run")]
    source = textwrap.dedent(
        """
        import torch
        import triton
        from scale_kernels import _scale


        def run(x):
            out = torch.empty_like(x)
            n = x.numel()
            _scale[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
            return out
        """
    )
    sources = {"scale_kernels.py": kernels}
    found = discover_source(source, "run", sources=sources)
    assert found is not None and found.knobs["BLOCK"] == (64, 128, 256, 512, 1024)
    assert materialize(source, "run", found.baseline, sources=sources)[0] is source
    variant, _ = materialize(
        source, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1}, sources=sources
    )
    # The autotuner is bypassed at the launch (its decorator lives in the other file).
    assert '_scale.fn[lambda META: (triton.cdiv(n, META["BLOCK"]),)](' in variant
    assert "(x, out, n, BLOCK=256, num_warps=2, num_stages=1)" in variant
    (tmp_path / "scale_kernels.py").write_text(kernels)
    sys.path.insert(0, str(tmp_path))
    try:
        copy = _import(tmp_path, variant, "ktuned_autotune_imported")
        x = torch.randn(1000)
        torch.testing.assert_close(copy.run(x), x * 3)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("scale_kernels", None)


def test_configs_from_a_module_list_or_a_function_returning_one(tmp_path: Path) -> None:
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    as_function = AUTOTUNED.replace(configs, "get_configs()").replace(
        "@triton.autotune(",
        f'def get_configs():\n    """The tutorial\'s way."""\n    return {configs}\n\n\n'
        "@triton.autotune(",
        1,
    )
    as_list = AUTOTUNED.replace(configs, "CONFIGS").replace(
        "@triton.autotune(", f"CONFIGS = {configs}\n\n\n@triton.autotune(", 1
    )
    for source in (as_function, as_list):
        found = discover_source(source, "run")
        assert found is not None
        assert found.knobs["BLOCK"] == (64, 128, 256, 512, 1024), found.notices
        variant, _ = materialize(source, "run", {"BLOCK": 64, "num_warps": 2, "num_stages": 1})
        assert "configs=[triton.Config({'BLOCK': 64}, num_warps=2, num_stages=1)]," in variant
        x = torch.randn(100)
        copy = _import(tmp_path, variant, f"ktuned_autotune_{len(source)}")
        torch.testing.assert_close(copy.run(x), x * 3)


def test_a_library_autotuner_named_like_autotune_is_one(tmp_path: Path) -> None:
    """A library's own autotuner (a subclass of Triton's ``Autotuner`` behind its own
    decorator, as flash-linear-attention's ``@fla_cache_autotune``) runs each config's
    options itself: discovery tunes its configs and adds no ``num_warps`` to the launch,
    which would be passed twice (``got multiple values for keyword argument``)."""
    library = AUTOTUNED.replace(
        "import triton.language as tl\n",
        "import triton.language as tl\nfrom triton.runtime.autotuner import Autotuner\n\n\n"
        "class CachedAutotuner(Autotuner):\n    pass\n\n\n"
        "def lib_cache_autotune(configs, key, **kw):\n"
        "    def wrap(fn):\n"
        "        return CachedAutotuner(fn, fn.arg_names, configs, key, None, None, **kw)\n"
        "    return wrap\n",
    ).replace("@triton.autotune(", "@lib_cache_autotune(")
    found = discover_source(library, "run")
    assert found is not None
    assert found.knobs["BLOCK"] == (64, 128, 256, 512, 1024)
    assert found.baseline["num_warps"] == AUTO  # from the configs, not an added option
    variant, _ = materialize(library, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    assert "num_warps=2, num_stages=1)]," in variant
    assert "_scale[lambda META: (triton.cdiv(n, META['BLOCK']),)](x, out, n)" in variant.replace(
        '"', "'"
    )
    copy = _import(tmp_path, variant, "ktuned_library_autotune_pinned")
    (config,) = copy._scale.configs
    assert config.kwargs == {"BLOCK": 256} and config.num_warps == 2
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 3)


def test_an_autotuned_original_runs_its_first_config_in_the_interpreter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Triton's interpreter cannot benchmark an autotuner's several configs (no GPU driver:
    "0 active drivers"); every autotuned original failed on the CPU and nothing was tuned.
    There the autotuner now runs its first config: the original is measured and candidates
    pinned to other configs are evaluated against it."""
    from tuned.cli import main
    from tuned.store.sqlite import SqliteStore

    entry = tmp_path / "reg" / "scale"
    entry.mkdir(parents=True)
    (entry / "scale.py").write_text(
        AUTOTUNED
        + "\n\ndef make_inputs(shape, dtype, device, seed):\n"
        + "    g = torch.Generator().manual_seed(seed)\n"
        + "    return (torch.randn(shape['n'], generator=g).to(dtype).to(device),)\n"
    )
    (entry / "kernel.yaml").write_text(
        "name: scale\nmodule: scale.py\nlauncher: run\ninputs: make_inputs\n"
        "shapes:\n  - {n: 1000, perf: true}\ndtypes: [float32]\n"
    )
    state = tmp_path / "state"
    args = ["tune", str(entry), "--budget", "2", "--state-dir", str(state)]
    main([*args, "--device", "interpreter", "--compile-workers", "0"])
    out = capsys.readouterr().out
    assert "active drivers" not in out and "the original fails" not in out, out
    store = SqliteStore(state / "ktuned.sqlite")
    try:
        kernel = store.kernel("scale")
        assert kernel is not None
        best = store.best("scale")
        assert best is not None
        trials = store.trials("scale", kernel.generation, best.fingerprint)
    finally:
        store.close()
    outcomes = {t.provenance.value: t.result.outcome.value for t in trials}
    assert outcomes.get("original") == "ok", outcomes
    assert sum(1 for t in trials if t.result.outcome.value == "ok") >= 2  # candidates too


BUILT_BY_HELPER = '''
def _configs():
    """Built in loops, as torchao's mx_formats kernels do."""
    results = []
    for BLOCK in (128, 256):
        for num_warps in (2, 4):
            config = triton.Config({"BLOCK": BLOCK}, num_warps=num_warps, num_stages=1)
            results.append(config)
    return results


SMALL = [triton.Config({"BLOCK": b}, num_warps=w) for b in [32, 64] for w in [1, 2]]


'''


def _space(module: ModuleType) -> set[tuple[object, ...]]:
    """The configurations of the imported module's Autotuner: the ground truth."""
    return {
        (c.kwargs["BLOCK"], c.num_warps, c.num_stages or 3)  # None: Triton's default
        for c in module._scale.configs
    }


def test_configs_built_by_a_helper_in_loops_or_added_lists(tmp_path: Path) -> None:
    """``configs=_configs()`` (a function appending Configs in for loops, inside an ``if``
    block) and ``SMALL + _configs()``: the note named an AST node type ("BinOp")."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    guarded = textwrap.indent(BUILT_BY_HELPER, "    ")
    for n, expr in enumerate(["_configs()", "SMALL + _configs()"]):
        source = AUTOTUNED.replace(configs, expr).replace(
            "@triton.autotune(", f"if torch.__version__:\n{guarded}\n@triton.autotune(", 1
        )
        found = discover_source(source, "run")
        assert found is not None and not found.notices, found.notices
        space = found.sites["BLOCK"][0].autotune
        assert space is not None
        truth = _space(_import(tmp_path, source, f"ktuned_autotune_built_{n}"))
        assert {(c["BLOCK"], c["num_warps"], c["num_stages"]) for c in space.configs} == truth
        assert set(found.knobs["BLOCK"]) >= {b for b, _, _ in truth}
        variant, _ = materialize(source, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
        assert "configs=[triton.Config({'BLOCK': 256}, num_warps=2, num_stages=1)]," in variant
        copy = _import(tmp_path, variant, f"ktuned_autotune_built_pinned_{n}")
        assert _space(copy) == {(256, 2, 1)}
        x = torch.randn(1000)
        torch.testing.assert_close(copy.run(x), x * 3)


def test_a_library_autotuner_called_with_configs_and_key_is_one_whatever_its_name(
    tmp_path: Path,
) -> None:
    """A library's autotuner named otherwise (FlagGems' ``@libtuner(configs=..., key=...)``
    above ``@libentry()``) is recognized by Triton's keywords: its configs are the space, and
    no ``num_warps`` is added to the launch (it was, and Triton's autotuner got it twice)."""
    library = AUTOTUNED.replace(
        "import triton.language as tl\n",
        "import triton.language as tl\n\n\n"
        "def lib_entry():\n    return lambda fn: fn\n\n\n"
        "def tuner(configs, key, strategy=None):\n"
        "    return triton.autotune(configs=configs, key=key)\n",
    ).replace("@triton.autotune(", "@lib_entry()\n@tuner(")
    found = discover_source(library, "run")
    assert found is not None
    assert found.knobs["BLOCK"] == (64, 128, 256, 512, 1024)
    assert found.baseline["num_warps"] == AUTO  # from the configs, not an added option
    variant, _ = materialize(library, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    assert "_scale[lambda META: (triton.cdiv(n, META['BLOCK']),)](x, out, n)" in variant.replace(
        '"', "'"
    )
    copy = _import(tmp_path, variant, "ktuned_libtuner_pinned")
    (config,) = copy._scale.configs
    assert config.kwargs == {"BLOCK": 256} and config.num_warps == 2
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 3)
    # Configs it cannot read get a note naming the decorator as written, not Triton's.
    unread = library.replace("configs=[", "configs=load_configs('scale') or [", 1)
    found = discover_source(unread, "run")
    assert found is not None and "BLOCK" not in found.knobs
    (note,) = [n.reason for n in found.notices]
    assert "its @tuner configs could not be read" in note, note


def test_configs_discovery_cannot_read_get_a_note_that_says_where_and_what_to_do() -> None:
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    helper = BUILT_BY_HELPER.replace(
        "            results.append(config)",
        "            if BLOCK * num_warps <= 512:\n                results.append(config)",
    )
    source = AUTOTUNED.replace(configs, "_configs()").replace(
        "@triton.autotune(", f"{helper}\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and "BLOCK" not in found.knobs
    (note,) = [n.reason for n in found.notices]
    assert "could not be read without running the module" in note, note
    assert "stopped at line 14, in _configs(): `if BLOCK * num_warps <= 512:`" in note, note
    assert "declare knobs in kernel.yaml (each Config key, num_warps and num_stages" in note


def test_configs_from_a_comprehension_over_module_level_lists(tmp_path: Path) -> None:
    """``for BT in BT_LIST`` over a module-level list, and a platform choice between two lists
    (``[...] if is_amd else [...]``, either at once or in the branches of an ``if``), as
    flash-linear-attention writes its configs: the note stopped at the name ``BT_LIST``. Of a
    platform choice NVIDIA's side is read; of a test that is not one (``if BIG:``), the union."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    comprehension = '[triton.Config({"BLOCK": b}, num_warps=w) for b in BLOCKS for w in WARPS]'
    heads = {
        "BLOCKS = [32, 64]\nWARPS = [1, 2] if is_amd else [2, 4]\n": (2, 4),
        "BLOCKS: list[int] = [32, 64]\nif is_amd:\n    WARPS = [1, 2]\n"
        "else:\n    WARPS = [2, 4]\n": (2, 4),
        "BLOCKS = [32, 64]\nWARPS = [1, 2] if BIG else [2, 4]\n": (1, 2, 4),
        "BLOCKS = [32, 64]\nif BIG:\n    WARPS = [1, 2]\nelse:\n    WARPS = [2, 4]\n": (1, 2, 4),
    }
    for n, (head, warps) in enumerate(heads.items()):
        source = AUTOTUNED.replace(configs, comprehension).replace(
            "@triton.autotune(", f"is_amd = BIG = False\n{head}\n\n@triton.autotune(", 1
        )
        found = discover_source(source, "run")
        assert found is not None and not found.notices, found.notices
        space = found.sites["BLOCK"][0].autotune
        assert space is not None
        assert {(c["BLOCK"], c["num_warps"]) for c in space.configs} == {
            (b, w) for b in (32, 64) for w in warps
        }
        assert found.knobs["BLOCK"] == (16, 32, 64, 128)
        assert found.knobs["num_warps"] == (1, 2, 4, 8)
        variant, _ = materialize(source, "run", {"BLOCK": 64, "num_warps": 2, "num_stages": 1})
        assert "configs=[triton.Config({'BLOCK': 64}, num_warps=2, num_stages=1)]," in variant
        copy = _import(tmp_path, variant, f"ktuned_autotune_module_lists_{n}")
        x = torch.randn(1000)
        torch.testing.assert_close(copy.run(x), x * 3)


PLATFORM_HELPERS = """
def is_cuda():
    return triton.runtime.driver.active.get_current_target().backend == "cuda"


def get_cuda_autotune_config():
    return [
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]


def get_hip_autotune_config():
    return [triton.Config({"BLOCK": 64, "waves_per_eu": 2}, num_warps=1)]


"""


@pytest.mark.parametrize(
    "choice",
    [
        # Triton's matmul tutorial (03-matrix-multiplication.py)
        "def get_autotune_config():\n    if is_cuda():\n        return get_cuda_autotune_config()\n"
        "    else:\n        return get_hip_autotune_config()\n",
        # an early return on the other platform, negated
        "def get_autotune_config():\n    if not is_cuda():\n"
        "        return get_hip_autotune_config()\n    return get_cuda_autotune_config()\n",
        # torch's own version flags, and a string comparison
        "def get_autotune_config():\n    if torch.version.hip is not None:\n"
        "        configs = get_hip_autotune_config()\n    else:\n"
        "        configs = get_cuda_autotune_config()\n    return configs\n",
        "def get_autotune_config():\n"
        '    if triton.runtime.driver.active.get_current_target().backend != "hip":\n'
        "        return get_cuda_autotune_config()\n    return get_hip_autotune_config()\n",
        # a conditional expression, and module-level branches
        "def get_autotune_config():\n"
        "    return get_cuda_autotune_config() if is_cuda() else get_hip_autotune_config()\n",
        "if not torch.version.hip:\n    def get_autotune_config():\n"
        "        return get_cuda_autotune_config()\nelse:\n    def get_autotune_config():\n"
        "        return get_hip_autotune_config()\n",
    ],
)
def test_configs_chosen_by_platform_are_nvidias(choice: str) -> None:
    """A config function that branches on the platform (``if is_cuda(): return cuda_configs()
    else: return hip_configs()``, Triton's matmul tutorial) is read on NVIDIA's side, the
    platform ktuned tunes on: the note stopped at ``if is_cuda():``, and the union would have
    made AMD's ``waves_per_eu`` a knob of every config."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    source = AUTOTUNED.replace(configs, "get_autotune_config()").replace(
        "@triton.autotune(", f"{PLATFORM_HELPERS}{choice}\n\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and not found.notices, found.notices
    space = found.sites["BLOCK"][0].autotune
    assert space is not None
    assert [(c["BLOCK"], c["num_warps"], c["num_stages"]) for c in space.configs] == [
        (128, 4, 3),
        (512, 8, 2),
    ]
    assert "waves_per_eu" not in found.knobs
    variant, _ = materialize(source, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    assert "configs=[triton.Config({'BLOCK': 256}, num_warps=2, num_stages=1)]," in variant


def test_a_test_that_is_not_a_platform_still_stops_the_config_function() -> None:
    """A GPU-generation test chooses between NVIDIA GPUs, and a name that says nothing of the
    platform is no platform test: both still get the note at the ``if``."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    for test in ("torch.cuda.get_device_capability()[0] >= 9", "is_hopper()"):
        choice = (
            f"def get_autotune_config():\n    if {test}:\n"
            "        return get_cuda_autotune_config()\n    return get_hip_autotune_config()\n"
        )
        source = AUTOTUNED.replace(configs, "get_autotune_config()").replace(
            "@triton.autotune(", f"{PLATFORM_HELPERS}{choice}\n\n@triton.autotune(", 1
        )
        found = discover_source(source, "run")
        assert found is not None and "BLOCK" not in found.knobs
        (note,) = [n.reason for n in found.notices]
        assert f"in get_autotune_config(): `if {test}:`" in note, note


def test_nvidia_branch_reads_the_common_platform_tests() -> None:
    expected = {
        "is_cuda()": True,
        "not is_cuda()": False,
        "is_hip()": False,
        "not is_hip()": True,
        "IS_AMD": False,
        "isHip": False,
        "torch.version.cuda": True,
        "torch.version.hip is None": True,
        "torch.version.hip is not None": False,
        "torch.cuda.is_available()": True,
        'device.type == "cuda"': True,
        'backend != "hip"': True,
        'backend == "hip"': False,
        "torch.cuda.get_device_capability()[0] >= 9": None,
        "is_hopper()": None,
        "is_cuda(x)": None,
        "BIG": None,
        "is_cuda() and BIG": None,
    }
    found = {t: nvidia_branch(ast.parse(t, mode="eval").body) for t in expected}
    assert found == expected


@pytest.mark.parametrize(
    "helper",
    [
        # flaggems' cfggen: a comprehension bound to a name, then returned
        "def cfggen():\n    configs = [\n"
        '        triton.Config({"BLOCK": b}, num_warps=w)\n'
        "        for w in [2, 4]\n        for b in [128, 256]\n    ]\n    return configs\n",
        # grown by += and extend
        'def cfggen():\n    configs = [triton.Config({"BLOCK": 128}, num_warps=2)]\n'
        '    configs += [triton.Config({"BLOCK": 256}, num_warps=w) for w in (2, 4)]\n'
        '    configs.extend([triton.Config({"BLOCK": 128}, num_warps=4)])\n    return configs\n',
    ],
)
def test_configs_a_helper_binds_to_a_name_and_returns(helper: str) -> None:
    """``configs = [triton.Config(...) for w in [...] for bs in [...]]; return configs`` (a
    helper that is not a single ``return``): the note stopped at the comprehension."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    source = AUTOTUNED.replace(configs, "cfggen()").replace(
        "@triton.autotune(", f"{helper}\n\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and not found.notices, found.notices
    space = found.sites["BLOCK"][0].autotune
    assert space is not None
    assert {(c["BLOCK"], c["num_warps"]) for c in space.configs} == {
        (b, w) for b in (128, 256) for w in (2, 4)
    }


def test_a_module_level_name_bound_by_code_still_gets_the_note() -> None:
    """A list computed by a call, or grown after it is bound, is not read as a literal."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    comprehension = '[triton.Config({"BLOCK": b}, num_warps=4) for b in BLOCKS]'
    for head in ("BLOCKS = sorted([32, 64])\n", "BLOCKS = [32, 64]\nBLOCKS += [128]\n"):
        source = AUTOTUNED.replace(configs, comprehension).replace(
            "@triton.autotune(", f"{head}\n\n@triton.autotune(", 1
        )
        found = discover_source(source, "run")
        assert found is not None and "BLOCK" not in found.knobs
        (note,) = [n.reason for n in found.notices]
        assert "it stopped at the name `BLOCKS`" in note, note


SETTING_ALIASES = """
IS_HIP = torch.version.hip is not None
AUTOTUNE_SETTING = "fast"


def get_max_config_nvidia():
    configs = []
    for w in [2, 4]:
        for b in [64, 1024]:
            configs.append(triton.Config({"BLOCK": b}, num_warps=w))
    return configs


def get_fast_config_nvidia():
    return [triton.Config({"BLOCK": 128}, num_warps=4)]


def get_default_config_nvidia():
    config = triton.Config({"BLOCK": 256}, num_warps=8)
    return [config]


def get_default_config_amd():
    return [triton.Config({"BLOCK": 999}, num_warps=1)]


if IS_HIP:
    get_max_config = get_default_config_amd
    get_fast_config = get_default_config_amd
    get_default_config = get_default_config_amd
else:
    get_max_config = get_max_config_nvidia
    get_fast_config = get_fast_config_nvidia
    get_default_config = get_default_config_nvidia

if AUTOTUNE_SETTING == "max":
    get_autotune_config = get_max_config
elif AUTOTUNE_SETTING == "fast":
    get_autotune_config = get_fast_config
else:
    get_autotune_config = get_default_config
"""


def test_configs_behind_aliases_chosen_by_a_setting_are_every_branchs(tmp_path: Path) -> None:
    """gemlite binds ``get_autotune_config`` to one of three helpers by a setting read at
    import (``if AUTOTUNE_SETTING == 'max': ... elif 'fast': ... else: ...``), each an alias
    chosen by ``if IS_HIP:``: discovery stopped at the alias and its GEMM and GEMV kernels had
    no space. Every NVIDIA branch's configurations are now the space; AMD's are not."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    source = AUTOTUNED.replace(configs, "get_autotune_config()").replace(
        "@triton.autotune(", f"{SETTING_ALIASES}\n\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and not found.notices, found.notices
    space = found.sites["BLOCK"][0].autotune
    assert space is not None
    assert {(c["BLOCK"], c["num_warps"]) for c in space.configs} == {
        (64, 2),
        (1024, 2),
        (64, 4),
        (1024, 4),
        (128, 4),
        (256, 8),
    }
    assert 999 not in found.knobs["BLOCK"] and found.baseline["BLOCK"] == AUTO
    variant, _ = materialize(source, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1})
    assert "configs=[triton.Config({'BLOCK': 256}, num_warps=2, num_stages=1)]," in variant
    copy = _import(tmp_path, variant, "ktuned_autotune_setting_aliases")
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 3)


def test_configs_of_an_imported_kernel_from_a_helper_of_a_third_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A library's layers launch kernels imported from its kernels module, autotuned over
    # configs a helper of its utils module builds (attorch: `configs=
    # element_wise_kernel_configs()`, whose dict key is the helper's parameter default, and
    # `[triton.Config({}, num_warps=2**i) for i in range(6)]`). They were read with no
    # module at all: "could not be read", no knob.
    pkg = tmp_path / "fakeat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text(
        textwrap.dedent(
            """
            import triton

            def block_configs(block_name="BLOCK"):
                \"\"\"Configs for element-wise kernels.\"\"\"
                return [triton.Config({block_name: 128}, num_warps=2),
                        triton.Config({block_name: 512}, num_warps=4)]

            def warp_configs():
                return [triton.Config({}, num_warps=2**i) for i in range(3)]
            """
        )
    )
    kernels = AUTOTUNED[: AUTOTUNED.index("def run")]
    configs = kernels[kernels.index("[") : kernels.index("],") + 1]
    kernels = kernels.replace(configs, "block_configs()")
    kernels = kernels.replace(
        "import triton\n", "import triton\nfrom .utils import block_configs\n", 1
    )
    warps = kernels.replace("block_configs", "warp_configs").replace("_scale", "_scale_w")
    (pkg / "kernels.py").write_text(kernels + warps[warps.index("@triton.autotune") :])
    (pkg / "kernels.py").write_text(
        (pkg / "kernels.py")
        .read_text()
        .replace(
            "from .utils import block_configs\n", "from .utils import block_configs, warp_configs\n"
        )
    )
    layers = textwrap.dedent(
        """
        import torch
        import triton
        from .kernels import _scale, _scale_w


        def run(x):
            out = torch.empty_like(x)
            n = x.numel()
            _scale[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, out, n)
            return out


        def run_w(x):
            out = torch.empty_like(x)
            n = x.numel()
            _scale_w[(1,)](x, out, n, BLOCK=1024)
            return out
        """
    )
    (pkg / "layers.py").write_text(layers)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = discover_source(layers, "run", "fakeat.layers")
    assert found is not None
    assert found.knobs["BLOCK"] == (64, 128, 256, 512, 1024), found.notices
    assert found.knobs["num_warps"] == (1, 2, 4, 8)
    found_w = discover_source(layers, "run_w", "fakeat.layers")
    assert found_w is not None and found_w.knobs["num_warps"] == (1, 2, 4, 8), found_w.notices
    # pinned at the launch; the copy runs inside the package, the kernels module untouched
    # (as a worker does: the copy has no module file, its package resolves its imports)
    variant, _ = materialize(
        layers, "run", {"BLOCK": 256, "num_warps": 2, "num_stages": 1}, package="fakeat"
    )
    assert "_scale.fn[" in variant and "BLOCK=256, num_warps=2, num_stages=1" in variant
    (pkg / "layers_variant.py").write_text(variant)
    try:
        copy = importlib.import_module("fakeat.layers_variant")
        x = torch.randn(1000)
        torch.testing.assert_close(copy.run(x), x * 3)
    finally:
        for name in [m for m in sys.modules if m == "fakeat" or m.startswith("fakeat.")]:
            sys.modules.pop(name)


def test_configs_from_a_comprehension_over_itertools_product(tmp_path: Path) -> None:
    """``for (b, w), s in itertools.product(TILES, [1, 2])`` (torchao's NVFP4 quantizer, and
    ``itertools.product([32, 64], repeat=2)``): the note stopped at the product."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    comprehension = (
        '[triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)'
        " for (b, w), s in itertools.product(TILES, [1, 2])]"
    )
    head = "import itertools\nTILES: list[tuple[int, int]] = [(32, 2), (64, 4)]\n"
    source = AUTOTUNED.replace(configs, comprehension).replace(
        "@triton.autotune(", f"{head}\n\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and not found.notices, found.notices
    space = found.sites["BLOCK"][0].autotune
    assert space is not None
    assert {(c["BLOCK"], c["num_warps"], c["num_stages"]) for c in space.configs} == {
        (32, 2, 1),
        (32, 2, 2),
        (64, 4, 1),
        (64, 4, 2),
    }
    variant, _ = materialize(source, "run", {"BLOCK": 64, "num_warps": 2, "num_stages": 1})
    assert "configs=[triton.Config({'BLOCK': 64}, num_warps=2, num_stages=1)]," in variant
    copy = _import(tmp_path, variant, "ktuned_autotune_itertools_product")
    x = torch.randn(1000)
    torch.testing.assert_close(copy.run(x), x * 3)
    repeated = source.replace(
        "itertools.product(TILES, [1, 2])", "itertools.product(TILES, repeat=1)"
    )
    repeated = repeated.replace("for (b, w), s in", "for ((b, w),) in").replace(
        ", num_stages=s)", ")"
    )
    found = discover_source(repeated, "run")
    assert found is not None and not found.notices, found.notices


def test_configs_of_an_annotated_module_level_list() -> None:
    """``CONFIGS: list[triton.Config] = [...]`` then ``configs=CONFIGS`` (torchao's NVFP4
    quantizer): only plain assignments were followed, and the note stopped at the name."""
    configs = """[
        triton.Config({"BLOCK": 128}, num_warps=4),
        triton.Config({"BLOCK": 512}, num_warps=8, num_stages=2),
    ]"""
    source = AUTOTUNED.replace(configs, "CONFIGS").replace(
        "@triton.autotune(", f"CONFIGS: list[triton.Config] = {configs}\n\n\n@triton.autotune(", 1
    )
    found = discover_source(source, "run")
    assert found is not None and not found.notices, found.notices
    space = found.sites["BLOCK"][0].autotune
    assert space is not None
    assert {(c["BLOCK"], c["num_warps"]) for c in space.configs} == {(128, 4), (512, 8)}


def test_an_autotune_key_a_heuristic_sets_is_no_knob_of_the_configs() -> None:
    """FlagGems' log_softmax: ``@triton.autotune`` over ``@triton.heuristics({"num_warps":
    heur_num_warps, ...})``. Triton's autotuner passes the config's ``num_warps`` to the
    heuristics, which set it again at every launch: as a config knob it timed the same code
    five times. The heuristic's own value is the knob."""
    source = AUTOTUNED.replace(
        "@triton.jit",
        "@triton.heuristics({'num_warps': _warps})\n@triton.jit",
        1,
    ).replace("@triton.autotune(", "def _warps(args):\n    return 4\n\n\n@triton.autotune(", 1)
    found = discover_source(source, "run")
    assert found is not None
    assert found.baseline["BLOCK"] == AUTO and found.baseline["num_stages"] == AUTO
    assert found.knobs["num_warps"] == ("/4", "/2", "x1", "x2", "x4"), found.knobs
    assert found.baseline["num_warps"] == "x1"  # the heuristic's, not the configs'
