"""Evaluating candidates in isolated worker subprocesses."""

from __future__ import annotations

from tuned.evaluation.client import EvaluationSettings, WorkerClient, worker_environment
from tuned.evaluation.static import static_check

__all__ = ["EvaluationSettings", "WorkerClient", "static_check", "worker_environment"]
