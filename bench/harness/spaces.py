"""Recorded spaces (Kernel Tuner caches) for the replay benchmarks: where they are, reading
them (through :mod:`tuned.registry.replay`, the one reader) and replay entries over them."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness.state import ROOT
from tuned.registry import KernelSpec, load_entry
from tuned.registry.replay import RecordedCache, read_cache

#: The shared recorded spaces next to the checkout (not in the repository).
BENCHDATA = ROOT.parent / "shared" / "benchdata"
#: The H100 sweeps of the example matmul that the repository carries.
MATMUL_H100 = ROOT / "bench" / "data" / "matmul_H100.json.gz"
MATMUL4096_H100 = ROOT / "bench" / "data" / "matmul4096_H100.json.gz"
#: The small real space the tests use (a convolution on an A6000): what smoke runs replay.
SMOKE_SPACE = ROOT / "tests" / "fixtures" / "convolution_A6000_small.json.gz"
BUNDLED_SPACES = [BENCHDATA, ROOT / "bench" / "data"]


def read_space(path: Path) -> RecordedCache:
    """The parsed cache at ``path`` (gzip or plain JSON)."""
    cache, _ = read_cache(path.read_bytes())
    return cache


def optimum_s(path: Path) -> float:
    """The space's best recorded median time, in seconds."""
    medians = [r.median_ms for r in read_space(path).records.values()]
    return min(m for m in medians if m is not None) / 1e3


def recorded_runs(path: Path, *, at_least: int = 1) -> list[list[float]]:
    """The recorded runs (seconds) of every configuration that ran at least ``at_least``
    times, in the cache's order."""
    return [
        [t / 1e3 for t in r.times_ms]
        for r in read_space(path).records.values()
        if r.status == "ok" and len(r.times_ms) >= at_least
    ]


def replay_caches(parser: argparse.ArgumentParser, spaces: list[Path]) -> list[Path]:
    """The Kernel Tuner caches named by ``spaces`` (files, or directories of them), sorted;
    a parser error when one does not exist or there are none."""
    missing = [str(s) for s in spaces if not s.exists()]
    if missing:
        parser.error(f"not found: {', '.join(missing)}")
    caches = sorted(p for s in spaces for p in (sorted(s.glob("*.json*")) if s.is_dir() else [s]))
    if not caches:
        parser.error(f"no Kernel Tuner caches (*.json, *.json.gz) in {spaces}")
    return caches


def write_replay_entry(
    root: Path,
    cache: Path,
    seed: int,
    *,
    name: str | None = None,
    noise: str = "none",
    baseline: dict[str, object] | None = None,
) -> KernelSpec:
    """A replay entry of ``cache`` (``kind: replay``) written under ``root`` and loaded;
    ``baseline``: its knobs, default a seeded draw (tuned.registry.replay)."""
    entry = root / (name or cache.name.split(".")[0].replace("_", "-").lower())
    entry.mkdir(parents=True, exist_ok=True)
    text = (
        f"name: {entry.name}\nkind: replay\ncache: {cache.resolve()}\nnoise: {noise}\n"
        f"seed: {seed}\n"
    )
    if baseline:
        text += "baseline: {" + ", ".join(f"{k}: {v}" for k, v in baseline.items()) + "}\n"
    (entry / "kernel.yaml").write_text(text)
    return load_entry(entry)
