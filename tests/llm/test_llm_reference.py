"""Reference-only entries (``kind: reference``): a PyTorch reference and an input maker, no
Triton module. Loaded and checked; measured against eager (and optionally compiled) PyTorch;
the LLM writes the first Triton module from the reference through a real chat server on
loopback, the worker evaluates it in Triton's interpreter, and the bandit takes over with
the knobs discovered in it. Without an LLM the entry waits, visibly, in ``needs_llm``."""

from __future__ import annotations

import contextlib
import io
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.llm.chat_server import ChatServer, fenced, reply
from tuned.cli import main as cli_main
from tuned.errors import RegistryError
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.reference import baseline_source, choose_impl
from tuned.llm.gate import check_llm_module
from tuned.llm.settings import LlmSettings
from tuned.llm.setup import open_proposer
from tuned.metrics import StoreCollector
from tuned.outcomes import Outcome, Provenance
from tuned.registry import KernelSpec, load_entry
from tuned.search import Campaign, TuneSettings
from tuned.store import SqliteStore
from tuned.store.ledger import BudgetCaps

#: A deliberately slow reference (a Python loop over elements), so that the interpreted
#: Triton module, one program of 1024 lanes, beats it on this CPU.
REF_SOURCE = textwrap.dedent(
    '''
    """out = 2 * x + y, as a slow PyTorch reference (KernelBench style)."""
    import torch


    def reference(x, y):
        out = torch.empty_like(x)
        for i in range(x.numel()):
            out[i] = 2 * x[i] + y[i]
        return out


    def make_inputs(shape, dtype, device, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape["N"], generator=g).to(dtype)
        y = torch.randn(shape["N"], generator=g).to(dtype)
        return x.to(device), y.to(device)
    '''
)
REF_YAML = textwrap.dedent(
    """
    name: axpy
    kind: reference
    module: ref.py
    reference: reference
    inputs: make_inputs
    shapes:
      - {N: 1024, perf: true}
      - {N: 7}
    dtypes: [float32]
    """
)
#: What the scripted LLM writes: a Triton module with the reference's parameters and two
#: knobs (discovered: BLOCK and num_warps).
TRITON_MODULE = textwrap.dedent(
    '''
    """out = 2 * x + y in Triton."""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _axpy(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, 2 * x + y, mask=mask)


    def launcher(x, y, BLOCK: int = 1024, num_warps: int = 4):
        out = torch.empty_like(x)
        n = x.numel()
        _axpy[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK, num_warps=num_warps)
        return out
    '''
)


def write_reference_entry(root: Path, yaml: str = REF_YAML, source: str = REF_SOURCE) -> Path:
    entry = root / "axpy"
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "ref.py").write_text(source)
    (entry / "kernel.yaml").write_text(yaml)
    return entry


# -- the registry contract


def test_a_reference_entry_loads_without_a_launcher_or_knobs(tmp_path: Path) -> None:
    spec = load_entry(write_reference_entry(tmp_path))
    assert spec.kind == "reference" and spec.reference_only
    assert spec.launcher == "launcher" and spec.reference == "reference"
    assert spec.knobs == {} and spec.baseline_knobs == {}
    named = load_entry(write_reference_entry(tmp_path / "b", REF_YAML + "launcher: axpy\n"))
    assert named.launcher == "axpy"


@pytest.mark.parametrize(
    ("yaml", "source", "field", "words"),
    [
        (REF_YAML.replace("reference: reference\n", ""), REF_SOURCE, "reference", "required"),
        (REF_YAML + "knobs: {BLOCK: [64]}\n", REF_SOURCE, "knobs", "no knobs of its own"),
        (REF_YAML, REF_SOURCE + "\ndef launcher(x, y):\n    return x\n", "launcher", "already"),
        (REF_YAML.replace("kind: reference", "kind: kernelbench"), REF_SOURCE, "kind", "reference"),
    ],
    ids=["no_reference", "knobs", "launcher_defined", "unknown_kind"],
)
def test_a_bad_reference_entry_says_what_to_fix(
    tmp_path: Path, yaml: str, source: str, field: str, words: str
) -> None:
    with pytest.raises(RegistryError) as info:
        load_entry(write_reference_entry(tmp_path, yaml, source))
    text = str(info.value)
    assert field in text and words in text, text


def test_the_gate_holds_the_first_module_to_the_references_parameters(tmp_path: Path) -> None:
    spec = load_entry(write_reference_entry(tmp_path))

    def check(source: str) -> str | None:
        found = check_llm_module(
            source, launcher="launcher", original_source=spec.module_source, reference="reference"
        )
        return None if found is None else found.rule

    assert check(TRITON_MODULE) is None
    dropped = TRITON_MODULE.replace("def launcher(x, y, BLOCK", "def launcher(x, BLOCK")
    assert check(dropped) == "signature"
    no_default = TRITON_MODULE.replace("BLOCK: int = 1024", "BLOCK: int")
    assert check(no_default.replace("num_warps: int = 4", "num_warps: int = 4")) == "signature"
    cheat = TRITON_MODULE.replace("    return out\n", "    return 2 * x + y\n")
    assert check(cheat) == "torch_compute"


def test_the_baseline_source_runs_eager_or_compiled(tmp_path: Path) -> None:
    spec = load_entry(write_reference_entry(tmp_path))
    eager, compiled = baseline_source(spec, "eager"), baseline_source(spec, "compile")
    assert eager.startswith(spec.module_source.rstrip()) and "return reference(*inputs)" in eager
    assert "torch.compile(reference)" in compiled
    assert choose_impl(2.0, 1.0) == "compile" and choose_impl(1.0, 2.0) == "eager"
    assert choose_impl(1.0, None) == "eager"  # compile unavailable or wrong: eager


# -- end to end


def settings_for(server: ChatServer, **kw: object) -> LlmSettings:
    options: dict[str, object] = {
        "request_timeout_s": 20.0,
        "retries": 0,
        "max_tokens": 2000,
        "budget": BudgetCaps(total_tokens=200_000),
        "compile_reference": False,
        **kw,
    }
    return LlmSettings(base_url=server.base_url, model="scripted", **options)  # type: ignore[arg-type]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[KernelSpec, SqliteStore, WorkerClient, str]]:
    spec = load_entry(write_reference_entry(tmp_path / "registry"))
    store = SqliteStore(tmp_path / "ktuned.sqlite")
    store.sync_kernel(spec)
    with WorkerClient(workdir=tmp_path / "w", settings=EvaluationSettings(interpreter=True)) as c:
        yield spec, store, c, store.record_fingerprint(c.start())
    store.close()


def ledger_rows(path: Path) -> list[tuple[str, int, str]]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT purpose, charged, state FROM llm_ledger ORDER BY id").fetchall()
    finally:
        db.close()
    return [(str(p), int(c), str(s)) for p, c, s in rows]


def test_the_llm_writes_the_first_module_and_the_bandit_takes_over(
    world: tuple[KernelSpec, SqliteStore, WorkerClient, str],
) -> None:
    spec, store, client, fid = world
    with ChatServer(default=lambda body: reply(fenced(TRITON_MODULE), usage=(700, 300))) as srv:
        proposer = open_proposer(
            settings_for(srv), store_path=store.path, gpu={"gpu_model": "none"}
        )
        campaign = Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
            llm=proposer,
        )
        base = campaign.step()
        assert base is not None and base.provenance is Provenance.ORIGINAL
        assert base.result.outcome is Outcome.OK and base.result.time_s is not None
        recorded = base.result.metadata["reference_baseline"]
        assert recorded["impl"] == "eager" and recorded["compile"] == "disabled"
        assert srv.requests == []  # the baseline needs no LLM

        first = campaign.step()
        assert first is not None and first.provenance is Provenance.LLM, first
        assert first.result.outcome is Outcome.OK, first.result.reason
        assert first.parent_id == base.candidate_id
        assert dict(first.knobs) == {"BLOCK": 1024, "num_warps": 4}  # its discovered defaults
        # Faster than the (slow) reference: accepted as the kernel's best.
        best = store.best("axpy")
        assert best is not None and best.candidate_id == first.candidate_id
        assert best.speedup is not None and best.speedup > 1.5
        prompt = srv.requests[0]["messages"]
        assert "No Triton implementation exists yet" in prompt[1]["content"]
        assert "def reference(x, y)" in prompt[1]["content"]
        assert "launcher(x, y" in prompt[0]["content"]
        assert ledger_rows(store.path) == [("rewrite", 1000, "settled")]

        # The bandit goes on with knob moves of the LLM-written module.
        seed = store.candidate(first.candidate_id, spec.generation)
        assert seed is not None
        rows = [campaign.step() for _ in range(2)]
        assert all(r is not None for r in rows)
        moves = [r for r in rows if r is not None and r.provenance is Provenance.PARAMETRIC]
        assert moves, [r.strategy for r in rows if r is not None]
        for r in moves:
            assert r.result.outcome is Outcome.OK, r.result.reason
            cand = store.candidate(r.candidate_id, spec.generation)
            assert cand is not None and cand.source == seed.source
            assert set(r.knobs) == {"BLOCK", "num_warps"}
        assert campaign.needs_llm == ""
        assert store.kernel("axpy") is not None and store.kernel("axpy").state == "active"  # type: ignore[union-attr]


def test_without_an_llm_a_reference_entry_waits_in_needs_llm(
    world: tuple[KernelSpec, SqliteStore, WorkerClient, str], tmp_path: Path
) -> None:
    spec, store, client, fid = world
    campaign = Campaign(
        spec=spec, store=store, client=client, fingerprint=fid, settings=TuneSettings(budget=None)
    )
    assert campaign.step() is None
    assert "no LLM is configured" in campaign.needs_llm
    assert campaign.note.startswith("needs_llm:")
    assert campaign.remaining() == 0
    assert store.trials("axpy", spec.generation, fid) == []  # nothing run, no GPU time
    kernel = store.kernel("axpy")
    assert kernel is not None and kernel.state == "needs_llm"
    # ktuned status shows it, with the reason.
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["status", "--state-dir", str(tmp_path)]) == 0
    row = next(line for line in out.getvalue().splitlines() if line.startswith("axpy"))
    assert row.split()[1] == "needs_llm", row  # the state column
    assert "no LLM is configured" in row  # and the reason, on the kernel's row
    # So does /metrics (read from the store).
    registry = CollectorRegistry()
    registry.register(StoreCollector(store.path))
    body = generate_latest(registry).decode()
    assert 'ktuned_kernel_state{kernel="axpy",state="needs_llm"} 1.0' in body
    # With a budget too small for one request, it waits as well (nothing is sent).
    with ChatServer(default=lambda body: reply(fenced(TRITON_MODULE))) as srv:
        proposer = open_proposer(
            settings_for(srv, budget=BudgetCaps(total_tokens=10)), store_path=store.path
        )
        waiting = Campaign(
            spec=spec,
            store=store,
            client=client,
            fingerprint=fid,
            settings=TuneSettings(budget=None),
            llm=proposer,
        )
        assert waiting.step() is None and "budget" in waiting.needs_llm
        assert srv.requests == []


@pytest.mark.slow  # torch.compile on a CPU takes most of a minute
def test_the_baseline_record_says_whether_torch_compile_was_used(tmp_path: Path) -> None:
    """``torch.compile`` is timed beside eager when enabled; whatever happens on this machine
    (compiled and faster, slower, or unavailable without a C++ compiler), the record says
    which implementation the baseline is and why."""
    from tuned.evaluation.reference import measure_reference

    vectorized = REF_SOURCE.replace(
        "    out = torch.empty_like(x)\n    for i in range(x.numel()):\n"
        "        out[i] = 2 * x[i] + y[i]\n    return out\n",
        "    return 2 * x + y\n",
    )
    spec = load_entry(write_reference_entry(tmp_path, source=vectorized))
    result, wall = measure_reference(
        spec,
        workdir=tmp_path / "ref",
        interpreter=True,
        seeds=(0, 1),
        interpreter_max_size=1 << 22,
        timing={"interpreter_reps": 3},
        compile_reference=True,
        timeout_s=300,
    )
    assert result.outcome is Outcome.OK, result.reason
    record = result.metadata["reference_baseline"]
    assert record["impl"] in ("eager", "compile") and wall > 0
    assert record["compile"] == "ok" or record["compile"].startswith(("unavailable", "incorrect"))
    if record["impl"] == "compile":
        assert record["compile"] == "ok" and record["compile_s"] < record["eager_s"]
        assert result.time_s == record["compile_s"]
    else:
        assert result.time_s == record["eager_s"]
        assert record["compile"] != "ok" or record["compile_s"] >= record["eager_s"]
    assert list(result.timings) == ["N=1024/float32"]
    # A reference that raises is a recorded failure, not an exception.
    broken = REF_SOURCE.replace("def reference(x, y):\n", "def reference(x, y):\n    1 / 0\n")
    spec = load_entry(write_reference_entry(tmp_path / "broken", source=broken))
    result, _ = measure_reference(
        spec,
        workdir=tmp_path / "ref2",
        interpreter=True,
        seeds=(0,),
        interpreter_max_size=1 << 22,
        timing={},
        compile_reference=False,
        timeout_s=120,
    )
    assert result.outcome is Outcome.RUNTIME_ERROR and "ZeroDivisionError" in result.reason


def test_the_scheduler_keeps_a_waiting_entry_aside_and_tries_it_again() -> None:
    from tuned.daemon.config import SchedulerConfig
    from tuned.daemon.scheduler import Scheduler

    scheduler = Scheduler(SchedulerConfig())
    scheduler.track("axpy", weight=5.0, space_size=0)
    scheduler.track("add", weight=1.0, space_size=10)
    assert scheduler.pick(0.0) == "axpy"  # new, heavier
    scheduler.wait_for_llm("axpy", "no LLM is configured", retry_at=100.0)
    assert scheduler.states()["axpy"] == "needs_llm"
    assert scheduler.pick(50.0) == "add"  # the other kernel goes on
    assert scheduler.next_revisit(50.0) == 50.0
    scheduler.tracks["add"].finished = "knob space exhausted"
    assert scheduler.pick(50.0) is None and scheduler.pick(100.0) == "axpy"
    scheduler.wait_for_llm("axpy", "no LLM is configured", retry_at=float("inf"))
    assert scheduler.pick(1e12) is None and scheduler.next_revisit(0.0) is None


def test_the_daemon_keeps_tuning_while_a_reference_entry_waits_for_an_llm(
    tmp_path: Path, start_daemon: Any
) -> None:
    from tests.conftest import ADD_SOURCE, ADD_YAML
    from tests.daemon.conftest import wait_for

    registry = tmp_path / "registry"
    write_reference_entry(registry)
    add = registry / "add"
    add.mkdir()
    (add / "add.py").write_text(ADD_SOURCE)
    (add / "kernel.yaml").write_text(ADD_YAML.format(name="add"))
    d = start_daemon(registry)
    d.notify.wait("READY", "1", timeout=180)
    wait_for(
        lambda: 'ktuned_kernel_state{kernel="axpy",state="needs_llm"} 1.0' in d.metrics(),
        120,
        "the reference entry in state needs_llm",
    )
    wait_for(lambda: len(d.query("SELECT 1 FROM evaluations WHERE kernel='add'")) >= 3, 180,
             "the other kernel tuned meanwhile")  # fmt: skip
    assert d.query("SELECT COUNT(*) FROM evaluations WHERE kernel='axpy'") == [(0,)]
    assert d.query("SELECT state FROM kernels WHERE name='axpy'") == [("needs_llm",)]
    assert d.proc.poll() is None
    assert d.stop() == 0
    assert "axpy: needs_llm: no LLM is configured" in d.output()
