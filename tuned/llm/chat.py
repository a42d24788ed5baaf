"""Chat completions against any OpenAI-compatible endpoint, inside the token budget.

The ``openai`` package (imported here only, lazily: a GPU box without it still tunes
parametrically) talks to OpenAI, vLLM, SGLang and Ollama alike through ``base_url``. Its own
retries are off: each HTTP attempt is one ledger reservation, so this module retries itself.

One :meth:`ChatClient.complete`:

1. a cached reply to the very same question is returned at no cost (:mod:`tuned.store.llm_cache`);
2. otherwise each attempt reserves ``prompt estimate + max_tokens`` (refused:
   :class:`~tuned.store.ledger.BudgetExceeded`, nothing sent), sends, and settles:

   ==============================  ========================  ====================
   what happened                   charged                   then
   ==============================  ========================  ====================
   a reply                         reported usage (or all)   cached, returned
   429 ``insufficient_quota``      0                         final error
   429, 5xx                        0                         retry with back-off
   other 4xx (auth, bad request)   0                         final error
   could not connect               0                         retry with back-off
   timeout, connection dropped     the whole reservation     retry with back-off
   ==============================  ========================  ====================

   Back-off: ``backoff_s * 2**attempt`` with full jitter, at most ``backoff_max_s``, and at
   least the server's ``Retry-After``.

The API key is handed to the ``openai`` client object and nowhere else: it is not logged,
not stored, and workers never see it (their environment is an allowlist).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuned.errors import TunedError
from tuned.llm.settings import LlmSettings
from tuned.store.ledger import TokenLedger, Usage, estimate_prompt_tokens
from tuned.store.llm_cache import CachedReply, ResponseCache, prompt_key

__all__ = ["ChatClient", "ChatReply", "LlmError", "LlmUnavailable", "Message"]

log = logging.getLogger(__name__)

Message = Mapping[str, str]

#: The key a client sends when none is configured (local servers accept anything).
NO_KEY = "not-needed"


class LlmUnavailable(TunedError):
    """The LLM proposer cannot run here at all (the ``openai`` package is missing)."""


class LlmError(TunedError):
    """A request failed. ``kind``: ``quota``, ``auth``, ``bad_request``, ``rate_limit``,
    ``server``, ``timeout``, ``connection``; ``final``: retrying cannot help."""

    def __init__(
        self, kind: str, message: str, *, final: bool, attempts: int, charged: int = 0
    ) -> None:
        self.kind = kind
        self.final = final
        self.attempts = attempts
        self.charged = charged  # tokens the ledger charged for the failed attempts
        super().__init__(message)


@dataclass(frozen=True)
class ChatReply:
    """One answer: its text, why generation stopped, the usage reported (``None``: not
    reported), whether it came from the cache, and the tokens the ledger charged for it."""

    text: str
    finish_reason: str | None
    usage: Usage | None
    cached: bool
    charged: int
    attempts: int
    prompt_key: str


def load_openai() -> Any:
    """The ``openai`` module, or :class:`LlmUnavailable` saying how to install it."""
    try:
        import openai
    except ImportError as exc:
        raise LlmUnavailable(
            "the LLM proposer needs the 'openai' package (pip install 'openai>=1.40'); "
            "parametric tuning goes on without it"
        ) from exc
    return openai


@dataclass(frozen=True)
class _Failure:
    kind: str
    final: bool
    billed: bool  # may the server have generated (and charged) tokens?
    retry_after_s: float | None
    message: str


class ChatClient:
    """Sends chat requests for the LLM proposer; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        settings: LlmSettings,
        ledger: TokenLedger,
        cache: ResponseCache,
        api_key: str | None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.cache = cache
        self._sleep = sleep
        self._rng = rng or random.Random()
        openai = load_openai()
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or NO_KEY,
            timeout=settings.request_timeout_s,
            max_retries=0,
        )

    def close(self) -> None:
        self._client.close()

    def complete(
        self,
        messages: Sequence[Message],
        *,
        kernel: str,
        purpose: str = "rewrite",
        max_tokens: int | None = None,
    ) -> ChatReply:
        """The reply to ``messages``; raises :class:`LlmError` or
        :class:`~tuned.store.ledger.BudgetExceeded` (nothing sent). ``max_tokens``: this
        request's limit (default ``llm.max_tokens``), reserved and sent alike."""
        s = self.settings
        limit = s.max_tokens if max_tokens is None else max_tokens
        key = prompt_key(s.model, messages, max_tokens=limit, temperature=s.temperature)
        hit = self.cache.get(key)
        if hit is not None:
            return ChatReply(hit.text, hit.finish_reason, hit.usage, True, 0, 0, key)
        estimate = estimate_prompt_tokens(messages)
        charged = 0
        attempt = 0
        while True:
            attempt += 1
            reservation = self.ledger.reserve(
                kernel=kernel,
                prompt_estimate=estimate,
                max_tokens=limit,
                model=s.model,
                purpose=purpose,
            )
            try:
                response = self._client.chat.completions.create(
                    model=s.model,
                    messages=[{"role": m["role"], "content": m["content"]} for m in messages],
                    max_tokens=limit,
                    temperature=s.temperature,
                )
            except self._openai.OpenAIError as exc:
                failure = self._classify(exc)
                if failure.billed:
                    charged += self.ledger.settle(reservation, None, note=failure.message)
                else:
                    self.ledger.release(reservation, note=failure.message)
                if failure.final or attempt > s.retries:
                    raise LlmError(
                        failure.kind,
                        f"LLM request for {kernel} failed after {attempt} attempt(s): "
                        f"{failure.message}",
                        final=failure.final,
                        attempts=attempt,
                        charged=charged,
                    ) from None
                delay = self._backoff(attempt, failure.retry_after_s)
                log.info(
                    "LLM request for %s: %s; retrying in %.1f s (attempt %d of %d)",
                    kernel,
                    failure.message,
                    delay,
                    attempt + 1,
                    s.retries + 1,
                )
                self._sleep(delay)
                continue
            text, finish, usage = _unpack(response)
            self.cache.put(key, s.model, CachedReply(text, finish, usage))
            charged += self.ledger.settle(reservation, usage)
            return ChatReply(text, finish, usage, False, charged, attempt, key)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        delay = self._rng.uniform(0.0, min(s.backoff_max_s, s.backoff_s * 2 ** (attempt - 1)))
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.backoff_max_s))
        return delay

    def _classify(self, exc: BaseException) -> _Failure:
        """Map an ``openai`` exception to what to charge and whether to retry."""
        o = self._openai
        if isinstance(exc, o.APITimeoutError):
            return _Failure("timeout", False, True, None, "no answer within the timeout")
        if isinstance(exc, o.APIConnectionError):
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else ""
            if cause in ("ConnectError", "ConnectTimeout"):
                return _Failure("connection", False, False, None, f"cannot connect ({cause})")
            return _Failure("connection", False, True, None, f"connection failed ({cause})")
        if isinstance(exc, o.APIStatusError):
            status = int(exc.status_code)
            code = _error_code(exc)
            retry_after = _retry_after(exc)
            if code == "insufficient_quota":
                return _Failure(
                    "quota",
                    True,
                    False,
                    None,
                    "the provider reports insufficient_quota (the account is out of credit)",
                )
            if status == 429:
                return _Failure("rate_limit", False, False, retry_after, "rate limited (429)")
            if status >= 500:
                return _Failure("server", False, False, retry_after, f"server error ({status})")
            if status in (401, 403):
                return _Failure(
                    "auth",
                    True,
                    False,
                    None,
                    f"not authorized ({status}); set the API key (llm.api_key_env, "
                    "llm.api_key_file or the systemd credential llm.api_key_credential)",
                )
            return _Failure("bad_request", True, False, None, f"request refused ({status})")
        return _Failure("bad_request", True, True, None, f"unexpected reply ({type(exc).__name__})")


def _error_code(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            return str(inner.get("code") or inner.get("type") or "")
    return str(getattr(exc, "code", "") or "")


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    value = None if response is None else response.headers.get("retry-after")
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None


def _unpack(response: Any) -> tuple[str, str | None, Usage | None]:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return "", None, _usage(response)
    choice = choices[0]
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None) or ""
    return str(text), getattr(choice, "finish_reason", None), _usage(response)


def _usage(response: Any) -> Usage | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if prompt is None or completion is None:
        return None
    return Usage(int(prompt), int(completion))
