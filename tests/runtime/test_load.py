"""``tuned.runtime.load`` on real stores and the real example kernels (Triton's interpreter on
a CPU machine): with and without results, stale, tampered, from many threads."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest
import torch

from tests.runtime.rows import Rows, example
from tuned.runtime import RuntimeLoadError, TunedKernel, current_fingerprint, load
from tuned.runtime.standalone import fingerprint as standalone_fingerprint
from tuned.runtime.standalone import runtime_device
from tuned.store.sqlite import SqliteStore

DEVICE = "cuda" if runtime_device() == "cuda" else "cpu"
LABELS = ["N=4096/float32"]


def _inputs(n: int = 3000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def _runtime_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tuned.runtime" and r.levelno >= logging.INFO]


def test_fingerprint_copy_in_exports_equals_the_workers() -> None:
    from tuned.evaluation.worker import fingerprint

    assert standalone_fingerprint(runtime_device()) == fingerprint(runtime_device())
    assert current_fingerprint() == fingerprint(runtime_device())


def test_load_with_results_runs_the_stored_best(tuned_state: Path) -> None:
    store = SqliteStore(tuned_state / "ktuned.sqlite")
    best = store.best("vector_add")
    store.close()
    assert best is not None
    kernel = load("vector_add", store=tuned_state)
    # "tuned" when a validated variant beats the original somewhere (overall or on a shape).
    tuned = any(v.label != "original" for v in kernel.variants)
    assert kernel.status == ("tuned" if tuned else "original")
    assert kernel.variants[kernel.default].candidate_id == best.candidate_id
    assert dict(kernel.variants[kernel.default].knobs) == dict(best.knobs)
    x, y = _inputs()
    assert torch.allclose(kernel(x, y), x + y)
    # The database file itself and the default state directory (env) name the same store.
    assert load("vector_add", store=tuned_state / "ktuned.sqlite").status == kernel.status


def test_default_store_follows_ktuned_state_dir(
    tuned_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KTUNED_STATE_DIR", str(tuned_state))
    assert load("vector_add").status in ("tuned", "original")
    monkeypatch.setenv("KTUNED_STATE_DIR", str(tuned_state / "nowhere"))
    with pytest.raises(RuntimeLoadError, match="no ktuned store"):
        load("vector_add")


def test_load_without_results_runs_the_original_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    Rows.open(tmp_path, example("vector_add")).store.close()  # synced, never evaluated
    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "none" and "no successful evaluation" in kernel.reason
    x, y = _inputs()
    for _ in range(3):
        assert torch.allclose(kernel(x, y), x + y)
    records = _runtime_records(caplog)
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "running the original" in records[0].getMessage()
    with pytest.raises(RuntimeLoadError, match="no validated variant"):
        load("vector_add", store=tmp_path, fallback="error")
    mine = load("vector_add", store=tmp_path, fallback=lambda x, y: x - y)
    assert torch.allclose(mine(x, y), x - y)


def test_unknown_kernel_is_a_clear_error(tuned_state: Path) -> None:
    with pytest.raises(RuntimeLoadError, match=r"no kernel 'nope'.*known: vector_add"):
        load("nope", store=tuned_state)
    with pytest.raises(RuntimeLoadError, match="fallback="):
        load("vector_add", store=tuned_state, fallback="maybe")


def test_stale_fingerprint_falls_back_and_other_devices_do_not_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    current = current_fingerprint()
    old = {**current, "triton": "0.0.1-old"}
    rows = Rows.open(tmp_path, example("vector_add"), old)
    base = rows.evaluate(rows.candidate(original=True), {LABELS[0]: 2.0e-3})
    fast = rows.evaluate(rows.candidate({"BLOCK_SIZE": 4096, "num_warps": 4}), {LABELS[0]: 1e-3})
    rows.accept(fast, base)
    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "stale"
    assert "triton 0.0.1-old -> " + current["triton"] in kernel.reason
    assert [r.levelno for r in _runtime_records(caplog)] == [logging.WARNING]
    x, y = _inputs()
    assert torch.allclose(kernel(x, y), x + y)
    # The Python version does not make results stale: kernels compile the same under any.
    other_python = rows.on({**current, "python": "3.0.0"})
    other_python.evaluate(other_python.candidate(original=True), {LABELS[0]: 2.0e-3})
    assert load("vector_add", store=tmp_path).status == "original"
    rows.store.close()

    other = tmp_path / "other"
    imaginary = {**current, "mode": "gpu", "gpu_model": "Imaginary GPU"}
    rows = Rows.open(other, example("vector_add"), imaginary)
    rows.evaluate(rows.candidate(original=True), {LABELS[0]: 2.0e-3})
    rows.store.close()
    kernel = load("vector_add", store=other)
    assert kernel.status == "none" and "tuned only on Imaginary GPU" in kernel.reason


def _llm_store(state: Path) -> tuple[Rows, str]:
    """vector_add whose accepted best is an 'LLM rewrite' (its own source text)."""
    spec = example("vector_add")
    rows = Rows.open(state, spec)
    base = rows.evaluate(rows.candidate(original=True), {LABELS[0]: 2.0e-3})
    source = spec.module_source + "\n# rewritten: same kernel, its own source text\n"
    llm = rows.evaluate(
        rows.candidate({"BLOCK_SIZE": 2048, "num_warps": 4}, source=source), {LABELS[0]: 1e-3}
    )
    rows.accept(llm, base)
    return rows, llm.id


def test_tampered_source_is_refused_and_the_original_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows, llm_id = _llm_store(tmp_path)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "tuned" and kernel.variants[0].candidate_id == llm_id
    source_hash = rows.store.candidate(llm_id, rows.spec.generation)
    assert source_hash is not None
    rows.store.close()

    db = sqlite3.connect(tmp_path / "ktuned.sqlite")
    with db:
        db.execute(
            "UPDATE sources SET text = text || '\nimport os  # injected\n' WHERE text LIKE ?",
            ("%rewritten: same kernel%",),
        )
    db.close()
    caplog.set_level(logging.INFO)
    kernel = load("vector_add", store=tmp_path)
    assert kernel.status == "refused" and llm_id in kernel.reason
    records = _runtime_records(caplog)
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    x, y = _inputs()
    assert torch.allclose(kernel(x, y), x + y)
    assert kernel.variants[0].candidate_id == "original"

    # A tampered original cannot be fallen back on: that is an error, never silently run.
    db = sqlite3.connect(tmp_path / "ktuned.sqlite")
    with db:
        db.execute(
            "UPDATE sources SET text = text || '\n# edited\n' WHERE text NOT LIKE ?",
            ("%rewritten%",),
        )
    db.close()
    with pytest.raises(RuntimeLoadError, match="stored original does not match its hash"):
        load("vector_add", store=tmp_path)


def test_concurrent_loads_and_calls_from_threads(tmp_path: Path) -> None:
    """Loads and calls from 8 threads at once. Triton's interpreter itself is not thread-safe
    (it patches ``triton.language`` while a kernel runs), so there the launches are serialized
    by the test; loading, routing and the call path run concurrently everywhere."""
    _llm_store(tmp_path)[0].store.close()
    results: list[bool] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)
    interpreter = threading.Lock() if current_fingerprint()["mode"] == "interpreter" else None

    def launch(kernel: TunedKernel, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if interpreter is None:
            return kernel(x, y)
        with interpreter:
            return kernel(x, y)

    def worker(n: int) -> None:
        try:
            start.wait()
            kernel = load("vector_add", store=tmp_path)
            for i in range(3):
                x, y = _inputs(1000 + 97 * n + i)
                assert kernel.route((x, y)).candidate_id == kernel.variants[0].candidate_id
                results.append(
                    kernel.status == "tuned" and torch.allclose(launch(kernel, x, y), x + y)
                )
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert results == [True] * 24
