"""Replay entries (``kind: replay``): a tuning space recorded in a Kernel Tuner cache file.

A replay entry evaluates nothing: each configuration is looked up in a brute-forced Kernel
Tuner cache (format in ``../shared/benchdata/README.md``; ``.json`` or ``.json.gz``). It lets
the whole loop (store, policies, acceptance, reports) run on real recorded GPU measurements,
on any machine, in milliseconds per evaluation::

    name: convolution-a100
    kind: replay
    cache: convolution_A100.json.gz   # relative to the entry directory, or absolute
    noise: none                       # none: median recorded run; recorded: draws from them
    seed: 0                           # seeds the noise draws and the default baseline
    baseline: {block_size_x: 32, ...} # optional; default: a seeded draw among working configs
    weight: 1.0

The knobs are the cache's ``tune_params`` (in ``tune_params_keys`` order). The cache is data:
it is parsed as JSON, never executed. :func:`read_cache` parses it (memoized by content hash,
so the loader and :class:`tuned.evaluation.replay.ReplayClient` share one parsed copy).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tuned.registry.problems import Problems, show
from tuned.registry.spec import KnobValue, ReplaySource
from tuned.registry.validate import is_int
from tuned.yaml_files import YamlFileError, read_regular_file

__all__ = [
    "FAILURE_NAMES",
    "MAX_CACHE_BYTES",
    "NOISE_MODES",
    "REPLAY_KEYS",
    "CacheFormatError",
    "Record",
    "RecordedCache",
    "check_replay",
    "parse_cache",
    "read_cache",
]

#: Keys of a replay entry's ``kernel.yaml``.
REPLAY_KEYS: tuple[str, ...] = ("name", "kind", "cache", "noise", "seed", "baseline", "weight")
NOISE_MODES: tuple[str, ...] = ("none", "recorded")
#: Kernel Tuner's failure markers (the value of ``time`` instead of a number).
FAILURE_NAMES: tuple[str, ...] = ("CompilationFailedConfig", "RuntimeFailedConfig", "InvalidConfig")
#: Largest cache file, compressed or not, and largest decompressed JSON text.
MAX_CACHE_BYTES = 256 << 20
MAX_JSON_BYTES = 1 << 30
_MEMO_SIZE = 8


class CacheFormatError(ValueError):
    """A cache file that is not a Kernel Tuner cache (the message says where and why)."""


@dataclass(frozen=True)
class Record:
    """One recorded configuration: ``status`` is ``"ok"`` or Kernel Tuner's failure marker;
    ``time_ms`` the recorded mean and ``times_ms`` the recorded runs (milliseconds)."""

    status: str
    time_ms: float | None = None
    times_ms: tuple[float, ...] = ()

    @property
    def median_ms(self) -> float | None:
        if self.status != "ok":
            return None
        return float(np.median(self.times_ms)) if self.times_ms else self.time_ms


@dataclass(frozen=True)
class RecordedCache:
    """A parsed Kernel Tuner cache: the knob space and one :class:`Record` per configuration
    recorded (configurations absent violate the kernel's restrictions)."""

    keys: tuple[str, ...]
    values: Mapping[str, tuple[KnobValue, ...]]
    records: Mapping[tuple[KnobValue, ...], Record]
    device: str
    kernel: str

    def key(self, knobs: Mapping[str, KnobValue]) -> tuple[KnobValue, ...] | None:
        """The record key of ``knobs``, or None when they do not name exactly the cache's keys."""
        if set(knobs) != set(self.keys):
            return None
        return tuple(knobs[k] for k in self.keys)

    def lookup(self, knobs: Mapping[str, KnobValue]) -> Record | None:
        key = self.key(knobs)
        return None if key is None else self.records.get(key)

    def working(self) -> list[tuple[KnobValue, ...]]:
        """Keys of the configurations that ran, in the cache's order."""
        return [k for k, r in self.records.items() if r.status == "ok"]

    def optimum_ms(self) -> float:
        return min(r.time_ms for r in self.records.values() if r.time_ms is not None)


def _scalar(value: object) -> bool:
    return isinstance(value, (bool, int, str)) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def parse_cache(data: bytes) -> RecordedCache:
    """Parse a Kernel Tuner cache (gzip-compressed or plain JSON); CacheFormatError if not one."""
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                data = fh.read(MAX_JSON_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise CacheFormatError(f"not a readable gzip file: {exc}") from exc
        if len(data) > MAX_JSON_BYTES:
            raise CacheFormatError(f"decompresses to more than {MAX_JSON_BYTES >> 20} MiB")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CacheFormatError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CacheFormatError("the top level must be an object with tune_params_keys, cache")
    keys = doc.get("tune_params_keys")
    params = doc.get("tune_params")
    cache = doc.get("cache")
    if not (isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys)):
        raise CacheFormatError("tune_params_keys must be a non-empty list of parameter names")
    if len(set(keys)) != len(keys):
        raise CacheFormatError(f"tune_params_keys names a parameter twice: {show(keys)}")
    if not isinstance(params, dict) or set(params) != set(keys):
        raise CacheFormatError("tune_params must map each name of tune_params_keys to its values")
    values: dict[str, tuple[KnobValue, ...]] = {}
    for k in keys:
        listed = params[k]
        if not (isinstance(listed, list) and listed and all(_scalar(v) for v in listed)):
            raise CacheFormatError(f"tune_params.{k} must be a non-empty list of scalars")
        values[k] = tuple(listed)
    if not isinstance(cache, dict):
        raise CacheFormatError("cache must be an object keyed by configuration")
    records: dict[tuple[KnobValue, ...], Record] = {}
    for label, entry in cache.items():
        if not isinstance(entry, dict) or any(k not in entry for k in (*keys, "time")):
            raise CacheFormatError(f"cache entry {label!r} lacks a parameter value or time")
        key = tuple(entry[k] for k in keys)
        if any(v not in values[k] for k, v in zip(keys, key)):
            raise CacheFormatError(f"cache entry {label!r} has a value outside tune_params")
        raw = entry["time"]
        if isinstance(raw, str):
            records[key] = Record(status=raw)
            continue
        runs = entry.get("times") or [raw]
        if not _number(raw) or not isinstance(runs, list) or not all(_number(t) for t in runs):
            raise CacheFormatError(f"cache entry {label!r}: time and times must be numbers > 0")
        records[key] = Record(status="ok", time_ms=float(raw), times_ms=tuple(map(float, runs)))
    if not any(r.status == "ok" for r in records.values()):
        raise CacheFormatError("no configuration ran (every time is a failure marker)")
    return RecordedCache(
        keys=tuple(keys),
        values=values,
        records=records,
        device=str(doc.get("device_name", "unknown device")),
        kernel=str(doc.get("kernel_name", "unknown kernel")),
    )


_MEMO: OrderedDict[str, RecordedCache] = OrderedDict()


def read_cache(data: bytes) -> tuple[RecordedCache, str]:
    """The parsed cache of ``data`` and its SHA-256, memoized by hash (a few recent ones)."""
    digest = hashlib.sha256(data).hexdigest()
    cached = _MEMO.get(digest)
    if cached is None:
        cached = parse_cache(data)
        _MEMO[digest] = cached
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    else:
        _MEMO.move_to_end(digest)
    return cached, digest


def _read_file(path: Path, out: Problems) -> bytes | None:
    """The cache's bytes (a regular file, at most the cap: a FIFO is refused at once)."""
    try:
        return read_regular_file(path, cap=MAX_CACHE_BYTES, what="cache file")
    except YamlFileError as exc:
        out.add("cache", f"{path}: {exc.problem}")
        return None


@dataclass(frozen=True)
class ReplayParts:
    """What :func:`check_replay` read: the source, the cache, its bytes, knobs and baseline."""

    source: ReplaySource
    cache: RecordedCache
    data: bytes
    knobs: dict[str, tuple[KnobValue, ...]]
    baseline: dict[str, KnobValue]


def _check_baseline(
    value: object, cache: RecordedCache, seed: int, out: Problems
) -> dict[str, KnobValue]:
    if value is None:  # a seeded draw among the configurations that ran
        working = cache.working()
        key = working[int(np.random.default_rng([seed, 0]).integers(len(working)))]
        return dict(zip(cache.keys, key))
    example = ", ".join(f"{k}: {v[0]!r}" for k, v in list(cache.values.items())[:2])
    if not isinstance(value, dict):
        out.add("baseline", f"must be a mapping of every knob to a value, e.g. {{{example}, ...}}")
        return {}
    missing = [k for k in cache.keys if k not in value]
    extra = [str(k) for k in value if k not in cache.keys]
    if missing or extra:
        out.add(
            "baseline",
            f"must give exactly the cache's knobs ({', '.join(cache.keys)}); "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"unknown {', '.join(extra)}" if extra else "",
                )
                if part
            ),
        )
        return {}
    baseline = {k: value[k] for k in cache.keys}
    record = cache.lookup(baseline)
    if record is None:
        out.add("baseline", f"{show(baseline)} is not recorded in the cache (outside the space)")
    elif record.status != "ok":
        out.add("baseline", f"{show(baseline)} did not run when recorded ({record.status})")
    return baseline


def check_replay(
    doc: Mapping[object, object], directory: Path, out: Problems
) -> ReplayParts | None:
    """Check the replay-specific fields of ``doc``; None when the entry cannot be used."""
    for key in doc:
        if key not in REPLAY_KEYS:
            out.add(
                str(key),
                f"unknown key for a replay entry; allowed keys: {', '.join(REPLAY_KEYS)}",
            )
    noise = doc.get("noise", "none")
    if noise not in NOISE_MODES:
        out.add("noise", f"must be one of {', '.join(NOISE_MODES)}, got {show(noise)}")
    seed = doc.get("seed", 0)
    if not is_int(seed) or seed < 0:
        out.add("seed", f"must be an integer >= 0, got {show(seed)}")
        seed = 0
    cache_field = doc.get("cache")
    if not isinstance(cache_field, str) or not cache_field.strip():
        out.add(
            "cache",
            "required: the path of a Kernel Tuner cache file (.json or .json.gz), relative "
            f"to the entry directory or absolute; got {show(cache_field)}",
        )
        return None
    path = (directory / cache_field).absolute()
    if not path.exists():
        out.add("cache", f"file not found: {path}; cache is relative to {directory}")
        return None
    data = _read_file(path, out)
    if data is None:
        return None
    try:
        cache, digest = read_cache(data)
    except CacheFormatError as exc:
        out.add("cache", f"{path} is not a Kernel Tuner cache file: {exc}")
        return None
    baseline = _check_baseline(doc.get("baseline"), cache, seed, out)
    source = ReplaySource(
        cache=path,
        sha256=digest,
        noise=str(noise),
        seed=seed,
        device=cache.device,
        kernel=cache.kernel,
    )
    return ReplayParts(
        source=source, cache=cache, data=data, knobs=dict(cache.values), baseline=baseline
    )
