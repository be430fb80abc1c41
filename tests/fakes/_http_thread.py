"""A stdlib HTTP server on 127.0.0.1 running in a daemon thread: the lifecycle shared by the fakes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog (5) drops the SYNs of a burst of clients, which then wait a
    # second for the retransmit: a fake must not be the bottleneck of a concurrency benchmark
    request_queue_size = 128


class ThreadedHTTPFake:
    """Base of a fake server: call `_serve(handler_class)` in `__init__`, then `start()` / `stop()`."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
