"""A real HTTP server on loopback that speaks OpenAI's chat completions protocol, scripted.

Each request to ``POST /v1/chat/completions`` takes the next :class:`Step` of the script
(the last one repeats once the script is used up, or ``default`` answers): a reply with
content and usage, an error status with an OpenAI-style error body, a hang longer than the
client's timeout, or a reply without ``usage``. Every request is recorded (body and headers),
so tests can check what was sent. Run standalone (``python tests/llm/chat_server.py PORT
REPLY_FILE``) it answers every request with the file's content: the daemon's end-to-end test
uses that to run a second process.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One scripted answer."""

    content: str = ""
    status: int = 200
    error_code: str = ""
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = (100, 50)
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


def reply(content: str, **kw: Any) -> Step:
    return Step(content=content, **kw)


def error(status: int, code: str = "", **kw: Any) -> Step:
    return Step(status=status, error_code=code, **kw)


class ChatServer:
    """``with ChatServer([steps]) as srv: ... srv.base_url ... srv.requests``."""

    def __init__(
        self,
        script: list[Step] | None = None,
        *,
        default: Callable[[dict[str, Any]], Step] | None = None,
    ) -> None:
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                step = server._next(body, {k.lower(): v for k, v in self.headers.items()})
                if step.delay_s:
                    time.sleep(step.delay_s)
                if step.status != 200:
                    payload: dict[str, Any] = {
                        "error": {
                            "message": f"scripted {step.status}",
                            "type": step.error_code or "server_error",
                            "code": step.error_code or None,
                        }
                    }
                else:
                    payload = {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": step.content},
                                "finish_reason": step.finish_reason,
                            }
                        ],
                    }
                    if step.usage is not None:
                        p, c = step.usage
                        payload["usage"] = {
                            "prompt_tokens": p,
                            "completion_tokens": c,
                            "total_tokens": p + c,
                        }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in step.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a hang past its timeout)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Step:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self.script:
                return self.script.pop(0)
        if self.default is not None:
            return self.default(body)
        return error(500)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def fenced(source: str, prose: str = "Here is the rewritten module.") -> str:
    return f"{prose}\n\n```python\n{source}\n```\n"


def main() -> None:  # pragma: no cover - a subprocess in the end-to-end test
    port, reply_file = int(sys.argv[1]), sys.argv[2]
    with open(reply_file, encoding="utf-8") as f:
        text = f.read()
    srv = ChatServer(default=lambda body: reply(text, usage=(1200, 800)))
    srv._httpd.server_close()
    srv._httpd = ThreadingHTTPServer(("127.0.0.1", port), srv._httpd.RequestHandlerClass)
    srv._httpd.daemon_threads = True
    log = sys.argv[3] if len(sys.argv) > 3 else None

    def default(body: dict[str, Any]) -> Step:
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(body) + "\n")
        return reply(text, usage=(1200, 800))

    srv.default = default
    srv._httpd.serve_forever()


if __name__ == "__main__":  # pragma: no cover
    main()
