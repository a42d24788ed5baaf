"""The tuner's end of a worker's answer pipe: newline-terminated JSON messages, read under a
deadline, in bounded memory, whatever the other end writes (docs/security.md, "The channel").

:class:`LineReader` scans each byte once and hands over a line longer than :data:`MAX_LINE`
as it stands; :func:`parse_message` says what is wrong with a line that is not a message. What
a malformed message means for the candidate is :class:`tuned.evaluation.client.WorkerClient`'s
business.
"""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

__all__ = ["MAX_LINE", "LineReader", "parse_message"]


class LineReader:
    """Reads newline-terminated messages from a pipe with a deadline; a line longer than
    ``limit`` (default :data:`MAX_LINE`) is handed over as it stands, to be refused."""

    def __init__(self, fd: int, limit: int | None = None) -> None:
        self.fd = fd
        self.limit = MAX_LINE if limit is None else limit
        self.buffer = bytearray()
        self._scanned = 0  # bytes of ``buffer`` known to hold no newline

    def read_line(self, timeout: float) -> bytes | None:
        """A line; ``b""`` at end of file; ``None`` if ``timeout`` passed first. A line longer
        than ``limit`` is handed over as it stands (and refused by the caller)."""
        deadline = time.monotonic() + timeout
        while (end := self.buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self.buffer)
            if len(self.buffer) > self.limit:  # no end in sight: hand it over, it is refused
                line = bytes(self.buffer)
                self.buffer, self._scanned = bytearray(), 0
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return b""
            self.buffer += chunk
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        self._scanned = 0
        return line

    def complete_lines(self, limit: int = 1 << 20) -> int:
        """The whole lines written and not read yet, reading what is there without waiting
        (at most ``limit`` more bytes)."""
        taken = 0
        while taken < limit and select.select([self.fd], [], [], 0)[0]:
            chunk = os.read(self.fd, min(1 << 16, limit - taken))
            if not chunk:
                break
            self.buffer += chunk
            taken += len(chunk)
        return self.buffer.count(b"\n")

    def pending(self) -> bool:
        """Whether anything was written that nobody read yet (end of file counts)."""
        if self.buffer:
            return True
        ready, _, _ = select.select([self.fd], [], [], 0)
        return bool(ready)


#: A message longer than this is not a message (a worker's result is a few kilobytes).
MAX_LINE = 16 << 20


def parse_message(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A worker's line as a message, or ``None`` and what is wrong with it."""
    if len(line) > MAX_LINE:
        return None, f"a line of {len(line)} bytes"
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        return None, f"a line that is not JSON ({line[:80]!r})"
    if not isinstance(message, dict):
        return None, f"a JSON {type(message).__name__}, not a message"
    return message, None
