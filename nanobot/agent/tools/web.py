"""Web tools: `web_fetch` (with an SSRF guard) and `web_search` (brave, tavily, searxng, duckduckgo).

web_fetch checks every hop's host with netguard (public addresses only unless allowHosts lists
it), connects to the very address it checked (Host header and TLS SNI keep the real name), and
`tools.web.timeoutS` is the deadline of the whole fetch, redirects and slow bodies included.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus, urljoin, urlparse, urlunparse

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.agent.tools.netguard import AddressRefused, host_allowed, host_entry, resolve_checked
from nanobot.agent.tools.web_content import binary_body, decode_body, html_to_text, read_limited
from nanobot.config.schema import WebSearchConfig, WebToolConfig
from nanobot.secrets import mask_cut

if TYPE_CHECKING:
    import httpx  # imported when a fetch or search runs: ~0.1-0.3 s that a turn without them never pays

MASK_MARGIN_CHARS = 1024  # masked past the shown text's end: a secret across the cut is still whole
MAX_SEARCH_BYTES = 2 * 1024 * 1024  # a search answer (JSON of a few results, or a results page)
MAX_TEXT_CHARS = 50_000
USER_AGENT = "nanobot/0.1 (+personal assistant)"
_SEARCH_ENDPOINTS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "duckduckgo": "https://html.duckduckgo.com/html/",
}


async def check_url_allowed(url: str, allow_hosts: list[str], *, shared: bool = False) -> str:
    """The checked address to connect to for `url` (raises ToolError when the URL may not be fetched).
    The name looked up is the one the request will carry (`ascii_host`: `faß.de` was looked up as
    `fass.de`, another domain, and sent as `xn--fa-hia.de`); `shared`: a group's or guest's fetch,
    which allowHosts does not open."""
    try:
        parsed = urlparse(url)
        hostname = parsed.hostname
    except ValueError as exc:  # "http://[::1": the model gets what is wrong, the log no traceback
        raise ToolError(f"invalid URL {url}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not hostname:
        raise ToolError(f"only http(s) URLs with a host are allowed: {url}")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise ToolError(f"invalid port in {url}") from None
    try:
        host = ascii_host(url)
        if host != parsed.hostname and host_allowed(parsed.hostname, port, allow_hosts):
            allow_hosts = [*allow_hosts, host_entry(host, port)]  # allowed by its written name
        return await resolve_checked(host, port, allow_hosts, shared=shared)
    except ValueError as exc:  # a label too long to encode, say
        raise ToolError(f"invalid URL {url}: {exc}") from None
    except AddressRefused as exc:
        raise ToolError(str(exc)) from None


def ascii_host(url: str) -> str:
    """The URL's host as it goes on the wire (IDNA 2008, as httpx writes it)."""
    import httpx

    try:
        return httpx.URL(url).raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise ToolError(f"invalid URL {url}: {exc}") from None


def pinned_request(url: str, address: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL with its host replaced by the checked address, the Host header and the TLS SNI name,
    so the connection goes where the check said while the server still sees the real host name
    (in its ASCII form: `bücher.de` failed every fetch as a header no ASCII could encode)."""
    import httpx

    parsed = urlparse(url)
    literal = f"[{address}]" if ":" in address else address
    netloc = f"{literal}:{parsed.port}" if parsed.port else literal
    try:
        host_header = httpx.URL(url).netloc.decode("ascii")
    except (httpx.InvalidURL, UnicodeError) as exc:
        raise ToolError(f"invalid URL {url}: {exc}") from None
    host = ascii_host(url)
    extensions = {"sni_hostname": host} if parsed.scheme == "https" else {}
    return urlunparse(parsed._replace(netloc=netloc)), {"Host": host_header}, extensions


class WebFetchTool(Tool):
    name = "web_fetch"
    description = "Fetch a web page or text resource by URL and return its readable text."
    parameters = {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "http(s) URL"}},
        "required": ["url"],
    }

    def __init__(self, cfg: WebToolConfig) -> None:
        self.cfg = cfg

    async def execute(self, ctx: ToolContext, url: str, **_: Any) -> str:
        # the exceptions to "public addresses only" are the owner's: a group member or a guest
        # reached the home automation API allowHosts lists for the owner
        allow_hosts = [] if ctx.shared else self.cfg.allow_hosts
        try:
            async with asyncio.timeout(self.cfg.timeout_s):
                return await self._fetch(url.strip(), allow_hosts, shared=ctx.shared)
        except TimeoutError:
            raise ToolError(f"fetch did not finish within {self.cfg.timeout_s:g} s: {url}") from None

    async def _fetch(self, current: str, allow_hosts: list[str], *, shared: bool = False) -> str:
        import httpx

        async with httpx.AsyncClient(
            timeout=self.cfg.timeout_s,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
            trust_env=False,
        ) as client:
            for _hop in range(self.cfg.max_redirects + 1):
                address = await check_url_allowed(current, allow_hosts, shared=shared)
                target, headers, extensions = pinned_request(current, address)
                try:
                    request = client.build_request("GET", target, headers=headers, extensions=extensions)
                    resp = await client.send(request, stream=True)
                    try:
                        if resp.is_redirect and resp.headers.get("location"):
                            current = urljoin(current, resp.headers["location"])
                            continue
                        body, truncated = await read_limited(resp, self.cfg.max_bytes)
                    finally:
                        await resp.aclose()
                    # Text extraction is CPU work on up to max_bytes: off the event loop, so every
                    # other chat (and this fetch's own deadline) keeps running meanwhile.
                    return await asyncio.to_thread(self._render, resp, body, current, truncated)
                except httpx.HTTPError as exc:
                    raise ToolError(f"fetch failed: {type(exc).__name__}: {exc}") from None
        raise ToolError(f"too many redirects (more than {self.cfg.max_redirects})")

    @staticmethod
    def _render(resp: httpx.Response, body: bytes, url: str, truncated: bool) -> str:
        ctype = resp.headers.get("content-type", "")
        if binary_body(ctype, body):  # an image or an archive decoded as text is noise for the model
            what = f"{ctype or 'unknown type'}, {len(body)}{'+' if truncated else ''} bytes"
            return f"URL: {url}\nStatus: {resp.status_code}\n\n[binary content ({what}); not shown]"
        text = decode_body(body, resp.charset_encoding).lstrip("\ufeff")
        if "html" in ctype or text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
            text = html_to_text(text)
        # masked before it is cut (a key cut in half no longer matches), and a piece of one at a cut
        # the byte limit made; the registry masks the result again, whole. Only what can be shown is
        # masked (with room for a secret across the cut): a 2 MB page with many secrets took seconds.
        if len(text) > MAX_TEXT_CHARS + MASK_MARGIN_CHARS:
            text, truncated = text[: MAX_TEXT_CHARS + MASK_MARGIN_CHARS], True
        text = mask_cut(text, end=truncated)
        if len(text) > MAX_TEXT_CHARS:
            text, truncated = mask_cut(text[:MAX_TEXT_CHARS], end=True), True
        note = " (truncated)" if truncated else ""
        return f"URL: {url}\nStatus: {resp.status_code}{note}\n\n{text}"


def _hits(items: list[dict[str, Any]], snippet_key: str) -> list[dict[str, str]]:
    """A search API's result objects as title / url / snippet (the snippet's key differs per API)."""
    found = items if isinstance(items, list) else []
    return [
        {"title": str(i.get("title", "")), "url": str(i.get("url", "")), "snippet": str(i.get(snippet_key, ""))}
        for i in found
        if isinstance(i, dict)
    ]


class WebSearchTool(Tool):
    name = "web_search"
    description = "Search the web; returns titles, URLs and snippets."
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "required": ["query"],
    }

    def __init__(self, cfg: WebSearchConfig, timeout_s: float = 20.0) -> None:
        self.cfg = cfg
        self.timeout_s = timeout_s

    async def execute(self, ctx: ToolContext, query: str, count: int | None = None, **_: Any) -> str:
        provider = self.cfg.provider
        if not provider:
            raise ToolError(
                "web search is not configured: set tools.web.search.provider "
                "(brave, tavily, searxng or duckduckgo) and its apiKey/baseUrl"
            )
        if provider in ("brave", "tavily") and not self.cfg.api_key:
            raise ToolError(f"web search provider '{provider}' needs tools.web.search.apiKey")
        if provider == "searxng" and not self.cfg.base_url:
            raise ToolError("web search provider 'searxng' needs tools.web.search.baseUrl")
        n = count or self.cfg.max_results
        import httpx

        try:
            # one deadline for the whole search (httpx's timeout is per read: an API that sends a
            # byte now and then held the turn far past it)
            async with asyncio.timeout(self.timeout_s):
                async with httpx.AsyncClient(
                    # the encodings read_limited decodes (httpx offers br and zstd when they are installed)
                    timeout=self.timeout_s, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"}
                ) as client:
                    results = await getattr(self, f"_{provider}")(client, query, n)
        except httpx.HTTPError as exc:
            raise ToolError(f"search failed: {type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise ToolError(f"search did not finish within {self.timeout_s:g} s") from None
        if not results:
            return f"No results for: {query}"
        return "\n\n".join(
            f"{i}. {r['title']}\n   {r['url']}\n   {r['snippet']}" for i, r in enumerate(results[:n], 1)
        )

    def _endpoint(self, provider: str) -> str:
        return self.cfg.base_url or _SEARCH_ENDPOINTS[provider]

    @staticmethod
    async def _answer(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> bytes:
        """The search answer's body, at most MAX_SEARCH_BYTES: read whole, a 150 MB answer took
        350 MB of the daemon's memory (an endless one all of it)."""
        async with client.stream(method, url, **kwargs) as resp:
            resp.raise_for_status()
            body, cut = await read_limited(resp, MAX_SEARCH_BYTES)
        if cut:
            raise ToolError(f"the search answer was larger than {MAX_SEARCH_BYTES // 2**20} MB")
        return body

    @staticmethod
    def _json(body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # nested too deep to parse is no answer either
            raise ToolError("the search answer was not JSON") from None
        return data if isinstance(data, dict) else {}

    async def _brave(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        body = await self._answer(
            client,
            "GET",
            self._endpoint("brave"),
            params={"q": query, "count": n},
            headers={"X-Subscription-Token": self.cfg.api_key, "Accept": "application/json"},
        )
        web = self._json(body).get("web")
        return _hits(web.get("results", []) if isinstance(web, dict) else [], "description")

    async def _tavily(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        body = await self._answer(
            client,
            "POST",
            self._endpoint("tavily"),
            json={"api_key": self.cfg.api_key, "query": query, "max_results": n},
        )
        return _hits(self._json(body).get("results", []), "content")

    async def _searxng(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        url = self.cfg.base_url.rstrip("/") + "/search"
        body = await self._answer(client, "GET", url, params={"q": query, "format": "json"})
        return _hits(self._json(body).get("results", []), "content")

    async def _duckduckgo(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        page = (await self._answer(client, "GET", f"{self._endpoint('duckduckgo')}?q={quote_plus(query)}")).decode(
            "utf-8", errors="replace"
        )
        # parsing is CPU work on up to MAX_SEARCH_BYTES: off the event loop, as web_fetch's
        return await asyncio.to_thread(_duckduckgo_hits, page)


# [^<>]: each scan stops at the next tag, so a page of `<a class="result__a" ` without any `>` costs
# linear time (with [^>]+ twice, every `<a` scanned to the end of the page: minutes for 42 KB)
_DDG_ANCHOR = re.compile(r"<a\s[^<>]*>")
_DDG_HREF = re.compile(r'\shref="([^"]+)"')
_DDG_SNIPPET = re.compile(r'class="result__snippet"[^<>]*>')


def _duckduckgo_hits(page: str) -> list[dict[str, str]]:
    """Each result link of DuckDuckGo's HTML page with the snippet before the next link, in one
    pass (a lazy regex spanning link to snippet took minutes on a page of links without snippets,
    and the whole daemon waited: `timeoutS` cannot stop a regex)."""
    links = [(tag, href) for tag in _DDG_ANCHOR.finditer(page)
             if 'class="result__a"' in tag.group() and (href := _DDG_HREF.search(tag.group()))]
    results = []
    for k, (link, href) in enumerate(links):
        end = links[k + 1][0].start() if k + 1 < len(links) else len(page)
        title_end = page.find("</a>", link.end(), end)
        snippet = _DDG_SNIPPET.search(page, link.end(), end)
        if title_end < 0 or snippet is None:
            continue
        # the snippet's own element closes it (bold query words inside it close theirs first)
        text_end = page.find("</a>", snippet.end(), end)
        if text_end < 0:
            text_end = page.find("</", snippet.end(), end)
        results.append(
            {
                "url": html.unescape(href.group(1)),
                "title": html_to_text(page[link.end() : title_end]),
                "snippet": html_to_text(page[snippet.end() : text_end if text_end >= 0 else end]),
            }
        )
    return results
