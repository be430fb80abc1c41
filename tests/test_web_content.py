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


KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123456789"
MORE_PAGES: dict[str, tuple[dict[str, str], bytes]] = {
    # the key straddles the 50,000-character cut: 53 of its 54 characters came back unmasked
    "/key-at-the-cut": ({"Content-Type": "text/plain"}, ("x" * 49_990 + KEY + "y" * 100).encode()),
    "/base64-charset": ({"Content-Type": "text/plain; charset=base64"}, b"hello world"),
    "/undefined-charset": ({"Content-Type": "text/plain; charset=undefined"}, b"hello world"),
    "/gzip-members": (
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        b"".join(__import__("gzip").compress(part.encode()) for part in ("part one; ", "part two; ", "part three.")),
    ),
    "/utf16le": ({"Content-Type": "text/plain; charset=utf-16le"}, "hello in UTF-16".encode("utf-16-le")),
    "/vnd-csv": ({"Content-Type": "application/vnd.ms-excel"}, b"name,qty\napple,3\n"),
    "/form": ({"Content-Type": "application/x-www-form-urlencoded"}, b"status=ok&user=alice"),
    "/gzip-padded": (
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        __import__("gzip").compress(b"hello padded gzip") + b"\x00" * 16,
    ),
    # Python codecs that are no web encoding: punycode decodes in quadratic time (2 MB: a minute
    # of CPU in a thread the deadline cannot stop), utf-7 turns "+AGEAYgBj-" into "abc"
    "/punycode-charset": ({"Content-Type": "text/plain; charset=punycode"}, b"-" + b"a" * 20_000),
    "/utf7-meta": ({"Content-Type": "text/html"}, b"<meta charset='utf-7'><p>price +AGEAYgBj-</p>"),
    # labels the web reads as a superset: Turkish and Thai pages came out as Windows-1252
    "/turkish": ({"Content-Type": "text/plain; charset=iso-8859-9"}, "Türkçe: ğ ş ı İ".encode("cp1254")),
    "/thai": ({"Content-Type": "text/html"}, "<meta charset='tis-620'><p>ภาษาไทย</p>".encode("cp874")),
    "/photo.png": ({"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
    "/undeclared-binary": ({}, b"PK\x03\x04" + b"\x00" * 100),
    "/huge.json": ({"Content-Type": "application/json"}, b'{"results": [' + b'{"title": "t"},' * 200_000 + b"{}]}"),
}


@pytest.fixture
def more_port() -> Iterator[int]:
    with serve_pages(MORE_PAGES) as served:
        yield served


async def test_a_key_cut_by_the_length_limit_is_still_masked(more_port: int) -> None:
    from nanobot.secrets import register_secret

    register_secret(KEY)
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/key-at-the-cut")
    assert "(truncated)" in text and KEY[:8] not in text and "x***y" in text, text[-80:]


@pytest.mark.parametrize("path", ["/base64-charset", "/undefined-charset"])
async def test_a_charset_that_is_no_text_encoding_falls_back(more_port: int, path: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}{path}")).endswith("hello world")


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/punycode-charset", "-" + "a" * 20_000),
        ("/utf7-meta", "+AGEAYgBj-"),
        ("/turkish", "Türkçe: ğ ş ı İ"),
        ("/thai", "ภาษาไทย"),
    ],
)
async def test_a_charset_that_is_no_web_encoding_is_not_used(more_port: int, path: str, shown: str) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}{path}")).endswith(shown)


async def test_every_member_of_a_gzip_body_is_read(more_port: int) -> None:
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/gzip-members")
    assert text.endswith("part one; part two; part three."), text


async def test_a_search_answer_is_read_up_to_a_limit(more_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from nanobot.agent.tools import web

    monkeypatch.setattr(web, "MAX_SEARCH_BYTES", 1_000_000)  # the answer is 3 MB
    cfg = WebSearchConfig(provider="searxng", base_url=f"http://127.0.0.1:{more_port}/huge.json#")
    with pytest.raises(ToolError, match="larger than"):
        await WebSearchTool(cfg, timeout_s=10).execute(CTX, query="anything")


def test_an_ipv6_address_is_named_in_the_form_allow_hosts_takes() -> None:
    from nanobot.agent.tools.netguard import host_entry

    assert host_entry("::1", 8080) == "[::1]:8080" and host_entry("10.0.0.2", 80) == "10.0.0.2:80"


@pytest.mark.parametrize(("path", "kind"), [("/photo.png", "image/png"), ("/undeclared-binary", "unknown type")])
async def test_a_binary_body_is_named_not_shown(more_port: int, path: str, kind: str) -> None:
    """An image was handed to the model as a page of control characters."""
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}{path}")
    assert f"[binary content ({kind}, " in text and text.endswith("bytes); not shown]"), text


async def test_text_declared_as_an_application_type_and_padded_gzip_are_read(more_port: int) -> None:
    """The binary check hid text served as application/x-www-form-urlencoded (or yaml, javascript,
    octet-stream); NUL padding after a gzip member failed the whole fetch."""
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{more_port}"]))
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/form")).endswith("status=ok&user=alice")
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/gzip-padded")).endswith("hello padded gzip")
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/utf16le")).endswith("hello in UTF-16")
    assert (await tool.execute(CTX, url=f"http://127.0.0.1:{more_port}/vnd-csv")).endswith("apple,3\n")


def _echo_accept_encoding(handler) -> None:  # noqa: ANN001
    import json

    body = json.dumps({"results": [{"title": handler.headers.get("Accept-Encoding", ""), "url": "u", "content": "c"}]})
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body.encode())


async def test_a_search_asks_only_for_encodings_it_can_read() -> None:
    """httpx offers br and zstd when those packages are installed; the capped reader decodes gzip and
    deflate only, so every search failed with "unsupported content encoding: br" there."""
    with serve_pages({}, {"/search": _echo_accept_encoding}) as served:
        cfg = WebSearchConfig(provider="searxng", base_url=f"http://127.0.0.1:{served}")
        out = await WebSearchTool(cfg, timeout_s=10).execute(CTX, query="x")
    assert out.splitlines()[0] == "1. gzip, deflate", out


def _ddg_result(k: int, snippet: bool) -> str:
    link = f'<a rel="nofollow" class="result__a" href="https://example.org/{k}">Result {k}</a>'
    return link + (f'<a class="result__snippet" href="#">About <b>{k}</b>: more</a>' if snippet else "")


SEARCH_PAGES: dict[str, tuple[dict[str, str], bytes]] = {
    "/ddg": ({"Content-Type": "text/html"}, "".join(_ddg_result(k, k != 2) for k in (1, 2, 3)).encode()),
    # many links and no snippet: the lazy pattern spanning link to snippet ran for minutes
    "/ddg-bare": ({"Content-Type": "text/html"}, "".join(_ddg_result(k, False) for k in range(400)).encode()),
    "/deep.json": ({"Content-Type": "application/json"}, b"[" * 100_000 + b"]" * 100_000),
    # link tags that never close: every `<a` scanned to the end of the page twice over (cubic)
    "/ddg-open": ({"Content-Type": "text/html"}, b'<a class="result__a" ' * 1_200),
    # closers without their `>`: each scanned to the end of the page (quadratic)
    "/open-closers": ({"Content-Type": "text/html"}, b"<p>Lead</p><script>" + b"</script " * 40_000),
    "/huge-ref": ({"Content-Type": "text/html"}, b"<p>Useful text</p>&#" + b"1" * 5_000 + b"; &#65;&#x42;"),
    "/utf16-meta": ({"Content-Type": "text/html"}, b'<meta charset="utf-16"><p>Opening hours: 9 to 17</p>'),
    "/closers": (
        {"Content-Type": "text/html"},
        b"<p>Intro</p><script>x()</script ><p>PRICE: 42 EUR</p><style>a{}</style\n><svg-icon>Cart</svg-icon>"
        b"<p>Outro</p><script>y()</script>",
    ),
}


@pytest.fixture
def search_port() -> Iterator[int]:
    with serve_pages(SEARCH_PAGES) as served:
        yield served


async def test_duckduckgo_results_keep_their_own_snippets(search_port: int) -> None:
    """A result without a snippet took the next result's; a page of links without snippets froze
    the whole daemon (the regex ran on the event loop, past timeoutS)."""
    cfg = WebSearchConfig(provider="duckduckgo", base_url=f"http://127.0.0.1:{search_port}/ddg")
    out = await WebSearchTool(cfg, timeout_s=10).execute(CTX, query="x")
    assert "Result 1" in out and "About 1" in out and "Result 3" in out and "About 3" in out, out
    assert "Result 2" not in out and out.count("About 3") == 1 and out.count(": more") == 2, out  # past the bold word
    cfg = WebSearchConfig(provider="duckduckgo", base_url=f"http://127.0.0.1:{search_port}/ddg-bare")
    assert (await WebSearchTool(cfg, timeout_s=10).execute(CTX, query="x")).startswith("No results")
    cfg = WebSearchConfig(provider="searxng", base_url=f"http://127.0.0.1:{search_port}/deep.json#")
    with pytest.raises(ToolError, match="not JSON"):  # nested too deep: no traceback in the log
        await WebSearchTool(cfg, timeout_s=10).execute(CTX, query="x")


async def test_pages_are_cut_where_a_browser_cuts_them(search_port: int) -> None:
    """`<meta charset="utf-16">` made an ASCII page CJK garbage (browsers read it as UTF-8);
    `</script >` and `<svg-icon>` made everything up to the next exact closer vanish."""
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{search_port}"]))
    assert "Opening hours: 9 to 17" in await tool.execute(CTX, url=f"http://127.0.0.1:{search_port}/utf16-meta")
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{search_port}/closers")
    assert "PRICE: 42 EUR" in text and "Cart" in text and "Outro" in text, text
    assert "x()" not in text and "a{}" not in text and "y()" not in text, text


async def test_hostile_markup_is_read_within_the_deadline(search_port: int) -> None:
    """A page (or a search answer) built to make one regex run for minutes held the interpreter
    lock: every chat froze and the tool only said, long after, that it did not finish in time. A
    numeric character reference of 5,000 digits failed the whole fetch with a ValueError."""
    cfg = WebSearchConfig(provider="duckduckgo", base_url=f"http://127.0.0.1:{search_port}/ddg-open")
    assert (await WebSearchTool(cfg, timeout_s=5).execute(CTX, query="x")).startswith("No results")
    tool = WebFetchTool(WebToolConfig(allow_hosts=[f"127.0.0.1:{search_port}"], timeout_s=5))
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{search_port}/open-closers")
    assert "Lead" in text and "</script" in text, text[:200]  # unclosed: shown, as before
    text = await tool.execute(CTX, url=f"http://127.0.0.1:{search_port}/huge-ref")
    assert "Useful text" in text and "\ufffd" in text and "AB" in text, text


@pytest.mark.parametrize("url", ["http://[::1", "https://[::1%/", "http://[vfoo]/", f"http://{'a' * 300}.org/"])
async def test_a_malformed_url_is_named_not_a_traceback(url: str) -> None:
    with pytest.raises(ToolError, match="invalid URL|only http"):
        await WebFetchTool(WebToolConfig()).execute(CTX, url=url)
