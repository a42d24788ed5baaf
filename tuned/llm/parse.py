"""Reading the module out of an LLM's reply, and saying why when there is none.

The prompt asks for the whole module in one fenced Python block; replies still come with
prose around it, several blocks (a usage example, a diff, then the module), no fences at all,
or cut off at ``max_tokens``. The rules, in order:

1. fenced blocks (```` ``` ```` or ``~~~``, any language tag) are collected; an opening fence
   without its closing one marks the reply as cut off;
2. among the closed blocks, those that define the launcher (``def <launcher>(`` at top
   level, found with :mod:`ast` when the block parses, else textually) are candidates, and
   the last one wins (models put their final answer last);
3. without any fence, a reply that is itself a module defining the launcher is taken whole;
4. otherwise the reply is refused with a status: ``truncated`` (cut off: ``finish_reason``
   ``length`` or an unclosed fence), ``no_code`` (nothing that looks like the module) or
   ``empty``.

A block that does not parse is still returned (status ``ok``): the static gate records the
syntax error as ``rejected_static``, which is the outcome the history shows the model.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = ["ParsedReply", "fenced_blocks", "parse_reply"]

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.MULTILINE)


@dataclass(frozen=True)
class ParsedReply:
    """``source`` when ``status == "ok"``; ``reason`` says what was found or missing."""

    status: str
    reason: str
    source: str | None = None
    blocks: int = 0


def _blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """Closed fenced blocks as (language, body), and whether a fence was left open."""
    blocks: list[tuple[str, str]] = []
    fences = list(_FENCE.finditer(text))
    i = 0
    while i < len(fences):
        opening = fences[i]
        marker = opening.group(1)
        closing = next(
            (
                j
                for j in range(i + 1, len(fences))
                if fences[j].group(1).startswith(marker[0])
                and len(fences[j].group(1)) >= len(marker)
                and not fences[j].group(2)
            ),
            None,
        )
        if closing is None:
            return blocks, True
        body = text[opening.end() + 1 : fences[closing].start()]
        blocks.append((opening.group(2).lower(), body.rstrip() + "\n"))
        i = closing + 1
    return blocks, False


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """Closed fenced blocks of ``text`` as (language, body), and whether a fence was left
    open (the rules of this module's docstring; the strategy reply is read with it too)."""
    return _blocks(text)


def defines(source: str, launcher: str) -> bool:
    """Whether ``source`` defines ``launcher`` at top level (textually if it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return re.search(rf"^def\s+{re.escape(launcher)}\s*\(", source, re.MULTILINE) is not None
    return any(isinstance(node, ast.FunctionDef) and node.name == launcher for node in tree.body)


def parse_reply(text: str, finish_reason: str | None, launcher: str) -> ParsedReply:
    """The module in ``text`` (see the module docstring for the rules)."""
    if not text.strip():
        if finish_reason == "length":
            return ParsedReply("truncated", "the reply is empty: max_tokens reached")
        return ParsedReply("empty", "the reply is empty")
    blocks, unclosed = _blocks(text)
    python = [b for lang, b in blocks if lang in ("", "python", "py", "python3")]
    found = [b for b in python if defines(b, launcher)]
    if found:
        return ParsedReply(
            "ok",
            f"{len(blocks)} fenced block(s); took the last defining {launcher}()",
            found[-1],
            len(blocks),
        )
    if unclosed or finish_reason == "length":
        return ParsedReply(
            "truncated",
            "the reply was cut off (finish_reason="
            f"{finish_reason or 'stop'}, {'an unclosed code fence' if unclosed else 'no fence'})"
            f"; raise llm.max_tokens if this repeats",
            None,
            len(blocks),
        )
    if not blocks and defines(text, launcher):
        try:
            ast.parse(text)
        except SyntaxError:
            pass
        else:
            return ParsedReply("ok", "no fence; the reply is the module", text, 0)
    if blocks:
        return ParsedReply(
            "no_code",
            f"{len(blocks)} fenced block(s), none defines the launcher {launcher}()",
            None,
            len(blocks),
        )
    return ParsedReply("no_code", "no fenced Python block in the reply", None, 0)
