"""The worker's end of the protocol (tuned/evaluation/modules.py, ``Channel``): what
:meth:`Channel.waiting` sees without consuming it, and lines it refuses."""

from __future__ import annotations

import contextlib
import os
import threading

import pytest

from tuned.evaluation.modules import MAX_LINE, Channel


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
