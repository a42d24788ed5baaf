"""ktuned: keeps the Triton kernels of a registry as fast as the hardware allows."""

from __future__ import annotations

__version__ = "0.1.0"
