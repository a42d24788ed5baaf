"""Durable state: kernels, generations, candidates, evaluations, policy state."""

from __future__ import annotations

from tuned.store.base import BestRow, KernelRow, TrialRow, fingerprint_id
from tuned.store.sqlite import SCHEMA_VERSION, SqliteStore

__all__ = ["SCHEMA_VERSION", "BestRow", "KernelRow", "SqliteStore", "TrialRow", "fingerprint_id"]
