"""The daemon's log as an operator reads it: in the journal, or anywhere else.

:func:`configure_logging`: under systemd (``$JOURNAL_STREAM`` names stderr) each line starts
with its syslog priority (``<6>``), which journald turns into the entry's level and which
adds its own timestamp; elsewhere each line has an ISO 8601 UTC timestamp and the level.

:class:`BestJournal`: one line per accepted best, structured as ``key=value`` pairs so that
``journalctl -u ktuned | grep event=best`` (or a log shipper) reads them::

    event=best kernel=softmax speedup=2.02 best_s=1.2e-05 baseline_s=2.4e-05
    vs_previous=1.48 interval=1.41..1.55 candidate=3f2a... provenance=parametric
    knobs={"BLOCK":128,"num_warps":4}

``speedup`` is the new incumbent's against the original (as ``ktuned status`` shows it);
``vs_previous`` and ``interval`` are the acceptance rule's bootstrap estimate and
interval of the gain over the previous best (the confirming re-measurement's when there was
one, docs/decisions.md).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

from tuned.store.api import Store

__all__ = ["BestJournal", "configure_logging", "under_journald"]

log = logging.getLogger("tuned.daemon.best")

#: syslog priorities of Python's levels (sd-daemon(3)'s <N> prefixes).
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def under_journald(stream: TextIO = sys.stderr) -> bool:
    """Whether ``stream`` is connected to the journal (``$JOURNAL_STREAM`` is its dev:inode)."""
    value = os.environ.get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(part) for part in value.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


class _JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = _PRIORITY.get(record.levelno, 6)
        text = super().format(record)
        return "\n".join(f"<{level}>{line}" for line in text.splitlines())


class _UtcFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def configure_logging(level: int, stream: TextIO = sys.stderr) -> None:
    """Replace the root logger's handlers with one for ``stream`` (see the module docstring)."""
    handler = logging.StreamHandler(stream)
    if under_journald(stream):
        handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(_UtcFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


class BestJournal:
    """Logs each new accepted best of a kernel once (see the module docstring).

    Call :meth:`before` ahead of a kernel's step (the first call only notes what is already
    in the store, so a restart repeats nothing) and :meth:`after` once it returned."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: dict[str, int] = {}

    def before(self, kernel: str) -> None:
        if kernel not in self._seen:
            self._seen[kernel] = len(self.store.acceptances(kernel))

    def after(self, kernel: str) -> list[str]:
        """Log (and return) a line per acceptance recorded since the last call."""
        decisions = self.store.acceptances(kernel)
        new = decisions[self._seen.get(kernel, len(decisions)) :]
        self._seen[kernel] = len(decisions)
        lines = [self._line(kernel, d) for d in new if d["status"] == "accepted"]
        for line in lines:
            log.info("%s", line)
        return lines

    def _line(self, kernel: str, decision: dict[str, Any]) -> str:
        interval = decision.get("second") or decision.get("first") or {}
        fields: dict[str, object] = {"event": "best", "kernel": kernel}
        progress = self.store.kernel_progress([kernel])
        p = progress[0] if progress else None
        if p is not None and p.speedup is not None:
            fields["speedup"] = f"{p.speedup:.3g}"
            fields["best_s"] = f"{p.best_s:.3g}"
            fields["baseline_s"] = f"{p.baseline_s:.3g}"
        if "speedup" in interval:
            fields["vs_previous"] = f"{float(interval['speedup']):.3g}"
        if "low" in interval and "high" in interval:
            fields["interval"] = f"{float(interval['low']):.3g}..{float(interval['high']):.3g}"
        candidate = self.store.candidate(str(decision["candidate_id"]), decision["generation"])
        fields["candidate"] = str(decision["candidate_id"])[:12]
        if candidate is not None:
            fields["provenance"] = candidate.provenance.value
            fields["knobs"] = json.dumps(
                dict(candidate.knobs), sort_keys=True, separators=(",", ":")
            )
        return " ".join(f"{k}={v}" for k, v in fields.items())
