"""KernelBand's hierarchical bandit: (runtime cluster x strategy) arms, then a parent.

One decision (``suggest``):

1. The first ``initial_random`` evaluations (the baseline included) are uniform random, so
   there is something to cluster and climb from.
2. The successful candidates are clustered by runtime behaviour (:mod:`clustering`); the
   level-1 arms are the pairs ``(cluster, strategy)`` whose strategy can move a knob.
3. Arms are closed by three masks, at least one arm always staying open:
   *saturation* (KernelBand: the strategy's target resource is saturated on the cluster's
   representative, see :mod:`policies.masks`), *exhaustion* (no parent in the cluster has
   a free neighbour for the strategy's knobs) and *reach*: a cluster is skipped while a
   quarter of the best improvement seen in the last ``reach_window`` pulls could not make
   its parent beat the incumbent, ``t_parent * (1 - reach_scale * r_max) >= t_best`` (a
   Lipschitz-style bound in the spirit of KernelBand's profiling bounds; ``reach_scale``
   0.25, issue 24: the best recent gain is rare, and a bound that takes it at face value
   spends early pulls on slow parents; when it closes every arm, the arm with the fastest
   parent stays open).
4. The selector (masked UCB by default) picks an open arm: ``mu + c * sqrt(ln t / n)``.
   Suggestions still being evaluated (``pending``, when a batch is proposed or candidates
   are compiled ahead) count as pulls of their arm with reward 0 until their results are
   observed (:meth:`policies.arms.BanditState.with_pending`): ``n_a + p_a`` pulls, ``t + P``
   in all, so a batch spreads over the arms instead of piling onto one.
5. Level 2 picks the parent inside the cluster: the fastest candidate with a free neighbour
   for the strategy's knobs; when profiles exist, among the few fastest ones it prefers
   headroom on the strategy's target resource, ``-ln(t / t_fastest) + w * (1 - SOL)``.
6. The parametric proposer (:mod:`policies.moves`) moves the parent's knobs of the
   strategy's groups; for an LLM arm ``(cluster, llm:<strategy>)``, offered by the caller
   through :meth:`HierarchicalPolicy.set_llm_strategies`, the caller has an LLM rewrite the
   parent's code under the strategy instead.

7. *The model arm* (issue 24; on by default behind the flatness gate). Best-first expansion
   fills the plateau around a local optimum when the optimum lies in another basin (another
   value of a categorical switch, a tile size that only pays with another method). While
   the incumbent sits on a plateau (``flat_gate``: most of its evaluated one-knob
   neighbours within ``flat_tolerance`` of its time), one more arm, ``model``, proposes
   from a surrogate of the whole space: a Gaussian process's expected improvement
   (:mod:`policies.surrogate`, ``"gp"``, the default) or a density-ratio (TPE-style) model
   (:mod:`policies.density`, ``"tpe"``); its parent is the incumbent, and it is credited
   like any other arm with the child's gain over it. Around an isolated spike (every
   neighbour far slower) the gate stays shut and the best-first climb keeps every
   evaluation; ``model_patience`` may delay the arm further.
   A *restart* arm (opt-in, ``stall_patience``) joins once the incumbent has not
   improved for that many evaluations: a greedy climb from a uniformly random start that
   moves one knob to any value (:meth:`policies.moves.NeighbourProposer.any_value`) and
   starts over when its base has no free such neighbour. A proposal that beats the
   incumbent hands its basin to the best-first arms, which always expand the fastest parent.
   A *crossover* arm (opt-in, ``crossover``; policy ``hierarchical_crossover``) proposes a
   child of two of the fastest evaluated configurations (:mod:`policies.crossover`), its
   parent the incumbent, credited like the model arm.

``observe`` credits the arm with KernelBand's reward, the child's relative latency
reduction versus its parent clipped at 0 (failures: 0). State (arm statistics, clustering,
recent rewards, prior, the restart arm's climb) is a JSON-safe dataclass; everything else is
rebuilt from ``trials``. The model and restart arms' rewards stay out of the reach mask's
window (their parent is the incumbent, whatever the cluster).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from clustering import ClusteringSettings, ClusterModel, RuntimeClusterer, feature_row
from policies.arms import ArmSelector, ArmStats, BanditState, clipped_reward
from policies.base import SearchSpace, Suggestion, Trial
from policies.crossover import CrossoverProposer, CrossoverSettings
from policies.density import DensityProposer, DensitySettings
from policies.discounted import DiscountedUCBSelector, DiscountedUCBSettings
from policies.history import TrialLog
from policies.masks import METRIC_OF, MaskSettings, open_arms
from policies.moves import MoveSettings, NeighbourProposer
from policies.parents import ParentQueues, headroom_choice
from policies.strategies import (
    CONFIG,
    STRATEGIES,
    Strategy,
    knob_groups,
    llm_strategy_name,
    strategy_knobs,
)
from policies.surrogate import SurrogateProposer, SurrogateSettings
from policies.thompson import ThompsonSelector, ThompsonSettings
from policies.ucb import UCBSelector, UCBSettings

__all__ = ["HierarchicalPolicy", "HierarchicalSettings", "HierarchicalState", "make_selector"]

_SELECTORS = ("ucb", "thompson", "discounted_ucb")
_MODELS = ("gp", "tpe", "none")
#: The model arm's name (and strategy): one arm, not one per cluster.
MODEL_ARM = "model"
RESTART_ARM = "restart"
CROSSOVER_ARM = "crossover"


@dataclass(frozen=True)
class HierarchicalSettings:
    """Everything the hierarchical policy can be told; the defaults are the product's."""

    selector: str = "ucb"
    ucb: UCBSettings = field(default_factory=UCBSettings)
    thompson: ThompsonSettings = field(default_factory=ThompsonSettings)
    discounted: DiscountedUCBSettings = field(default_factory=DiscountedUCBSettings)
    #: ``None``: no clustering, every candidate in cluster 0 (the ablation).
    clustering: ClusteringSettings | None = field(default_factory=ClusteringSettings)
    masks: MaskSettings = field(default_factory=MaskSettings)
    moves: MoveSettings = field(default_factory=MoveSettings)
    #: The model arm's proposer: ``"gp"`` (:mod:`policies.surrogate`, the default),
    #: ``"tpe"`` (:mod:`policies.density`) or ``"none"``: no model arm. Open from the
    #: first decision on, the GP arm ends a stall on categorical switches and costs the
    #: best-first climb a needle optimum; behind the flatness gate (``flat_gate``) it keeps
    #: the first and not the second (docs/decisions.md, issue 24).
    model: str = "gp"
    surrogate: SurrogateSettings = field(default_factory=SurrogateSettings)
    #: The model arm opens once the incumbent has not improved for this many
    #: evaluations (0: from the first bandit decision on).
    model_patience: int = 0
    density: DensitySettings = field(default_factory=DensitySettings)
    strategies: tuple[str, ...] = tuple(s.name for s in STRATEGIES)
    #: Knob -> group, overriding inference (see :mod:`policies.strategies`).
    knob_groups: tuple[tuple[str, str], ...] = ()
    initial_random: int = 10
    #: The restart arm opens once the incumbent has not improved for this many
    #: evaluations; 0: never, the default (measured with 20, 40 and 60 on the recorded
    #: spaces: it cost the best-first climb more than it found, see docs/decisions.md).
    stall_patience: int = 0
    reach_window: int = 20
    #: The reach mask's bound: a parent stays open while ``t_parent * (1 - reach_scale *
    #: r_max) < t_best``, ``r_max`` the best reward of the last ``reach_window`` pulls.
    #: 0.25 (issue 24, 2026-11-29; 1.0 before, policy ``hierarchical_reach1``):
    #: fewer early pulls on parents that only the rarest gain could take past the
    #: incumbent. 0.0 keeps only parents as fast as the incumbent (ties).
    reach_scale: float = 0.25
    #: *Crossover arm* (issue 24, opt-in; ``None``: off, the default). One more arm,
    #: ``crossover``, proposes a child of two of the fastest evaluated configurations
    #: (:mod:`policies.crossover`), credited like the model arm with its gain over the
    #: incumbent. It opens once the incumbent has not improved for ``crossover_patience``
    #: evaluations and, with ``flat_gate``, only while the incumbent sits on a plateau.
    crossover: CrossoverSettings | None = None
    crossover_patience: int = 0
    #: *Flatness gate* (issue 24; 0.0: off). When > 0, the model and
    #: restart arms open only while the incumbent's evaluated Hamming neighbourhood
    #: (configurations that differ from it in one knob, any value) is a plateau: at least
    #: ``flat_min_neighbours`` of them ran, and at least this fraction of them is within
    #: ``flat_tolerance`` of its time (a categorical switch's plateau, as on pnpoly; an
    #: isolated spike's neighbours, as on convolution_A100, are far slower). The default:
    #: the GP arm behind the gate at 0.5 and 2 %.
    flat_gate: float = 0.5
    flat_tolerance: float = 0.02
    flat_min_neighbours: int = 6
    #: Level 2 with a profile: how much full headroom is worth, in log-latency.
    headroom_weight: float = 0.1
    headroom_candidates: int = 4
    #: ``"cluster"``: level 2 as above. ``"incumbent"``: the parent is always the fastest
    #: candidate overall (a flat bandit over strategies, without the hierarchy).
    parent: str = "cluster"

    def __post_init__(self) -> None:
        if self.model not in _MODELS:
            raise ValueError(f"unknown model {self.model!r}; valid: {_MODELS}")
        if self.selector not in _SELECTORS:
            raise ValueError(f"unknown selector {self.selector!r}; valid: {_SELECTORS}")
        if self.parent not in ("cluster", "incumbent"):
            raise ValueError(f"parent must be 'cluster' or 'incumbent', got {self.parent!r}")
        if self.initial_random < 1:
            raise ValueError("initial_random must be >= 1 (the baseline)")
        if self.model_patience < 0:
            raise ValueError(f"model_patience must be >= 0, got {self.model_patience}")
        if self.crossover_patience < 0:
            raise ValueError(f"crossover_patience must be >= 0, got {self.crossover_patience}")
        if self.stall_patience < 0:
            raise ValueError(f"stall_patience must be >= 0, got {self.stall_patience}")
        if not 0.0 <= self.flat_gate <= 1.0 or self.flat_tolerance < 0:
            raise ValueError("flat_gate must be in [0, 1] and flat_tolerance >= 0")
        if self.reach_window < 0 or self.headroom_candidates < 1:
            raise ValueError("reach_window must be >= 0 and headroom_candidates >= 1")
        if not self.reach_scale >= 0:
            raise ValueError(f"reach_scale must be >= 0, got {self.reach_scale}")
        known = {s.name for s in STRATEGIES}
        unknown = [s for s in self.strategies if s not in known]
        if unknown or not self.strategies:
            raise ValueError(f"unknown or no strategies {unknown}; valid: {sorted(known)}")


def make_selector(settings: HierarchicalSettings) -> ArmSelector:
    """The level-1 selector named by ``settings.selector``."""
    if settings.selector == "thompson":
        return ThompsonSelector(settings=settings.thompson)
    if settings.selector == "discounted_ucb":
        return DiscountedUCBSelector(settings=settings.discounted)
    return UCBSelector(settings=settings.ucb)


@dataclass
class HierarchicalState:
    """What a restarted daemon needs to continue: persisted after every update."""

    bandit: BanditState = field(default_factory=BanditState)
    clusters: ClusterModel | None = None
    recent_rewards: list[float] = field(default_factory=list)
    #: Strategy -> (pseudo pulls, pseudo reward sum) every new arm of it starts from.
    prior: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: The restart arm's climb: its base (knob values) and the base's time.
    climb: dict[str, Any] | None = None
    climb_time_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "climb": None if self.climb is None else dict(self.climb),
            "climb_time_s": self.climb_time_s,
            "bandit": self.bandit.to_dict(),
            "clusters": None if self.clusters is None else self.clusters.to_dict(),
            "recent_rewards": list(self.recent_rewards),
            "prior": {s: [n, r] for s, (n, r) in sorted(self.prior.items())},
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> HierarchicalState:
        clusters = state.get("clusters")
        return cls(
            bandit=BanditState.from_dict(state.get("bandit", {})),
            clusters=None if clusters is None else ClusterModel.from_dict(clusters),
            recent_rewards=[float(r) for r in state.get("recent_rewards", [])],
            prior={s: (float(v[0]), float(v[1])) for s, v in state.get("prior", {}).items()},
            climb=None if state.get("climb") is None else dict(state["climb"]),
            climb_time_s=state.get("climb_time_s"),
        )


@dataclass(frozen=True)
class _Arm:
    cluster: int
    strategy: Strategy
    knobs: tuple[int, ...]
    parent: int  # position in log.ok
    llm: bool = False  # applied by an LLM rewrite of the parent (no knob move)
    model: bool = False  # proposed by the density model over the whole space
    restart: bool = False  # a climb from a diverse start (see RESTART_ARM)
    crossover: bool = False  # a child of two of the fastest candidates (see CROSSOVER_ARM)

    @property
    def global_arm(self) -> bool:
        """One arm for the whole space (no cluster), its parent the incumbent."""
        return self.model or self.restart or self.crossover

    @property
    def strategy_name(self) -> str:
        if self.model:
            return MODEL_ARM
        if self.restart:
            return RESTART_ARM
        if self.crossover:
            return CROSSOVER_ARM
        return llm_strategy_name(self.strategy.name) if self.llm else self.strategy.name

    @property
    def name(self) -> str:
        if self.global_arm:
            return self.strategy_name
        return f"{self.cluster}/{self.strategy_name}"


class HierarchicalPolicy:
    """The default search policy of ktuned (see the module docstring for one decision)."""

    name: ClassVar[str] = "hierarchical"
    default_settings: ClassVar[HierarchicalSettings] = HierarchicalSettings()
    llm_arms: ClassVar[bool] = True  # the Policy hook: set_llm_strategies opens LLM arms

    def __init__(
        self,
        *,
        settings: HierarchicalSettings | None = None,
        state: HierarchicalState | None = None,
        prior: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.settings = settings or self.default_settings
        self.state = state or HierarchicalState()
        if prior:
            self.state.prior = {s: (float(n), float(r)) for s, (n, r) in prior.items()}
        self._selector = make_selector(self.settings)
        self._proposer = NeighbourProposer(settings=self.settings.moves)
        self._model: SurrogateProposer | DensityProposer | None = None
        if self.settings.model == "gp":
            self._model = SurrogateProposer(settings=self.settings.surrogate)
        elif self.settings.model == "tpe":
            self._model = DensityProposer(settings=self.settings.density)
        self._crossover = (
            None
            if self.settings.crossover is None
            else CrossoverProposer(settings=self.settings.crossover, proposer=self._proposer)
        )
        self._crossover_child: int | None = None
        self._groups: list[tuple[int, ...]] = []
        self._clusterer = (
            None
            if self.settings.clustering is None
            else RuntimeClusterer(settings=self.settings.clustering, model=self.state.clusters)
        )
        self._log: TrialLog | None = None
        self._queues: ParentQueues | None = None
        self._strategy_knobs: list[tuple[Strategy, tuple[int, ...]]] = []
        self._profiled: set[str] = set()
        self._llm: tuple[Strategy, ...] = ()

    # -- Policy protocol --------------------------------------------------------------------

    def suggest(
        self,
        space: SearchSpace,
        trials: Sequence[Trial],
        rng: np.random.Generator,
        *,
        pending: Sequence[Suggestion] = (),
    ) -> Suggestion | None:
        log, queues = self._sync(space, trials)
        taken = log.pending_codes(pending)
        if log.n_trials < self.settings.initial_random or not log.ok:
            move = self._proposer.random(log, rng, taken)
            if move is not None or not log.ok or not self._llm:
                return None if move is None else Suggestion(knobs=log.index.decode(move.code))
            # A small space, exhausted before the random phase ends: LLM arms go on.
        self._refresh_clusters(log, queues, rng)
        in_flight = Counter(s.arm for s in pending if s.arm is not None)
        arm = self._choose_arm(log, queues, rng, taken, in_flight)
        if arm is not None and arm.llm:
            code = log.ok[arm.parent].code
            assert code is not None
            return self._from_arm(log, arm, code)
        if arm is not None and arm.restart:
            return self._restart_move(log, rng, taken)
        if arm is not None and arm.crossover and self._crossover_child is not None:
            child, self._crossover_child = self._crossover_child, None
            return self._from_arm(log, arm, child)
        if arm is not None and arm.model and self._model is not None:
            code = self._model.propose(log, rng, taken)
            if code is not None:
                return self._from_arm(log, arm, code)
        elif arm is not None:
            parent_code = log.ok[arm.parent].code
            assert parent_code is not None
            move = self._proposer.local(log, parent_code, arm.knobs, rng, taken)
            if move is not None:
                return self._from_arm(log, arm, move.code)
        # Every arm is exhausted (or only pending moves are left): widen, then random.
        best = log.best
        move = self._proposer.propose(
            log, None if best is None else best.code, self._all_knobs(log), rng, taken
        )
        if move is None:
            return None
        from_best = best is not None and move.kind != "random"
        return Suggestion(
            knobs=log.index.decode(move.code),
            parent_id=best.candidate_id if from_best and best else None,
            parent_time_s=best.time_s if from_best and best else None,
        )

    @staticmethod
    def _from_arm(log: TrialLog, arm: _Arm, code: int) -> Suggestion:
        """The configuration ``code`` as ``arm``'s pull, credited against its parent."""
        parent = log.ok[arm.parent]
        return Suggestion(
            knobs=log.index.decode(code),
            strategy=arm.strategy_name,
            parent_id=parent.candidate_id,
            arm=arm.name,
            parent_time_s=parent.time_s,
        )

    def observe(self, suggestion: Suggestion, trial: Trial) -> None:
        if suggestion.arm is None:
            return
        reward = clipped_reward(suggestion.parent_time_s, trial.time_s if trial.ok else None)
        self._seed_arm(suggestion.arm, suggestion.strategy)
        self._selector.update(self.state.bandit, suggestion.arm, reward)
        state = self.state
        if suggestion.arm == RESTART_ARM:
            if trial.ok and (
                state.climb is None
                or state.climb_time_s is None
                or (trial.time_s or 0.0) < state.climb_time_s
            ):
                state.climb, state.climb_time_s = dict(suggestion.knobs), trial.time_s
            return
        if suggestion.arm in (MODEL_ARM, CROSSOVER_ARM):
            return
        window = self.settings.reach_window
        if window:
            self.state.recent_rewards = [*self.state.recent_rewards, reward][-window:]

    def to_dict(self) -> dict[str, Any]:
        if self._clusterer is not None:
            self.state.clusters = self._clusterer.model
        return self.state.to_dict()

    @classmethod
    def from_dict(
        cls, state: dict[str, Any], *, settings: HierarchicalSettings | None = None
    ) -> HierarchicalPolicy:
        return cls(settings=settings, state=HierarchicalState.from_dict(state))

    def set_llm_strategies(self, strategies: Sequence[Strategy]) -> None:
        """Offer LLM arms ``(cluster, llm:<strategy>)`` for these strategies from the next
        :meth:`suggest` on; ``()`` masks every LLM arm (no LLM, or its budget is spent).

        An LLM arm's suggestion keeps its parent's knobs and names the strategy
        ``"llm:<strategy>"``: the caller rewrites the parent's code under the strategy and
        evaluates the result (the parent of an LLM arm is its cluster's fastest candidate).
        The saturation and reach masks apply to LLM arms as to any other; they are never
        exhausted, since a rewrite needs no free neighbour.
        """
        self._llm = tuple(strategies)

    # -- introspection for the daemon -------------------------------------------------------

    def update_metrics(self, metrics: Mapping[str, Mapping[str, float]]) -> None:
        """Merge metrics that arrived after a candidate's trial was digested.

        Profiles are taken after a candidate is evaluated (and only for representatives and
        new bests), so its ``Trial.metrics`` grow later; the incremental history would not
        see that. ``metrics`` maps candidate id -> metrics; keys a trial does not have yet are
        added, known ones are kept (compile metadata stays authoritative for what it says).
        """
        log = self._log
        if log is None or not metrics:
            return
        for i, entry in enumerate(log.ok):
            new = metrics.get(entry.candidate_id)
            if not new or all(k in entry.metrics for k in new):
                continue
            updated = replace(entry, metrics={**new, **entry.metrics})
            log.ok[i] = updated
            if log.by_id.get(entry.candidate_id) is entry:
                log.by_id[entry.candidate_id] = updated
            self._profiled.update(m for m in METRIC_OF.values() if m in new)

    def representatives(self) -> dict[int, str]:
        """Cluster id -> candidate id of its representative (its fastest member).

        These are the candidates whose profile decides the cluster's masks: the ones worth
        an Nsight Compute run.
        """
        if self._log is None or self._queues is None:
            return {}
        out: dict[int, str] = {}
        clusters = len(self._queues.clusters())
        for _, i in self._log.ranked:
            out.setdefault(self._queues.labels[i], self._log.ok[i].candidate_id)
            if len(out) == clusters:
                break
        return out

    # -- internals --------------------------------------------------------------------------

    def _sync(self, space: SearchSpace, trials: Sequence[Trial]) -> tuple[TrialLog, ParentQueues]:
        log = TrialLog.for_space(self._log, space)
        if log is not self._log:
            self._log = log
            groups = knob_groups(space, dict(self.settings.knob_groups))
            self._groups = [log.index.movable(names) for names in groups.values()]
            self._proposer.set_knob_groups(self._groups)
            self._strategy_knobs = []
            for strategy in STRATEGIES:
                if strategy.name in self.settings.strategies:
                    knobs = log.index.movable(strategy_knobs(strategy, groups))
                    if knobs:
                        self._strategy_knobs.append((strategy, knobs))
        log.sync(trials)
        queues = self._queues
        if queues is None or queues.log is not log or queues.epoch != log.epoch:
            queues = self._queues = self._new_queues(log)
        new = log.ok[len(queues.labels) :]
        if new:
            model = None if self._clusterer is None else self._clusterer.model
            labels = (
                [0] * len(new)
                if model is None
                else [
                    int(c)
                    for c in model.assign([feature_row(e.time_s or 1.0, e.metrics) for e in new])
                ]
            )
            for entry, label in zip(new, labels):
                queues.add(label)
                self._profiled.update(m for m in METRIC_OF.values() if m in entry.metrics)
        return log, queues

    def _new_queues(self, log: TrialLog) -> ParentQueues:
        self._profiled = set()
        return ParentQueues(log, self._proposer, [k for _, k in self._strategy_knobs])

    def _refresh_clusters(
        self, log: TrialLog, queues: ParentQueues, rng: np.random.Generator
    ) -> None:
        if self._clusterer is None or not self._clusterer.due(len(log.ok), log.n_trials):
            return
        rows = [feature_row(e.time_s or 1.0, e.metrics) for e in log.ok]
        queues.reset([int(c) for c in self._clusterer.fit(rows, log.n_trials, rng)])
        self.state.clusters = self._clusterer.model

    def _all_knobs(self, log: TrialLog) -> tuple[int, ...]:
        return tuple(j for j, card in enumerate(log.index.cards) if card > 1)

    def _seed_arm(self, arm: str, strategy: str) -> None:
        """Give a new arm its strategy's prior pseudo-counts (once)."""
        bandit = self.state.bandit
        if arm in bandit.arms or strategy not in self.state.prior:
            return
        pulls, reward_sum = self.state.prior[strategy]
        bandit.arms[arm] = ArmStats(pulls, reward_sum)
        bandit.total_pulls += pulls

    def _choose_arm(
        self,
        log: TrialLog,
        queues: ParentQueues,
        rng: np.random.Generator,
        taken: set[int],
        in_flight: Mapping[str, int],
    ) -> _Arm | None:
        candidates = self._candidate_arms(log, queues)
        representative: dict[int, Mapping[str, float]] = {}
        if self._profiled:
            clusters = len(queues.clusters())
            for _, i in log.ranked:
                representative.setdefault(queues.labels[i], log.ok[i].metrics)
                if len(representative) == clusters:
                    break
        pairs = [(a.cluster, a.strategy) for a in candidates]
        kept = {(c, s.name) for c, s in open_arms(pairs, representative, self.settings.masks)}
        arms = self._reachable(log, [a for a in candidates if (a.cluster, a.strategy.name) in kept])
        incumbent = log.ranked[0][1]
        stalled = self._stalled_for(log)
        flat = not self.settings.flat_gate or self._flat(log)
        model_open = flat and stalled >= self.settings.model_patience
        if self._model is not None and model_open and len(log.ok) >= 2:
            arms.append(_Arm(-1, CONFIG, (), incumbent, model=True))
        patience = self.settings.stall_patience
        if flat and patience and stalled >= patience:
            arms.append(_Arm(-1, CONFIG, (), incumbent, restart=True))
        crossover_open = flat and stalled >= self.settings.crossover_patience
        if self._crossover is not None and crossover_open and len(log.times) >= 2:
            arms.append(_Arm(-1, CONFIG, (), incumbent, crossover=True))
        while arms:
            for arm in arms:
                self._seed_arm(arm.name, arm.strategy_name)
            bandit = self.state.bandit.with_pending(in_flight) if in_flight else self.state.bandit
            chosen = self._selector.select(bandit, [a.name for a in arms], rng)
            arm = next(a for a in arms if a.name == chosen)
            if arm.crossover:
                assert self._crossover is not None
                self._crossover_child = self._crossover.propose(log, self._groups, rng, taken)
                if self._crossover_child is not None:
                    return arm
                arms = [a for a in arms if a is not arm]  # no free child
                continue
            if arm.model or arm.restart:
                return arm
            parent = log.ok[arm.parent].code
            assert parent is not None
            steps = self._proposer.steps(log, parent, arm.knobs)
            if arm.llm or any(log.is_free(c, taken) for c in steps):
                return arm
            arms = [a for a in arms if a is not arm]  # only pending moves left there
        return None

    def _flat(self, log: TrialLog) -> bool:
        """The flatness gate: is the incumbent's evaluated Hamming neighbourhood a plateau?"""
        best = log.best
        if best is None or best.code is None or best.time_s is None:
            return False
        limit = best.time_s * (1.0 + self.settings.flat_tolerance)
        times = log.times
        evaluated = close = 0
        for c in log.index.hamming(best.code, self._all_knobs(log)):
            t = times.get(c)
            if t is not None:
                evaluated += 1
                close += t <= limit
        if evaluated < self.settings.flat_min_neighbours:
            return False
        return close >= self.settings.flat_gate * evaluated

    def _stalled_for(self, log: TrialLog) -> int:
        """Evaluations since the incumbent was found."""
        best = log.best
        if best is None:
            return 0
        return log.n_trials - 1 - log.ids.index(best.candidate_id)

    def _restart_move(
        self, log: TrialLog, rng: np.random.Generator, taken: set[int]
    ) -> Suggestion | None:
        """The restart arm: a step of the current climb, or a new climb's random start."""
        state = self.state
        # Credited against the incumbent, not the climb's base: a climb from a random start
        # gains a lot relative to its base long before it can matter.
        best = log.best
        reference = None if best is None else best.time_s
        base = None if state.climb is None else log.index.encode(state.climb)
        if base is not None:
            move = self._proposer.any_value(log, base, self._all_knobs(log), rng, taken)
            if move is not None:
                return Suggestion(
                    knobs=log.index.decode(move.code),
                    strategy=RESTART_ARM,
                    arm=RESTART_ARM,
                    parent_time_s=reference,
                )
        state.climb, state.climb_time_s = None, None
        code = log.index.random_free(rng, log.seen | taken)
        if code is None:
            return None
        return Suggestion(
            knobs=log.index.decode(code),
            strategy=RESTART_ARM,
            arm=RESTART_ARM,
            parent_time_s=reference,
        )

    def _candidate_arms(self, log: TrialLog, queues: ParentQueues) -> list[_Arm]:
        """Every (cluster, strategy) with a parent that still has a free neighbour."""
        incumbent = log.ranked[0][1]
        k = self.settings.headroom_candidates if self._profiled else 1
        out = []
        for cluster in queues.clusters():
            for strategy, knobs in self._strategy_knobs:
                found = queues.top(cluster, knobs, k)
                if not found:
                    continue
                if self.settings.parent == "incumbent" and found[0] != incumbent:
                    continue  # flat policy: moves from the incumbent only
                metric = METRIC_OF.get(strategy.target)
                parent = headroom_choice(log, found, metric, self.settings.headroom_weight)
                out.append(_Arm(cluster, strategy, knobs, parent))
        if self._llm:
            out += self._llm_arms(log, queues, incumbent)
        return out

    def _llm_arms(self, log: TrialLog, queues: ParentQueues, incumbent: int) -> list[_Arm]:
        """One LLM arm per (cluster, offered strategy), its parent the cluster's fastest
        candidate within the knob space (the incumbent for the flat policies)."""
        fastest: dict[int, int] = {}
        for _, i in log.ranked:
            if log.ok[i].code is not None:
                fastest.setdefault(queues.labels[i], i)
        if self.settings.parent == "incumbent":
            fastest = {c: i for c, i in fastest.items() if i == incumbent}
        return [
            _Arm(cluster, strategy, (), parent, llm=True)
            for cluster, parent in sorted(fastest.items())
            for strategy in self._llm
        ]

    def _reachable(self, log: TrialLog, arms: list[_Arm]) -> list[_Arm]:
        """The reach mask: arms whose parent one good step could take past the incumbent."""
        if not arms or not self.settings.reach_window or not self.state.recent_rewards:
            return arms
        best = log.ok[log.ranked[0][1]].time_s or 0.0
        r_max = self.settings.reach_scale * max(self.state.recent_rewards)

        def time_of(arm: _Arm) -> float:
            return log.ok[arm.parent].time_s or math.inf

        kept = [a for a in arms if time_of(a) <= best or time_of(a) * (1.0 - r_max) < best]
        if kept:
            return kept
        fastest = min(time_of(a) for a in arms)
        return [a for a in arms if time_of(a) == fastest]
