"""Level 2 of the hierarchy: which candidate of a cluster to move from (the parent).

For each pair (cluster, knob set of a strategy) a heap holds the cluster's successful
candidates by time, fastest first. A candidate whose one-step neighbourhood within the knob
set is taken (every neighbour evaluated or invalid) is *exhausted* for it and leaves the
heap for good (lazily, when it reaches the top): the evaluated set only grows. So the parent
is found in amortized constant time also with thousands of candidates, and a search that
always expands the fastest non-exhausted candidate is a best-first search over the space's
adjacency graph.

With a profile, the parent may trade a little latency for headroom on the strategy's target
resource: among the ``k`` fastest non-exhausted candidates it takes the largest
``-ln(t / t_fastest) + w * (1 - SOL_target)``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from copy import deepcopy

from policies.history import TrialLog
from policies.moves import NeighbourProposer

__all__ = ["ParentQueues", "headroom_choice"]


class ParentQueues:
    """Per (cluster, knob set) heaps of parent candidates (positions in ``log.ok``)."""

    def __init__(
        self,
        log: TrialLog,
        proposer: NeighbourProposer,
        knob_sets: Sequence[tuple[int, ...]],
    ) -> None:
        self.log = log
        self.epoch = log.epoch
        self.proposer = proposer
        self.knob_sets = tuple(dict.fromkeys(knob_sets))
        self.labels: list[int] = []
        self._clusters: set[int] = set()
        self._heaps: dict[tuple[int, tuple[int, ...]], list[tuple[float, int]]] = {}
        self._exhausted: dict[tuple[int, ...], set[int]] = {k: set() for k in self.knob_sets}

    def __deepcopy__(self, memo: dict[int, object]) -> ParentQueues:
        """Independent queues over the copy of their log (the one in ``memo`` when the
        whole policy is copied): the heaps, labels and exhausted sets are copied, the
        proposer (settings only) is shared."""
        copy = ParentQueues.__new__(ParentQueues)
        memo[id(self)] = copy
        copy.log = deepcopy(self.log, memo)
        copy.epoch = self.epoch
        copy.proposer = self.proposer
        copy.knob_sets = self.knob_sets
        copy.labels = list(self.labels)
        copy._clusters = set(self._clusters)
        copy._heaps = {key: list(heap) for key, heap in self._heaps.items()}
        copy._exhausted = {key: set(done) for key, done in self._exhausted.items()}
        return copy

    def reset(self, labels: Sequence[int]) -> None:
        """New cluster labels for all of ``log.ok`` (after a refit): rebuild every heap."""
        self.labels = list(labels)
        self._clusters = set(self.labels)
        self._heaps = {}
        buckets: dict[tuple[int, tuple[int, ...]], list[tuple[float, int]]] = {}
        for i, (entry, label) in enumerate(zip(self.log.ok, self.labels)):
            if entry.code is None or entry.time_s is None:
                continue
            for knobs in self.knob_sets:
                if i not in self._exhausted[knobs]:
                    buckets.setdefault((label, knobs), []).append((entry.time_s, i))
        for key, items in buckets.items():
            heapq.heapify(items)
            self._heaps[key] = items

    def add(self, label: int) -> None:
        """Register the next entry of ``log.ok`` (position ``len(labels)``) in ``label``."""
        i = len(self.labels)
        self.labels.append(label)
        self._clusters.add(label)
        entry = self.log.ok[i]
        if entry.code is None or entry.time_s is None:
            return
        for knobs in self.knob_sets:
            heapq.heappush(self._heaps.setdefault((label, knobs), []), (entry.time_s, i))

    def clusters(self) -> list[int]:
        """Cluster ids that have at least one candidate, ascending."""
        return sorted(self._clusters)

    def top(self, cluster: int, knobs: tuple[int, ...], k: int = 1) -> list[int]:
        """Up to ``k`` non-exhausted candidates of ``cluster`` for ``knobs``, fastest first."""
        heap = self._heaps.get((cluster, knobs))
        if not heap:
            return []
        exhausted = self._exhausted[knobs]
        out: list[tuple[float, int]] = []
        while heap and len(out) < k:
            item = heapq.heappop(heap)
            code = self.log.ok[item[1]].code
            if code is None or self.proposer.exhausted(self.log, code, knobs):
                exhausted.add(item[1])
                continue
            out.append(item)
        for item in out:
            heapq.heappush(heap, item)
        return [i for _, i in out]


def headroom_choice(log: TrialLog, found: Sequence[int], metric: str | None, weight: float) -> int:
    """The candidate of ``found`` (fastest first) with the best latency-headroom trade-off.

    ``-ln(t_i / t_fastest) + weight * (1 - SOL_i)``; without ``metric`` on any of them, the
    fastest. Unprofiled candidates count as saturated (no known headroom).
    """
    if not found:
        raise ValueError("no parent candidates to choose from")
    if metric is None or not any(metric in log.ok[i].metrics for i in found):
        return found[0]
    fastest = log.ok[found[0]].time_s or 1.0

    def utility(i: int) -> float:
        entry = log.ok[i]
        headroom = 1.0 - float(entry.metrics.get(metric, 1.0))
        return -math.log((entry.time_s or fastest) / fastest) + weight * headroom

    return max(found, key=utility)
