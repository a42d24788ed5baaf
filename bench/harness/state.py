"""Where a benchmark keeps its state: the checkout's root, scratch space and state
directories that are removed afterwards unless the user named one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The checkout's root (``bench/..``).
ROOT = Path(__file__).resolve().parents[2]


def scratch_base() -> Path | None:
    """``/dev/shm`` where it exists (SQLite stores of replays are fsync-bound on disk), else
    None (the system's temporary directory)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


@contextmanager
def state_dir(
    given: Path | None, *, prefix: str, shm: bool = False, keep: bool = False
) -> Iterator[Path]:
    """``given`` (made if missing, kept), or a fresh temporary directory named ``prefix*``
    (on :func:`scratch_base` with ``shm``) that is removed when the block ends, unless
    ``keep`` (then its path is printed so that it can be inspected)."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    made = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_base() if shm else None))
    try:
        yield made
    finally:
        if keep:
            print(f"kept {made}")
        else:
            shutil.rmtree(made, ignore_errors=True)
