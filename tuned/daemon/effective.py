"""``ktuned run --check-config``: the effective configuration as YAML, and the paths it names.

:func:`config_yaml` prints every key with the value in force (the file's or the default), in
the layout of ``deploy/ktuned.yaml``, so the output is itself a valid configuration.
:func:`check_paths` rejects input paths that do not exist (``registry.path``,
``llm.api_key_file``): a daemon started on them would run idle or fail later.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import Path

import yaml

from tuned.daemon.config import ConfigError, DaemonConfig

__all__ = ["check_paths", "config_yaml"]


def _plain(value: object) -> object:
    """``value`` as YAML's plain types (paths as strings, tuples as lists)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def config_yaml(config: DaemonConfig) -> str:
    """The effective configuration (``source`` aside) as a YAML document."""
    doc = _plain(config)
    assert isinstance(doc, dict)
    doc.pop("source", None)
    evaluation = doc.get("evaluation")
    if isinstance(evaluation, dict) and evaluation.get("compile_workers") is None:
        evaluation["compile_workers"] = "auto"  # None in the dataclass: chosen at start
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def check_paths(config: DaemonConfig) -> None:
    """Raise :class:`ConfigError` (exit 2) for every input path that does not exist."""
    problems = []
    registry = config.registry.path
    if not registry.is_dir():
        what = "is not a directory" if registry.exists() else "does not exist"
        problems.append(
            f"key 'registry.path': {registry} {what}; allowed: an existing registry directory "
            "(one subdirectory per kernel with its kernel.yaml; docs/registry.md)"
        )
    key_file = config.llm.api_key_file
    if key_file is not None and not key_file.is_file():
        problems.append(
            f"key 'llm.api_key_file': {key_file} does not exist; allowed: a readable file "
            "holding the API key (docs/llm.md)"
        )
    if problems:
        raise ConfigError(config.source, problems)
