"""``ktuned report``: PNG plots and a one-page HTML summary, for people without Grafana."""

from __future__ import annotations

from tuned.reporting.page import write_report

__all__ = ["write_report"]
