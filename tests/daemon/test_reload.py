"""What SIGHUP reloads: the running values of restart-only keys are kept and reported, the rest
is in force at once, and every document that lists the restart-only keys lists these."""

from __future__ import annotations

import re
from pathlib import Path

from tests.daemon.conftest import ROOT
from tuned.daemon.config import load_config
from tuned.daemon.reload import RESTART_ONLY, plan_reload


def _config(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_restart_only_keys_keep_their_running_values(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    (registry / "b").mkdir(parents=True)
    running = load_config(
        _config(
            tmp_path,
            "a.yaml",
            f"registry: {{path: {registry}}}\nlog_level: info\nmetrics: {{listen: 127.0.0.1:1}}\n"
            "llm: {model: a}\nscheduler: {window: 8}\ngpu: {index: 0}\n",
        )
    )
    read = load_config(
        _config(
            tmp_path,
            "b.yaml",
            f"registry: {{path: {registry / 'b'}}}\nlog_level: debug\n"
            "metrics: {listen: 127.0.0.1:2}\nllm: {model: b}\nscheduler: {window: 3}\n"
            "gpu: {index: 1}\nseed: 7\n",
        )
    )
    plan = plan_reload(running, read)
    assert plan.deferred == ("log_level", "metrics", "llm", "gpu.index/indexes")
    assert plan.config.llm == running.llm and plan.config.llm.model == "a"
    assert plan.config.log_level == "info" and plan.config.metrics == running.metrics
    assert plan.config.gpu.index == 0
    # In force at once: the registry, the scheduler, the seed.
    assert plan.config.scheduler.window == 3 and plan.config.seed == 7
    assert plan.registry_changed and plan.policy_changed and not plan.profiling_changed
    unchanged = plan_reload(running, running)
    assert unchanged.deferred == () and not unchanged.registry_changed
    assert unchanged.config == running


def test_the_documents_list_the_restart_only_keys() -> None:
    expected = {*RESTART_ONLY, "gpu.index", "gpu.indexes"}
    service = (ROOT / "docs" / "service.md").read_text()
    [sentence] = re.findall(r"SIGHUP applies everything except (.*?): a change", service, re.S)
    assert set(re.findall(r"`([a-z_.]+)`", sentence)) == expected, sentence
    example = (ROOT / "deploy" / "ktuned.yaml").read_text()
    [comment] = re.findall(r"\(SIGHUP\), except (.*?), which need a restart", example, re.S)
    keys = set(re.findall(r"[a-z_]+(?:\.[a-z_]+(?:/[a-z_]+)?)?", comment.replace("#", "")))
    keys.discard("and")
    assert keys == {*RESTART_ONLY, "gpu.index/indexes"}, comment
    # No document says that a reload applies the LLM settings.
    for doc in (*(ROOT / "docs").glob("*.md"), ROOT / "README.md"):
        for line in doc.read_text().splitlines():
            if "SIGHUP" in line and "llm" in line.lower():
                assert re.search(r"not reload|next restart|restart", line), (doc.name, line)
