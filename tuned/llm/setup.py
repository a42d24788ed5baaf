"""Building the LLM proposer from the configuration (the daemon's and ``ktuned tune``'s).

The ledger, the response cache and the attempt log share the store's database file, each
through its own connection. ``None`` (and one log line) when the LLM is not configured or
the ``openai`` package is missing: parametric tuning goes on either way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from tuned.errors import BadInputError
from tuned.llm.chat import ChatClient, LlmUnavailable
from tuned.llm.proposed import StrategyBook
from tuned.llm.proposer import LlmProposer
from tuned.llm.settings import LlmSettings, resolve_api_key
from tuned.store.ledger import TokenLedger
from tuned.store.llm_attempts import AttemptLog
from tuned.store.llm_cache import ResponseCache

__all__ = ["open_proposer"]

log = logging.getLogger(__name__)


def open_proposer(
    settings: LlmSettings,
    *,
    store_path: Path,
    ledger_url: str | None = None,
    gpu: Mapping[str, str] | None = None,
) -> LlmProposer | None:
    """The proposer for ``settings`` on the store at ``store_path``, or ``None`` if off.

    ``ledger_url``: a ``postgresql://`` store whose token ledger every daemon of a fleet
    shares, so the caps hold across boxes (docs/fleet.md); ``None``: the ledger lives in
    ``store_path`` with the response cache and the attempt log, which stay per box."""
    if not settings.base_url and not settings.model:
        return None
    if not settings.enabled:
        missing = "llm.model" if settings.base_url else "llm.base_url"
        raise BadInputError(
            f"the llm section sets one of base_url and model but not {missing}; set both to "
            "turn the LLM proposer on, or neither to leave it off"
        )
    api_key = resolve_api_key(settings)
    ledger = TokenLedger(ledger_url or store_path, caps=settings.budget, prices=settings.prices)
    cache = ResponseCache(store_path)
    try:
        client = ChatClient(settings=settings, ledger=ledger, cache=cache, api_key=api_key)
    except LlmUnavailable as exc:
        log.error("%s", exc)
        ledger.close()
        cache.close()
        return None
    log.info(
        "LLM proposer: model %s at %s (API key %s); budget: %s",
        settings.model,
        settings.base_url,
        "set" if api_key else "not set",
        ", ".join(
            f"{s.scope} {s.remaining} of {s.limit} tokens left"
            for s in ledger.spend()
            if s.limit is not None
        ),
    )
    return LlmProposer(
        settings=settings,
        ledger=ledger,
        client=client,
        attempts=AttemptLog(store_path),
        book=StrategyBook(store_path),
        gpu=gpu,
    )
