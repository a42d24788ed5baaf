"""Durable state: kernels, generations, candidates, evaluations, policy state, claims.

:class:`Store` is the interface; :class:`SqliteStore` (one box) and :class:`PostgresStore`
(a fleet, needs ``ktuned[fleet]``) implement it; :func:`open_store` picks one from a URL.
"""

from __future__ import annotations

from tuned.store.api import Store
from tuned.store.base import BestRow, CaseTimingRow, KernelRow, TrialRow, fingerprint_id
from tuned.store.claims import Claim, ClaimSettings
from tuned.store.schema import SCHEMA_VERSION
from tuned.store.sqlite import SqliteStore
from tuned.store.url import default_store_url, open_store

__all__ = [
    "SCHEMA_VERSION",
    "BestRow",
    "CaseTimingRow",
    "Claim",
    "ClaimSettings",
    "KernelRow",
    "SqliteStore",
    "Store",
    "TrialRow",
    "default_store_url",
    "fingerprint_id",
    "open_store",
]
