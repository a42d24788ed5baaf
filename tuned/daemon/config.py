"""The daemon's configuration: one YAML file, parsed and validated once into frozen dataclasses.

Every key is optional; the dataclass defaults are the single source of truth for what an
absent key means (``ktuned run`` without ``--config`` runs on ``DaemonConfig()``). A bad file
is reported whole: every problem names its key, what was found and what is allowed, and
``ktuned run`` exits 2.
``deploy/ktuned.yaml`` documents every key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies import DEFAULT_POLICY
from policies.masks import MaskSettings
from tuned.config_checks import Check, boolean, number
from tuned.errors import BadInputError
from tuned.evaluation.client import EvaluationSettings
from tuned.evaluation.sandbox import SANDBOX_MODES, SandboxSettings, hidden_paths
from tuned.llm.settings import LlmSettings, llm_checks
from tuned.paths import default_state_dir
from tuned.settings import ProfilingConfig
from tuned.yaml_files import YamlFileError, load_yaml_file

__all__ = [
    "ConfigError",
    "DaemonConfig",
    "EvaluationConfig",
    "GpuConfig",
    "MetricsConfig",
    "ProfilingConfig",
    "RegistryConfig",
    "SchedulerConfig",
    "default_registry",
    "load_config",
    "parse_config",
]

DEVICES = ("auto", "gpu", "interpreter")
LOG_LEVELS = ("debug", "info", "warning", "error")


def default_registry() -> Path:
    """The example registry shipped with ktuned: ``examples/registry`` beside the packages in
    a source tree, else the wheel's copy (``tuned/deploy_files/registry``)."""
    here = Path(__file__).resolve().parents[1]
    tree = here.parent / "examples" / "registry"
    return tree if tree.is_dir() else here / "deploy_files" / "registry"


def _default_state_dir() -> Path:
    # systemd's StateDirectory= exports $STATE_DIRECTORY; otherwise the CLI's usual default.
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    return default_state_dir()


@dataclass(frozen=True)
class RegistryConfig:
    """``path``: the registry directory; polled every ``poll_interval_s`` (works on NFS)."""

    path: Path = field(default_factory=default_registry)
    poll_interval_s: float = 30.0


@dataclass(frozen=True)
class SchedulerConfig:
    """Which kernel gets the next evaluation (docs/service.md, "Scheduler")."""

    window: int = 8
    min_gain: float = 0.01
    converge_after: int = 24
    revisit_interval_s: float = 6 * 3600.0
    prior_rate: float = 0.05
    floor_rate: float = 0.001


@dataclass(frozen=True)
class GpuConfig:
    """When the GPU counts as busy with foreign work, and what to do about it."""

    index: int = 0
    #: Several GPUs of this box, one benchmark worker each (NVML indexes); empty: ``index``.
    indexes: tuple[int, ...] = ()
    busy_utilization_percent: float = 10.0
    busy_memory_bytes: int = 1 << 30
    check_interval_s: float = 15.0
    throttle_retries: int = 3

    @property
    def lanes(self) -> tuple[int, ...]:
        """The GPUs measured on, the first one first."""
        return self.indexes or (self.index,)


@dataclass(frozen=True)
class EvaluationConfig:
    """``compile_workers``: CPU processes compiling candidates ahead while the GPU measures
    (docs/evaluation.md, "Throughput"); ``None`` (``auto``): the cores minus one on a GPU,
    none in the interpreter; ``0``: compile in the GPU worker, one candidate at a time."""

    phase_timeout_s: float = EvaluationSettings.benchmark_timeout_s  # defaults: one place
    startup_timeout_s: float = EvaluationSettings.startup_timeout_s
    interpreter_max_size: int = EvaluationSettings.interpreter_max_size
    compile_workers: int | None = None
    #: ``bwrap``: every worker in the host sandbox; ``none``: unconfined (docs/security.md).
    sandbox: str = "bwrap"
    #: ``auto`` (on a GPU) or ``yes``: when a kernel's campaign ends, re-measure its claims
    #: against the original in a fresh worker (``ktuned referee``) and show those figures.
    settle: str = "auto"
    #: ``auto`` (on a GPU) or ``yes``: a worker's timing waits while its spares make case
    #: data on the same GPU (docs/evaluation.md, "One timing at a time").
    gpu_turn: str = "auto"


@dataclass(frozen=True)
class MetricsConfig:
    """``listen``: ``HOST:PORT`` of the Prometheus endpoint (``/metrics``)."""

    listen: str = "127.0.0.1:9474"

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclass(frozen=True)
class DaemonConfig:
    state_dir: Path = field(default_factory=_default_state_dir)
    #: Store URL (docs/fleet.md): "" is ``sqlite:///<state_dir>/ktuned.sqlite``; a
    #: ``postgresql://`` URL shares results and claims work with every daemon using it.
    store: str = ""
    #: Fleet mode: seconds a claim on a candidate holds without a result or a renewal before
    #: another daemon takes it over (docs/fleet.md). A live daemon renews its claims every
    #: lease/3, so this is how long a dead box's work waits, not a bound on an evaluation;
    #: 0: the daemon's evaluation bound (the pre-renewal default: safe, but slow takeovers).
    fleet_lease_s: float = 90.0
    device: str = "auto"
    policy: str = DEFAULT_POLICY
    seed: int = 0
    log_level: str = "info"
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    #: The LLM proposer and its token budget (docs/llm.md); off unless base_url and model set.
    llm: LlmSettings = field(default_factory=LlmSettings)
    source: str = "(built-in defaults)"

    def evaluation_settings(
        self, interpreter: bool, config_path: Path | None
    ) -> EvaluationSettings:
        """The workers' settings: this config's deadlines and sandbox, which also covers the
        state directory, the config file and the LLM key file (docs/security.md)."""
        e = self.evaluation
        hidden = hidden_paths(self.state_dir, config_path, self.llm.api_key_file)
        return EvaluationSettings(
            interpreter=interpreter,
            startup_timeout_s=e.startup_timeout_s,
            compile_timeout_s=e.phase_timeout_s,
            correctness_timeout_s=e.phase_timeout_s,
            benchmark_timeout_s=e.phase_timeout_s,
            interpreter_max_size=e.interpreter_max_size,
            sandbox=SandboxSettings(mode=e.sandbox, hidden=hidden),
            gpu_turn=EvaluationSettings.turn_choice(e.gpu_turn),
        )


#: The example configuration that documents every key, as installed (the wheel ships it).
EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "deploy_files" / "deploy" / "ktuned.yaml"


def _example() -> str:
    example = EXAMPLE_CONFIG.resolve()
    return str(example) if example.is_file() else "deploy/ktuned.yaml in ktuned's source"


class ConfigError(BadInputError):
    """The configuration file is unusable; ``problems`` lists every problem, each with its key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(
            f"invalid configuration {source} ({len(self.problems)} problem"
            f"{'s' if len(self.problems) != 1 else ''}; see {_example()} for every key):\n"
            f"{lines}"
        )


# -- checks: each returns (value, None) or (None, what is allowed)


def _choice(choices: tuple[str, ...] | list[str]) -> Check:
    allowed = "one of " + ", ".join(choices)

    def check(value: object) -> tuple[Any, str | None]:
        return (value, None) if isinstance(value, str) and value in choices else (None, allowed)

    return check


def _path(value: object) -> tuple[Any, str | None]:
    if isinstance(value, str) and value.strip():
        return Path(os.path.expanduser(value)), None
    return None, "a non-empty path"


def _path_text(value: object) -> tuple[Any, str | None]:
    if isinstance(value, str) and value.strip():
        return os.path.expanduser(value.strip()), None
    return None, "a program name or path, e.g. ncu or /usr/local/cuda/bin/ncu"


def _listen(value: object) -> tuple[Any, str | None]:
    allowed = "HOST:PORT with a port in 0..65535, e.g. 127.0.0.1:9474 or [::1]:9474"
    if not isinstance(value, str) or ":" not in value:
        return None, allowed
    host, _, port = value.rpartition(":")
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses
    if not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        return None, allowed
    return value, None


def _indexes(value: object) -> tuple[Any, str | None]:
    allowed = "a list of distinct GPU indexes (integers >= 0), e.g. [0, 1, 2, 3], or []"
    if not isinstance(value, list):
        return None, allowed
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None, allowed
    if len(set(value)) != len(value):
        return None, allowed
    return tuple(int(v) for v in value), None


def _thresholds(value: object) -> tuple[Any, str | None]:
    allowed = "a mapping of sm, dram, l2 to SOL fractions in (0, 1], e.g. {sm: 0.8, dram: 0.7}"
    if not isinstance(value, Mapping) or not set(value) <= {"sm", "dram", "l2"}:
        return None, allowed
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1
        for v in value.values()
    ):
        return None, allowed
    return MaskSettings(**{str(k): float(v) for k, v in value.items()}), None


def _workers(value: object) -> tuple[Any, str | None]:
    if value == "auto":
        return None, None
    count, allowed = number(0, integer=True)(value)
    return (count, None) if allowed is None else (None, "auto, or an integer >= 0")


def _policy(value: object) -> tuple[Any, str | None]:
    from policies import POLICIES

    return _choice(sorted(POLICIES))(value)


_SECTIONS: dict[str, tuple[type[Any], dict[str, Check]]] = {
    "registry": (
        RegistryConfig,
        {"path": _path, "poll_interval_s": number(0.05)},
    ),
    "scheduler": (
        SchedulerConfig,
        {
            "window": number(1, integer=True),
            "min_gain": number(0.0, 1.0),
            "converge_after": number(1, integer=True),
            "revisit_interval_s": number(0.0),
            "prior_rate": number(0.0),
            "floor_rate": number(0.0),
        },
    ),
    "gpu": (
        GpuConfig,
        {
            "index": number(0, integer=True),
            "indexes": _indexes,
            "busy_utilization_percent": number(0.0, 100.0),
            "busy_memory_bytes": number(0, integer=True),
            "check_interval_s": number(0.05),
            "throttle_retries": number(0, integer=True),
        },
    ),
    "evaluation": (
        EvaluationConfig,
        {
            "phase_timeout_s": number(1.0),
            "startup_timeout_s": number(1.0),
            "interpreter_max_size": number(1, integer=True),
            "compile_workers": _workers,
            "sandbox": _choice(SANDBOX_MODES),
            "settle": _choice(("auto", "yes", "no")),
            "gpu_turn": _choice(("auto", "yes", "no")),
        },
    ),
    "metrics": (MetricsConfig, {"listen": _listen}),
    "profiling": (
        ProfilingConfig,
        {
            "enabled": boolean,
            "ncu": _path_text,
            "deadline_s": number(1.0),
            "launch_count": number(1, integer=True),
            "per_step": number(0, integer=True),
            "roofline": boolean,
            "thresholds": _thresholds,
        },
    ),
    "llm": (LlmSettings, llm_checks()),
}


def _store_url(value: object) -> tuple[Any, str | None]:
    from tuned.errors import BadInputError
    from tuned.store.url import check_store_url

    allowed = (
        '"" (the default), sqlite:///ABSOLUTE/PATH.sqlite or '
        "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
    )
    if not isinstance(value, str):
        return None, allowed
    if value == "":
        return value, None  # the SQLite store in state_dir
    try:
        check_store_url(value)
    except BadInputError:
        return None, allowed
    return value, None


def _state_dir(value: object) -> tuple[Any, str | None]:
    path, allowed = _path(value)
    if allowed is None and path.exists() and not path.is_dir():
        return None, f"a directory (created if missing); {path} exists and is not a directory"
    return path, allowed


_TOP: dict[str, Check] = {
    "state_dir": _state_dir,
    "store": _store_url,
    "fleet_lease_s": number(0.0),
    "device": _choice(DEVICES),
    "policy": _policy,
    "seed": number(0, integer=True),
    "log_level": _choice(LOG_LEVELS),
}


def parse_config(doc: object, *, source: str) -> DaemonConfig:
    """Validate a parsed YAML document; raise :class:`ConfigError` listing every problem."""
    problems: list[str] = []
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfigError(source, [f"the top level must be a mapping of keys, got {_show(doc)}"])
    known = sorted([*_TOP, *_SECTIONS])
    values: dict[str, Any] = {}
    for key, raw in doc.items():
        if key in _TOP:
            value, allowed = _TOP[key](raw)
            if allowed:
                problems.append(f"key '{key}': got {_show(raw)}; allowed: {allowed}")
            else:
                values[key] = value
        elif key in _SECTIONS:
            section = _section(str(key), raw, problems)
            if section is not None:
                values[key] = section
        else:
            problems.append(f"key '{key}': unknown key; allowed keys: {', '.join(known)}")
    if problems:
        raise ConfigError(source, problems)
    return dataclasses.replace(DaemonConfig(), **values, source=source)


def _section(name: str, raw: object, problems: list[str]) -> object | None:
    cls, checks = _SECTIONS[name]
    if raw is None:
        default: object = cls()
        return default
    if not isinstance(raw, Mapping):
        problems.append(
            f"key '{name}': got {_show(raw)}; allowed: a mapping of {', '.join(checks)}"
        )
        return None
    values: dict[str, Any] = {}
    before = len(problems)
    for key, value in raw.items():
        if key not in checks:
            problems.append(
                f"key '{name}.{key}': unknown key; allowed keys: {', '.join(sorted(checks))}"
            )
            continue
        parsed, allowed = checks[key](value)
        if allowed:
            problems.append(f"key '{name}.{key}': got {_show(value)}; allowed: {allowed}")
        else:
            values[str(key)] = parsed
    section: object = cls(**values)
    return section if len(problems) == before else None


def load_config(path: Path) -> DaemonConfig:
    """Read and validate ``path``; :class:`ConfigError` (exit 2) on any problem."""
    try:  # regular files only, 1 MiB, UTF-8, unique keys, bounded aliases and depth
        doc = load_yaml_file(path, what="configuration file")
    except YamlFileError as exc:
        raise ConfigError(str(path), [str(exc)]) from None
    return parse_config(doc, source=str(path))


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
