"""Serving ``/metrics`` on the configured address, and proving it answers before READY."""

from __future__ import annotations

import errno
import logging
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from tuned.errors import TunedError
from tuned.metrics.exposition import MetricsHTTPServer

__all__ = ["MetricsAddressError", "MetricsServer"]

log = logging.getLogger(__name__)


class MetricsAddressError(TunedError):
    """The metrics address cannot be served (in use, not an address of this host)."""


@dataclass
class MetricsServer:
    """``/metrics`` of ``registry`` on ``host:port``, in a background thread."""

    host: str
    port: int
    registry: CollectorRegistry
    _server: MetricsHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            self._server = MetricsHTTPServer((self.host, self.port), self.registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise MetricsAddressError(
                    f"cannot serve metrics on {self.listen}: the address is already in use "
                    "(another ktuned or exporter?); stop it or set metrics.listen in the "
                    "config to a free HOST:PORT"
                ) from exc
            raise MetricsAddressError(
                f"cannot serve metrics on {self.listen}: {exc.strerror or exc}; set "
                "metrics.listen in the config to an address of this host"
            ) from exc
        self._thread = self._server.serve_in_background()
        self.port = int(self._server.server_address[1])
        log.info("metrics on http://%s/metrics", self.listen)

    @property
    def listen(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def check_answers(self, timeout: float = 10.0) -> None:
        """GET ``/metrics`` once (the whole collector runs); raise if it does not answer."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{self.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                response.read()
        except (urllib.error.URLError, OSError) as exc:
            raise MetricsAddressError(f"the metrics endpoint {url} does not answer: {exc}") from exc

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
