"""Fleet mode: claims on candidates (:mod:`tuned.store.claims`, docs/fleet.md), so that
processes sharing a store never evaluate one candidate twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from policies import (
    Suggestion,
)
from tuned.outcomes import Candidate, Provenance
from tuned.search.reference_only import ReferenceOnlyCampaign
from tuned.store.base import TrialRow


class ClaimingCampaign(ReferenceOnlyCampaign):
    """Claims taken, read, taken over and waited for."""

    def _claim(self, candidate: Candidate, suggestion: Suggestion) -> bool:
        """Take the lease on evaluating ``candidate`` (always True without claims)."""
        if self.claims is None:
            return True
        self.store.add_candidate(candidate)  # whoever takes the claim over can rebuild it
        return self.store.claim(
            candidate,
            self.fingerprint,
            _suggestion_payload(suggestion),
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
        )

    def _claimed_elsewhere(self) -> list[Suggestion]:
        """Suggestions other processes are evaluating (live claims): pending for the policy,
        so it neither proposes them again nor loses track of the pulls in flight."""
        if self.claims is None:
            return []
        return [
            _suggestion_from(c.payload)
            for c in self.store.open_claims(
                self.spec.name,
                self.spec.generation,
                self.fingerprint,
                exclude_owner=self.claims.owner,
            )
        ]

    def _take_over(self) -> TrialRow | None:
        """Evaluate one candidate whose claim expired unfinished (its owner died), crediting
        the arm its owner's policy pulled; ``None`` when there is none."""
        if self.claims is None:
            return None
        for claim in self.store.take_over(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
        ):
            candidate = self.store.candidate(claim.candidate_id, self.spec.generation)
            if candidate is None:  # cannot happen: claims are taken after add_candidate
                continue
            row = self.evaluate(candidate)
            if candidate.provenance is not Provenance.ORIGINAL:
                self.observe(_suggestion_from(claim.payload), row)
            return row
        return None

    def _taken_over(self, limit: int) -> list[tuple[Suggestion, Candidate]]:
        """Up to ``limit`` candidates whose claims expired unfinished, now this process's."""
        if self.claims is None or limit <= 0:
            return []
        out = []
        for claim in self.store.take_over(
            self.spec.name,
            self.spec.generation,
            self.fingerprint,
            owner=self.claims.owner,
            lease_s=self.claims.lease_s,
            limit=limit,
        ):
            candidate = self.store.candidate(claim.candidate_id, self.spec.generation)
            if candidate is not None and candidate.provenance is not Provenance.ORIGINAL:
                out.append((_suggestion_from(claim.payload), candidate))
        return out

    def _wait_for_others(self) -> bool:
        """Wait while other processes hold every open claim of this generation, until one
        finishes or expires (True: decide again) or ``claims.max_wait_s`` passes (False,
        ``self.note`` says why)."""
        assert self.claims is not None
        deadline = time.monotonic() + self.claims.max_wait_s
        seen = len(self._trials())
        while True:
            open_claims = self.store.open_claims(
                self.spec.name,
                self.spec.generation,
                self.fingerprint,
                exclude_owner=self.claims.owner,
            )
            if not open_claims or any(c.expires_in <= 0 for c in open_claims):
                return True
            if len(self._trials()) != seen:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                self.note = (
                    f"waiting for {len(open_claims)} candidate(s) other processes are "
                    "evaluating (fleet mode)"
                )
                return False
            soonest = min(c.expires_in for c in open_claims)
            time.sleep(max(0.01, min(self.claims.poll_s, soonest + 0.01, left)))


def _suggestion_payload(suggestion: Suggestion) -> dict[str, object]:
    """``suggestion`` as a claim's JSON payload (:func:`_suggestion_from` reads it back)."""
    return {
        "knobs": dict(suggestion.knobs),
        "strategy": suggestion.strategy,
        "parent_id": suggestion.parent_id,
        "arm": suggestion.arm,
        "parent_time_s": suggestion.parent_time_s,
    }


def _suggestion_from(payload: Mapping[str, Any]) -> Suggestion:
    return Suggestion(
        knobs=dict(payload.get("knobs") or {}),
        strategy=str(payload.get("strategy") or "config"),
        parent_id=payload.get("parent_id"),
        arm=payload.get("arm"),
        parent_time_s=payload.get("parent_time_s"),
    )
