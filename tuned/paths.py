"""Where ktuned keeps its state by default: one home for the path defaults every layer reads
(the CLI, the daemon's config, the runtime's ``load``). Imports nothing of ktuned."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["STORE_FILE", "default_state_dir", "resolve_store_path"]

#: The SQLite store's file name inside a state directory.
STORE_FILE = "ktuned.sqlite"


def default_state_dir() -> Path:
    """``$KTUNED_STATE_DIR``, else ``$XDG_STATE_HOME/ktuned``, else ``~/.local/state/ktuned``."""
    if os.environ.get("KTUNED_STATE_DIR"):
        return Path(os.environ["KTUNED_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ktuned"


def resolve_store_path(store: str | os.PathLike[str] | None) -> Path:
    """A state directory (its ``ktuned.sqlite``) or a database file; ``None``: the default
    state directory (``$KTUNED_STATE_DIR``, else ``$XDG_STATE_HOME/ktuned``, else
    ``~/.local/state/ktuned``), as every ktuned command uses."""
    path = Path(store) if store is not None else default_state_dir()
    return path / STORE_FILE if path.is_dir() or path.suffix != ".sqlite" else path
