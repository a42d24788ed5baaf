"""Fixtures of the LLM tests: the daemon fixture of tests/daemon, for the end-to-end run."""

from __future__ import annotations

from tests.daemon.conftest import start_daemon

__all__ = ["start_daemon"]
