"""How the next candidate is chosen: one kernel generation tuned on one machine.

:class:`Campaign` (``campaign.py``: the generation loop) is built in layers, each a module
of one job, each class extending the one below it:

- ``base.py``: the campaign's state and its reads of the store (trials, incumbent, knob
  space, policy, summary);
- ``judging.py``: evaluating a candidate and the acceptance rule;
- ``reference_only.py``: reference entries, which wait for the LLM's first module;
- ``claims.py``: fleet mode's claims on candidates;
- ``proposals.py``: suggestions made into candidates (knob moves, LLM rewrites);
- ``speculation.py``: guesses of the next candidates, for compiles ahead;
- ``campaign.py``: ``step``, ``run``, ``rewrite`` and ``propose_batch``.
"""

from __future__ import annotations

from tuned.search.base import CampaignSummary, OnResult, TuneSettings
from tuned.search.campaign import Campaign
from tuned.search.judging import Prepared

__all__ = ["Campaign", "CampaignSummary", "OnResult", "Prepared", "TuneSettings"]
