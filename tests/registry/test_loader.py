"""Tests of the registry loader on real entry directories written into ``tmp_path``."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuned.errors import BadInputError, RegistryError
from tuned.registry import (
    Problem,
    Roofline,
    Shape,
    Tolerance,
    format_problems,
    load_entry,
    loader,
    scan_registry,
)

LAUNCHER_DEF = "def softmax(x, BLOCK_SIZE=1024, num_warps=4, num_stages=2):"
VALID_MODULE = f"""\
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < N, other=-float("inf"))
    y = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + offs, y / tl.sum(y, axis=0), mask=offs < N)


{LAUNCHER_DEF}
    y = torch.empty_like(x)
    grid = (x.shape[0],)
    _softmax_kernel[grid](x, y, x.shape[1], BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps,
                          num_stages=num_stages)
    return y


def reference(x):
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape["M"], shape["N"], generator=g).to(dtype=dtype, device=device),)
"""

Doc = dict[str, Any]
Mutator = Callable[[Doc], object]


def valid_doc() -> Doc:
    return {
        "name": "softmax",
        "module": "softmax.py",
        "launcher": "softmax",
        "reference": "reference",
        "inputs": "make_inputs",
        "shapes": [{"M": 4096, "N": 4096, "perf": True}, {"M": 1, "N": 65537}],
        "dtypes": ["fp16", "bf16", "float32"],
        "tolerance": {"float32": {"atol": 1.0e-5, "rtol": 2.0e-5}},
        "knobs": {"BLOCK_SIZE": [256, 512, 1024], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3]},
        "weight": 2.5,
        "roofline": {"bytes": "2*M*N*elem", "flops": "5*M*N"},
    }


def write_entry(
    directory: Path, doc: Doc | None = None, *, text: str | None = None, module: str = VALID_MODULE
) -> Path:
    """An entry directory with kernel.yaml (``text``, else ``doc`` dumped) and softmax.py."""
    directory.mkdir(parents=True, exist_ok=True)
    if text is None:
        text = yaml.safe_dump(valid_doc() if doc is None else doc, sort_keys=False)
    (directory / "kernel.yaml").write_text(text)
    (directory / "softmax.py").write_text(module)
    return directory


def problems_of(entry: Path) -> list[Problem]:
    with pytest.raises(RegistryError) as info:
        load_entry(entry)
    problems = info.value.problems
    assert problems and all(isinstance(p, Problem) for p in problems)
    assert str(info.value) == format_problems(p for p in problems if isinstance(p, Problem))
    return [p for p in problems if isinstance(p, Problem)]


def find(problems: list[Problem], field: str, fragment: str) -> Problem:
    for p in problems:
        if p.field == field and fragment in p.reason:
            return p
    raise AssertionError(f"no problem ({field!r}, {fragment!r}) in:\n{format_problems(problems)}")


def put(*path: str | int, value: object) -> Mutator:
    def mutate(doc: Doc) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def drop(*path: str | int) -> Mutator:
    def mutate(doc: Doc) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


@dataclass(frozen=True)
class Case:
    mutate: Mutator | None
    field: str
    fragment: str
    module: str = VALID_MODULE
    file: str = "kernel.yaml"


def launcher(signature: str) -> str:
    return VALID_MODULE.replace(LAUNCHER_DEF, f"def softmax({signature}):")


CASES: dict[str, Case] = {
    # top level
    "unknown key": Case(put("shape", value=[]), "shape", "allowed keys: name, module, launcher"),
    "unknown key hint": Case(put("dtype", value=[]), "dtype", "did you mean 'dtypes'?"),
    "name missing": Case(drop("name"), "name", "required"),
    "name pattern": Case(put("name", value="Soft Max"), "name", "lowercase letters, digits"),
    "name not str": Case(put("name", value=12), "name", "got 12"),
    # module
    "module missing": Case(drop("module"), "module", "required"),
    "module absolute": Case(put("module", value="/etc/x.py"), "module", "absolute path"),
    "module escapes": Case(put("module", value="../x.py"), "module", "'..' is not allowed"),
    "module not py": Case(put("module", value="softmax.txt"), "module", "must name a .py file"),
    "module not found": Case(put("module", value="nope.py"), "module", "file not found"),
    "module syntax": Case(
        None, "", "syntax error at line 2", module="x = 1\ndef f(:\n", file="softmax.py"
    ),
    # functions
    "launcher missing": Case(drop("launcher"), "launcher", "required"),
    "launcher not identifier": Case(put("launcher", value="soft-max"), "launcher", "identifier"),
    "launcher not defined": Case(
        put("launcher", value="run"), "launcher", "no top-level function 'run' in softmax.py"
    ),
    "inputs missing": Case(drop("inputs"), "inputs", "required"),
    "inputs not defined": Case(put("inputs", value="gen"), "inputs", "no top-level function 'gen'"),
    "reference not defined": Case(put("reference", value="ref"), "reference", "'ref'"),
    # shapes
    "shapes missing": Case(drop("shapes"), "shapes", "required"),
    "shapes empty": Case(put("shapes", value=[]), "shapes", "non-empty list"),
    "shape not mapping": Case(put("shapes", 1, value=[1, 2]), "shapes[1]", "must be a mapping"),
    "dim negative": Case(
        put("shapes", 1, "N", value=-3), "shapes[1].N", "positive integer, got -3"
    ),
    "dim float": Case(put("shapes", 0, "M", value=1.5), "shapes[0].M", "positive integer"),
    "dim bool": Case(put("shapes", 0, "M", value=True), "shapes[0].M", "got True"),
    "dim name": Case(put("shapes", 1, "1x", value=2), "shapes[1]", "not a Python identifier"),
    "perf not bool": Case(put("shapes", 0, "perf", value="yes"), "shapes[0].perf", "true or false"),
    "no perf shape": Case(drop("shapes", 0, "perf"), "shapes", "add perf: true"),
    "dims differ": Case(
        put("shapes", 1, value={"M": 1, "K": 2}), "shapes[1]", "every shape must name the same"
    ),
    "shape twice": Case(
        put("shapes", 1, value={"N": 4096, "M": 4096}), "shapes[1]", "same sizes as shapes[0]"
    ),
    # dtypes
    "dtypes missing": Case(drop("dtypes"), "dtypes", "required"),
    "dtypes empty": Case(put("dtypes", value=[]), "dtypes", "non-empty list"),
    "dtype unknown": Case(
        put("dtypes", 1, value="float8"), "dtypes[1]", "valid: float16, bfloat16"
    ),
    "dtype duplicate": Case(put("dtypes", 1, value="half"), "dtypes[1]", "duplicates dtypes[0]"),
    # tolerance
    "tolerance not mapping": Case(put("tolerance", value=[1]), "tolerance", "must be a mapping"),
    "tolerance dtype unused": Case(
        put("tolerance", "float64", value={"atol": 0.0, "rtol": 0.0}),
        "tolerance.float64",
        "not in dtypes",
    ),
    "tolerance negative": Case(
        put("tolerance", "float32", "atol", value=-1.0), "tolerance.float32.atol", ">= 0"
    ),
    "tolerance yaml 1e-2": Case(
        put("tolerance", "float32", "rtol", value="1e-2"), "tolerance.float32.rtol", "1.0e-2"
    ),
    "tolerance key": Case(
        put("tolerance", "float32", "eps", value=1.0), "tolerance.float32.eps", "atol, rtol"
    ),
    # knobs: values
    "knobs not mapping": Case(put("knobs", value=[1]), "knobs", "must be a mapping"),
    "knob name": Case(put("knobs", "block-size", value=[1]), "knobs", "not a Python identifier"),
    "knob empty": Case(put("knobs", "num_warps", value=[]), "knobs.num_warps", "non-empty list"),
    "knob null value": Case(
        put("knobs", "num_stages", 1, value=None), "knobs.num_stages[1]", "null"
    ),
    "knob nested": Case(put("knobs", "num_stages", 1, value=[2]), "knobs.num_stages[1]", "scalar"),
    "knob duplicate": Case(
        put("knobs", "num_stages", 2, value=1),
        "knobs.num_stages[2]",
        "duplicates knobs.num_stages[0]",
    ),
    "knob mixed types": Case(
        put("knobs", "num_stages", value=[1, "two"]), "knobs.num_stages", "mix numbers and strings"
    ),
    "num_warps 3": Case(
        put("knobs", "num_warps", 1, value=3), "knobs.num_warps[1]", "power of two"
    ),
    "num_warps 64": Case(put("knobs", "num_warps", 2, value=64), "knobs.num_warps[2]", "and 32"),
    "num_stages 0": Case(put("knobs", "num_stages", 0, value=0), "knobs.num_stages[0]", ">= 1"),
    "num_ctas 0": Case(put("knobs", "num_ctas", value=[0]), "knobs.num_ctas[0]", ">= 1"),
    "maxnreg 256": Case(put("knobs", "maxnreg", value=[256]), "knobs.maxnreg[0]", "1 and 255"),
    "BLOCK not pow2": Case(
        put("knobs", "BLOCK_SIZE", 0, value=100), "knobs.BLOCK_SIZE[0]", "tl.arange"
    ),
    "block lowercase": Case(
        put("knobs", "block_k", value=[48]), "knobs.block_k[0]", "power of two"
    ),
    # knobs: against the launcher
    "knob not a parameter": Case(
        put("knobs", "GROUP_M", value=[4, 8]), "knobs.GROUP_M", "not a parameter of launcher"
    ),
    "knob without default": Case(
        None,
        "knobs.BLOCK_SIZE",
        "give the launcher a literal default for knob BLOCK_SIZE",
        module=launcher("x, BLOCK_SIZE, num_warps=4, num_stages=2"),
    ),
    "knob default not literal": Case(
        None,
        "knobs.BLOCK_SIZE",
        "`DEFAULT_BLOCK`, not a literal",
        module=launcher("x, BLOCK_SIZE=DEFAULT_BLOCK, num_warps=4, num_stages=2"),
    ),
    "knob only in kwargs": Case(
        None,
        "knobs.BLOCK_SIZE",
        "only through **opts",
        module=launcher("x, num_warps=4, num_stages=2, **opts"),
    ),
    "knob positional-only": Case(
        None,
        "knobs.BLOCK_SIZE",
        "positional-only",
        module=launcher("x, BLOCK_SIZE=1024, /, num_warps=4, num_stages=2"),
    ),
    # weight
    "weight zero": Case(put("weight", value=0), "weight", "number > 0"),
    "weight text": Case(put("weight", value="heavy"), "weight", "got 'heavy'"),
    "weight bool": Case(put("weight", value=True), "weight", "got True"),
    # roofline
    "roofline not mapping": Case(put("roofline", value="2*M"), "roofline", "must be a mapping"),
    "roofline key": Case(put("roofline", "time", value="M"), "roofline.time", "bytes, flops"),
    "roofline not str": Case(put("roofline", "flops", value=5), "roofline.flops", "quoted"),
    "roofline call": Case(
        put("roofline", "flops", value="max(M, N)"), "roofline.flops", "function calls"
    ),
    "roofline attribute": Case(
        put("roofline", "bytes", value="M*x.itemsize"), "roofline.bytes", "attribute access"
    ),
    "roofline name": Case(
        put("roofline", "flops", value="2*M*K"),
        "roofline.flops",
        "unknown name 'K'; allowed names: M, N, elem",
    ),
    "roofline operator": Case(put("roofline", "flops", value="M % 2"), "roofline.flops", "Mod"),
    "roofline syntax": Case(
        put("roofline", "flops", value="2*"), "roofline.flops", "not an arithmetic"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_each_bad_field_is_reported(tmp_path: Path, case: Case) -> None:
    doc = valid_doc()
    if case.mutate is not None:
        case.mutate(doc)
    entry = write_entry(tmp_path / "softmax", doc, module=case.module)
    problem = find(problems_of(entry), case.field, case.fragment)
    assert problem.file == entry / case.file
    assert f"{entry / case.file}: " in str(problem)


YAML_CASES = {
    "syntax": (
        "name: softmax\nmodule: softmax.py\nlauncher: a: b\n",
        "line 3, column 12: invalid YAML",
    ),
    "duplicate key": (
        "name: a\nmodule: softmax.py\nname: b\n",
        "line 3, column 1: invalid YAML: duplicate key 'name' (first at line 1)",
    ),
    "not a mapping": ("- name\n- module\n", "the top level must be a mapping with the keys name"),
    "empty": ("# nothing yet\n", "empty"),
    "python tag": ("name: !!python/object/apply:os.getpid []\n", "invalid YAML"),
    "not utf-8": (
        "name: caf\udce9\n",
        "line 1, column 10: not valid UTF-8 (byte 0xe9 at offset 9)",
    ),
}


@pytest.mark.parametrize(("text", "fragment"), YAML_CASES.values(), ids=YAML_CASES.keys())
def test_unreadable_kernel_yaml_is_reported(tmp_path: Path, text: str, fragment: str) -> None:
    entry = write_entry(tmp_path / "e")
    (entry / "kernel.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    problem = find(problems_of(entry), "", fragment)
    assert problem.file == entry / "kernel.yaml"


def test_missing_kernel_yaml(tmp_path: Path) -> None:
    problem = find(problems_of(tmp_path), "", "not found")
    assert problem.file == tmp_path / "kernel.yaml"
    assert "launcher" in problem.reason  # says what an entry needs


def test_size_caps_and_encoding(tmp_path: Path) -> None:
    big = write_entry(tmp_path / "big")
    (big / "kernel.yaml").write_text("#" * loader.MAX_YAML_BYTES + "\nname: x\n")
    assert find(problems_of(big), "", "larger than 1 MiB").file == big / "kernel.yaml"

    huge_module = write_entry(tmp_path / "huge", module=VALID_MODULE + "#" * loader.MAX_PY_BYTES)
    assert (
        find(problems_of(huge_module), "", "larger than 4 MiB").file == huge_module / "softmax.py"
    )

    latin1 = write_entry(tmp_path / "latin1")
    (latin1 / "helper.py").write_bytes(b"x = 1\n# caf\xe9\n")
    assert (
        find(problems_of(latin1), "", "line 2, column 6: not valid UTF-8").file
        == latin1 / "helper.py"
    )


def test_too_many_python_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_PY_FILES", 3)
    entry = write_entry(tmp_path / "e")
    for i in range(4):
        (entry / f"m{i}.py").write_text("")
    assert find(problems_of(entry), "", "more than 3 .py files").file == entry


def test_symlinks_out_of_the_entry_are_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text(VALID_MODULE)
    entry = write_entry(tmp_path / "e", {**valid_doc(), "module": "link.py"})
    (entry / "link.py").symlink_to(outside)
    find(problems_of(entry), "module", "resolves outside the entry directory")

    other = write_entry(tmp_path / "f")
    (other / "helper.py").symlink_to(outside)
    assert find(problems_of(other), "", "outside the entry").file == other / "helper.py"


def test_valid_entry_loads(tmp_path: Path) -> None:
    entry = write_entry(tmp_path / "softmax")
    (entry / "lib").mkdir()
    (entry / "lib" / "helpers.py").write_text("def helper():\n    return 1\n")
    (entry / "__pycache__").mkdir()
    (entry / "__pycache__" / "junk.py").write_text("ignored")
    (entry / ".hidden").mkdir()
    (entry / ".hidden" / "junk.py").write_text("ignored")

    spec = load_entry(entry)
    assert load_entry(entry / "kernel.yaml") == spec
    assert (spec.name, spec.module, spec.directory) == ("softmax", "softmax.py", entry)
    assert (spec.launcher, spec.inputs, spec.reference) == ("softmax", "make_inputs", "reference")
    assert spec.module_path == entry / "softmax.py"
    assert spec.shapes == (Shape({"M": 4096, "N": 4096}, perf=True), Shape({"M": 1, "N": 65537}))
    assert spec.perf_shapes == spec.shapes[:1]
    assert spec.dtypes == ("float16", "bfloat16", "float32")
    assert spec.tolerance == {
        "float16": Tolerance(1e-2, 1e-2),
        "bfloat16": Tolerance(2e-2, 2e-2),
        "float32": Tolerance(1e-5, 2e-5),
    }
    assert spec.knobs == {
        "BLOCK_SIZE": (256, 512, 1024),
        "num_warps": (2, 4, 8),
        "num_stages": (1, 2, 3),
    }
    assert spec.knobs_declared
    assert spec.baseline_knobs == {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2}
    assert spec.weight == 2.5
    assert spec.roofline == Roofline(bytes="2*M*N*elem", flops="5*M*N")
    assert spec.module_source == VALID_MODULE
    assert spec.extra_files == {"lib/helpers.py": "def helper():\n    return 1\n"}


def test_defaults_of_optional_fields(tmp_path: Path) -> None:
    doc = valid_doc()
    for key in ("reference", "tolerance", "knobs", "weight", "roofline"):
        del doc[key]
    doc["dtypes"] = ["float", "double", "int8", "int32", "int64"]
    spec = load_entry(write_entry(tmp_path / "e", doc))
    assert spec.reference is None and spec.roofline is None and spec.weight == 1.0
    # Without knobs, they are discovered from the launch site (tests/registry/test_discovery.py).
    assert not spec.knobs_declared and set(spec.knobs) == {"BLOCK_SIZE", "num_warps", "num_stages"}
    assert spec.baseline_knobs == {"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 2}
    assert spec.tolerance == {
        "float32": Tolerance(1e-4, 1e-4),
        "float64": Tolerance(1e-7, 1e-7),
        "int8": Tolerance(0.0, 0.0),
        "int32": Tolerance(0.0, 0.0),
        "int64": Tolerance(0.0, 0.0),
    }


def test_baseline_may_lie_outside_the_space(tmp_path: Path) -> None:
    module = launcher("x, BLOCK_SIZE=2048, num_warps=4, *, num_stages=5")
    spec = load_entry(write_entry(tmp_path / "e", module=module))
    assert spec.baseline_knobs == {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 5}


def test_generation_is_the_hash_of_the_entry_files(tmp_path: Path) -> None:
    entry = write_entry(tmp_path / "e")
    (entry / "helper.py").write_text("X = 1\n")
    first = load_entry(entry).generation
    assert load_entry(entry).generation == first
    digest = hashlib.sha256()
    for rel in ("helper.py", "kernel.yaml", "softmax.py"):
        digest.update(rel.encode() + b"\0" + (entry / rel).read_bytes() + b"\0")
    assert first == digest.hexdigest()

    (entry / "README.md").write_text("not part of the generation")
    assert load_entry(entry).generation == first
    seen = {first}
    for rel, extra in (
        ("kernel.yaml", "# note\n"),
        ("softmax.py", "# note\n"),
        ("helper.py", "Y = 2\n"),
    ):
        with (entry / rel).open("a") as fh:
            fh.write(extra)
        generation = load_entry(entry).generation
        assert generation not in seen, rel
        seen.add(generation)


def test_the_module_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    module = f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(3)\n" + VALID_MODULE
    entry = write_entry(tmp_path / "e", module=module)
    (entry / "helper.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    before = set(sys.modules)
    spec = load_entry(entry)
    assert spec.module_source == module
    assert not marker.exists()
    assert set(sys.modules) - before == set()


def test_every_problem_of_an_entry_is_reported(tmp_path: Path) -> None:
    doc = valid_doc()
    doc["name"] = "Bad Name"
    doc["dtypes"] = ["float16", "float8", "float32"]
    doc["knobs"]["num_warps"] = [4, 6]
    doc["launcher"] = "missing"
    doc["roofline"] = {"flops": "__import__('os')"}
    doc["shapes"][1]["N"] = 0
    problems = problems_of(write_entry(tmp_path / "e", doc))
    expected = [
        ("name", "lowercase"),
        ("dtypes[1]", "unknown dtype 'float8'"),
        ("knobs.num_warps[1]", "power of two"),
        ("launcher", "no top-level function 'missing'"),
        ("roofline.flops", "function calls"),
        ("shapes[1].N", "positive integer, got 0"),
    ]
    for field, fragment in expected:
        find(problems, field, fragment)
    assert len(problems) == len(expected)
    assert len(format_problems(problems).splitlines()) == len(expected)


def test_problem_str_names_file_field_and_reason() -> None:
    problem = Problem(Path("reg/k/kernel.yaml"), "shapes[1].N", "must be a positive integer")
    assert str(problem) == "reg/k/kernel.yaml: field 'shapes[1].N': must be a positive integer"
    assert str(Problem(Path("k/kernel.yaml"), "", "a\nb")) == "k/kernel.yaml: a b"


def test_scan_keeps_valid_entries_and_reports_broken_ones(tmp_path: Path) -> None:
    write_entry(tmp_path / "b_second", {**valid_doc(), "name": "second"})
    write_entry(tmp_path / "a_first", {**valid_doc(), "name": "first"})
    broken = write_entry(tmp_path / "c_broken", {**valid_doc(), "dtypes": ["float8"]})
    (tmp_path / "notes").mkdir()  # no kernel.yaml: not an entry
    write_entry(tmp_path / ".trash", {**valid_doc(), "dtypes": ["float8"]})
    (tmp_path / "README.md").write_text("a file beside the entries")

    scan = scan_registry(tmp_path)
    assert [e.name for e in scan.entries] == ["first", "second"]
    assert list(scan.invalid) == [str(broken)]
    assert scan.invalid[str(broken)] == scan.problems
    find(scan.problems, "dtypes[0]", "unknown dtype")
    assert scan.summary() == "2 entries ok, 1 invalid"


def test_scan_of_a_single_entry(tmp_path: Path) -> None:
    entry = write_entry(tmp_path / "softmax")
    scan = scan_registry(entry)
    assert [e.name for e in scan.entries] == ["softmax"] and scan.problems == []


def test_scan_reports_a_name_used_twice(tmp_path: Path) -> None:
    write_entry(tmp_path / "a")
    second = write_entry(tmp_path / "b")
    scan = scan_registry(tmp_path)
    assert [e.directory for e in scan.entries] == [tmp_path / "a"]
    problem = find(scan.problems, "name", f"name 'softmax' already used by {tmp_path / 'a'}")
    assert problem.file == second / "kernel.yaml"
    assert list(scan.invalid) == [str(second)]


def test_scan_of_a_missing_or_non_directory_root(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        scan_registry(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInputError, match="not a directory"):
        scan_registry(tmp_path / "file")


MODULE_CLASS = (
    VALID_MODULE
    + """

class Softmax(torch.nn.Module):
    def __init__(self, hidden_size, weight, *, eps, scale=1.0):
        super().__init__()
        self.weight = weight

    def forward(self, x, BLOCK_SIZE=1024):
        return softmax(x, BLOCK_SIZE=BLOCK_SIZE)
"""
)


def test_a_class_launchers_required_constructor_arguments_come_from_init(tmp_path: Path) -> None:
    """The worker builds a class launcher as ``Class(**init)``: a required argument ``init``
    leaves out failed the original's first evaluation, with a ``TypeError`` raised inside
    ktuned; the check says which, and ``init`` naming them all is valid."""
    doc = {**valid_doc(), "launcher": "Softmax", "knobs": {"BLOCK_SIZE": [256, 1024]}}
    doc["init"] = {"hidden_size": "N"}
    problem = find(
        problems_of(write_entry(tmp_path / "a", doc, module=MODULE_CLASS)), "init", "weight, eps"
    )
    assert "requires weight, eps, which init does not give" in problem.reason
    assert "hidden_size" not in problem.reason and "scale" not in problem.reason
    doc["init"] = {"hidden_size": "N", "weight": 2.0, "eps": 1e-6}
    assert load_entry(write_entry(tmp_path / "b", doc, module=MODULE_CLASS)).name == "softmax"
