"""Watching the registry by polling: works on NFS, where inotify sees nothing.

Each :meth:`RegistryWatcher.poll` lists the entry directories and takes a cheap signature of
each (relative path, size and mtime of every file). An entry is acted on only when its
signature is the same in two consecutive polls, so a writer that is still writing (or a
rename dance of an atomic replace) is never read half-way; it is then loaded and the
signature taken again, and a load that raced a write is thrown away until the next poll. The
generation is the hash of the content (see :mod:`tuned.registry.loader`), so a touched but
unchanged entry starts nothing. A directory missing in two consecutive polls is removed. An
unreadable registry root changes nothing: a lost NFS mount never retires the whole registry.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from tuned.registry import KernelSpec, Problem
from tuned.registry.loader import KERNEL_YAML, load_registry_entry

__all__ = ["RegistryChanges", "RegistryWatcher"]

log = logging.getLogger(__name__)

Signature = tuple[tuple[str, int, int], ...]


@dataclass
class RegistryChanges:
    """What one poll found. ``removed`` and ``retired`` hold kernel names."""

    added: list[KernelSpec] = field(default_factory=list)
    changed: list[KernelSpec] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: dict[str, list[Problem]] = field(default_factory=dict)
    removed_invalid: list[str] = field(default_factory=list)
    invalidated: list[str] = field(default_factory=list)  # kernels whose entry broke
    pending: int = 0  # entries seen changing, acted on once they hold still

    def __bool__(self) -> bool:
        return bool(
            self.added or self.changed or self.removed or self.invalid or self.removed_invalid
        )

    def describe(self) -> str:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (
                ("new", [s.name for s in self.added]),
                ("changed", [s.name for s in self.changed]),
                ("removed", self.removed),
                ("invalid", [Path(d).name for d in self.invalid]),
            )
            if names
        ]
        return "; ".join(parts) or "no change"


@dataclass
class _Loaded:
    signature: Signature
    spec: KernelSpec | None
    problems: list[Problem]


class RegistryWatcher:
    """Polls ``root`` (a registry directory, or one entry) and reports stable changes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._seen: dict[str, Signature] = {}  # the previous poll's signatures
        self._missing: set[str] = set()  # directories missing in the previous poll
        self._loaded: dict[str, _Loaded] = {}  # acted-on state per directory
        self.root_problem: str | None = None

    @property
    def specs(self) -> dict[str, KernelSpec]:
        """The valid entries as last acted on, by kernel name."""
        return {x.spec.name: x.spec for x in self._loaded.values() if x.spec is not None}

    def poll(self) -> RegistryChanges:
        changes = RegistryChanges()
        directories = self._directories()
        if directories is None:
            return changes
        now = {d: sig for d in directories if (sig := _signature(Path(d))) is not None}
        for directory, sig in now.items():
            self._missing.discard(directory)
            stable = self._seen.get(directory) == sig
            loaded = self._loaded.get(directory)
            if loaded is not None and loaded.signature == sig:
                continue
            if not stable:
                changes.pending += 1
                continue
            self._load(directory, sig, changes)
        for directory in set(self._loaded) - set(now):
            if directory in self._missing:  # gone in two consecutive polls
                gone = self._loaded.pop(directory)
                if gone.spec is not None:
                    changes.removed.append(gone.spec.name)
                else:
                    changes.removed_invalid.append(directory)
                self._missing.discard(directory)
            else:
                self._missing.add(directory)
                changes.pending += 1
        self._seen = now
        return changes

    def _load(self, directory: str, sig: Signature, changes: RegistryChanges) -> None:
        # as `ktuned registry check` loads it: an entry directory that is a symlink out of
        # the registry is refused, not tuned
        spec, problems = load_registry_entry(self.root, directory)
        if _signature(Path(directory)) != sig:  # written to while we read: next poll
            changes.pending += 1
            return
        if spec is not None:
            owner = next(
                (d for d, x in self._loaded.items() if x.spec and x.spec.name == spec.name),
                None,
            )
            if owner is not None and owner != directory:
                problems = [
                    Problem(
                        file=Path(directory) / KERNEL_YAML,
                        field="name",
                        reason=f"name '{spec.name}' already used by {owner}; names identify "
                        "kernels, give each entry its own",
                    )
                ]
                spec = None
        previous = self._loaded.get(directory)
        self._loaded[directory] = _Loaded(signature=sig, spec=spec, problems=problems)
        if spec is None:
            changes.invalid[directory] = problems
            if previous is not None and previous.spec is not None:
                changes.invalidated.append(previous.spec.name)
            return
        if previous is None or previous.spec is None:
            changes.added.append(spec)
        elif previous.spec.name != spec.name:
            changes.removed.append(previous.spec.name)
            changes.added.append(spec)
        elif previous.spec.generation != spec.generation:
            changes.changed.append(spec)

    def _directories(self) -> list[str] | None:
        root = self.root
        try:
            if (root / KERNEL_YAML).exists():
                found = [str(root)]
            else:
                found = [
                    str(d)
                    for d in sorted(root.iterdir(), key=lambda p: p.name)
                    if not d.name.startswith(".") and d.is_dir() and (d / KERNEL_YAML).exists()
                ]
        except OSError as exc:
            problem = f"cannot list the registry {root}: {exc.strerror or exc}"
            if problem != self.root_problem:
                log.error("%s; keeping every kernel as it is until it can be read", problem)
            self.root_problem = problem
            return None
        if self.root_problem is not None:
            log.info("the registry %s can be read again", root)
        self.root_problem = None
        return found


def _signature(directory: Path) -> Signature | None:
    """(relative path, size, mtime_ns) of every non-hidden file of an entry; None when the
    entry has no ``kernel.yaml`` (it is gone).

    A file that cannot be followed (a dangling symlink) counts by its link, so the entry is
    still loaded and reported invalid naming that file, as ``ktuned registry check`` does,
    never taken for a removed entry (which would retire its kernel)."""
    out: list[tuple[str, int, int]] = []
    for top, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(top) / name
            try:
                st = path.stat()
            except OSError:
                try:
                    st = path.lstat()
                except OSError:
                    continue  # gone while listed: the next poll's signature differs
            out.append((path.relative_to(directory).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(out) if any(rel == KERNEL_YAML for rel, _, _ in out) else None
