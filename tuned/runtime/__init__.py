"""Running the daemon's results: ``load`` a kernel's best variants, ``export`` them.

``tuned.runtime.load(name)`` returns a callable with the launcher's signature that runs the
best validated variant for this GPU model and software, per timed shape, and falls back to the
original (one log line) when there is none, it is stale or a source fails its hash check.
``ktuned export`` writes the same thing as a directory that runs without ktuned. See
docs/runtime.md.
"""

from __future__ import annotations

from tuned.runtime.loader import NoGpuDriverError, RuntimeLoadError, current_fingerprint, load
from tuned.runtime.shapes import ShapeSettings
from tuned.runtime.standalone import Bucket, TamperedSourceError, TunedKernel, Variant

__all__ = [
    "Bucket",
    "NoGpuDriverError",
    "RuntimeLoadError",
    "ShapeSettings",
    "TamperedSourceError",
    "TunedKernel",
    "Variant",
    "current_fingerprint",
    "load",
]
