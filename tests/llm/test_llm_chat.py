"""The chat client against a real HTTP server on loopback: retries, timeouts, accounting."""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import free_port
from tests.llm.chat_server import ChatServer, Step, error, reply
from tuned.llm.chat import ChatClient, LlmError, LlmUnavailable
from tuned.llm.settings import LlmSettings, resolve_api_key
from tuned.store.ledger import BudgetCaps, BudgetExceeded, TokenLedger, estimate_prompt_tokens
from tuned.store.llm_cache import ResponseCache

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
RESERVED = estimate_prompt_tokens(MESSAGES) + 64
KEY = "sk-test-do-not-leak-1234567890"


class Rig:
    def __init__(self, tmp: Path, server: ChatServer | None, **overrides: object) -> None:
        url = server.base_url if server else f"http://127.0.0.1:{free_port()}/v1"
        base = {"retries": 2, "request_timeout_s": 1.0, "max_tokens": 64, "backoff_s": 0.01}
        self.settings = LlmSettings(base_url=url, model="m", **{**base, **overrides})  # type: ignore[arg-type]
        self.path = tmp / "ktuned.sqlite"
        self.ledger = TokenLedger(self.path, caps=BudgetCaps(100_000))
        self.cache = ResponseCache(self.path)
        self.sleeps: list[float] = []
        self.client = ChatClient(
            settings=self.settings,
            ledger=self.ledger,
            cache=self.cache,
            api_key=KEY,
            sleep=self.sleeps.append,
        )

    def charged(self) -> list[int]:
        return [int(r["charged"]) for r in reversed(self.ledger.rows())]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[type[Rig]]:
    yield Rig


def test_a_reply_is_charged_its_usage_and_cached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with ChatServer([reply("hello", usage=(11, 7))]) as srv:
        r = Rig(tmp_path, srv)
        first = r.client.complete(MESSAGES, kernel="k")
        assert (first.text, first.finish_reason, first.charged, first.cached) == (
            "hello",
            "stop",
            18,
            False,
        )
        again = r.client.complete(MESSAGES, kernel="k")  # a restart would find it too
        assert again.cached and again.text == "hello" and again.charged == 0
        assert len(srv.requests) == 1
        assert r.charged() == [18]
        assert srv.requests[0]["max_tokens"] == 64 and srv.requests[0]["model"] == "m"
        assert srv.headers[0]["authorization"] == f"Bearer {KEY}"
    # The key reached the server, and nowhere else: not the logs, not the database.
    assert KEY not in caplog.text
    r.ledger.close()
    r.cache.close()
    for f in tmp_path.iterdir():
        assert KEY.encode() not in f.read_bytes(), f


def test_429_then_success_costs_only_the_success(tmp_path: Path) -> None:
    with ChatServer([error(429, headers={"retry-after": "3"}), reply("ok", usage=(5, 5))]) as srv:
        r = Rig(tmp_path, srv)
        got = r.client.complete(MESSAGES, kernel="k")
        assert got.text == "ok" and got.attempts == 2 and got.charged == 10
        assert r.charged() == [0, 10]
        assert r.sleeps and r.sleeps[0] >= 3.0  # Retry-After honoured


def test_500s_exhaust_the_retries_at_no_cost(tmp_path: Path) -> None:
    with ChatServer([error(500), error(502), error(503)]) as srv:
        r = Rig(tmp_path, srv)
        with pytest.raises(LlmError) as info:
            r.client.complete(MESSAGES, kernel="k")
        assert info.value.kind == "server" and not info.value.final and info.value.attempts == 3
        assert len(srv.requests) == 3 and r.charged() == [0, 0, 0]
        assert len(r.sleeps) == 2


def test_a_hang_past_the_timeout_is_charged_in_full(tmp_path: Path) -> None:
    with ChatServer([Step(content="late", delay_s=3.0)]) as srv:
        r = Rig(tmp_path, srv, retries=0)
        with pytest.raises(LlmError) as info:
            r.client.complete(MESSAGES, kernel="k")
        assert info.value.kind == "timeout"
        assert r.charged() == [RESERVED]  # the server may have generated it all


def test_missing_usage_is_charged_the_whole_reservation(tmp_path: Path) -> None:
    with ChatServer([reply("no usage here", usage=None)]) as srv:
        r = Rig(tmp_path, srv)
        got = r.client.complete(MESSAGES, kernel="k")
        assert got.usage is None and got.charged == RESERVED
        assert "usage not reported" in r.ledger.rows()[0]["note"]


def test_insufficient_quota_and_auth_are_final(tmp_path: Path) -> None:
    with ChatServer([error(429, "insufficient_quota"), error(401)]) as srv:
        r = Rig(tmp_path, srv)
        with pytest.raises(LlmError) as info:
            r.client.complete(MESSAGES, kernel="k")
        assert info.value.kind == "quota" and info.value.final and len(srv.requests) == 1
        with pytest.raises(LlmError) as info:
            r.client.complete([*MESSAGES, {"role": "user", "content": "again"}], kernel="k")
        assert info.value.kind == "auth" and "api_key" in str(info.value)
        assert len(srv.requests) == 2 and r.charged() == [0, 0]


def test_no_server_is_retried_at_no_cost(tmp_path: Path) -> None:
    r = Rig(tmp_path, None, retries=1)
    with pytest.raises(LlmError) as info:
        r.client.complete(MESSAGES, kernel="k")
    assert info.value.kind == "connection"
    assert r.charged() == [0, 0]


def test_a_refused_reservation_sends_nothing(tmp_path: Path) -> None:
    with ChatServer([reply("x")]) as srv:
        r = Rig(tmp_path, srv, max_tokens=100_000)
        with pytest.raises(BudgetExceeded):
            r.client.complete(MESSAGES, kernel="k")
        assert srv.requests == [] and r.ledger.rows() == []


def test_without_the_openai_package_the_message_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai -> ImportError
    with pytest.raises(LlmUnavailable, match=r"pip install 'openai>=1.40'.*parametric"):
        Rig(tmp_path, None)


def test_api_key_sources(tmp_path: Path) -> None:
    s = LlmSettings(base_url="http://x/v1", model="m", api_key_env="MY_KEY")
    assert resolve_api_key(s, {"MY_KEY": " k1 \n"}) == "k1"
    assert resolve_api_key(s, {}) is None
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "llm-api-key").write_text("k2\n")
    env = {"CREDENTIALS_DIRECTORY": str(creds), "MY_KEY": "k1"}
    assert resolve_api_key(s, env) == "k2"  # systemd's LoadCredential= wins over the env
    f = tmp_path / "key"
    f.write_text("k3")
    s2 = LlmSettings(base_url="http://x/v1", model="m", api_key_file=f)
    assert resolve_api_key(s2, env) == "k3"


def test_the_worker_environment_never_carries_the_key(tmp_path: Path) -> None:
    from tuned.evaluation.client import worker_environment

    base = {
        "PATH": "/usr/bin",
        "KTUNED_LLM_API_KEY": KEY,
        "OPENAI_API_KEY": KEY,
        "CREDENTIALS_DIRECTORY": str(tmp_path),
        "MY_LLM_TOKEN": KEY,
    }
    env = worker_environment(base, interpreter=True, cache_dir=tmp_path / "c", memory_limit=None)
    assert KEY not in env.values()
    assert "CREDENTIALS_DIRECTORY" not in env


def test_ledger_file_is_the_store_file(tmp_path: Path) -> None:
    with ChatServer([reply("hi")]) as srv:
        r = Rig(tmp_path, srv)
        r.client.complete(MESSAGES, kernel="k")
    db = sqlite3.connect(r.path)
    tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"llm_ledger", "llm_cache"} <= tables
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
