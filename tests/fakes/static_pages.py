"""Static pages on 127.0.0.1 for the web tools' tests: `serve_pages(pages)` serves each path's
(headers, body) with a Content-Length, in daemon threads, and yields the port. `slow` paths get
their own handler, by path prefix (a page that never finishes): a function writing to the request's
`wfile`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Page = tuple[dict[str, str], bytes]
Writer = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def serve_pages(pages: dict[str, Page], writers: dict[str, Writer] | None = None) -> Iterator[int]:
    custom = writers or {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            writer = next((w for prefix, w in custom.items() if path.startswith(prefix)), None)
            if writer is not None:
                writer(self)
                return
            headers, body = pages[path]
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # the client gave up (a bounded read): nothing to do
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def trickle(total_bytes: int, every_s: float, content_type: str = "text/plain") -> Writer:
    """A response that announces `total_bytes` and sends one byte every `every_s` (a server that
    never quite finishes: total deadlines are tested against it)."""

    def write(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(total_bytes))
        handler.end_headers()
        try:
            for _ in range(total_bytes):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(every_s)
        except OSError:  # the client gave up: the point of the test
            pass

    return write
