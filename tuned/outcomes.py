"""Candidates and the typed result of evaluating one.

Every evaluation ends in exactly one :class:`Outcome`; a failure is a recorded value with its
reason and the phase it happened in, never a silent ``None``.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuned.registry.spec import KnobValue

__all__ = ["Candidate", "EvalResult", "Outcome", "Provenance", "candidate_id", "canonical_knobs"]


class Outcome(str, enum.Enum):
    """How an evaluation ended (design: "Candidates and outcomes")."""

    OK = "ok"
    REJECTED_STATIC = "rejected_static"  # refused before running: syntax, missing launcher, ...
    COMPILE_ERROR = "compile_error"  # Triton compilation failed (incl. out of resources)
    RUNTIME_ERROR = "runtime_error"  # an exception while running the candidate
    TIMEOUT = "timeout"  # a phase deadline passed; the worker's process group was killed
    CRASH = "crash"  # the worker died (signal, abort, CUDA fault)
    INCORRECT = "incorrect"  # outputs differ from the reference beyond tolerance
    NAN = "nan"  # NaN or inf in an output where the reference has none
    CHEAT = "cheat"  # the candidate broke an integrity check (e.g. it modified its inputs)
    GPU_BUSY = "gpu_busy"  # not measured: foreign work was using the GPU

    @property
    def failed(self) -> bool:
        return self is not Outcome.OK


class Provenance(str, enum.Enum):
    ORIGINAL = "original"
    PARAMETRIC = "parametric"
    LLM = "llm"


def canonical_knobs(knobs: Mapping[str, KnobValue]) -> str:
    """Knob values as canonical JSON (sorted keys): the form that is hashed and stored."""
    return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def candidate_id(source: str, knobs: Mapping[str, KnobValue]) -> str:
    """Hash of (source text, knob values): equal candidates get equal ids, across runs."""
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(b"\0")
    h.update(canonical_knobs(knobs).encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class Candidate:
    """A (source, knobs) pair to evaluate, and where it came from."""

    kernel: str
    generation: str
    source: str
    knobs: Mapping[str, KnobValue]
    provenance: Provenance
    strategy: str | None = None
    parent_id: str | None = None

    @property
    def id(self) -> str:
        return candidate_id(self.source, self.knobs)


@dataclass(frozen=True)
class EvalResult:
    """The result of one evaluation.

    ``time_s`` is the objective: the geometric mean over the timed cases of each case's median
    time, in seconds; set only when ``outcome`` is OK. ``timings`` maps a case label
    ("M=4096xN=4096/float16") to its median seconds. ``timing_kind`` says what the numbers are:
    ``"gpu"`` (CUDA events, L2 flushed) or ``"interpreter"`` (wall clock in Triton's CPU
    interpreter: for relative comparison on this machine only, never a GPU result).
    """

    outcome: Outcome
    reason: str = ""
    phase: str = ""
    time_s: float | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    timing_kind: str = ""
    phase_seconds: Mapping[str, float] = field(default_factory=dict)
    checked_cases: int = 0
    skipped_cases: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "reason": self.reason,
            "phase": self.phase,
            "time_s": self.time_s,
            "timings": dict(self.timings),
            "timing_kind": self.timing_kind,
            "phase_seconds": dict(self.phase_seconds),
            "checked_cases": self.checked_cases,
            "skipped_cases": list(self.skipped_cases),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalResult:
        return cls(
            outcome=Outcome(d["outcome"]),
            reason=str(d.get("reason", "")),
            phase=str(d.get("phase", "")),
            time_s=None if d.get("time_s") is None else float(d["time_s"]),
            timings={str(k): float(v) for k, v in dict(d.get("timings", {})).items()},
            timing_kind=str(d.get("timing_kind", "")),
            phase_seconds={str(k): float(v) for k, v in dict(d.get("phase_seconds", {})).items()},
            checked_cases=int(d.get("checked_cases", 0)),
            skipped_cases=tuple(str(s) for s in d.get("skipped_cases", ())),
            metadata=dict(d.get("metadata", {})),
        )
