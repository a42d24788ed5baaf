"""Registry polling: stable changes only, broken entries reported, removals confirmed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.daemon.watcher import RegistryWatcher


def test_new_entries_are_acted_on_once_stable(write_entry: WriteEntry) -> None:
    registry = write_entry("a").parent
    write_entry("b")
    w = RegistryWatcher(registry)
    first = w.poll()
    assert not first and first.pending == 2  # seen once: maybe still being written
    second = w.poll()
    assert sorted(s.name for s in second.added) == ["a", "b"]
    assert not w.poll()  # nothing new


def test_a_file_being_written_is_never_read_half_way(write_entry: WriteEntry) -> None:
    entry = write_entry("a")
    w = RegistryWatcher(entry.parent)
    w.poll()
    w.poll()
    module = entry / "add.py"
    module.write_text(ADD_SOURCE[:200])  # half-written: not even valid Python
    assert not w.poll()  # changed since the last poll: wait
    module.write_text(ADD_SOURCE + "\n# v2\n")
    changes = w.poll()
    assert not changes and changes.pending == 1  # still moving
    changed = w.poll()
    assert [s.name for s in changed.changed] == ["a"]
    assert not changed.invalid  # the half-written state was never loaded


def test_touch_without_content_change_starts_nothing(write_entry: WriteEntry) -> None:
    entry = write_entry("a")
    w = RegistryWatcher(entry.parent)
    w.poll()
    w.poll()
    os.utime(entry / "add.py", ns=(1, 1))
    w.poll()
    assert not w.poll()  # same content hash, same generation


def test_atomic_replace_is_a_new_generation(write_entry: WriteEntry) -> None:
    entry = write_entry("a")
    w = RegistryWatcher(entry.parent)
    w.poll()
    generation = w.poll().added[0].generation
    tmp = entry / ".kernel.yaml.tmp"
    tmp.write_text((entry / "kernel.yaml").read_text().replace("[1, 2, 4]", "[1, 2]"))
    os.replace(tmp, entry / "kernel.yaml")
    w.poll()
    changed = w.poll().changed
    assert [s.name for s in changed] == ["a"] and changed[0].generation != generation


def test_broken_entries_are_reported_and_the_rest_go_on(write_entry: WriteEntry) -> None:
    registry = write_entry("good").parent
    bad = write_entry("bad")
    w = RegistryWatcher(registry)
    w.poll()
    w.poll()
    yaml_path = bad / "kernel.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("float32", "float33"))
    w.poll()
    changes = w.poll()
    assert list(changes.invalid) == [str(bad)]
    assert "float33" in str(changes.invalid[str(bad)][0])
    assert changes.invalidated == ["bad"]
    assert set(w.specs) == {"good"}
    yaml_path.write_text(yaml_path.read_text().replace("float33", "float32"))
    w.poll()
    assert [s.name for s in w.poll().added] == ["bad"]


def test_removal_needs_two_polls_and_an_unreadable_root_retires_nothing(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    registry = write_entry("a").parent
    write_entry("b")
    w = RegistryWatcher(registry)
    w.poll()
    w.poll()
    moved = tmp_path / "b-moved"
    shutil.move(registry / "b", moved)
    first = w.poll()
    assert not first.removed  # could be a rename dance
    assert w.poll().removed == ["b"]
    hidden = tmp_path / "registry-away"
    registry.rename(hidden)
    assert not w.poll() and not w.poll()  # the root is gone: keep everything
    assert w.root_problem is not None and set(w.specs) == {"a"}


def test_duplicate_names_make_the_later_entry_invalid(write_entry: WriteEntry) -> None:
    registry = write_entry("a").parent
    w = RegistryWatcher(registry)
    w.poll()
    w.poll()
    twin = registry / "z-twin"
    shutil.copytree(registry / "a", twin)
    w.poll()
    changes = w.poll()
    assert "already used" in str(changes.invalid[str(twin)][0])
