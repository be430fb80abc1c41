"""The direct route's HTTP layer on raw sockets: keep-alive reuse, a connection the server dropped
while idle, a drop in the middle of an answer, a stalled stream, and proxies from the environment.

Each server here is a few lines of asyncio on 127.0.0.1 that writes exactly the bytes a test needs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import pytest

from nanobot.providers import http
from nanobot.providers.errors import classify

OK_BODY = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()


def answer(body: bytes = OK_BODY, *, close: bool = False) -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "RawServer"], Awaitable[None]]


class RawServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []  # request heads, in order

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.requests.append(head)
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def call(url: str, timeout_s: float = 5.0) -> object:
    return await http.post_json(url, {"model": "m"}, headers={}, timeout_s=timeout_s)


async def test_keep_alive_connections_are_reused() -> None:
    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        while True:
            await srv.read_request(reader)
            writer.write(answer())

    async with RawServer(keep_alive) as srv:
        for _ in range(3):
            assert await call(srv.url) == json.loads(OK_BODY)
        assert (srv.connections, len(srv.requests)) == (1, 3)
        assert srv.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


async def test_a_connection_dropped_while_idle_is_replaced_without_sending_twice() -> None:
    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer
    ) -> None:
        await srv.read_request(reader)
        writer.write(answer())  # says keep-alive, then hangs up anyway (an idle timeout on its side)
        await writer.drain()

    async with RawServer(one_per_connection) as srv:
        assert await call(srv.url) == json.loads(OK_BODY)
        await asyncio.sleep(0.05)
        assert await call(srv.url) == json.loads(OK_BODY)
        assert (srv.connections, len(srv.requests)) == (2, 2)


async def test_a_drop_in_the_middle_of_an_answer_is_a_connection_error_not_a_silent_retry() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(answer()[:-10])
        await writer.drain()

    async with RawServer(half) as srv:
        with pytest.raises(http.ConnectError) as info:
            await call(srv.url)
        # reached, and part of the answer came: "cut off", not "could not be reached"
        assert classify(info.value).kind == "cut_off" and len(srv.requests) == 1


async def test_a_stalled_stream_times_out() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {"choices": []}\n\n')
        await writer.drain()
        await asyncio.sleep(5)

    async with RawServer(stall) as srv:
        events = http.post_events(srv.url, {"model": "m"}, headers={}, timeout_s=0.3)
        assert await anext(events) == {"choices": []}
        with pytest.raises(TimeoutError) as info:
            await anext(events)
        assert classify(info.value).kind == "timeout"


async def test_retry_after_ms_and_error_text_are_read() -> None:
    body = json.dumps({"error": {"message": "slow down", "type": "rate"}}).encode()

    async def limited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        head = f"HTTP/1.1 429 Too Many\r\nretry-after-ms: 250\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()

    async with RawServer(limited) as srv:
        with pytest.raises(http.HTTPStatusError) as info:
            await call(srv.url)
    failure = classify(info.value)
    assert (failure.kind, failure.retry_after_s) == ("rate_limit", 0.25) and "slow down" in str(info.value)


async def test_plain_http_goes_through_the_proxy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        await srv.read_request(reader)
        writer.write(answer(close=True))
        await writer.drain()

    async with RawServer(proxy) as srv:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{srv.port}")
        monkeypatch.setenv("no_proxy", "bypassed.test")
        assert await call("http://llm.test:8080/v1/chat/completions") == json.loads(OK_BODY)
        assert srv.requests[0].startswith(b"POST http://llm.test:8080/v1/chat/completions HTTP/1.1\r\n")
        # the bypass decisions, checked without connecting anywhere
        assert http._proxy_for(urlsplit("http://bypassed.test/v1")) is None
        assert http._proxy_for(urlsplit("http://127.0.0.1:1/v1")) is None  # loopback: never proxied
        assert http._proxy_for(urlsplit("http://llm.test/v1")) is not None


async def test_https_goes_through_a_connect_tunnel_and_a_refusal_is_a_connection_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, srv: RawServer) -> None:
        srv.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async with RawServer(refuse) as srv:
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:pw@127.0.0.1:{srv.port}")
        with pytest.raises(http.ConnectError) as info:
            await call("https://llm.test/v1/chat/completions")
        head = srv.requests[0]
        assert (
            head.startswith(b"CONNECT llm.test:443 HTTP/1.1\r\n") and b"Proxy-Authorization: Basic " in head
        )
        assert "403" in str(info.value) and classify(info.value).kind == "connection"
