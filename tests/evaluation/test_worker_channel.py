"""The worker's end of the protocol (tuned/evaluation/modules.py, ``Channel``): what
:meth:`Channel.waiting` sees without consuming it, and lines it refuses."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import WriteEntry
from tuned.evaluation import EvaluationSettings, WorkerClient
from tuned.evaluation.modules import MAX_LINE, Channel
from tuned.outcomes import Candidate, Outcome, Provenance
from tuned.registry import load_entry


def _channel() -> tuple[Channel, int, int]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    return Channel(in_r, out_w), in_w, out_r


def test_waiting_sees_sent_messages_without_consuming_them() -> None:
    channel, to_channel, _ = _channel()
    assert channel.waiting() == []  # nothing sent: returns at once, never blocks
    os.write(to_channel, b'{"op": "prepare", "n": 1}\n{"op": "taken"}\n{"op": "ev')
    assert [m["op"] for m in channel.waiting()] == ["prepare", "taken"]  # not the cut line
    assert channel.receive() == {"op": "prepare", "n": 1}
    assert channel.receive() == {"op": "taken"}
    os.write(to_channel, b'aluate"}\n')
    assert channel.receive() == {"op": "evaluate"}
    os.close(to_channel)
    assert channel.receive() is None and channel.waiting() == []


def test_a_line_without_end_at_close_is_no_message_and_an_endless_one_is_refused() -> None:
    channel, to_channel, _ = _channel()
    os.write(to_channel, b'{"op": "exit"')
    os.close(to_channel)
    assert channel.receive() is None
    channel, to_channel, _ = _channel()

    def write_endless_line() -> None:
        with contextlib.suppress(BrokenPipeError):
            for _ in range(MAX_LINE // (1 << 16) + 2):
                os.write(to_channel, b"x" * (1 << 16))
        os.close(to_channel)

    writer = threading.Thread(target=write_endless_line)
    writer.start()
    with pytest.raises(ValueError, match="longer than"):
        channel.receive()
    channel.waiting()  # bounded too: reads no further than the limit
    os.close(channel._in.fd)  # the writer ends
    writer.join(timeout=30)
    assert not writer.is_alive()


def test_sigusr2_prints_a_waiting_workers_stacks_to_its_log_and_it_goes_on(
    tmp_path: Path, write_entry: WriteEntry
) -> None:
    """On the H200 a tune sat 190 s with no evaluation and no phase over its timeout, and
    nothing said where it waited. SIGUSR2 now makes a worker (and the zygote and runners)
    print every thread's stack to its log (docs/runbook.md), without stopping it."""
    spec = load_entry(write_entry())
    candidate = Candidate(
        kernel=spec.name,
        generation=spec.generation,
        source=spec.module_source,
        knobs={},
        provenance=Provenance.PARAMETRIC,
        strategy="test",
    )
    workdir = tmp_path / "w"
    with WorkerClient(workdir=workdir, settings=EvaluationSettings(interpreter=True)) as client:
        assert client.evaluate(spec, candidate).outcome is Outcome.OK
        (judge,) = client.worker_pids()
        os.kill(judge, signal.SIGUSR2)
        log = workdir / "stderr.log"
        deadline = time.monotonic() + 30
        while "_serve" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        text = log.read_text()
        assert "Current thread" in text or "Thread 0x" in text
        assert "in _serve" in text  # where the judge waits: for its next request
        after = client.evaluate(spec, candidate)
        assert after.outcome is Outcome.OK, after.reason
        assert client.worker_pids() == {judge}  # the same process goes on
