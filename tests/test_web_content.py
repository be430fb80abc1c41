"""web_fetch reads pages as a browser would, and web_search keeps to its deadline.

Served on 127.0.0.1 (allowed with tools.web.allowHosts). Before: a Latin-1 or Windows-1252 page
that declared its charset only in <meta>, or not at all, reached the model with U+FFFD for every
accent; a byte-order mark was ignored (UTF-16 came out as garbage, a UTF-8 BOM hid the HTML);
raw deflate was refused; a search API trickling a byte now and then held the turn ten times past
timeoutS.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.web import WebFetchTool, WebSearchTool
from nanobot.config.schema import WebSearchConfig, WebToolConfig

CTX = ToolContext(channel="cli", chat_id="direct", session_key="cli:direct", sender_id="user")
TEXT = "Café crème, naïve façade – 10 €"
PAGES: dict[str, tuple[dict[str, str], bytes]] = {
    "/latin1-meta": (
        {"Content-Type": "text/html"},
        f"<html><head><meta charset='iso-8859-1'></head><body><p>{TEXT}</p></body></html>".encode("cp1252"),
    ),
    "/cp1252-plain": ({"Content-Type": "text/plain"}, TEXT.encode("cp1252")),
    "/utf16-bom": ({"Content-Type": "text/html"}, f"<html><body><p>{TEXT}</p></body></html>".encode("utf-16")),
    "/utf8-bom": ({}, b"\xef\xbb\xbf<!DOCTYPE html><html><body><script>var x=1</script><p>" + TEXT.encode() + b"</p>"),
    "/raw-deflate": (
        {"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": "deflate"},
        (lambda c: c.compress(TEXT.encode()) + c.flush())(zlib.compressobj(wbits=-zlib.MAX_WBITS)),
    ),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/trickle"):  # a search API that never finishes its answer
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.3)
            except OSError:
                pass
            return
        headers, body = PAGES[self.path]
        self.send_response(200)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def port() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("path", sorted(PAGES))
async def test_pages_are_read_in_their_own_encoding(port: int, path: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{port}"]))
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{port}{path}")
    body = text.split("\n\n", 1)[1]
    assert TEXT in body, body
    assert "\ufffd" not in body and "\ufeff" not in body and "<script>" not in body and "var x" not in body


async def test_a_search_that_never_finishes_stops_at_its_deadline(port: int) -> None:
    cfg = WebSearchConfig(provider="searxng", base_url=f"http://127.0.0.1:{port}/trickle")
    tool = WebSearchTool(cfg, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ToolError, match="did not finish within 1 s"):
        await tool.execute(CTX, query="anything")
    assert time.monotonic() - started < 10  # it took 30 s before (a byte every 0.3 s, 100 bytes)
