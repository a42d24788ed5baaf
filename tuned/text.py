"""Stored text made safe to print on a terminal or in a log line.

Names, labels, reasons and sources come from the store (or a registry), which whoever can
write it controls: a kernel named ``"ev\\x1b[2Jil"`` must not clear the screen, a newline
must not start a fake table row or log line, and a right-to-left override must not reorder
what is shown. :func:`printable` writes each such character as its Python escape.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

#: C0 controls, DEL, C1 controls, and the invisible format characters that reorder or hide
#: text (soft hyphen, zero-width characters, bidirectional marks and overrides, line and
#: paragraph separators, the byte-order mark, interlinear annotations).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb]"
)


def printable(text: object, limit: int | None = 200, *, keep: str = "") -> str:
    """``text`` with every unsafe character but those in ``keep`` written as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``); other text, non-ASCII letters included, unchanged.
    Cut to at most ``limit`` characters (ending in ``...``); ``None``: whole (a source)."""

    def escape(match: re.Match[str]) -> str:
        char = match.group()
        return char if char in keep else char.encode("unicode_escape").decode("ascii")

    out = _UNSAFE.sub(escape, str(text))
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 3)] + "..."
    return out
