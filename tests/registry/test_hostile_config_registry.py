"""Hostile ``kernel.yaml`` values: each ends in a problem naming the file and the field (or the
line and column), the entry is invalid, and the other entries of the registry still load."""

from __future__ import annotations

from pathlib import Path

import pytest

from profilers.classify import RooflinePoint, roofline_point
from tests.conftest import ADD_YAML, WriteEntry
from tuned.registry import Problem, format_problems, scan_registry
from tuned.registry.loader import load_registry_entry


def _scan_one_bad(write_entry: WriteEntry, yaml_text: str) -> list[Problem]:
    """The problems of entry ``bad`` (written with ``yaml_text``) beside a valid ``good``."""
    registry = write_entry("good").parent
    write_entry("bad", yaml=yaml_text)
    scan = scan_registry(registry)
    assert [s.name for s in scan.entries] == ["good"]  # one broken entry stops nothing
    assert list(scan.invalid) == [str(registry / "bad")]
    return scan.invalid[str(registry / "bad")]


def _with_weight(value: str) -> str:
    return ADD_YAML.format(name="bad") + f"weight: {value}\n"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("2001-13-45", "cannot read '2001-13-45' as a date (YYYY-MM-DD): month must be in 1..12"),
        ("!!float abc", "cannot read 'abc' as a number"),
        ("!!int abc", "cannot read 'abc' as an integer"),
        ("1" + "0" * 5000, "as an integer: Exceeds the limit (4300 digits)"),
    ],
)
def test_values_pyyaml_cannot_build_name_the_file_and_place(
    write_entry: WriteEntry, value: str, fragment: str
) -> None:
    problems = _scan_one_bad(write_entry, _with_weight(value))
    line = ADD_YAML.format(name="bad").count("\n") + 1  # the weight line
    assert len(problems) == 1, format_problems(problems)
    problem = problems[0]
    assert problem.file.name == "kernel.yaml" and problem.file.parent.name == "bad"
    assert problem.reason.startswith(f"line {line}, column 9: invalid YAML: ")
    assert fragment in problem.reason
    assert "set_int_max_str_digits" not in problem.reason


def test_a_nul_byte_names_its_line_and_column(write_entry: WriteEntry) -> None:
    problems = _scan_one_bad(write_entry, ADD_YAML.format(name="bad") + "weight: 1\x00\n")
    line = ADD_YAML.format(name="bad").count("\n") + 1
    assert [p.reason for p in problems] == [
        f"line {line}, column 10: invalid YAML: the character U+0000 is not allowed in YAML; "
        "remove it (is this a binary file?)"
    ]


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        ("weight: 1" + "0" * 400, "weight", "about 10**400 is too large; must be a number > 0"),
        (
            "tolerance: {float16: {atol: 1" + "0" * 400 + "}}",
            "tolerance.float16.atol",
            "about 10**400 is too large; must be a finite number >= 0",
        ),
    ],
)
def test_integers_beyond_a_float_are_too_large(
    write_entry: WriteEntry, extra: str, field: str, fragment: str
) -> None:
    problems = _scan_one_bad(write_entry, ADD_YAML.format(name="bad") + extra + "\n")
    assert [(p.field, fragment in p.reason) for p in problems] == [(field, True)]


def test_shape_sizes_beyond_a_float_are_named(write_entry: WriteEntry) -> None:
    huge = "1" + "0" * 400
    text = ADD_YAML.format(name="bad").replace(
        "{N: 3000, perf: true}", f"{{N: {huge}, perf: true}}"
    )
    problems = _scan_one_bad(write_entry, text)
    assert [(p.field, p.reason.split(" is ")[0]) for p in problems] == [
        ("shapes[0].N", "about 10**400")
    ]
    dims = ", ".join(f"D{i}: {2**40}" for i in range(40))
    many = ADD_YAML.format(name="bad").replace(
        "- {N: 3000, perf: true}\n  - {N: 7}", f"- {{{dims}, perf: true}}"
    )
    problems = _scan_one_bad(write_entry, many)
    assert any(
        p.field == "shapes[0]" and "multiply to about 10**481 (more than 2**50)" in p.reason
        for p in problems
    ), format_problems(problems)


def test_a_kernel_yaml_symlinked_out_of_the_entry_is_refused(
    write_entry: WriteEntry, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text(ADD_YAML.format(name="bad"))
    registry = write_entry("good").parent
    bad = write_entry("bad")
    (bad / "kernel.yaml").unlink()
    (bad / "kernel.yaml").symlink_to(outside)
    scan = scan_registry(registry)
    assert [s.name for s in scan.entries] == ["good"]
    assert [str(p) for p in scan.invalid[str(bad)]] == [
        f"{bad / 'kernel.yaml'}: a symlink to a file outside the entry directory; copy it in"
    ]


def test_load_registry_entry_refuses_an_entry_symlinked_out_of_the_registry(
    write_entry: WriteEntry, tmp_path: Path
) -> None:
    registry = write_entry("good").parent
    elsewhere = write_entry("ext", root=tmp_path / "outside")
    (registry / "linked").symlink_to(elsewhere)
    spec, problems = load_registry_entry(registry, registry / "linked")
    assert spec is None
    assert [p.file for p in problems] == [registry / "linked"]
    assert "outside the registry" in problems[0].reason
    spec, problems = load_registry_entry(registry, registry / "good")
    assert spec is not None and spec.name == "good" and not problems


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("N/0", "N / 0 fails at 3000 and 0 (float division by zero)"),
        ("(0-N)**0.5", "(0 - N) ** 0.5 at -3000 and 0.5 is not a real number"),
        ("N**N**N", "(Numerical result out of range)"),
        ("0-N", "it is -3000, a negative amount of work"),
    ],
)
def test_roofline_expressions_are_evaluated_on_the_shapes(
    write_entry: WriteEntry, expr: str, fragment: str
) -> None:
    text = ADD_YAML.format(name="bad") + f'roofline: {{bytes: "{expr}"}}\n'
    problems = _scan_one_bad(write_entry, text)
    assert [p.field for p in problems] == ["roofline.bytes"], format_problems(problems)
    assert problems[0].reason.startswith(f"'{expr}' cannot be evaluated for shapes[0] with ")
    assert fragment in problems[0].reason


@pytest.mark.parametrize("expr", ["N/0", "(0-N)**0.5", "N**N**N", "0-N", "N*1e308*10"])
def test_a_roofline_expression_that_fails_gives_no_point(expr: str) -> None:
    def point(bytes_expr: str | None, flops_expr: str | None) -> RooflinePoint | None:
        return roofline_point(
            bytes_expr=bytes_expr,
            flops_expr=flops_expr,
            dims={"N": 7},
            dtype="float32",
            time_s=1e-3,
            peak_bytes_per_s=1e12,
            peak_flops_per_s=1e12,
        )

    assert point(expr, None) is None  # never raises: a campaign goes on without the point
    both = point(expr, "2*N")
    assert both is not None and both.bandwidth_fraction is None
    assert both.flops_fraction == pytest.approx(14 / 1e-3 / 1e12)
