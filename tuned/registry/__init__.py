"""The kernel registry: one directory per kernel, validated into :class:`KernelSpec`.

Nothing from an entry is executed here: ``kernel.yaml`` is read with PyYAML's safe loader and
the module with :mod:`ast`. The format is the design's "Registry entry" section.

- :func:`load_entry` loads one entry or raises :class:`~tuned.errors.RegistryError` listing
  every :class:`Problem` (file, field, reason) of it.
- :func:`scan_registry` loads every entry of a registry directory; invalid entries are
  reported in the returned :class:`RegistryScan` and never stop the valid ones.
- :func:`format_problems` renders problems one per line, for ``ktuned registry check``.
"""

from __future__ import annotations

from tuned.registry.loader import RegistryScan, load_entry, scan_registry
from tuned.registry.problems import Problem, format_problems
from tuned.registry.spec import KernelSpec, Roofline, Shape, Tolerance

__all__ = [
    "KernelSpec",
    "Problem",
    "RegistryScan",
    "Roofline",
    "Shape",
    "Tolerance",
    "format_problems",
    "load_entry",
    "scan_registry",
]
