"""A running daemon follows its registry: new generations, retirements, broken entries."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tests.daemon.conftest import StartDaemon, wait_for

pytestmark = pytest.mark.slow


def test_the_daemon_follows_registry_edits(
    tmp_path: Path, write_entry: WriteEntry, start_daemon: StartDaemon
) -> None:
    registry = write_entry("a").parent
    write_entry("b")
    write_entry("c")
    d = start_daemon(registry, poll=0.3)
    d.notify.wait("READY", "1", timeout=180)

    def baselines() -> set[tuple[object, ...]]:
        return set(
            d.query(
                "SELECT c.kernel, c.generation FROM candidates c JOIN evaluations e"
                " ON e.candidate_id = c.id AND e.generation = c.generation"
                " WHERE c.provenance = 'original'"
            )
        )

    wait_for(lambda: {k for k, _ in baselines()} == {"a", "b", "c"}, 120, "three baselines")
    generation = lambda name: d.query(f"SELECT generation FROM kernels WHERE name='{name}'")[0][0]
    state = lambda name: d.query(f"SELECT state, reason FROM kernels WHERE name='{name}'")[0]
    old_a = generation("a")

    module = registry / "a" / "add.py"
    module.write_text(module.read_text() + "\n# tuned by hand\n")
    shutil.rmtree(registry / "c")
    yaml_b = registry / "b" / "kernel.yaml"
    yaml_b.write_text(yaml_b.read_text().replace("float32", "float33"))

    wait_for(lambda: generation("a") != old_a, 30, "a new generation of a")
    wait_for(lambda: ("a", generation("a")) in baselines(), 60, "a new baseline for a")
    wait_for(lambda: state("c")[0] == "retired", 30, "c retired")
    wait_for(lambda: state("b")[0] == "invalid", 30, "b invalid")
    assert "float33" in str(state("b")[1])
    n = len(d.evaluations())
    wait_for(lambda: len(d.evaluations()) > n + 2, 60, "tuning to go on for a")
    recent = {k for k, _, _ in d.evaluations()[n:]}
    assert recent == {"a"}  # neither the retired nor the broken kernel is evaluated
    # Old generations keep their history.
    assert d.query(f"SELECT COUNT(*) FROM evaluations WHERE generation='{old_a}'")[0][0] >= 1
    body = d.metrics()
    assert 'ktuned_kernel_state{kernel="c",state="retired"} 1.0' in body
    assert 'ktuned_kernel_state{kernel="b",state="invalid"} 1.0' in body
    assert "ktuned_registry_invalid_entries 1.0" in body

    yaml_b.write_text(yaml_b.read_text().replace("float33", "float32"))
    wait_for(lambda: state("b")[0] == "active", 30, "b fixed")
    assert d.stop() == 0
