"""The ``llm:`` section of the daemon's configuration, and where the API key comes from.

Frozen and validated once at start-up (``tuned.daemon.config`` parses the YAML into it).
The LLM proposer is on when ``base_url`` and ``model`` are both set. The API key is never a
configuration value: it is read, in this order, from ``api_key_file``, from the systemd
credential ``api_key_credential`` (``LoadCredential=`` puts it in ``$CREDENTIALS_DIRECTORY``)
or from the environment variable ``api_key_env``. Local servers (vLLM, SGLang, Ollama)
usually need none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuned.config_checks import Check, boolean, number
from tuned.errors import BadInputError
from tuned.store.ledger import BudgetCaps, Prices

__all__ = ["DEFAULT_CAPS", "LlmSettings", "llm_checks", "resolve_api_key"]

#: A conservative default budget: set your own under ``llm.budget``.
DEFAULT_CAPS = BudgetCaps(total_tokens=1_000_000, daily_tokens=200_000, kernel_tokens=200_000)


@dataclass(frozen=True)
class LlmSettings:
    """Endpoint, model, request limits and the token budget (deploy/ktuned.yaml documents
    each key)."""

    base_url: str = ""
    model: str = ""
    api_key_env: str = "KTUNED_LLM_API_KEY"
    api_key_credential: str = "llm-api-key"
    api_key_file: Path | None = None
    max_tokens: int = 4096
    temperature: float = 0.2
    request_timeout_s: float = 180.0
    retries: int = 4
    backoff_s: float = 2.0
    backoff_max_s: float = 60.0
    #: Recent attempts on the kernel shown in each prompt.
    history: int = 6
    budget: BudgetCaps = field(default_factory=lambda: DEFAULT_CAPS)
    prices: Prices | None = None
    #: LLM-proposed strategies (docs/llm.md): ask for new ones after every this many LLM
    #: rewrites of a kernel (0: never by count) ...
    strategy_every: int = 12
    #: ... or once this many rewrites in a row (since the last ask) gave no new best (0: off).
    strategy_stall: int = 6
    #: Accepted proposed strategies per kernel, at most (0: never ask).
    max_strategies: int = 4
    #: ``max_tokens`` of a strategy request (its reply is a few short JSON objects).
    strategy_max_tokens: int = 1024
    #: Reference entries: also time ``torch.compile`` of the reference for the baseline.
    compile_reference: bool = True

    @property
    def enabled(self) -> bool:
        return bool(self.base_url and self.model)

    def request_tokens_floor(self) -> int:
        """The smallest reservation a rewrite request can need (``max_tokens`` plus a
        minimal prompt): below this, LLM arms are masked."""
        return self.max_tokens + 1024


def resolve_api_key(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key, from the file, the systemd credential or the environment (first found);
    ``None`` if none is configured. Never logged."""
    env = os.environ if environ is None else environ
    candidates: list[Path] = []
    if settings.api_key_file is not None:
        candidates.append(settings.api_key_file)
    creds = env.get("CREDENTIALS_DIRECTORY")
    if creds and settings.api_key_credential:
        candidates.append(Path(creds) / settings.api_key_credential)
    for path in candidates:
        if path.is_file():
            try:
                key = path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise BadInputError(
                    f"cannot read the LLM API key file {path}: {exc.strerror or exc}; check "
                    "its permissions (the daemon's user must be able to read it)"
                ) from exc
            if key:
                return key
        elif path == settings.api_key_file:
            raise BadInputError(
                f"llm.api_key_file {path} does not exist; create it (mode 0600) or remove the key"
            )
    key = env.get(settings.api_key_env, "").strip() if settings.api_key_env else ""
    return key or None


# -- validation of the YAML section (used by tuned.daemon.config)


def _text(allow_empty: bool = True) -> Check:
    def check(value: object) -> tuple[Any, str | None]:
        if value is None and allow_empty:
            return "", None
        if isinstance(value, str) and (allow_empty or value.strip()):
            return value.strip(), None
        return None, "a string" if allow_empty else "a non-empty string"

    return check


def _url(value: object) -> tuple[Any, str | None]:
    if value is None or value == "":
        return "", None  # off
    if isinstance(value, str) and value.strip().startswith(("http://", "https://")):
        return value.strip().rstrip("/"), None
    return None, "an http(s) URL of an OpenAI-compatible API, e.g. https://api.openai.com/v1"


def _file(value: object) -> tuple[Any, str | None]:
    if value is None:
        return None, None
    allowed = "a path to an existing file holding only the key"
    if isinstance(value, str) and value.strip():
        path = Path(os.path.expanduser(value.strip()))
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            return None, f"{allowed}; {path} {what} (create it, mode 0600, or remove the key)"
        return path, None
    return None, allowed


def _budget(value: object) -> tuple[Any, str | None]:
    allowed = (
        "a mapping of total_tokens (required), daily_tokens, kernel_tokens to integers >= 0 "
        "(null: no cap), e.g. {total_tokens: 5000000, daily_tokens: 300000}"
    )
    keys = {"total_tokens", "daily_tokens", "kernel_tokens"}
    if not isinstance(value, Mapping) or not set(value) <= keys or "total_tokens" not in value:
        return None, allowed
    caps: dict[str, int | None] = {}
    for k, v in value.items():
        if v is None and k != "total_tokens":
            caps[str(k)] = None
        elif isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            caps[str(k)] = v
        else:
            return None, allowed
    total = caps.pop("total_tokens")
    assert total is not None
    return BudgetCaps(total_tokens=total, **caps), None


def _prices(value: object) -> tuple[Any, str | None]:
    allowed = (
        "a mapping of prompt_per_mtok and completion_per_mtok to dollars per million "
        "tokens (numbers >= 0)"
    )
    keys = {"prompt_per_mtok", "completion_per_mtok"}
    if value is None:
        return None, None
    if not isinstance(value, Mapping) or not set(value) <= keys:
        return None, allowed
    if not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        return None, allowed
    return Prices(**{str(k): float(v) for k, v in value.items()}), None


def llm_checks() -> dict[str, Check]:
    """Key -> check of the ``llm:`` section (the config module's convention)."""
    return {
        "base_url": _url,
        "model": _text(),
        "api_key_env": _text(),
        "api_key_credential": _text(),
        "api_key_file": _file,
        "max_tokens": number(1, integer=True),
        "temperature": number(0.0, 2.0),
        "request_timeout_s": number(1.0),
        "retries": number(0, 20, integer=True),
        "backoff_s": number(0.0),
        "backoff_max_s": number(0.0),
        "history": number(0, 50, integer=True),
        "budget": _budget,
        "prices": _prices,
        "strategy_every": number(0, integer=True),
        "strategy_stall": number(0, integer=True),
        "max_strategies": number(0, 32, integer=True),
        "strategy_max_tokens": number(64, integer=True),
        "compile_reference": boolean,
    }
