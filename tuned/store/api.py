"""The store interface every engine implements: :class:`Store`."""

from __future__ import annotations

from tuned.store.claims import Claims
from tuned.store.hardware import Hardware
from tuned.store.reads import Reads

__all__ = ["Store"]


class Store(Reads, Hardware, Claims):
    """Durable state of tuning, behind one interface for every engine.

    Contract (checked for every engine by ``tests/store/test_contract.py``):

    - Every write method is one transaction: all of it is saved, or (on an error, raised as
      :class:`tuned.errors.StoreError` saying so) nothing. A process killed at any point
      leaves the store as of its last completed write.
    - Reads see every write committed before they started, by this or any other process
      sharing the database (other daemons, ``ktuned status``, the metrics collector).
    - A store object is used by one thread at a time; open one per thread.
    - Records are append-only apart from the registry tables (``kernels``, invalid
      entries), policy state (last writer wins) and claims; results are never rewritten.
    - Several processes may write at once (SQLite: on one box; PostgreSQL: a fleet); claims
      (:mod:`tuned.store.claims`) keep them from evaluating the same candidate twice.

    Engines: :class:`tuned.store.sqlite.SqliteStore`, :class:`tuned.store.postgres.PostgresStore`;
    :func:`tuned.store.open_store` picks one from a store URL.
    """
