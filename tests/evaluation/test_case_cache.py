"""The worker's cache of inputs and reference outputs: reused, never poisoned, bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import ADD_SOURCE, WriteEntry, has_gpu
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.case_cache import CaseCache, _to_host
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

        # A candidate that reaches for the cache through the garbage collector: the cache is
        # the judge's, in another process (tuned/evaluation/judge.py), so it finds nothing,
        # passes (its own outputs are right), and the next evaluation finds the cache intact.
        poisoner = c.evaluate(spec, _candidate(spec, _POISONS_CACHE))
        assert poisoner.outcome is Outcome.OK, poisoner.reason
        again = c.evaluate(spec, honest)
        assert again.outcome is Outcome.OK, again.reason
        assert again.metadata["case_cache"]["tampered"] == 0
        assert again.metadata["case_cache"]["hits"] > stats["hits"]
        assert c.starts == starts  # all in the same worker process


def _visit(
    cache: CaseCache, cases: int, made: list[int], computed: list[int], kernel: str = "kernel-a"
) -> None:
    """One candidate's pass over a kernel's cases: every case's inputs, then its reference
    (the worker's order), keys as the worker builds them (the kernel first)."""
    for case in range(cases):
        key = (kernel, case)
        inputs = cache.inputs(key, _maker(made, 256))  # type: ignore[arg-type]

        def ref(x: torch.Tensor = inputs[0]) -> torch.Tensor:
            computed.append(1)
            return x * 2

        cache.reference(key, "reference", ref)


def test_a_cycle_of_cases_larger_than_the_budget_is_reused_across_candidates() -> None:
    # Four cases of 3 KiB each (2 KiB inputs, 1 KiB reference); room resident for two.
    # A least-recently-used cache of this size would miss on every access of every pass.
    per_case = 2 * 256 * 4 + 256 * 4
    cache, made, computed = CaseCache(2 * per_case, spill_bytes=1 << 20), [], []
    _visit(cache, 4, made, computed)
    assert (len(made), len(computed)) == (4, 4)
    assert cache.stats.misses == 8 and cache.stats.hits == 0
    for _ in range(3):  # three more candidates: nothing made or computed again
        _visit(cache, 4, made, computed)
    assert (len(made), len(computed)) == (4, 4)
    assert cache.stats.hits == 24 and cache.stats.misses == 8
    assert cache.stats.spill_hits == 12  # the two cases that did not fit resident
    assert cache.stats.evictions == 0
    assert cache.held_bytes <= 2 * per_case


def test_a_budget_smaller_than_one_case_spills_instead_of_rebuilding() -> None:
    cache, made, computed = CaseCache(16, spill_bytes=1 << 20), [], []
    for _ in range(3):
        _visit(cache, 2, made, computed)
    assert cache.held_bytes == 0
    assert (len(made), len(computed)) == (2, 2)
    assert cache.stats.hits == cache.stats.spill_hits == 8
    # Without room anywhere, every pass makes its cases again (and nothing else is evicted).
    none, made2, computed2 = CaseCache(16, spill_bytes=16), [], []
    for _ in range(2):
        _visit(none, 2, made2, computed2)
    assert (len(made2), none.stats.hits, none.stats.evictions) == (4, 0, 0)


def test_room_is_made_from_a_kernel_no_longer_served_not_from_the_current_one() -> None:
    per_case = 2 * 256 * 4 + 256 * 4
    cache, made, computed = CaseCache(2 * per_case, spill_bytes=0), [], []
    for case in range(2):  # an earlier kernel fills the resident tier
        cache.inputs(("kernel-old", case), _maker(made, 256))  # type: ignore[arg-type]
    _visit(cache, 2, made, computed)
    assert cache.stats.evictions == 2  # the old kernel's entries went, not kernel-a's
    _visit(cache, 2, made, computed)
    assert cache.stats.hits == 4 and len(made) == 4


def test_a_kernel_prepared_ahead_takes_only_the_room_the_tuned_one_leaves() -> None:
    """A spare preparing the registry's next kernel (a guest) evicts nothing of the kernel
    being tuned: on the H100 the next kernel's cases evicted the current one's, and each of
    its re-measurements in that spare made 52 to 81 cases again (10 to 33 s)."""
    per_case = 2 * 256 * 4 + 256 * 4
    cache, made, computed = CaseCache(3 * per_case, spill_bytes=0), [], []
    for case in range(2):  # the kernel being tuned
        cache.inputs(("kernel-tuned", case), _maker(made, 256))  # type: ignore[arg-type]
    cache.guest = True
    _visit(cache, 2, made, computed)  # the next kernel ("kernel-a"), ahead
    assert cache.stats.evictions == 0
    assert cache.held_bytes <= 3 * per_case
    cache.guest = False
    before = len(made)
    for case in range(2):  # a re-measurement of the tuned kernel: nothing made again
        cache.inputs(("kernel-tuned", case), _maker(made, 256))  # type: ignore[arg-type]
    assert len(made) == before
    # Once the next kernel is the one served (not a guest), it makes its room as usual.
    _visit(cache, 2, made, computed)
    assert cache.stats.evictions > 0


def test_a_worker_and_its_spares_each_keep_only_their_share_of_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five caches on one 80 GiB GPU (a worker and four spares) that each took the free
    memory less the margin left 366 MiB on an H100, and the next candidate ran out of memory:
    each now admits at most its share of the device less the margin."""
    gib = 1 << 30
    free = {"now": 70 * gib}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free["now"], 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    alone, shared = CaseCache(share=1.0), CaseCache(share=0.2)
    margin = 16 * gib  # 20 % of 80 GiB
    assert alone._device_room("cuda:0") == 70 * gib - margin
    assert shared._device_room("cuda:0") == int(0.2 * (80 * gib - margin))  # 12.8 GiB
    shared.stats.resident_bytes = 12 * gib  # what it holds already counts against its share
    assert shared._device_room("cuda:0") == int(0.2 * (80 * gib - margin)) - 12 * gib
    shared.stats.resident_bytes = 0
    free["now"] = 20 * gib  # others took the device: the free memory still bounds it
    assert shared._device_room("cuda:0") == 4 * gib
    shared.resize(0, share=0.5)
    assert shared.share == 0.5


def test_release_device_drops_what_is_resident_and_keeps_what_is_spilled() -> None:
    per_case = 2 * 256 * 4 + 256 * 4
    cache, made, computed = CaseCache(per_case, spill_bytes=1 << 20), [], []
    _visit(cache, 2, made, computed)  # one case resident, one spilled
    assert cache.held_bytes == per_case and cache.stats.spill_bytes == per_case
    assert cache.release_device() == per_case
    assert cache.held_bytes == 0 and cache.stats.spill_bytes == per_case
    _visit(cache, 2, made, computed)
    assert len(made) == 3  # only the released case was made again


def test_out_of_gpu_memory_is_retried_once_after_the_cache_gives_its_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an H100 the example layer_norm's original ran out of memory while the worker's and
    its spares' caches held the device; its kernel was then never tuned. The worker now frees
    its resident cases and evaluates once more; a second failure stands."""
    from tuned.evaluation.worker import retry_out_of_memory

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    advice = "advice " * 60
    oom = {
        "outcome": "runtime_error",
        "reason": "case 3: correctness: OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "1.96 GiB. GPU 0 has a total capacity of 139.80 GiB of which 1.02 GiB is free. Process "
        "3311 has 20.25 GiB memory in use. Including non-PyTorch memory, this process has 30.00 "
        "GiB memory in use. Of the allocated memory 25.10 GiB is allocated by PyTorch, and "
        + advice,
    }
    ok = {"outcome": "ok", "time_s": 1e-4, "metadata": {}}
    calls: list[int] = []

    def again(result: dict[str, object]) -> object:
        def run() -> tuple[dict[str, object], bool]:
            calls.append(1)
            # The retry keeps its cases in host memory: none lands in the device tier.
            _visit(cache, 3, made, computed)
            assert cache.resident is False and cache.held_bytes == 0
            return dict(result), False

        return run

    cache, made, computed = CaseCache(1 << 20, spill_bytes=1 << 20), [], []
    _visit(cache, 2, made, computed)
    assert cache.held_bytes > 0
    result, fatal = retry_out_of_memory((dict(oom), False), again(ok), "cuda", cache)  # type: ignore[arg-type]
    assert result["outcome"] == "ok" and not fatal and len(calls) == 1
    note = result["metadata"]["retried"]  # type: ignore[index]
    assert "out of GPU memory on the first try" in note
    # The note keeps who held the device (the H200's question), not the message's advice.
    for figure in ("1.96 GiB", "1.02 GiB is free", "Process 3311 has 20.25 GiB", "30.00 GiB"):
        assert figure in note
    assert "advice" not in note
    assert cache.held_bytes == 0 and cache.stats.spill_bytes > 0
    assert cache.resident is True  # other kernels' cases go on the device again
    # This kernel's cases stay in host memory: on the H100, Liger's cross entropy forward and
    # backward otherwise ran out of memory on every candidate's first try.
    _visit(cache, 3, made, computed)
    assert cache.held_bytes == 0
    _visit(cache, 1, made, computed, kernel="kernel-b")
    assert cache.held_bytes > 0
    # Twice out of memory: the second result stands (one retry, never a loop).
    result, _ = retry_out_of_memory((dict(oom), False), again(oom), "cuda", cache)  # type: ignore[arg-type]
    assert result["outcome"] == "runtime_error" and len(calls) == 2
    # Not on the interpreter, not for another error, not after a fatal one.
    other = {"outcome": "runtime_error", "reason": "IndexError"}
    for first, device in (((oom, False), "cpu"), ((other, False), "cuda"), ((oom, True), "cuda")):
        assert retry_out_of_memory(first, again(ok), device, cache) == first  # type: ignore[arg-type]
    assert len(calls) == 2


def test_a_kernel_kept_on_host_gets_a_spill_tier_that_holds_its_cases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the H200 Liger's cross entropy forward and backward, kept in host memory after an
    out-of-memory retry, had 8.4 of its 23 GB of cases spilled (a sixteenth of the host) and
    made about 50 again for every candidate. Its spill tier now grows to a quarter of the
    host; it never shrinks (another kernel's cases stay)."""
    from tuned.evaluation import case_cache

    per_case = 2 * 256 * 4 + 256 * 4
    monkeypatch.setattr(case_cache, "_host_bytes", lambda: 16 * per_case)
    cache, made, computed = CaseCache(0, spill_bytes=per_case), [], []
    cache.resident = False  # the retry: nothing on the device
    _visit(cache, 3, made, computed)
    _visit(cache, 3, made, computed)
    assert len(made) == 3 + 2  # one case spilled, two made again
    cache.keep_on_host()
    assert cache.spill_bytes == 4 * per_case
    _visit(cache, 3, made, computed)
    _visit(cache, 3, made, computed)
    assert len(made) == 5 + 2  # two more kept on the first visit, none made on the second
    monkeypatch.setattr(case_cache, "_host_bytes", lambda: per_case)
    cache.keep_on_host()
    assert cache.spill_bytes == 4 * per_case


def test_spilled_cases_come_back_resident_once_there_is_room() -> None:
    """A spare prepares with a small share (its cases partly spilled), then takes over with the
    running worker's: its cases move back to the resident tier on their first use."""
    per_case = 2 * 256 * 4 + 256 * 4
    cache, made, computed = CaseCache(per_case, spill_bytes=1 << 20), [], []
    _visit(cache, 2, made, computed)
    assert cache.held_bytes == per_case and cache.stats.spill_bytes == per_case
    cache.resize(2 * per_case)  # the share of the running worker
    _visit(cache, 2, made, computed)
    assert cache.stats.promoted == 2  # the second case's inputs and reference
    assert cache.held_bytes == 2 * per_case and cache.stats.spill_bytes == 0
    _visit(cache, 2, made, computed)
    assert cache.stats.spill_hits == 2  # only the pass before the promotion
    assert (len(made), len(computed)) == (2, 2)  # nothing made again


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")
def test_a_spilled_gpu_case_lands_in_pinned_memory_as_it_was() -> None:
    """The spill tier of a GPU's cases: one copy straight into pinned host memory (so copying
    it back runs at the bus's rate), strides and values as they were, strided tensors too."""
    x = torch.randn(64, 33, device="cuda")
    strided = torch.randn(33, 64, device="cuda").t()  # not contiguous
    spilled = _to_host([x, strided, 3], pin=True)
    assert spilled[2] == 3
    for host, dev in zip(spilled[:2], (x, strided)):
        assert host.device.type == "cpu" and host.is_pinned()
        assert torch.equal(host, dev.cpu())
    assert spilled[0].stride() == x.stride()
    cache, calls = CaseCache(16, spill_bytes=1 << 20), []  # no room resident: spilled

    def make() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return x, torch.ones(3, device="cuda")

    for _ in range(2):
        got = cache.inputs(("k", 1), make)
        assert got[0].is_cuda and torch.equal(got[0], x)
    assert len(calls) == 1 and cache.stats.spill_hits == 1
