"""A fleet store that keeps tuning while PostgreSQL is unreachable: :class:`OutboxStore`.

:class:`OutboxStore` wraps a :class:`tuned.store.postgres.PostgresStore`. While the database
answers, every call goes to it (and read results are remembered). When a call fails because
the connection is lost (``psycopg.OperationalError``: server down, network cut, refused), the
store goes *offline*:

- results (candidates, evaluations, acceptance decisions, policy state, fingerprints,
  profiling runs, peaks, rooflines) are written to a local SQLite *outbox* (the same schema,
  a :class:`tuned.store.sqlite.SqliteStore` file under the state directory);
- claims are taken in the outbox only, so other boxes cannot see them: during an outage two
  boxes may evaluate the same candidate (at-least-once evaluation), but every measurement is
  recorded exactly once;
- reads answer from what the database last said merged with the outbox: ``trials`` is the
  union (so a campaign never re-evaluates what it measured before or during the outage;
  evaluations written to the database after its last read are folded in too), and
  ``candidate``, ``incumbent``, ``best``, ``policy_state`` and ``last_evaluated_at`` prefer
  the outbox's answer; other reads return the database's last answer for the same arguments,
  else the outbox's;
- registry writes (``sync_kernel``, ``retire_kernel``, ...) are applied to the outbox, so
  offline reads see them, and their statements are *journaled* there (they update and delete
  rows, which copying rows cannot replay); so a daemon can start, register its kernels and
  tune while the database is down.

At most every ``retry_s`` seconds a call tries the database again. When it answers,
:meth:`OutboxStore.sync` first replays the outbox into it in *one* PostgreSQL transaction and
then empties the outbox. Replay is idempotent: the journaled registry statements first, in
order (each sets absolute values, so running one twice changes nothing more; the registry is
last-writer-wins, as online); then the rows: rows with a primary key use ``ON CONFLICT``;
evaluations, acceptance decisions and profiling runs (which have only a serial key) are
skipped when a row with the same natural key (candidate, generation, fingerprint and start
time; or decision time; or profiling start) is there. A box killed during the replay
transaction leaves nothing of it in the database; one killed after its commit but before the
outbox was emptied replays on the next start and adds nothing. The outbox is synced when the
store is opened, too.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from tuned.errors import StoreError
from tuned.outcomes import Candidate, EvalResult, source_hash
from tuned.store._core import Row, Tx
from tuned.store.api import Store
from tuned.store.base import TrialRow
from tuned.store.dialect import POSTGRES, SQLITE, Dialect
from tuned.store.postgres import PostgresStore, redact
from tuned.store.sqlite import SqliteStore

__all__ = [
    "OUTBOX_READS",
    "OUTBOX_WRITES",
    "REGISTRY_WRITES",
    "OutboxStore",
    "is_connection_error",
    "replay",
]

log = logging.getLogger(__name__)

#: Writes kept in the outbox while the database is unreachable.
OUTBOX_WRITES = frozenset(
    {
        "add_candidate",
        "record_evaluation",
        "record_acceptance",
        "save_policy_state",
        "record_fingerprint",
        "record_profiling_run",
        "record_peaks",
        "record_roofline",
        "claim",
        "release",
        "take_over",
        "release_owner",
        "renew",
    }
)
#: Registry writes: offline, applied to the outbox with their statements journaled.
REGISTRY_WRITES = frozenset(
    {"sync_kernel", "set_kernel_state", "record_invalid", "retire_kernel", "forget_invalid"}
)
#: Reads answered offline from the database's last answer and the outbox.
OUTBOX_READS = frozenset(
    n
    for n in dir(Store)
    if not n.startswith("_")
    and callable(getattr(Store, n))
    and n not in OUTBOX_WRITES | REGISTRY_WRITES | {"close", "checkpoint"}
)
#: Offline, these prefer the outbox's answer (when not ``None``) to the database's last one.
_OUTBOX_FIRST = frozenset({"candidate", "incumbent", "best", "policy_state", "last_evaluated_at"})
#: Offline, these answer from the outbox only (claims are local while offline).
_OUTBOX_ONLY = frozenset({"open_claims", "claim_counts"})

#: Outbox tables replayed, in order, with how: ``None`` for ``ON CONFLICT DO NOTHING``,
#: a tuple of natural-key columns for "skip if a row with this key exists", or
#: ``("upsert", key columns, time column)`` for "keep the newer row".
_REPLAY: tuple[tuple[str, Any], ...] = (
    ("sources", None),
    ("generations", None),
    ("fingerprints", None),
    ("candidates", None),
    ("evaluations", ("candidate_id", "generation", "fingerprint", "started_at")),
    (
        "acceptances",
        ("kernel", "generation", "fingerprint", "candidate_id", "status", "decided_at"),
    ),
    ("profiling_runs", ("kernel", "generation", "candidate_id", "gpu_model", "started_at")),
    ("profiles", None),
    ("rooflines", None),
    ("gpu_peaks", ("upsert", ("gpu_model",), "measured_at")),
    ("policy_state", ("upsert", ("kernel", "generation", "fingerprint", "policy"), "updated_at")),
)
#: The outbox's own table: registry statements to run on the database, in order.
_JOURNAL = "outbox_journal"
#: Outbox tables emptied after a replay (claims are local and dropped; the registry tables
#: were written by journaled statements, replayed as such).
_CLEARED = (*(t for t, _ in _REPLAY), "claims", "kernels", "invalid_entries", _JOURNAL)
_CACHE_SIZE = 2048


def is_connection_error(exc: StoreError) -> bool:
    """True when ``exc`` comes from a lost or refused database connection (not from a bad
    statement or a constraint): the cases the outbox is for."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a PostgresStore needs psycopg
        return False
    return isinstance(exc.__cause__, psycopg.OperationalError)


class OutboxStore(Store):
    """The PostgreSQL store at ``url`` with a local outbox at ``outbox_path`` (see the module).

    ``retry_s``: how often an offline store tries the database again; ``connect_timeout_s``:
    how long each try may take. ``on_change``: called with the outbox's row count whenever it
    changes (the daemon's gauge). Opening never fails because the database is unreachable:
    the store starts offline. Like every store, one thread at a time.
    """

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(
        self,
        url: str,
        outbox_path: Path,
        *,
        retry_s: float = 5.0,
        connect_timeout_s: float = 5.0,
        on_change: Callable[[int], object] | None = None,
    ) -> None:
        self.url = url
        self.retry_s = retry_s
        self.connect_timeout_s = connect_timeout_s
        self.outbox = _OutboxFile(outbox_path)
        self._on_change = on_change
        self._primary: PostgresStore | None = None
        self._offline_since: float | None = None
        self._next_try = 0.0
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._online()  # sync what a previous run left, or start offline
        self._report()

    # -- state
    @property
    def location(self) -> str:
        return redact(self.url)

    @property
    def offline(self) -> bool:
        """True while the database is unreachable (writes go to the outbox)."""
        return self._offline_since is not None

    def outbox_rows(self) -> int:
        """Rows waiting in the outbox, journaled registry statements included (claims not
        counted: they are never replayed)."""
        return sum(
            int(self.outbox._query(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"])
            for t in (_JOURNAL, *(t for t, _ in _REPLAY))
        )

    def close(self) -> None:
        if self._primary is not None:
            self._primary.close()
        self.outbox.close()

    def checkpoint(self, wait_s: float = 2.0) -> None:
        self.outbox.checkpoint(wait_s)

    def _transaction(self) -> Any:
        raise NotImplementedError("OutboxStore routes whole calls; it runs no SQL of its own")

    def _query(self, sql: str, args: Any = ()) -> list[Row]:
        raise NotImplementedError("OutboxStore routes whole calls; it runs no SQL of its own")

    def _report(self) -> None:
        if self._on_change is not None:
            self._on_change(self.outbox_rows())

    # -- routing
    def _online(self) -> PostgresStore | None:
        """The database, after replaying the outbox into it; ``None`` while offline."""
        if self._offline_since is not None and time.monotonic() < self._next_try:
            return None
        try:
            if self._primary is None:
                self._primary = PostgresStore(self.url, connect_timeout_s=self.connect_timeout_s)
            self.sync()
        except StoreError as exc:
            if not is_connection_error(exc):
                raise
            self._go_offline(exc)
            return None
        return self._primary

    def _go_offline(self, exc: StoreError) -> None:
        self._next_try = time.monotonic() + self.retry_s
        if self._offline_since is None:
            self._offline_since = time.time()
            log.warning(
                "the store %s is unreachable (%s): tuning goes on, results are kept in the "
                "outbox %s until it is back; claims are local meanwhile",
                self.location,
                exc,
                self.outbox.path,
            )

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = _key(name, args, kwargs)
        primary = self._online()
        if primary is not None:
            try:
                result = getattr(primary, name)(*args, **kwargs)
            except StoreError as exc:
                if not is_connection_error(exc):
                    raise
                self._go_offline(exc)
            else:
                if self._offline_since is not None:
                    self._back_online({})
                if name in OUTBOX_READS:
                    self._remember(key, result)
                elif name in ("record_evaluation", "record_acceptance"):
                    self._note_write(name, args, kwargs)
                return result
        if name in OUTBOX_WRITES:
            for arg in args:
                if isinstance(arg, Candidate) and name != "add_candidate":
                    self.outbox.add_candidate(arg)  # so outbox reads (trials) join on it
            result = getattr(self.outbox, name)(*args, **kwargs)
            self._report()
            return result
        if name in REGISTRY_WRITES:
            with self.outbox.journaling():
                result = getattr(self.outbox, name)(*args, **kwargs)
            self._report()
            return result
        return self._read_offline(name, key, args, kwargs)

    def _remember(self, key: tuple[str, str], result: Any) -> None:
        self._cache[key] = result
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    def _note_write(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Fold a result written to the database into the remembered reads, so reads made
        offline include it even when it was written after the last read (a campaign reads
        its trials, evaluates, records, and the database goes away before the next read)."""
        bound = _signature(name).bind(None, *args, **kwargs).arguments
        c: Candidate = bound["candidate"]
        fp: str = bound["fingerprint"]
        if name == "record_acceptance":
            if bound["status"] == "accepted":
                self._remember(_key("incumbent", (c.kernel, c.generation, fp), {}), c.id)
            return
        key = _key("trials", (c.kernel, c.generation, fp), {})
        known: list[TrialRow] = list(self._cache.get(key, []))
        if key in self._cache and all(t.candidate_id != c.id for t in known):
            result: EvalResult = bound["result"]
            trial = TrialRow(
                candidate_id=c.id,
                knobs=c.knobs,
                provenance=c.provenance,
                strategy=c.strategy,
                parent_id=c.parent_id,
                source_hash=source_hash(c.source),
                result=result,
                wall_s=float(bound["wall_s"]),
            )
            self._remember(key, [*known, trial])

    def _read_offline(
        self, name: str, key: tuple[str, str], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        local = getattr(self.outbox, name)(*args, **kwargs)
        if name in _OUTBOX_ONLY:
            return local
        if name == "trials":
            known = list(self._cache.get(key, []))
            seen = {t.candidate_id for t in known}
            return known + [t for t in local if t.candidate_id not in seen]
        if name in _OUTBOX_FIRST and local is not None:
            return local
        return self._cache.get(key, local)

    # -- replay
    def sync(self) -> dict[str, int]:
        """Replay the outbox into the database (one transaction), then empty it.

        Returns the rows added per table (rows already there are not counted). Raises
        :class:`StoreError` when the database cannot be reached; the outbox is then kept.
        """
        if self.outbox_rows() == 0:
            return {}
        if self._primary is None:
            self._primary = PostgresStore(self.url, connect_timeout_s=self.connect_timeout_s)
        added = replay(self.outbox, self._primary)
        with self.outbox._transaction() as local:
            for table in _CLEARED:
                local.execute(f"DELETE FROM {table}")
        self._back_online(added)
        self._report()
        return added

    def _back_online(self, added: Mapping[str, int]) -> None:
        log.info(
            "the store %s is reachable again%s; synced the outbox: %s",
            self.location,
            ""
            if self._offline_since is None
            else f" after {time.time() - self._offline_since:.0f} s",
            ", ".join(f"{n} {t}" for t, n in added.items() if n) or "nothing new",
        )
        self._offline_since = None


def replay(outbox: SqliteStore, primary: PostgresStore) -> dict[str, int]:
    """Copy the outbox's rows into the database in one transaction, skipping rows already
    there (so replaying twice adds nothing); the rows added per table. The outbox is left as
    it is: :meth:`OutboxStore.sync` empties it after this commits."""
    has_journal = outbox._query("SELECT 1 FROM sqlite_master WHERE name=?", (_JOURNAL,))
    journal = (
        outbox._query(f"SELECT sql, args_json FROM {_JOURNAL} ORDER BY seq") if has_journal else []
    )
    pending = {t: outbox._query(f"SELECT * FROM {t} ORDER BY rowid") for t, _ in _REPLAY}
    added = {"registry writes": 0, **dict.fromkeys(pending, 0)}
    with primary._transaction() as db:
        for entry in journal:  # registry first: the results below belong to its generations
            db.execute(entry["sql"], json.loads(entry["args_json"]))
            added["registry writes"] += 1
        for table, how in _REPLAY:
            for row in pending[table]:
                added[table] += _replay_row(db, table, how, row)
    return added


def _replay_row(db: Tx, table: str, how: Any, row: Row) -> int:
    """Insert one outbox row into the database unless it is there; 1 if it was added."""
    cols = [c for c in row.keys() if c != "seq"]  # noqa: SIM118 (a Row iterates values)
    values = [row[c] for c in cols]
    insert = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    if how is None:
        return db.execute(insert + " ON CONFLICT DO NOTHING", values)
    if how[0] == "upsert":
        _, keys, stamp = how
        updates = ", ".join(f"{c}=excluded.{c}" for c in cols if c not in keys)
        return db.execute(
            f"{insert} ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
            f" WHERE {table}.{stamp} < excluded.{stamp}",
            values,
        )
    where = " AND ".join(f"{c}=?" for c in how)
    if db.rows(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1", [row[c] for c in how]):
        return 0
    db.execute(insert, values)
    if table == "evaluations":  # as record_evaluation does: the result closes its claim
        db.execute(
            "UPDATE claims SET done=1 WHERE kernel=? AND generation=? AND fingerprint=?"
            " AND candidate_id=?",
            (row["kernel"], row["generation"], row["fingerprint"], row["candidate_id"]),
        )
    return 1


class _JournalTx:
    """A transaction of the outbox that also journals each statement it executes (in the
    same SQLite transaction: a write and its journal entry are saved together)."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx

    def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        if SQLITE.now in sql:  # replayed on PostgreSQL: only engine-neutral statements
            raise StoreError(
                "a registry write uses the database clock, which the outbox cannot replay "
                "on PostgreSQL; pass the time as an argument (tuned/store/records.py)"
            )
        self._tx.execute(
            f"INSERT INTO {_JOURNAL} (sql, args_json) VALUES (?, ?)", (sql, json.dumps(list(args)))
        )
        return self._tx.execute(sql, args)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return self._tx.rows(sql, args)


class _OutboxFile(SqliteStore):
    """The outbox file: a SQLite store (the store's schema) plus the journal of registry
    statements (:meth:`journaling`), replayed on the database by :func:`replay`."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._journaling = False
        with super()._transaction() as db:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {_JOURNAL} (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " sql TEXT NOT NULL, args_json TEXT NOT NULL)"
            )

    @contextmanager
    def journaling(self) -> Iterator[None]:
        """Within: every statement a write method executes is journaled too."""
        self._journaling = True
        try:
            yield
        finally:
            self._journaling = False

    @contextmanager
    def _transaction(self) -> Iterator[Tx]:  # type: ignore[override]
        with super()._transaction() as db:
            yield _JournalTx(db) if self._journaling else db


@functools.cache
def _signature(name: str) -> inspect.Signature:
    return inspect.signature(getattr(Store, name))


def _key(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
    """A remembered read's key: the method and its arguments by name (positional or not)."""
    bound = _signature(name).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return name, repr([(k, v) for k, v in bound.arguments.items() if k != "self"])


def _route(name: str) -> Callable[..., Any]:
    def routed(self: OutboxStore, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, args, kwargs)

    routed.__name__ = name
    routed.__doc__ = getattr(Store, name).__doc__
    return routed


for _name in OUTBOX_WRITES | REGISTRY_WRITES | OUTBOX_READS:
    setattr(OutboxStore, _name, _route(_name))
