"""The response cache: a reply, keyed by the hash of the exact question, so a restarted daemon
never pays twice for the same prompt.

The key covers everything that shapes the answer: model, messages, ``max_tokens`` and
temperature. A reply is stored before its reservation is settled, so a crash in between
over-charges the ledger (settled at the maximum on restart) but never asks again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuned.store.connections import connect
from tuned.store.ledger import Usage

__all__ = ["CachedReply", "ResponseCache", "prompt_key"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    created_at {real} NOT NULL
);
"""


def prompt_key(
    model: str, messages: Sequence[Mapping[str, str]], *, max_tokens: int, temperature: float
) -> str:
    """The SHA-256 of the request's canonical JSON."""
    doc = {
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    text: str
    finish_reason: str | None
    usage: Usage | None


class ResponseCache:
    """Replies by prompt key in the database at ``path`` (its own connection)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = connect(path, _SCHEMA, what="LLM response cache")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, key: str) -> CachedReply | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, finish_reason, prompt_tokens, completion_tokens FROM llm_cache"
                " WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        usage = None if row[2] is None else Usage(int(row[2]), int(row[3] or 0))
        return CachedReply(str(row[0]), None if row[1] is None else str(row[1]), usage)

    def put(self, key: str, model: str, reply: CachedReply) -> None:
        usage = reply.usage
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO llm_cache (key, model, text, finish_reason,"
                " prompt_tokens, completion_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    reply.text,
                    reply.finish_reason,
                    None if usage is None else usage.prompt_tokens,
                    None if usage is None else usage.completion_tokens,
                    time.time(),
                ),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM llm_cache").fetchone()[0])
