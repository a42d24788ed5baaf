"""The worker's cache of inputs and reference outputs: reused, never poisoned, bounded."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.conftest import ADD_SOURCE, WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.case_cache import CaseCache
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry
from tuned.registry.spec import KernelSpec

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"


def _maker(calls: list[int], n: int = 4) -> object:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return torch.arange(n, dtype=torch.float32), torch.ones(n)

    return make


def test_inputs_are_made_once_and_handed_out_as_fresh_copies() -> None:
    cache, calls = CaseCache(1 << 20), []
    first = cache.inputs("k", _maker(calls))  # type: ignore[arg-type]
    first[0].zero_()  # a candidate writing into its inputs
    second = cache.inputs("k", _maker(calls))  # type: ignore[arg-type]
    assert len(calls) == 1
    assert torch.equal(second[0], torch.arange(4, dtype=torch.float32))
    assert second[0].data_ptr() != first[0].data_ptr()
    assert (cache.stats.hits, cache.stats.misses, cache.stats.tampered) == (1, 1, 0)


def test_a_tampered_cached_input_is_detected_dropped_and_rebuilt() -> None:
    cache, calls = CaseCache(1 << 20), []
    cache.inputs("k", _maker(calls))  # type: ignore[arg-type]
    cache.reference("k", "ref", lambda: torch.full((4,), 7.0))
    stored = next(e for key, e in cache._entries.items() if key[0] == "inputs")
    stored.value[1][2] = 99.0  # something in the process reached the cached tensor
    again = cache.inputs("k", _maker(calls))  # type: ignore[arg-type]
    assert cache.stats.tampered == 1 and len(calls) == 2
    assert torch.equal(again[1], torch.ones(4))
    # The reference computed from the tampered inputs went with them.
    assert torch.equal(cache.reference("k", "ref", lambda: torch.zeros(4)), torch.zeros(4))


def test_memory_stays_under_the_cap_least_recently_used_first() -> None:
    per_entry = 2 * 256 * 4  # two float32 tensors of 256 elements
    cache, calls = CaseCache(2 * per_entry + 100), []
    for key in ("a", "b", "a", "c"):  # "a" used again: "b" is the oldest when "c" arrives
        cache.inputs(key, _maker(calls, 256))  # type: ignore[arg-type]
    assert cache.held_bytes <= cache.capacity_bytes
    assert cache.stats.evictions == 1
    cache.inputs("a", _maker(calls, 256))  # type: ignore[arg-type]
    assert len(calls) == 3  # a, b, c made; a still there
    cache.inputs("b", _maker(calls, 256))  # type: ignore[arg-type]
    assert len(calls) == 4
    # Larger than the whole cap: handed out, not kept.
    tiny = CaseCache(16)
    tiny.inputs("x", _maker(calls, 256))  # type: ignore[arg-type]
    assert tiny.held_bytes == 0


def test_a_reference_is_kept_only_with_its_inputs() -> None:
    cache, calls = CaseCache(1 << 20), []
    computed: list[int] = []

    def ref() -> torch.Tensor:
        computed.append(1)
        return torch.zeros(4)

    cache.reference("k", "ref", ref)  # no inputs cached under "k": not kept
    cache.reference("k", "ref", ref)
    assert len(computed) == 2
    cache.inputs("k", _maker(calls))  # type: ignore[arg-type]
    cache.reference("k", "ref", ref)
    cache.reference("k", "ref", ref)
    assert len(computed) == 3


# Corrupts every tensor the worker's cache holds, then computes honestly.
_POISONS_CACHE = ADD_SOURCE.replace(
    "def add(x, y, BLOCK=256, num_warps=4):\n",
    "def add(x, y, BLOCK=256, num_warps=4):\n"
    "    import gc\n"
    "    for obj in gc.get_objects():\n"
    "        if type(obj).__name__ == 'CaseCache':\n"
    "            for entry in obj._entries.values():\n"
    "                for t in entry.value if isinstance(entry.value, list) else ():\n"
    "                    if isinstance(t, torch.Tensor):\n"
    "                        t.fill_(3.0)\n",
)


def _candidate(spec: KernelSpec, source: str) -> Candidate:
    return Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=source,
        knobs={},
        provenance=Provenance.PARAMETRIC,  # runtime defenses (not the LLM gate)
        strategy="test",
    )


def test_a_mutating_candidate_does_not_affect_the_next_evaluation_in_the_same_worker(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    spec = load_entry(write_entry())
    honest = _candidate(spec, spec.module_source)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        first = c.evaluate(spec, honest)
        assert first.outcome is Outcome.OK, first.reason
        assert first.metadata["case_cache"]["misses"] > 0
        starts = c.starts

        mutating = c.evaluate(
            spec, _candidate(spec, (ADVERSARIAL / "mutates_inputs.py").read_text())
        )
        assert mutating.outcome is Outcome.CHEAT and "modified its input" in mutating.reason
        after = c.evaluate(spec, honest)
        assert after.outcome is Outcome.OK, after.reason
        stats = after.metadata["case_cache"]
        assert stats["hits"] > first.metadata["case_cache"]["hits"] and stats["tampered"] == 0

        # A candidate that reaches into the cache itself: it passes (its own outputs are
        # right), and the next evaluation sees the corruption, rebuilds, and still passes.
        poisoner = c.evaluate(spec, _candidate(spec, _POISONS_CACHE))
        assert poisoner.outcome in (Outcome.OK, Outcome.INCORRECT, Outcome.CHEAT)
        again = c.evaluate(spec, honest)
        assert again.outcome is Outcome.OK, again.reason
        assert again.metadata["case_cache"]["tampered"] > 0
        assert c.starts == starts  # all in the same worker process
