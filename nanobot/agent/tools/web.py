"""Web tools: `web_fetch` (with an SSRF guard) and `web_search` (brave, tavily, searxng, duckduckgo)."""

from __future__ import annotations

import asyncio
import html
import ipaddress
import re
import socket
from typing import Any
from urllib.parse import quote_plus, urljoin, urlparse

import httpx

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.config.schema import WebSearchConfig, WebToolConfig

MAX_TEXT_CHARS = 50_000
USER_AGENT = "nanobot/0.1 (+personal assistant)"
_SEARCH_ENDPOINTS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "duckduckgo": "https://html.duckduckgo.com/html/",
}


def _ip_is_private(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_reserved
        or addr.is_multicast
        or addr.is_unspecified
    )


async def check_url_allowed(url: str, allow_hosts: list[str]) -> None:
    """Refuse non-HTTP URLs and hosts resolving to private, loopback or link-local addresses."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ToolError(f"only http(s) URLs with a host are allowed: {url}")
    host = parsed.hostname.lower()
    if host in {h.lower() for h in allow_hosts}:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, parsed.port or 443, type=socket.SOCK_STREAM
        )
    except socket.gaierror as exc:
        raise ToolError(f"cannot resolve host {host}: {exc.strerror}") from None
    for info in infos:
        if _ip_is_private(str(info[4][0])):
            raise ToolError(
                f"refusing to fetch {host}: it resolves to a private or loopback address "
                "(add it to tools.web.allowHosts to allow it)"
            )


def html_to_text(markup: str) -> str:
    markup = re.sub(r"(?is)<(script|style|noscript|svg|head)\b.*?</\1>", " ", markup)
    markup = re.sub(r"(?i)<br\s*/?>|</(p|div|li|h[1-6]|tr|section|article)>", "\n", markup)
    markup = re.sub(r"(?s)<[^>]+>", " ", markup)
    text = html.unescape(markup)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)  # tags replaced by spaces leave them at line edges
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


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
        current = url.strip()
        async with httpx.AsyncClient(
            timeout=self.cfg.timeout_s,
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            trust_env=False,
        ) as client:
            for _hop in range(self.cfg.max_redirects + 1):
                await check_url_allowed(current, self.cfg.allow_hosts)
                try:
                    async with client.stream("GET", current) as resp:
                        if resp.is_redirect and resp.headers.get("location"):
                            current = urljoin(current, resp.headers["location"])
                            continue
                        body = bytearray()
                        async for chunk in resp.aiter_bytes():
                            body.extend(chunk)
                            if len(body) > self.cfg.max_bytes:
                                break
                        truncated = len(body) > self.cfg.max_bytes
                        return self._render(resp, bytes(body[: self.cfg.max_bytes]), current, truncated)
                except httpx.HTTPError as exc:
                    raise ToolError(f"fetch failed: {type(exc).__name__}: {exc}") from None
        raise ToolError(f"too many redirects (more than {self.cfg.max_redirects})")

    @staticmethod
    def _render(resp: httpx.Response, body: bytes, url: str, truncated: bool) -> str:
        ctype = resp.headers.get("content-type", "")
        text = body.decode(resp.encoding or "utf-8", errors="replace")
        if "html" in ctype or text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
            text = html_to_text(text)
        if len(text) > MAX_TEXT_CHARS:
            text, truncated = text[:MAX_TEXT_CHARS], True
        note = " (truncated)" if truncated else ""
        return f"URL: {url}\nStatus: {resp.status_code}{note}\n\n{text}"


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
        try:
            async with httpx.AsyncClient(
                timeout=self.timeout_s, headers={"User-Agent": USER_AGENT}
            ) as client:
                results = await getattr(self, f"_{provider}")(client, query, n)
        except httpx.HTTPError as exc:
            raise ToolError(f"search failed: {type(exc).__name__}: {exc}") from None
        if not results:
            return f"No results for: {query}"
        return "\n\n".join(
            f"{i}. {r['title']}\n   {r['url']}\n   {r['snippet']}" for i, r in enumerate(results[:n], 1)
        )

    def _endpoint(self, provider: str) -> str:
        return self.cfg.base_url or _SEARCH_ENDPOINTS[provider]

    async def _brave(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        resp = await client.get(
            self._endpoint("brave"),
            params={"q": query, "count": n},
            headers={"X-Subscription-Token": self.cfg.api_key, "Accept": "application/json"},
        )
        resp.raise_for_status()
        items = resp.json().get("web", {}).get("results", [])
        return [
            {"title": i.get("title", ""), "url": i.get("url", ""), "snippet": i.get("description", "")}
            for i in items
        ]

    async def _tavily(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        resp = await client.post(
            self._endpoint("tavily"), json={"api_key": self.cfg.api_key, "query": query, "max_results": n}
        )
        resp.raise_for_status()
        return [
            {"title": i.get("title", ""), "url": i.get("url", ""), "snippet": i.get("content", "")}
            for i in resp.json().get("results", [])
        ]

    async def _searxng(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        resp = await client.get(
            self.cfg.base_url.rstrip("/") + "/search", params={"q": query, "format": "json"}
        )
        resp.raise_for_status()
        return [
            {"title": i.get("title", ""), "url": i.get("url", ""), "snippet": i.get("content", "")}
            for i in resp.json().get("results", [])
        ]

    async def _duckduckgo(self, client: httpx.AsyncClient, query: str, n: int) -> list[dict[str, str]]:
        resp = await client.get(f"{self._endpoint('duckduckgo')}?q={quote_plus(query)}")
        resp.raise_for_status()
        results = []
        pattern = re.compile(
            r'(?s)<a[^>]+class="result__a"[^>]+href="([^"]+)"[^>]*>(.*?)</a>.*?'
            r'class="result__snippet"[^>]*>(.*?)</'
        )
        for href, title, snippet in pattern.findall(resp.text):
            results.append(
                {"url": html.unescape(href), "title": html_to_text(title), "snippet": html_to_text(snippet)}
            )
        return results
