"""Re-validating a stale best (:mod:`tuned.runtime.stale`): one more evaluation of it under
the current software, on the campaign's usual path."""

from __future__ import annotations

from tuned.outcomes import Provenance
from tuned.search.campaign import Campaign
from tuned.store.base import TrialRow

__all__ = ["revalidate"]


def revalidate(campaign: Campaign, candidate_id: str) -> TrialRow | None:
    """Evaluate a stale best again under the campaign's (current) fingerprint: the usual path
    (correctness, timing interleaved with the incumbent, the acceptance rule), so it becomes
    the best again only if it still clears the bar. ``None`` if the candidate is unknown or
    the campaign has no successful baseline yet (the baseline comes first)."""
    spec = campaign.spec
    trials = campaign.store.trials(spec.name, spec.generation, campaign.fingerprint)
    if not any(t.provenance is Provenance.ORIGINAL and not t.result.outcome.failed for t in trials):
        return None
    candidate = campaign.store.candidate(candidate_id, campaign.spec.generation)
    if candidate is None:
        return None
    return campaign.evaluate(candidate)
