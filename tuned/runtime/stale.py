"""Stale bests: results that a change of driver, CUDA, Triton or PyTorch put in doubt.

A best (an accepted candidate of a kernel's current generation) measured under a fingerprint
of *this device* whose software differs from the current one is **stale** until the daemon
re-validates it: until the candidate has a successful evaluation under the current software,
or the kernel has an accepted best there. Results of *other devices* are not stale here; they
simply do not apply (``tuned.runtime.load`` falls back to the original for both). The
fingerprint comparison is :func:`~tuned.runtime.standalone.equivalent`.

Used by the metrics (``ktuned_stale_bests``), ``ktuned status`` and the daemon, which
re-validates stale bests before anything else (docs/runtime.md) through
:func:`tuned.search.revalidation.revalidate`.
"""

from __future__ import annotations

from collections.abc import Mapping

from tuned.runtime.standalone import equivalent, same_device
from tuned.store.api import Store

__all__ = ["classify_fingerprints", "stale_bests"]


def classify_fingerprints(
    known: Mapping[str, Mapping[str, str]], current: Mapping[str, str]
) -> tuple[set[str], set[str]]:
    """Fingerprint ids equivalent to ``current``, and those of the same device with other
    software (the ones whose bests can be stale)."""
    fresh = {fid for fid, fp in known.items() if equivalent(fp, current)}
    older = {fid for fid, fp in known.items() if same_device(fp, current)} - fresh
    return fresh, older


def stale_bests(store: Store, current: Mapping[str, str]) -> dict[str, list[str]]:
    """Per active kernel, the candidate ids of its stale bests (kernels without any absent).

    ``current``: the fingerprint now in use (the daemon's worker's).
    """
    fresh, older = classify_fingerprints(store.known_fingerprints(), current)
    return store.stale_bests(fresh, older)
