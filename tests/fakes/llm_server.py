"""A scripted OpenAI-compatible server on 127.0.0.1 for tests and benchmarks.

Reached through the real client libraries (`providers.custom.apiBase = server.url`: the openai SDK,
or litellm with `via: "litellm"`). Serves
`/v1/chat/completions` (plain and `stream: true` SSE, tool calls, error statuses) and `/v1/embeddings`
(deterministic hashed bag-of-words vectors); a reply may carry extra headers (Retry-After) or a raw,
malformed body. Runs in a thread so subprocess tests can use it too.

Script replies with `server.push(...)` (consumed in order) or set `server.responder` to a function
of the request body; otherwise the reply is "ok".
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes._http_thread import ThreadedHTTPFake


@dataclass
class Reply:
    content: str | None = "ok"
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"}
    status: int = 200
    error_message: str = "scripted error"
    delay_s: float = 0.0
    prompt_tokens: int = 10
    completion_tokens: int = 5
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers, e.g. Retry-After
    raw_body: str | bytes | None = None  # sent as is (status 200, JSON content type) instead of a completion
    # a streamed reply written in pieces of this many bytes (events split mid-line), with these line ends
    stream_piece_bytes: int = 0
    stream_line_end: str = "\n"
    stream_bad_event: str | None = None  # sent as one event's data after the first delta (e.g. not JSON)
    # the connection closes after this many pieces of the text: no finish_reason, no [DONE]
    stream_cut_after: int | None = None
    # streamed tool calls without their `index` (some OpenAI-compatible servers), each in two pieces:
    # id and name first, then the arguments
    stream_without_call_index: bool = False
    finish_reason: str | None = None  # instead of "tool_calls" / "stop" (e.g. "length": cut at max_tokens)


Responder = Callable[[dict[str, Any]], "Reply | dict[str, Any] | str"]


def _as_reply(value: Reply | dict[str, Any] | str) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    return Reply(**value)


def hashed_embedding(text: str, dim: int = 64) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words point the same way."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 16) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class FakeLLMServer(ThreadedHTTPFake):
    def __init__(self, embedding_dim: int = 64) -> None:
        self.script: list[Reply] = []
        self.responder: Responder | None = None
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []  # of the chat requests, in order
        self.embedding_requests: list[dict[str, Any]] = []
        self.embedding_dim = embedding_dim
        self.default_delay_s = 0.0
        self._lock = threading.Lock()
        self._serve(self._make_handler())

    @property
    def url(self) -> str:
        return f"{self.origin}/v1"

    # ---------------------------------------------------------------- scripting
    def push(self, *replies: Reply | dict[str, Any] | str) -> None:
        with self._lock:
            self.script.extend(_as_reply(r) for r in replies)

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self.script:
                return self.script.pop(0)
        if self.responder is not None:
            return _as_reply(self.responder(body))
        return Reply(delay_s=self.default_delay_s)

    # ---------------------------------------------------------------- HTTP
    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # small JSON replies must not wait ~40 ms for delayed ACKs

            def log_message(self, *args: Any) -> None:  # keep test output clean
                return

            def _read_json(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                return json.loads(raw or b"{}")

            def _send_json(
                self, status: int, payload: dict[str, Any] | str | bytes, headers: dict[str, str] | None = None
            ) -> None:
                if isinstance(payload, bytes):
                    data = payload
                else:
                    data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                if "Content-Type" not in (headers or {}):
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._send_json(
                        200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
                    )
                else:
                    self._send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                body = self._read_json()
                if self.path.endswith("/embeddings"):
                    server.embedding_requests.append(body)
                    inputs = body.get("input", [])
                    inputs = [inputs] if isinstance(inputs, str) else inputs
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": hashed_embedding(str(t), server.embedding_dim),
                        }
                        for i, t in enumerate(inputs)
                    ]
                    self._send_json(
                        200,
                        {
                            "object": "list",
                            "data": data,
                            "model": body.get("model", "fake"),
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        },
                    )
                    return
                if not self.path.endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": f"unknown path {self.path}"}})
                    return
                server.request_headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = server._next_reply(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    self._send_json(
                        reply.status,
                        {
                            "error": {
                                "message": reply.error_message,
                                "type": "scripted",
                                "code": str(reply.status),
                            }
                        },
                        reply.headers,
                    )
                    return
                if reply.raw_body is not None:
                    self._send_json(200, reply.raw_body, reply.headers)
                    return
                if body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._send_json(200, _completion(body, reply))

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                base = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model", "fake"),
                }

                end = reply.stream_line_end

                def write(text: str) -> None:
                    data = text.replace("\n", end).encode()
                    step = reply.stream_piece_bytes or len(data)
                    for start in range(0, len(data), step):
                        self.wfile.write(data[start : start + step])
                        self.wfile.flush()
                        if reply.stream_piece_bytes:
                            time.sleep(0.001)  # separate TCP segments, separate reads

                def emit(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> None:
                    chunk = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
                    if usage:
                        chunk["usage"] = usage
                    write(f"data: {json.dumps(chunk)}\n\n")

                emit({"role": "assistant", "content": ""})
                if reply.stream_bad_event is not None:
                    write(f"data: {reply.stream_bad_event}\n\n")
                text = reply.content or ""
                for n, piece in enumerate(re.findall(r"\S+\s*|\s+", text)):
                    if n == reply.stream_cut_after:
                        self.close_connection = True
                        return
                    emit({"content": piece})
                for i, call in enumerate(reply.tool_calls):
                    arguments = _args_text(call.get("arguments", {}))
                    if reply.stream_without_call_index:
                        head = {"id": call.get("id", f"call_{i}"), "type": "function"}
                        emit({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
                        emit({"tool_calls": [{"function": {"arguments": arguments}}]})
                        continue
                    emit(
                        {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": call.get("id", f"call_{i}"),
                                    "type": "function",
                                    "function": {"name": call["name"], "arguments": arguments},
                                }
                            ]
                        }
                    )
                finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
                emit(
                    {},
                    finish,
                    {
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens,
                        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                    },
                )
                write("data: [DONE]\n\n")
                self.close_connection = True

        return Handler


class RawArguments(list):
    """Tool-call arguments sent as a JSON list, not as the JSON text of one (some servers do)."""


def _args_text(arguments: Any) -> Any:
    if isinstance(arguments, RawArguments):
        return list(arguments)
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _completion(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.get("id", f"call_{i}"),
                "type": "function",
                "function": {"name": c["name"], "arguments": _args_text(c.get("arguments", {}))},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def echo_reply(body: dict[str, Any]) -> str:
    """ "re: " and the last paragraph of the last message (benchmarks check replies with it)."""
    return "re: " + str(body["messages"][-1]["content"]).rsplit("\n\n", 1)[-1]


def main() -> None:
    """Run standalone (for manual checks and subprocess benchmarks): prints the base URL.

    `--delay-ms N` answers after N ms; `--echo` answers with `echo_reply` instead of "ok".
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--echo", action="store_true")
    args = parser.parse_args()
    srv = FakeLLMServer()
    delay_s = args.delay_ms / 1000
    srv.default_delay_s = delay_s
    if args.echo:
        srv.responder = lambda body: Reply(content=echo_reply(body), delay_s=delay_s)
    srv.start()
    print(srv.url, flush=True)
    try:
        sys.stdin.read()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
