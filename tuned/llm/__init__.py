"""LLM-proposed kernel rewrites under a hard token budget (docs/llm.md).

Light to import: the ``openai`` package is only imported when a :class:`ChatClient` is
created, so a machine without it still tunes parametrically.

* what it remembers lives in the store, beside the store's own tables:
  :mod:`tuned.store.ledger` (the durable token ledger: reserve, settle, caps, recovery),
  :mod:`tuned.store.llm_cache` (replies by prompt hash) and :mod:`tuned.store.llm_attempts`
  (what each request gave);
* :mod:`tuned.llm.chat`: the OpenAI-compatible chat client (retries, back-off, timeouts);
* :mod:`tuned.llm.prompts`, :mod:`tuned.llm.parse`: the rewrite prompt and reading the reply;
* :mod:`tuned.llm.gate`: the static gate every LLM-written module passes before running;
* :mod:`tuned.llm.proposer`: the proposer the campaign calls for LLM arms;
* :mod:`tuned.llm.setup`: building it all from the daemon's configuration;
* :mod:`tuned.llm.budget`: ``ktuned budget``.
"""

from __future__ import annotations

from tuned.llm.settings import LlmSettings
from tuned.store.ledger import BudgetCaps, BudgetExceeded, Prices, TokenLedger, Usage

__all__ = ["BudgetCaps", "BudgetExceeded", "LlmSettings", "Prices", "TokenLedger", "Usage"]
