"""The tuner's side of the worker protocol (tuned/evaluation/client.py) over a real pipe: lines
cut anywhere, a line too long to be a message, words nobody asked for, and messages that are
not messages. Hostile candidates meet the same rules: tests/evaluation/test_sandbox_campaign.py."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tuned.evaluation.channel import MAX_LINE as _MAX_LINE
from tuned.evaluation.channel import LineReader as _LineReader
from tuned.evaluation.channel import parse_message as _parse_message


@pytest.fixture
def pipe() -> Iterator[tuple[_LineReader, int]]:
    r, w = os.pipe()
    yield _LineReader(r), w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_lines_cut_anywhere_come_back_whole_and_in_order(pipe: tuple[_LineReader, int]) -> None:
    reader, w = pipe
    os.write(w, b'{"type": "pha')
    assert reader.read_line(0.05) is None  # not a line yet: the deadline passes
    os.write(w, b'se", "phase": "load"}\n{"type": "result", "request": 1}\n{"a"')
    assert reader.read_line(1) == b'{"type": "phase", "phase": "load"}'
    assert reader.read_line(1) == b'{"type": "result", "request": 1}'
    assert reader.pending()  # the start of a third line is there, unread
    os.close(w)
    assert reader.read_line(1) == b""  # end of file


def test_a_line_without_end_is_cut_at_the_cap_and_refused(pipe: tuple[_LineReader, int]) -> None:
    reader, w = pipe
    os.set_blocking(w, False)
    sent = 0
    chunk = b"x" * (1 << 16)
    while sent <= _MAX_LINE:
        try:
            sent += os.write(w, chunk)
        except BlockingIOError:
            line = reader.read_line(0.01)
            if line is not None:
                break
    else:
        line = reader.read_line(5)
    assert line is not None and len(line) > _MAX_LINE
    message, problem = _parse_message(line)
    assert message is None and problem == f"a line of {len(line)} bytes"


def test_nothing_pending_after_a_whole_answer(pipe: tuple[_LineReader, int]) -> None:
    reader, w = pipe
    os.write(w, b'{"type": "ready"}\n')
    assert reader.read_line(1) == b'{"type": "ready"}'
    assert not reader.pending()
    os.write(w, b'{"type": "result"}\n')  # a second answer nobody asked for
    assert reader.pending()


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"\xff\xfe not json {", "a line that is not JSON"),
        (b"[1, 2]", "a JSON list, not a message"),
        (b'"result"', "a JSON str, not a message"),
        (b"", "a line that is not JSON"),
    ],
)
def test_what_is_not_a_message_is_named(line: bytes, problem: str) -> None:
    message, found = _parse_message(line)
    assert message is None and found is not None and found.startswith(problem)


def test_a_message_is_a_json_object() -> None:
    assert _parse_message(b'{"type": "result", "request": 3}') == (
        {"type": "result", "request": 3},
        None,
    )
