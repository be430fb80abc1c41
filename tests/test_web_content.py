"""web_fetch reads pages as a browser would, and web_search keeps to its deadline.

Served on 127.0.0.1 (allowed with tools.web.allowHosts). Before: a Latin-1 or Windows-1252 page
that declared its charset only in <meta>, or not at all, reached the model with U+FFFD for every
accent; a byte-order mark was ignored (UTF-16 came out as garbage, a UTF-8 BOM hid the HTML);
raw deflate was refused; a search API trickling a byte now and then held the turn ten times past
timeoutS.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator

import pytest

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.web import WebFetchTool, WebSearchTool
from nanobot.config.schema import WebSearchConfig, WebToolConfig
from tests.fakes.static_pages import serve_pages, trickle

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


@pytest.fixture
def port() -> Iterator[int]:
    # a search API that never finishes its answer: a byte every 0.3 s
    with serve_pages(PAGES, {"/trickle": trickle(100, 0.3, "application/json")}) as served:
        yield served


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
