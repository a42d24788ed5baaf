"""Safe reading of the YAML files users write (tuned.yaml_files): real files, real FIFOs."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from tuned.yaml_files import (
    MAX_ALIASES,
    MAX_DEPTH,
    YamlFileError,
    load_yaml_file,
)


def write(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def refused(path: Path) -> YamlFileError:
    with pytest.raises(YamlFileError) as info:
        load_yaml_file(path)
    assert str(info.value).startswith(f"{path}"), info.value
    return info.value


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The 'billion laughs': each level lists the previous one ``width`` times."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_plain_yaml_with_anchors_and_merges_loads(tmp_path: Path) -> None:
    text = (
        "tol: &tol {atol: 0.01, rtol: 0.01}\n"
        "tolerance: {float16: *tol, bfloat16: *tol}\n"
        "base: &base {a: 1, b: 2}\n"
        "derived:\n  <<: *base\n  b: 3\n"
    )
    doc = load_yaml_file(write(tmp_path, text))
    assert doc == {
        "tol": {"atol": 0.01, "rtol": 0.01},
        "tolerance": {
            "float16": {"atol": 0.01, "rtol": 0.01},
            "bfloat16": {"atol": 0.01, "rtol": 0.01},
        },
        "base": {"a": 1, "b": 2},
        "derived": {"a": 1, "b": 3},
    }
    assert load_yaml_file(write(tmp_path, "# nothing\n", "empty.yaml")) is None


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    error = refused(fifo)
    assert time.monotonic() - start < 1.0
    assert "FIFO" in error.problem and "not a regular file" in error.problem
    link = tmp_path / "link.yaml"
    link.symlink_to(fifo)
    assert "FIFO" in refused(link).problem  # followed, then refused on the descriptor


def test_devices_directories_and_missing_files_are_refused(tmp_path: Path) -> None:
    assert "a device" in refused(Path("/dev/zero")).problem
    assert "a directory" in refused(tmp_path).problem
    assert "cannot open" in refused(tmp_path / "absent.yaml").problem


def test_a_file_over_the_size_cap_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = write(tmp_path, b"# pad\n" * (1 << 20))  # 6 MiB
    tracemalloc.start()
    try:
        error = refused(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "larger than 1 MiB" in error.problem
    assert peak < 4 << 20  # read at most cap + 1 bytes


def test_bad_utf8_is_named_by_line_column_and_offset(tmp_path: Path) -> None:
    path = write(tmp_path, b"name: ok\nmodel: caf\xe9\n")
    error = refused(path)
    assert (error.line, error.column) == (2, 11)
    assert str(error) == (
        f"{path}:2:11: not valid UTF-8 (byte 0xe9 at offset 19); save the file as UTF-8"
    )


def test_a_syntax_error_reads_file_line_col(tmp_path: Path) -> None:
    path = write(tmp_path, "registry:\n  path: [a, b\n  poll: 3\n")
    error = refused(path)
    assert str(error).startswith(f"{path}:3:")
    assert "invalid YAML: expected ',' or ']'" in error.problem
    assert "while parsing a flow sequence at line 2" in error.problem
    assert "Traceback" not in str(error) and "^" not in str(error)


def test_duplicate_keys_name_the_key_and_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "metrics:\n  port: 9\n  host: x\n  port: 10\nseed: 1\n")
    error = refused(path)
    assert (error.line, error.column) == (4, 3)
    assert "duplicate key 'port' (first at line 2)" in error.problem


@pytest.mark.timeout(30)
def test_an_alias_bomb_is_refused_quickly_in_bounded_memory(tmp_path: Path) -> None:
    path = write(tmp_path, alias_bomb())
    tracemalloc.start()
    start = time.monotonic()
    try:
        error = refused(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < 2.0
    assert peak < 20 << 20
    assert "aliases expand to more than" in error.problem
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    assert f"more than {MAX_ALIASES} aliases" in refused(write(tmp_path, many, "m.yaml")).problem
    assert "contains itself" in refused(write(tmp_path, "a: &a [1, *a]\n", "r.yaml")).problem


@pytest.mark.timeout(30)
@pytest.mark.parametrize("style", ["flow", "block"])
def test_deep_nesting_is_a_clear_error_not_a_recursion_error(tmp_path: Path, style: str) -> None:
    if style == "flow":
        text = "a: " + "[" * 20_000 + "]" * 20_000 + "\n"
    else:  # as deep as 1 MiB allows
        text = "".join(" " * i + f"k{i}:\n" for i in range(1_000))
    start = time.monotonic()
    error = refused(write(tmp_path, text))
    assert time.monotonic() - start < 5.0
    assert f"nested more than {MAX_DEPTH} levels deep" in error.problem
    assert error.line is not None


def test_python_tags_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "x: !!python/object/apply:os.system ['true']\n")
    assert "invalid YAML" in refused(path).problem


@pytest.mark.timeout(20)
def test_a_replay_cache_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    from tuned.errors import RegistryError
    from tuned.registry import Problem, load_entry

    entry = tmp_path / "toy"
    entry.mkdir()
    (entry / "kernel.yaml").write_text("name: toy\nkind: replay\ncache: toy.json\n")
    os.mkfifo(entry / "toy.json")
    with pytest.raises(RegistryError) as info:
        load_entry(entry)
    problems = [p for p in info.value.problems if isinstance(p, Problem)]
    assert any(p.field == "cache" and "a FIFO (named pipe)" in p.reason for p in problems), problems
