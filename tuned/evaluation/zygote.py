"""The zygote: a process that has imported PyTorch and Triton and nothing else, and forks runners.

A runner per untrusted candidate would otherwise pay PyTorch's import (seconds) each time. The
judge (:mod:`tuned.evaluation.runners`) starts one zygote (``python -m tuned.evaluation.zygote
SOCKET_FD``) and asks it over a Unix socket for each runner: the request carries the runner's
pipes, arena and log as file descriptors (``SCM_RIGHTS``); the zygote forks, the child becomes
the runner (:func:`tuned.evaluation.runner.serve_fds`), the zygote answers with its pid. The
zygote never ran candidate code, holds no input, reference or secret, and initialized no CUDA
context (a child initializes its own), so what a child inherits is what a fresh process has.
It reaps a child only when the judge asks for its exit status, so the pid is not reused before.
It makes itself non-dumpable before it forks (as the judge does), and the runners inherit that.

Requests (JSON, one per ``sendmsg``) and answers (JSON)::

    -> {"op": "fork", "dir": ..., "writable": ...} + fds [in, out, arena, log]
    <- {"pid": ...}
    -> {"op": "wait", "pid": ...}   <- {"status": <os.waitstatus_to_exitcode>}
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Sequence

__all__ = ["main"]

_MAX_MESSAGE = 1 << 16


def _child(fds: Sequence[int], message: dict[str, object]) -> None:
    from tuned.evaluation.runner import serve_fds

    in_fd, out_fd, arena_fd, log_fd = fds
    os.dup2(log_fd, 2)
    os.dup2(log_fd, 1)
    os.close(log_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 0
    try:
        serve_fds(in_fd, out_fd, arena_fd, str(message["dir"]), str(message["writable"]))
    except BaseException:  # noqa: BLE001 - the child never returns into the zygote's loop
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(sock: socket.socket) -> None:
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 8)
        except OSError:
            return
        if not data:
            return
        message = json.loads(data)
        if message.get("op") == "fork" and len(fds) == 4:
            pid = os.fork()
            if pid == 0:
                sock.close()
                _child(fds, message)
            for fd in fds:
                os.close(fd)
            answer: dict[str, object] = {"pid": pid}
        elif message.get("op") == "wait":
            for fd in fds:
                os.close(fd)
            try:
                _, status = os.waitpid(int(message["pid"]), 0)
                answer = {"status": os.waitstatus_to_exitcode(status)}
            except ChildProcessError:
                answer = {"status": None}
        else:
            for fd in fds:
                os.close(fd)
            answer = {"error": "unknown request"}
        sock.sendall(json.dumps(answer).encode() + b"\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sock = socket.socket(fileno=int(args[0]))
    from tuned.evaluation.modules import dump_stacks_on_signal, limit_resources, refuse_tracing

    limit_resources()
    dump_stacks_on_signal()  # and every runner it forks
    # Non-dumpable, and so is every runner it forks: a runner can neither write the zygote's
    # memory (which forks later candidates' runners) nor trace another runner.
    refuse_tracing()
    import torch  # noqa: F401 - what every runner needs, imported once
    import triton  # noqa: F401

    import tuned.evaluation.runner  # noqa: F401

    sock.sendall(b'{"ready": true}\n')
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
