"""``ktuned registry add`` on launchers that return nothing and write arguments whose names say
nothing of it: the outputs are found from the kernels' stores (syntax trees only), and the
entry written then checks and runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tuned.registry.stored_outputs import stored_outputs

#: Context attention's form: ``o`` is written through a local pointer variable; the start of
#: each sequence is loaded from ``b_start_loc`` and used as an offset (never a written buffer);
#: a name reused for a loaded pointer and then the stored one counts only the latter.
ATTENTION = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _fwd_kernel(Q, K, V, B_Start_Loc, B_Seqlen, Out, stride_qbs, stride_obs,
                    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
        cur_batch = tl.program_id(0)
        start = tl.load(B_Start_Loc + cur_batch)
        seqlen = tl.load(B_Seqlen + cur_batch)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        off_q = (start + offs_m[:, None]) * stride_qbs + offs_d[None, :]
        ptrs = Q + off_q
        q = tl.load(ptrs, mask=offs_m[:, None] < seqlen, other=0.0)
        k = tl.load(K + off_q, mask=offs_m[:, None] < seqlen, other=0.0)
        v = tl.load(V + off_q, mask=offs_m[:, None] < seqlen, other=0.0)
        off_o = (start + offs_m[:, None]) * stride_obs + offs_d[None, :]
        ptrs = Out + off_o
        tl.store(ptrs, q * k + v, mask=offs_m[:, None] < seqlen)


    def context_attention_fwd(q, k, v, o, b_start_loc, b_seq_len, max_input_len):
        grid = (b_seq_len.shape[0],)
        _fwd_kernel[grid](q, k, v, b_start_loc, b_seq_len, o, q.stride(0), o.stride(0),
                          BLOCK_M=64, BLOCK_D=q.shape[-1])
    """
)

#: Rotary embedding's form: ``q`` and ``k`` rotated in place, through a function of the module
#: that takes views of them and passes them by keyword.
ROTARY = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _rotary_kernel(Q, K, Cos, Sin, stride_q, stride_k, HALF: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, HALF)
        q_ptrs = Q + row * stride_q + offs
        q0 = tl.load(q_ptrs)
        q1 = tl.load(q_ptrs + HALF)
        cos = tl.load(Cos + row * HALF + offs)
        sin = tl.load(Sin + row * HALF + offs)
        tl.store(q_ptrs, q0 * cos - q1 * sin)
        tl.store(q_ptrs + HALF, q0 * sin + q1 * cos)
        k_ptrs = K + row * stride_k + offs
        for half in range(2):
            k_ptrs += half * HALF
            tl.store(k_ptrs, tl.load(k_ptrs) * cos)


    def _launch(q, k, cos, sin):
        q2 = q.view(-1, q.shape[-1])
        _rotary_kernel[(q2.shape[0],)](Q=q2, K=k.contiguous(), Cos=cos, Sin=sin,
                                      stride_q=q2.stride(0), stride_k=k.stride(0),
                                      HALF=q.shape[-1] // 2)


    def rotary_emb_fwd(q, k, cos, sin):
        _launch(q, k, cos, sin)
    """
)

#: Block pointers, atomics and a ``@triton.jit`` helper that stores through the pointer it is
#: given; ``scale`` only read.
FORMS = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _write(ptr, offs, value):
        tl.store(ptr + offs, value)


    @triton.jit
    def _kernel(X, Scale, Acc, Count, Y, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        block = tl.make_block_ptr(base=Acc, shape=(n,), strides=(1,), offsets=(pid * BLOCK,),
                                  block_shape=(BLOCK,), order=(0,))
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs) * tl.load(Scale)
        tl.store(tl.advance(block, (0,)), x)
        tl.atomic_add(Count + pid, 1)
        _write(Y, offs, x)


    class Launch:
        @staticmethod
        def run(x, scale, acc, count, y):
            _kernel[(1,)](x, scale, acc, count, y, x.numel(), BLOCK=64)


    def forms(x, scale, acc, count, y):
        Launch.run(x, scale, acc[:, 0], count.data, y)
    """
)

#: The launcher allocates what its kernel writes (or rebinds the argument, or passes a copy):
#: none of its parameters is written.
ALLOCATES = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _copy(X, Out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Out + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)


    def allocates(x, y):
        z = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 64),)](x, z, x.numel(), BLOCK=64)


    def rebinds(x, y):
        y = torch.empty_like(x)
        _copy[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)


    def copies(x, y):
        _copy[(triton.cdiv(x.numel(), 64),)](x, y.float(), x.numel(), BLOCK=64)
    """
)


def test_an_o_buffer_written_through_a_pointer_variable() -> None:
    assert stored_outputs(ATTENTION, "context_attention_fwd") == {"o": ("_fwd_kernel",)}


def test_in_place_arguments_through_views_keywords_and_a_module_function() -> None:
    found = stored_outputs(ROTARY, "rotary_emb_fwd")
    assert found == {"q": ("_rotary_kernel",), "k": ("_rotary_kernel",)}


def test_block_pointers_atomics_helpers_and_static_methods() -> None:
    found = stored_outputs(FORMS, "forms")
    assert list(found) == ["acc", "count", "y"]


def test_a_buffer_the_launcher_allocates_is_never_its_output() -> None:
    for launcher in ("allocates", "rebinds", "copies"):
        assert stored_outputs(ALLOCATES, launcher) == {}, launcher


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on the import path (here and in workers) for the user's modules."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", str(root))
    yield root


def _add(site: Path, module: str, source: str, launcher: str, shape: dict[str, int]) -> Path:
    from tuned.registry.scaffold import add_entry

    (site / f"{module}.py").write_text(source)
    added = add_entry(f"{module}.{launcher}", [shape], ["float32"], site.parent / "reg")
    assert "outputs" not in " ".join(added.todo), added.todo
    return added.directory


def test_add_declares_what_the_kernels_store_and_draws_it_like_an_input(site: Path) -> None:
    entry = _add(site, "ctx_attn", ATTENTION, "context_attention_fwd", {"M": 4, "N": 16})
    yaml = (entry / "kernel.yaml").read_text()
    assert "outputs: [o]  # the launcher returns nothing" in yaml
    assert "found from its kernels' stores" in yaml and "o by _fwd_kernel" in yaml
    inputs = (entry / "entry.py").read_text()
    assert 'o = rand(shape["M"], shape["N"])' in inputs  # overwritten, but drawn: in place

    entry = _add(site, "rotary", ROTARY, "rotary_emb_fwd", {"M": 4, "N": 16})
    yaml = (entry / "kernel.yaml").read_text()
    assert "outputs: [q, k]" in yaml and "q, k by _rotary_kernel" in yaml
    assert 'q = rand(shape["M"], shape["N"])' in (entry / "entry.py").read_text()


def test_add_keeps_the_todo_when_no_argument_is_stored_into(site: Path) -> None:
    from tuned.registry.scaffold import add_entry

    (site / "allocs.py").write_text(ALLOCATES)
    added = add_entry("allocs.allocates", [{"N": 64}], ["float32"], site.parent / "reg")
    assert any(t.startswith("outputs") for t in added.todo)
    yaml = (added.directory / "kernel.yaml").read_text()
    assert "# outputs: [out]" in yaml and "\noutputs:" not in yaml


#: For the run: ``x`` updated in place through a pointer variable, ``o`` written through a
#: ``@triton.jit`` helper; neither is named like a buffer.
MIX = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _put(ptr, offs, value, mask):
        tl.store(ptr + offs, value, mask=mask)


    @triton.jit
    def _mix_kernel(X, Y, O, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x_ptrs = X + offs
        x = tl.load(x_ptrs, mask=mask)
        y = tl.load(Y + offs, mask=mask)
        tl.store(x_ptrs, x + y, mask=mask)
        _put(O, offs, x * y, mask)


    def mix_(x, y, o, BLOCK=64):
        n = x.numel()
        _mix_kernel[(triton.cdiv(n, BLOCK),)](x.view(-1), y, o, n, BLOCK=BLOCK)
    """
)


def test_an_entry_with_inferred_outputs_is_valid_and_checked_in_the_interpreter(
    site: Path,
) -> None:
    from tuned.evaluation import EvaluationSettings, WorkerClient
    from tuned.outcomes import Candidate, Outcome, Provenance
    from tuned.registry import scan_registry

    entry = _add(site, "mixer", MIX, "mix_", {"M": 3, "N": 50})
    assert "outputs: [x, o]" in (entry / "kernel.yaml").read_text()
    scan = scan_registry(entry)
    assert not scan.problems, scan.problems
    (spec,) = scan.entries
    assert spec.outputs == ("x", "o")

    def candidate(source: str) -> Candidate:
        return Candidate(
            kernel=spec.name,
            generation=spec.generation,
            source=source,
            knobs={"BLOCK": 32},
            provenance=Provenance.PARAMETRIC,
        )

    settings = EvaluationSettings(
        interpreter=True, compile_timeout_s=20.0, correctness_timeout_s=60.0
    )
    with WorkerClient(workdir=site.parent / "worker", settings=settings) as client:
        good = client.evaluate(spec, candidate(spec.module_source))
        assert good.outcome is Outcome.OK, good.reason
        # Each inferred output is compared: a wrong value in either is caught.
        for right, wrong in (("x + y, mask", "x - y, mask"), ("x * y, mask", "x + x, mask")):
            bad = spec.module_source.replace(right, wrong)
            assert bad != spec.module_source
            result = client.evaluate(spec, candidate(bad))
            assert result.outcome is Outcome.INCORRECT, (wrong, result.reason)


#: ``out`` is a buffer by its name; ``lse`` is found only from the store.
OUT_AND_LSE = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _k(X, Out, Lse, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n)
        tl.store(Out + offs, x, mask=offs < n)
        tl.store(Lse, tl.sum(x, axis=0))


    def fwd(x, out, lse):
        _k[(1,)](x, out, lse, x.numel(), BLOCK=64)
    """
)


def test_add_keeps_the_named_buffer_beside_the_stored_ones(site: Path) -> None:
    entry = _add(site, "outlse", OUT_AND_LSE, "fwd", {"N": 64})
    assert "outputs: [out, lse]" in (entry / "kernel.yaml").read_text()
    inputs = (entry / "entry.py").read_text()
    assert "out = torch.zeros(" in inputs and 'lse = rand(shape["N"])' in inputs


IN_PLACE_AND_LOSS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _grad_and_loss(x_ptr, loss_ptr, dx_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(loss_ptr + offs, x * x, mask=m)
        tl.store(dx_ptr + offs, 2 * x, mask=m)


    def loss_and_grad(student, teacher):
        n = student.numel()
        loss = torch.zeros_like(student)
        _grad_and_loss[(triton.cdiv(n, 256),)](
            x_ptr=student, loss_ptr=loss, dx_ptr=student, n=n, BLOCK=256
        )
        return loss, student
    """
)


def test_add_declares_an_argument_written_in_place_and_returned_beside_a_loss(
    site: Path,
) -> None:
    """Liger's JSD primitive writes its gradient into ``student_prob`` and returns it beside
    the loss: its entry failed at once ("output 1 shares memory with input 0, which the call
    changed"); ``registry add`` now declares the argument its kernels store into, with a note
    that its other return values are not compared, and the entry tunes."""
    entry = _add(site, "inplace_loss", IN_PLACE_AND_LOSS, "loss_and_grad", {"N": 1000})
    yaml = (entry / "kernel.yaml").read_text()
    assert "outputs: [student]  # the launcher writes these in place" in yaml, yaml
    flat = " ".join(line.lstrip("# ") for line in yaml.splitlines())
    assert "what it writes is compared and its other return values are not" in flat, yaml
    root = Path(__file__).resolve().parents[2]
    state = str(site.parent / "state")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuned.cli",
            "tune",
            str(entry),
            "--budget",
            "2",
            "--state-dir",
            state,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(site)])},
        cwd=root,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the original fails" not in done.stdout and "none" in done.stdout, done.stdout


#: Values loaded from one argument used as positions in others: a token table gathered
#: through (``Req``), a length bounding a loop (``Lens``) and a block pointer's offset
#: (``Starts``), through a helper; ``X``'s values are only data.
GATHER = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _row(ptr, starts_ptr, b, BLOCK: tl.constexpr):
        start = tl.load(starts_ptr + b)
        block = tl.make_block_ptr(ptr, (4096,), (1,), (start,), (BLOCK,), (0,))
        return tl.load(block)


    @triton.jit
    def _gather(X, Req, Lens, Starts, Out, stride, BLOCK: tl.constexpr):
        b = tl.program_id(0)
        n = tl.load(Lens + b)
        offs = tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(0, n, BLOCK):
            tok = tl.load(Req + b * stride + i + offs)
            acc += tl.load(X + tok * stride)
        acc += _row(X, Starts, b, BLOCK)
        tl.store(Out + b * BLOCK + offs, acc)


    def gather(x, req, lens, starts, out):
        _gather[(lens.shape[0],)](x, req, lens, starts, out, x.stride(0), BLOCK=64)


    @triton.jit
    def _pick(Scores, Seeds, Table, Out, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        u = tl.rand(tl.load(Seeds), offs)
        scores = tl.cumsum(tl.load(Scores + offs), 0)
        first = tl.argmax((u[:, None] <= scores[None, :]).to(tl.int32), 1)
        tl.store(Out + offs, tl.load(Table + first))


    def pick(scores, seeds, table, out):
        _pick[(1,)](scores, seeds, table, out, BLOCK=64)
    """
)


def test_arguments_whose_values_the_kernels_use_as_positions_are_found(site: Path) -> None:
    from tuned.registry.stored_outputs import indexed_inputs

    (site / "gathers.py").write_text(GATHER)
    assert indexed_inputs("gathers.gather") == {
        "req": ("_gather",),
        "lens": ("_gather",),
        "starts": ("_gather",),
    }
    (site / "ctx_attn.py").write_text(ATTENTION)  # the start of each sequence: an offset
    assert indexed_inputs("ctx_attn.context_attention_fwd") == {"b_start_loc": ("_fwd_kernel",)}
    (site / "mixer.py").write_text(MIX)  # data only
    assert indexed_inputs("mixer.mix_") == {}
    # A position chosen by comparing values (sampling: the first cumulative score past a
    # random number) makes neither the scores nor the seeds positions.
    assert indexed_inputs("gathers.pick") == {}


def test_add_asks_for_the_values_of_a_position_tensor_instead_of_drawing_floats(
    site: Path,
) -> None:
    """Drawn as floats, Triton refused the original at compile time ("invalid operands of
    type pointer<fp32> and float32": 9 TritonBench-G originals on the H200)."""
    entry = _add(site, "gathers", GATHER, "gather", {"M": 4, "N": 64})
    inputs = (entry / "entry.py").read_text()
    for name in ("req", "lens", "starts"):
        assert f"{name} (an integer tensor: _gather uses its values as positions" in inputs
        assert f"{name} = rand" not in inputs
    assert 'x = rand(shape["M"], shape["N"])' in inputs


#: Rotated in place, and unpacked whole as 3-D.
ROTATE_3D = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def _negate(Q, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Q + offs, -tl.load(Q + offs, mask=offs < n), mask=offs < n)


    def negate_(q):
        tokens, heads, dim = q.shape
        _negate[(triton.cdiv(q.numel(), 64),)](q, q.numel(), BLOCK=64)
    """
)


def test_a_tensor_asked_for_at_its_rank_is_still_declared_where_written(site: Path) -> None:
    """A 4-D --shape for a launcher that unpacks ``q`` as 3-D: ``q`` is asked for, and what
    its kernel writes is still its output (left out, the entry was invalid twice over:
    a stub, and "returns nothing and declares no outputs")."""
    entry = _add(site, "rot3", ROTATE_3D, "negate_", {"B": 2, "H": 4, "L": 8, "D": 16})
    assert "q (the launcher reads it as 3-D" in (entry / "entry.py").read_text()
    assert "outputs: [q]" in (entry / "kernel.yaml").read_text()


#: ``p`` and ``seed`` are numbers the kernel takes by value; ``x`` and ``w`` are memory (``w``
#: only through a jit helper), ``alpha`` reaches an unknown call (left alone: maybe memory),
#: ``unused`` is not used (``token_att_fwd2`` passes its ``B_Start_Loc`` tensor so).
BY_VALUE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _weighted(W, offs, n):
        return tl.load(W + offs, mask=offs < n)


    @triton.jit
    def _dropish(X, W, Out, n, p, seed, alpha, unused, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(X + offs, mask=offs < n) * _weighted(W, offs, n)
        keep = tl.rand(seed, offs) > p
        y = tl.where(keep, x / (1 - p), 0.0)
        y = mystery(y, alpha)
        tl.store(Out + offs, y, mask=offs < n)


    def dropish(x, w, p, seed, alpha, start_loc):
        out = torch.empty_like(x)
        n = x.numel()
        _dropish[(triton.cdiv(n, 128),)](x, w, out, n, p, seed, alpha, start_loc, BLOCK=128)
        return out
    """
)


def test_add_asks_for_numbers_a_kernel_takes_by_value_instead_of_drawing_tensors(
    site: Path,
) -> None:
    """FlagGems' dropout ``p`` and topk's ``k`` were drawn as tensors, and the originals failed
    (a tensor passed where the kernel computes with a number)."""
    from tuned.registry.stored_outputs import by_value_inputs

    entry = _add(site, "dropish", BY_VALUE, "dropish", {"N": 256})
    inputs = (entry / "entry.py").read_text()
    for name in ("p", "seed"):
        assert f"{name} (a number: _dropish takes it by value" in inputs, inputs
        assert f"{name} = rand" not in inputs
    for name in ("x", "w", "alpha", "start_loc"):  # memory, not ruled out, or unused
        assert f'{name} = rand(shape["N"])' in inputs, inputs
    assert by_value_inputs("dropish.dropish") == {
        "p": ("_dropish",),
        "seed": ("_dropish",),
    }
