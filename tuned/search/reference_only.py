"""Reference entries (kind: reference): no Triton module until the LLM writes one; the
baseline is the faster of eager PyTorch and ``torch.compile``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import replace

from tuned.errors import WorkerError
from tuned.evaluation.client import WorkerClient
from tuned.search.judging import JudgingCampaign
from tuned.store.base import TrialRow


class ReferenceOnlyCampaign(JudgingCampaign):
    """What a reference entry waits for, and its baseline."""

    def _waiting_for_llm(self, trials: Sequence[TrialRow]) -> str:
        """Why a reference entry cannot go on without the LLM now ("" when it can: it has a
        seed, or the LLM may be asked)."""
        if self._seed_of(trials) is not None:
            return ""
        if self.llm is None:
            return (
                "no LLM is configured (llm.base_url, llm.model): a reference entry waits for "
                "one to write its first Triton module"
            )
        if not self.llm.open_strategies(self.spec):
            why = self.llm.paused_reason or "its token budget cannot cover one more request"
            return f"the LLM cannot be asked now ({why}); waiting"
        return ""

    def _wait_for_llm(self, reason: str) -> None:
        self.needs_llm = reason
        self.note = f"needs_llm: {reason}"
        if not self._marked_needs_llm:
            self.store.set_kernel_state(self.spec.name, "needs_llm", reason)
            self._marked_needs_llm = True

    def _llm_resumed(self) -> None:
        if self._marked_needs_llm:
            self.store.set_kernel_state(self.spec.name, "active", "")
            self._marked_needs_llm = False

    def _reference_baseline(self) -> TrialRow:
        """Measure a reference entry's baseline, the faster of eager PyTorch and
        ``torch.compile`` (:mod:`tuned.evaluation.reference`), and record it as the original."""
        from tuned.evaluation.reference import baseline_source, measure_reference

        client = self.client
        if not isinstance(client, WorkerClient):  # a worker's settings and directory
            raise WorkerError(
                f"{self.spec.name}: a reference entry's baseline is measured by a worker, and "
                f"this campaign's evaluator is a {type(client).__name__}; tune it with a worker"
            )
        s = client.settings
        result, wall = measure_reference(
            self.spec,
            workdir=client.workdir.parent / "reference",
            interpreter=s.interpreter,
            seeds=s.seeds,
            interpreter_max_size=s.interpreter_max_size,
            timing=dataclasses.asdict(s.timing),
            compile_reference=self.llm is not None and self.llm.settings.compile_reference,
            timeout_s=s.startup_timeout_s + s.compile_timeout_s + s.benchmark_timeout_s,
            sandbox=s.sandbox,
        )
        impl = str(result.metadata.get("reference_baseline", {}).get("impl", "eager"))
        candidate = replace(self._baseline_candidate(), source=baseline_source(self.spec, impl))
        return self.record(candidate, result, wall_s=wall)
