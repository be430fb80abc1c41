"""A small pooled HTTP/1.1 client for JSON APIs: asyncio streams for the I/O, h11 for the protocol.

The direct model route needs two exchanges only, so this carries exactly those, without a general
HTTP library's import time and per-request bookkeeping:

- `post_json(url, body, ...)` sends `body` as JSON and returns the decoded JSON answer (a 200
  whose answer is only an error object raises as that error's status would);
- `post_events(url, body, ...)` sends `body` as JSON and yields the decoded `data` of each
  server-sent event of the answer, until `[DONE]` or the end of the body (events may arrive split
  across any number of reads).

Failures, as `nanobot.providers.errors.classify` reads them: a non-2xx answer raises
`HTTPStatusError` (`status_code`, and `response.headers` with lower-case names for Retry-After);
no connection within `timeout_s`, or no byte of the answer for `timeout_s`, raises `TimeoutError`;
an unreachable host or a dropped connection raises `ConnectError` (a `ConnectionError`); an answer
that is not JSON raises `json.JSONDecodeError`.

Connections are pooled per (event loop, scheme, host, port) and reused while the server keeps
them alive; a reused connection that the server closed while it sat idle is replaced once,
transparently, when it fails before any byte of the answer. Proxies come from the environment as
the usual clients read them (HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, NO_PROXY; http:// proxies only,
https targets through CONNECT); loopback addresses never go through a proxy.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
import urllib.request
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import SplitResult, urlsplit

import h11
from loguru import logger

from nanobot.secrets import mask_then_cut

READ_SIZE = 65_536
MAX_IDLE_PER_HOST = 64
#: servers close idle keep-alive connections after 5–75 s; older ones are not worth a failed write
IDLE_TTL_S = 4.0
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
USER_AGENT = "nanobot"


class ConnectError(ConnectionError):
    """The server could not be reached, or dropped the connection before answering in full."""


@dataclass(frozen=True)
class ErrorResponse:
    status_code: int
    headers: dict[str, str]  # lower-case names


class HTTPStatusError(Exception):
    """The server answered with a status outside 2xx (or reported an error inside a stream)."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        super().__init__(f"HTTP {status}: {_error_text(body)}")
        self.status_code = status
        self.response = ErrorResponse(status, headers)


ERROR_TEXT_CHARS = 300  # of a server's error message, in exceptions and log lines


def _error_text(body: bytes) -> str:
    """The server's own error message when it sent one in the usual shape, else the body's start."""
    try:
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return mask_then_cut(str(message), ERROR_TEXT_CHARS)
    except (ValueError, AttributeError):
        return mask_then_cut(body[: ERROR_TEXT_CHARS * 8].decode("utf-8", errors="replace"), ERROR_TEXT_CHARS)


def _stream_error_status(error: Any) -> int:
    """The HTTP status an error inside a stream stands for: its numeric code, else what its code or
    type names (OpenAI sends `"code": "rate_limit_exceeded"`: a rate limit, not a failing server
    to be asked again at once), else 500."""
    if not isinstance(error, dict):
        return 500
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code
    words = f"{code} {error.get('type')}".lower()
    for marks, status in ((("rate_limit", "rate limit", "quota"), 429), (("auth", "api_key", "api key"), 401)):
        if any(mark in words for mark in marks):
            return status
    return 500


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    try:
        import certifi  # the CA bundle the Python HTTP clients ship with, when installed

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        return ssl.create_default_context()


def _proxy_for(url: SplitResult) -> SplitResult | None:
    host = url.hostname or ""
    if host in _LOOPBACK or host.startswith("127.") or urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    raw = proxies.get(url.scheme) or proxies.get("all")
    if not raw:
        return None
    proxy = urlsplit(raw if "://" in raw else f"http://{raw}")
    if proxy.scheme != "http":
        logger.warning("ignoring the {} proxy from the environment: only http:// proxies work", proxy.scheme)
        return None
    return proxy


def _port(url: SplitResult) -> int:
    return url.port or (443 if url.scheme == "https" else 80)


class _Connection:
    __slots__ = ("reader", "writer", "protocol", "idle_since", "absolute_target")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, absolute: bool) -> None:
        self.reader = reader
        self.writer = writer
        self.protocol = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        self.absolute_target = absolute  # a plain-http request through a proxy names the whole URL

    def reusable(self, now: float) -> bool:
        return (
            not self.writer.is_closing() and not self.reader.at_eof() and now - self.idle_since < IDLE_TTL_S
        )

    def close(self) -> None:
        self.writer.close()


_pools: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str, int], list[_Connection]]
] = weakref.WeakKeyDictionary()


def _idle_list(url: SplitResult) -> list[_Connection]:
    per_loop = _pools.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault((url.scheme, url.hostname or "", _port(url)), [])


async def _tunnel(proxy: SplitResult, url: SplitResult) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection through an http:// proxy: CONNECT, then TLS to the target inside it."""
    reader, writer = await asyncio.open_connection(proxy.hostname, _port(proxy))
    authority = f"{url.hostname}:{_port(url)}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if proxy.username:
        secret = base64.b64encode(f"{proxy.username}:{proxy.password or ''}".encode()).decode()
        lines.append(f"Proxy-Authorization: Basic {secret}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.count(b" ") >= 1 else b""
    if not status.startswith(b"2"):
        writer.close()
        first_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
        raise ConnectError(f"the proxy refused the tunnel ({first_line})")
    await writer.start_tls(_tls_context(), server_hostname=url.hostname)
    return reader, writer


async def _open(url: SplitResult) -> _Connection:
    tls = _tls_context() if url.scheme == "https" else None
    proxy = _proxy_for(url)
    try:
        if proxy is None:
            reader, writer = await asyncio.open_connection(
                url.hostname, _port(url), ssl=tls, server_hostname=url.hostname if tls else None
            )
        elif tls is not None:
            reader, writer = await _tunnel(proxy, url)
        else:
            reader, writer = await asyncio.open_connection(proxy.hostname, _port(proxy))
    except TimeoutError:
        raise
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise ConnectError(f"cannot connect to {url.hostname}:{_port(url)}: {exc}") from exc
    return _Connection(reader, writer, absolute=proxy is not None and tls is None)


class _Exchange:
    """One request on one connection; each read waits at most `timeout_s`."""

    def __init__(self, conn: _Connection, timeout_s: float) -> None:
        self.conn = conn
        self.timeout_s = timeout_s
        self.answered = False  # some byte of the answer arrived: no silent retry after this

    async def next_event(self) -> Any:
        protocol = self.conn.protocol
        while True:
            try:
                event = protocol.next_event()
            except h11.RemoteProtocolError as exc:  # not HTTP, or the body was cut short
                raise ConnectError(self._cut(f"the server broke the HTTP exchange: {exc}")) from exc
            if event is not h11.NEED_DATA:
                if isinstance(event, h11.ConnectionClosed):
                    raise ConnectError(self._cut("the server closed the connection before answering in full"))
                return event
            try:
                # per read, never across a `yield` of the event stream (its reader may be slow)
                async with asyncio.timeout(self.timeout_s):
                    data = await self.conn.reader.read(READ_SIZE)
            except TimeoutError:
                raise
            except OSError as exc:
                raise ConnectError(self._cut(f"the connection failed: {exc}")) from exc
            self.answered = self.answered or bool(data)
            protocol.receive_data(data)

    def _cut(self, what: str) -> str:
        """The error text; once some of the answer arrived the server was reached, and the text says
        so in the words the error classes know ("stream ended before", not "could not be reached")."""
        return f"{what} (the answer stream ended before it was complete)" if self.answered else what

    async def body(self) -> bytes:
        parts = []
        while not isinstance(event := await self.next_event(), h11.EndOfMessage):
            parts.append(event.data)
        return b"".join(parts)


def _request_head(url: SplitResult, conn: _Connection, headers: dict[str, str], body: bytes) -> h11.Request:
    target = url.path or "/"
    if url.query:
        target += f"?{url.query}"
    if conn.absolute_target:
        target = f"{url.scheme}://{url.netloc}{target}"
    host = url.hostname or ""
    if url.port:
        host = f"{host}:{url.port}"
    head = [("host", host), ("user-agent", USER_AGENT), ("content-type", "application/json")]
    head += [("content-length", str(len(body))), *headers.items()]
    return h11.Request(method="POST", target=target, headers=head)


async def _start(
    url: SplitResult, headers: dict[str, str], body: bytes, timeout_s: float
) -> tuple[_Exchange, h11.Response]:
    """Send the request on a pooled (or new) connection and read the answer's status and headers."""
    idle = _idle_list(url)
    now = time.monotonic()
    while True:
        conn = None
        while idle and conn is None:
            candidate = idle.pop()
            if candidate.reusable(now):
                conn = candidate
            else:
                candidate.close()
        reused = conn is not None
        if conn is None:
            async with asyncio.timeout(timeout_s):
                conn = await _open(url)
        exchange = _Exchange(conn, timeout_s)
        try:
            protocol = conn.protocol
            conn.writer.write(
                protocol.send(_request_head(url, conn, headers, body))
                + protocol.send(h11.Data(data=body))
                + protocol.send(h11.EndOfMessage())
            )
            if conn.writer.transport.get_write_buffer_size() > READ_SIZE:  # a big prompt: flow control
                async with asyncio.timeout(timeout_s):
                    await conn.writer.drain()
            response = await exchange.next_event()
        except ConnectionError as exc:
            conn.close()
            if reused and not exchange.answered:
                continue  # the server had dropped the idle connection: the request never reached it
            if isinstance(exc, ConnectError):
                raise
            raise ConnectError(f"the connection failed: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return exchange, response


def _finish(exchange: _Exchange, url: SplitResult) -> None:
    """Return the connection to its pool when the server keeps it open, else close it."""
    conn = exchange.conn
    protocol = conn.protocol
    if protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
        protocol.start_next_cycle()
        idle = _idle_list(url)
        if len(idle) < MAX_IDLE_PER_HOST:
            conn.idle_since = time.monotonic()
            idle.append(conn)
            return
    conn.close()


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _headers_of(response: h11.Response) -> dict[str, str]:
    return {name.decode().lower(): value.decode("latin-1") for name, value in response.headers}


async def post_json(url: str, body: dict[str, Any], *, headers: dict[str, str], timeout_s: float) -> Any:
    """POST `body` as JSON; the decoded JSON answer (see the module docstring for the failures)."""
    target = urlsplit(url)
    payload = _encode(body)
    exchange, response = await _start(target, headers, payload, timeout_s)
    try:
        raw = await exchange.body()
    except BaseException:
        exchange.conn.close()
        raise
    _finish(exchange, target)
    if not 200 <= response.status_code < 300:
        raise HTTPStatusError(response.status_code, _headers_of(response), raw)
    decoded = _json(raw)
    if _is_error_answer(decoded):  # some proxies answer a rate limit with 200 and an error object
        raise HTTPStatusError(_stream_error_status(decoded["error"]), _headers_of(response), raw)
    return decoded


def _is_error_answer(decoded: Any) -> bool:
    """An answer that carries only an error object (no choices, no embeddings)."""
    if not isinstance(decoded, dict) or not decoded.get("error"):
        return False
    return not (decoded.get("choices") or decoded.get("data"))


async def post_events(
    url: str, body: dict[str, Any], *, headers: dict[str, str], timeout_s: float
) -> AsyncIterator[Any]:
    """POST `body` as JSON and yield the decoded data of each server-sent event of the answer."""
    target = urlsplit(url)
    payload = _encode(body)
    exchange, response = await _start(target, headers, payload, timeout_s)
    complete = False
    try:
        if not 200 <= response.status_code < 300:
            raw = await exchange.body()
            complete = True
            raise HTTPStatusError(response.status_code, _headers_of(response), raw)
        async for data in _events(exchange):
            yield data
        complete = True
    finally:
        if complete:
            _finish(exchange, target)
        else:  # the reader stopped early or the stream broke: the connection's state is unknown
            exchange.conn.close()


def _json(raw: bytes) -> Any:
    """JSON from a server's bytes, in the encoding they are in (a BOM, UTF-16: as json.loads reads
    bytes). Bytes that do not decode (half an emoji, a Latin-1 byte) become U+FFFD: the answer
    around them is kept, where json.loads(bytes) threw all of it away."""
    return json.loads(raw.decode(json.detect_encoding(raw), "replace"))


async def _events(exchange: _Exchange) -> AsyncIterator[Any]:
    pending = b""
    data_lines: list[bytes] = []
    done = False
    while True:
        event = await exchange.next_event()
        if isinstance(event, h11.EndOfMessage):
            lines = [pending, b""]  # a last event without its blank line still counts
        else:
            pending += event.data
            *lines, pending = pending.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                data_lines.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif not line and data_lines:
                data = b"\n".join(data_lines)
                data_lines = []
                if done or data.strip() == b"[DONE]":
                    done = True
                    continue
                decoded = _json(data)
                if _is_error_answer(decoded):
                    raise HTTPStatusError(_stream_error_status(decoded["error"]), {}, data)
                yield decoded
            # other fields (event:, id:, retry:) and comments carry nothing for these APIs
        if isinstance(event, h11.EndOfMessage):
            return
