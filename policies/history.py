"""An incremental digest of the trial history, so a decision costs O(new trials), not O(all).

The tuning loop hands every policy the whole history on every call (a fresh list each time).
:class:`TrialLog` remembers how much of it it has already read and only digests the tail;
when the history is not an extension of what it read (another kernel, a restart), it starts
over. Nothing here is persisted: it is rebuilt from ``trials`` after a restart.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.base import SearchSpace, Suggestion, Trial
from policies.space_index import SpaceIndex

__all__ = ["Entry", "TrialLog"]


@dataclass(frozen=True)
class Entry:
    """One evaluated candidate: ``code`` is ``None`` when its knobs are outside the space."""

    candidate_id: str
    code: int | None
    time_s: float | None
    metrics: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.time_s is not None


class TrialLog:
    """What a policy needs to know of the history, kept up to date incrementally.

    ``seen`` holds the code of every evaluated configuration (failures included; ``codes``
    the same in evaluation order, each once), ``failed``
    those that failed, ``times`` the (first) time of every successful code, ``ok`` the
    successful entries in evaluation order and ``ranked`` their ``(time_s, position in ok)``
    pairs, fastest first.
    """

    def __init__(self, index: SpaceIndex) -> None:
        self.index = index
        #: Incremented whenever the digest starts over; caches built on it compare this.
        self.epoch = 0
        self.reset()

    def __deepcopy__(self, memo: dict[int, object]) -> TrialLog:
        """An independent log of the same history, cheap enough for a policy copied every
        step (:meth:`tuned.search.Campaign.likely_next` asks a copy what comes next):
        its containers are copied; the entries (frozen) and the index (see
        :meth:`SpaceIndex.__deepcopy__`) are shared."""
        copy = TrialLog.__new__(TrialLog)
        memo[id(self)] = copy
        copy.index = self.index
        copy.epoch = self.epoch
        copy.ids = list(self.ids)
        copy.seen = set(self.seen)
        copy.codes = list(self.codes)
        copy.failed = set(self.failed)
        copy.ok = list(self.ok)
        copy.ranked = list(self.ranked)
        copy.by_id = dict(self.by_id)
        copy.times = dict(self.times)
        return copy

    @classmethod
    def for_space(cls, log: TrialLog | None, space: SearchSpace) -> TrialLog:
        """``log`` if it digests this space (equal knobs and restriction), else a new one.

        The tuning loop may build an equal :class:`SearchSpace` on every call; equality,
        not identity, decides.
        """
        if log is not None and log.index.matches(space):
            return log
        return cls(SpaceIndex(space))

    def reset(self) -> None:
        self.epoch += 1
        self.ids: list[str] = []
        self.seen: set[int] = set()
        self.codes: list[int] = []
        self.failed: set[int] = set()
        self.ok: list[Entry] = []
        self.ranked: list[tuple[float, int]] = []
        self.by_id: dict[str, Entry] = {}
        self.times: dict[int, float] = {}

    def sync(self, trials: Sequence[Trial]) -> int:
        """Digest the trials not read yet; returns how many were new."""
        n = len(self.ids)
        if n > len(trials) or (
            n
            and (
                trials[n - 1].candidate_id != self.ids[-1] or trials[0].candidate_id != self.ids[0]
            )
        ):
            self.reset()
            n = 0
        for trial in trials[n:]:
            self._add(trial)
        return len(trials) - n

    def _add(self, trial: Trial) -> None:
        code = self.index.encode(trial.knobs)
        time_s = float(trial.time_s) if trial.ok and trial.time_s is not None else None
        entry = Entry(trial.candidate_id, code, time_s, dict(trial.metrics))
        self.ids.append(trial.candidate_id)
        self.by_id.setdefault(trial.candidate_id, entry)
        if code is not None:
            if code not in self.seen:
                self.codes.append(code)
            self.seen.add(code)
            if time_s is None:
                self.failed.add(code)
            else:
                self.times.setdefault(code, time_s)
        if time_s is not None:
            self.ok.append(entry)
            bisect.insort(self.ranked, (time_s, len(self.ok) - 1))

    # -- queries ----------------------------------------------------------------------------

    @property
    def n_trials(self) -> int:
        return len(self.ids)

    @property
    def best(self) -> Entry | None:
        """The fastest successful entry so far."""
        return self.ok[self.ranked[0][1]] if self.ranked else None

    def pending_codes(self, pending: Sequence[Suggestion]) -> set[int]:
        """Codes of suggestions still being evaluated (never proposed again meanwhile)."""
        out = set()
        for suggestion in pending:
            code = self.index.encode(suggestion.knobs)
            if code is not None:
                out.add(code)
        return out

    def is_free(self, code: int, pending: set[int]) -> bool:
        """A valid configuration that is neither evaluated nor pending."""
        return code not in self.seen and code not in pending and self.index.admits(code)
