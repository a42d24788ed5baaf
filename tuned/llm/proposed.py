"""LLM-proposed strategies: new arms described by the LLM from a kernel's profile and history.

Now and then (:meth:`tuned.llm.proposer.LlmProposer.refresh_strategies`: after every
``llm.strategy_every`` rewrites of a kernel, or once ``llm.strategy_stall`` rewrites in a
row gave no new best) the proposer asks for new strategy descriptions through the same
ledger, caps and cache as every request. The reply is a small JSON document::

    {"strategies": [{"name": "split-K reduction", "target": "sm",
                     "instruction": "Split the K loop across programs and ..."}]}

Each entry is checked (:func:`parse_strategies`: a name, a ``target`` among ``sm``,
``dram``, ``l2``, ``latency``, an instruction of 20 to 1,200 characters), then deduplicated
against the catalog and the kernel's accepted strategies (:func:`duplicate_of`: the same
normalized name, or an instruction whose content words overlap by half, or which reads
80 % alike) and capped (``llm.max_strategies`` per kernel). An accepted one is stored in
``llm_strategies`` (the store's database file, so it survives restarts) with its
provenance (the request's attempt id, prompt hash, model, generation and why it was asked)
and becomes the strategy ``proposed_<slot>`` of that kernel: an LLM arm
``(cluster, llm:proposed_<slot>)`` of the hierarchical bandit. The slot, not the free-text
name, is what metric labels carry, so their cardinality stays bounded by the cap.
"""

from __future__ import annotations

import difflib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from policies.strategies import RESOURCES, Strategy
from tuned.llm.parse import fenced_blocks
from tuned.store.connections import connect

__all__ = [
    "STRATEGY_STATUSES",
    "DraftStrategy",
    "ProposedStrategy",
    "StrategyBook",
    "duplicate_of",
    "normalize_name",
    "parse_strategies",
    "proposed_name",
    "read_strategies",
    "similarity",
]

#: Every status a strategy request can end in (bounded: a metric label).
STRATEGY_STATUSES = (
    "accepted",
    "duplicate",
    "capped",
    "malformed",
    "truncated",
    "empty",
    "budget",
    "llm_error",
)
PREFIX = "proposed_"
MAX_NAME = 60
MIN_INSTRUCTION, MAX_INSTRUCTION = 20, 1200
#: Instructions this alike are the same strategy (content-word overlap, or text ratio).
WORD_OVERLAP, TEXT_RATIO = 0.5, 0.8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_strategies (
    kernel TEXT NOT NULL,
    slot INTEGER NOT NULL,
    name TEXT NOT NULL,
    target TEXT NOT NULL,
    instruction TEXT NOT NULL,
    generation TEXT NOT NULL,
    model TEXT NOT NULL,
    trigger TEXT NOT NULL,
    attempt_id INTEGER,
    prompt_key TEXT,
    created_at {real} NOT NULL,
    PRIMARY KEY (kernel, slot)
);
"""


def proposed_name(slot: int) -> str:
    """The strategy name of a kernel's ``slot``-th proposed strategy (``proposed_1``)."""
    return f"{PREFIX}{slot}"


def normalize_name(name: str) -> str:
    """Lower case, runs of other characters as one ``_`` (``"Split-K  Reduction"`` ->
    ``"split_k_reduction"``)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


@dataclass(frozen=True)
class DraftStrategy:
    """One strategy as the reply describes it, checked but not yet deduplicated."""

    name: str
    target: str
    instruction: str


@dataclass(frozen=True)
class ProposedStrategy:
    """An accepted strategy of one kernel, with its provenance."""

    kernel: str
    slot: int
    name: str
    target: str
    instruction: str
    generation: str
    model: str
    trigger: str
    attempt_id: int | None
    created_at: float

    @property
    def strategy(self) -> Strategy:
        """The policy's view: an LLM-only strategy (no knob groups) named by its slot."""
        return Strategy(
            name=proposed_name(self.slot),
            target=self.target,
            knob_groups=(),
            instruction=self.instruction,
        )


# -- reading the reply


def _documents(text: str) -> list[object]:
    """JSON documents in ``text``: fenced blocks (last first), else the text itself, else
    its outermost ``{...}``."""
    blocks, _ = fenced_blocks(text)
    candidates = [body for _, body in reversed(blocks)]
    candidates.append(text)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    out = []
    for body in candidates:
        try:
            out.append(json.loads(body))
        except ValueError:
            continue
    return out


def _check(item: object, i: int) -> tuple[DraftStrategy | None, str]:
    if not isinstance(item, Mapping):
        return None, f"entry {i} is not an object"
    name, target, instruction = item.get("name"), item.get("target"), item.get("instruction")
    if not isinstance(name, str) or not normalize_name(name) or len(name) > MAX_NAME:
        return None, f"entry {i}: name must be text of 1 to {MAX_NAME} characters"
    if not isinstance(target, str) or target.strip().lower() not in RESOURCES:
        return None, f"entry {i} ({name}): target must be one of {', '.join(RESOURCES)}"
    if not isinstance(instruction, str) or not (
        MIN_INSTRUCTION <= len(instruction.strip()) <= MAX_INSTRUCTION
    ):
        return None, (
            f"entry {i} ({name}): instruction must be text of {MIN_INSTRUCTION} to "
            f"{MAX_INSTRUCTION} characters"
        )
    return DraftStrategy(name.strip(), target.strip().lower(), " ".join(instruction.split())), ""


def parse_strategies(text: str, finish_reason: str | None) -> tuple[str, str, list[DraftStrategy]]:
    """(status, reason, drafts) of a strategy reply: status ``ok`` with at least one valid
    draft, else ``empty``, ``truncated`` or ``malformed`` with the reason."""
    if not text.strip():
        return ("truncated" if finish_reason == "length" else "empty"), "the reply is empty", []
    for doc in _documents(text):
        items = doc.get("strategies") if isinstance(doc, Mapping) else doc
        if not isinstance(items, list):
            continue
        drafts, problems = [], []
        for i, item in enumerate(items):
            draft, problem = _check(item, i)
            if draft is None:
                problems.append(problem)
            else:
                drafts.append(draft)
        if drafts:
            return "ok", "; ".join(problems), drafts
        return "malformed", "; ".join(problems) or "the strategies list is empty", []
    if finish_reason == "length":
        return "truncated", "the reply was cut off before its JSON ended", []
    return "malformed", 'no JSON {"strategies": [...]} in the reply', []


# -- deduplication


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def similarity(a: str, b: str) -> float:
    """How alike two instructions read: the larger of the content-word overlap (Jaccard,
    scaled so that :data:`WORD_OVERLAP` maps to 1) and the text ratio (scaled likewise)."""
    wa, wb = _words(a), _words(b)
    overlap = len(wa & wb) / len(wa | wb) if wa | wb else 0.0
    ratio = difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()
    return max(overlap / WORD_OVERLAP, ratio / TEXT_RATIO)


def duplicate_of(draft: DraftStrategy, existing: Iterable[tuple[str, str]]) -> str | None:
    """The name of the existing strategy (name, instruction) ``draft`` duplicates, if any."""
    key = normalize_name(draft.name)
    for name, instruction in existing:
        if key == normalize_name(name) or similarity(draft.instruction, instruction) >= 1.0:
            return name
    return None


# -- the table


class StrategyBook:
    """``llm_strategies`` in the database at ``path`` (its own connection)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = connect(path, _SCHEMA, what="LLM strategy book")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def for_kernel(self, kernel: str) -> list[ProposedStrategy]:
        """The kernel's accepted strategies, by slot."""
        with self._lock:
            rows = self._db.execute(
                "SELECT kernel, slot, name, target, instruction, generation, model, trigger,"
                " attempt_id, created_at FROM llm_strategies WHERE kernel = ? ORDER BY slot",
                (kernel,),
            ).fetchall()
        return [_row(r) for r in rows]

    def add(
        self,
        kernel: str,
        draft: DraftStrategy,
        *,
        generation: str,
        model: str,
        trigger: str,
        attempt_id: int | None,
        prompt_key: str | None,
    ) -> ProposedStrategy:
        """Store ``draft`` in the kernel's next free slot."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                slot = int(
                    self._db.execute(
                        "SELECT COALESCE(MAX(slot), 0) + 1 FROM llm_strategies WHERE kernel = ?",
                        (kernel,),
                    ).fetchone()[0]
                )
                now = time.time()
                self._db.execute(
                    "INSERT INTO llm_strategies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (kernel, slot, draft.name, draft.target, draft.instruction, generation,
                     model, trigger, attempt_id, prompt_key, now),
                )  # fmt: skip
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return ProposedStrategy(
            kernel, slot, draft.name, draft.target, draft.instruction, generation, model,
            trigger, attempt_id, now,
        )  # fmt: skip


def _row(r: Sequence[object]) -> ProposedStrategy:
    return ProposedStrategy(
        str(r[0]), int(str(r[1])), str(r[2]), str(r[3]), str(r[4]), str(r[5]), str(r[6]),
        str(r[7]), None if r[8] is None else int(str(r[8])), float(str(r[9])),
    )  # fmt: skip


def read_strategies(db: sqlite3.Connection) -> list[ProposedStrategy]:
    """Every accepted strategy, from any connection to the database (``ktuned budget``, the
    metrics collector's read-only one); empty if the table was never created."""
    try:
        rows = db.execute(
            "SELECT kernel, slot, name, target, instruction, generation, model, trigger,"
            " attempt_id, created_at FROM llm_strategies ORDER BY kernel, slot"
        ).fetchall()
    except sqlite3.OperationalError:
        return []
    return [_row(r) for r in rows]
