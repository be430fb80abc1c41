"""One behaviour on both remote routes: the openai SDK (direct) and litellm (`via: "litellm"`).

Every test builds its provider through `resolve_provider` from a `providers.custom` config aimed at
the local fake LLM, so the real client library and a real socket carry each request.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import pytest

from nanobot.config.schema import Config
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.providers.registry import resolve_provider
from tests.fakes.llm_server import FakeLLMServer, Reply

ROUTES = ["direct", "litellm"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "x",
            "parameters": {"type": "object", "properties": {"a": {"type": "string"}}},
        },
    }
]
FORCED = {"type": "function", "function": {"name": "save_memory"}}
MESSAGES = [{"role": "user", "content": "hello"}]


def build(route: str, api_base: str, *, retries: int = 2, timeout_s: float = 10.0) -> LLMProvider:
    config = Config(
        agents={
            "defaults": {
                "provider": "custom",
                "model": "fake-model",
                "llmMaxRetries": retries,
                "llmTimeoutS": timeout_s,
            }
        },
        providers={
            "custom": {
                "apiBase": api_base,
                "apiKey": "sk-test",
                "via": "auto" if route == "direct" else "litellm",
            }
        },
    )
    provider = resolve_provider(config)
    expected = "OpenAICompatProvider" if route == "direct" else "LiteLLMProvider"
    assert type(provider).__name__ == expected
    provider.retry_base_delay_s = 0.01  # type: ignore[attr-defined]
    return provider


@pytest.fixture(params=ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_plain_reply_with_usage(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(content="hi there", prompt_tokens=12, completion_tokens=3))
    response = await build(route, fake_llm.url).chat(MESSAGES, max_tokens=50, temperature=0.3)
    assert response.content == "hi there" and not response.tool_calls
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 3)
    sent = fake_llm.requests[-1]
    assert sent["model"] == "fake-model" and sent["messages"] == MESSAGES
    assert sent["max_tokens"] == 50 and sent["temperature"] == 0.3


async def test_tool_calls_are_decoded_and_malformed_arguments_kept(
    route: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {"id": "a", "name": "read_file", "arguments": {"path": "x.md"}},
                {"id": "b", "name": "list_dir", "arguments": '{"path": "."}'},
                {"id": "c", "name": "save_memory", "arguments": '{"a": "unterminated'},
            ],
        )
    )
    response = await build(route, fake_llm.url).chat(MESSAGES, TOOLS)
    assert [(c.id, c.name) for c in response.tool_calls] == [
        ("a", "read_file"),
        ("b", "list_dir"),
        ("c", "save_memory"),
    ]
    assert response.tool_calls[0].arguments == {"path": "x.md"}
    assert response.tool_calls[1].arguments == {"path": "."}
    assert response.tool_calls[2].arguments == '{"a": "unterminated'  # kept for the registry to explain
    assert response.finish_reason == "tool_calls"
    assert fake_llm.requests[-1]["tools"][0]["function"]["name"] == "save_memory"


@pytest.mark.parametrize("stream", [False, True])
async def test_forced_tool_choice_is_sent(route: str, stream: bool, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(
        Reply(content=None, tool_calls=[{"id": "s", "name": "save_memory", "arguments": {"a": "b"}}])
    )
    response = await build(route, fake_llm.url).chat(
        MESSAGES, TOOLS, tool_choice=FORCED, on_delta=_sink([]) if stream else None
    )
    assert response.tool_calls[0].arguments == {"a": "b"}
    assert [r.get("tool_choice") for r in fake_llm.requests] == [FORCED]


@pytest.mark.parametrize(("status", "stream"), [(400, False), (422, False), (400, True), (422, True)])
async def test_refused_forced_tool_choice_falls_back_to_auto(
    route: str, status: int, stream: bool, fake_llm: FakeLLMServer
) -> None:
    def responder(body: dict) -> Reply:
        if body.get("tool_choice") not in (None, "auto"):
            return Reply(status=status, error_message="this server cannot force a function")
        return Reply(content=None, tool_calls=[{"id": "s", "name": "save_memory", "arguments": {"a": "b"}}])

    fake_llm.responder = responder
    provider = build(route, fake_llm.url, retries=0)
    response = await provider.chat(
        MESSAGES, TOOLS, tool_choice=FORCED, on_delta=_sink([]) if stream else None
    )
    assert response.tool_calls[0].name == "save_memory" and response.tool_calls[0].arguments == {"a": "b"}
    choices = [r.get("tool_choice") for r in fake_llm.requests]
    assert choices[-1] == "auto" and all(c == FORCED for c in choices[:-1])


def _sink(into: list[str]):  # noqa: ANN202
    async def on_delta(delta: str) -> None:
        into.append(delta)

    return on_delta


async def test_stream_delivers_deltas_usage_and_tool_calls(route: str, fake_llm: FakeLLMServer) -> None:
    deltas: list[str] = []
    fake_llm.push(Reply(content="one two three", prompt_tokens=7, completion_tokens=3))
    provider = build(route, fake_llm.url)
    response = await provider.chat(MESSAGES, on_delta=_sink(deltas))
    assert response.content == "one two three" and "".join(deltas) == "one two three" and len(deltas) >= 3
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (7, 3)
    assert fake_llm.requests[-1]["stream"] is True
    fake_llm.push(
        Reply(content="", tool_calls=[{"id": "c1", "name": "save_memory", "arguments": {"a": "1"}}])
    )
    response = await provider.chat(MESSAGES, TOOLS, on_delta=_sink(deltas))
    assert response.tool_calls[0].id == "c1" and response.tool_calls[0].arguments == {"a": "1"}
    assert response.finish_reason == "tool_calls"


async def test_429_waits_for_retry_after(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=429, headers={"Retry-After": "0.5"}), Reply(content="after the wait"))
    provider = build(route, fake_llm.url)
    provider.retry_base_delay_s = 20.0  # type: ignore[attr-defined]  # a backoff would blow the timeout
    start = time.perf_counter()
    response = await provider.chat(MESSAGES)
    elapsed = time.perf_counter() - start
    assert response.content == "after the wait" and len(fake_llm.requests) == 2
    assert 0.5 <= elapsed < 5.0


async def test_429_with_a_long_retry_after_fails_at_once(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=429, headers={"Retry-After": "3600"}), Reply(content="never asked"))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url).chat(MESSAGES)
    assert (info.value.kind, info.value.status) == ("rate_limit", 429)
    assert "rate-limiting" in str(info.value) and len(fake_llm.requests) == 1


async def test_500s_are_retried_then_reported(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[Reply(status=500, error_message="boom")] * 3)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=2).chat(MESSAGES)
    assert (info.value.kind, info.value.status) == ("server", 500) and "HTTP 500" in str(info.value)
    assert len(fake_llm.requests) == 3
    fake_llm.push(Reply(status=503), Reply(content="recovered"))
    assert (await build(route, fake_llm.url).chat(MESSAGES)).content == "recovered"


async def test_timeout_is_retried_then_reported(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(delay_s=1.5), Reply(delay_s=1.5))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1, timeout_s=0.4).chat(MESSAGES)
    assert info.value.kind == "timeout" and "in time" in str(info.value)
    assert len(fake_llm.requests) == 2


@pytest.fixture
def keep_alive_server():  # noqa: ANN201
    """A server that answers every request with headers, then a byte every 0.1 s and never a reply:
    SSE keep-alive comments for a stream, blanks before the JSON body otherwise (what some proxies
    send while a model is stuck). The transport's per-read timeout never fires."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            request = conn.recv(65536)
            stream = b'"stream": true' in request or b'"stream":true' in request
            head = "text/event-stream" if stream else "application/json"
            conn.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: {head}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
            piece = b": keep-alive\n\n" if stream else b" "
            while not stop.is_set():
                try:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                except OSError:
                    return
                time.sleep(0.1)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    listener.close()


@pytest.fixture
def resetting_server():  # noqa: ANN201
    """A server that starts its answer, then resets the connection (RST) in the middle of it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"choi')
                time.sleep(0.05)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    listener.close()


async def test_a_connection_reset_mid_answer_is_not_called_unreachable(resetting_server: str) -> None:
    """The server was reached and began answering: "could not be reached; check its address" sent the
    user after a configuration that was right."""
    with pytest.raises(LLMError) as info:
        await build("direct", resetting_server, retries=0).chat(MESSAGES)
    assert info.value.kind == "cut_off" and "check its address" not in str(info.value), info.value


@pytest.mark.parametrize("stream", [False, True])
async def test_a_server_that_only_keeps_the_connection_alive_times_out(
    route: str, stream: bool, keep_alive_server: str
) -> None:
    """llmTimeoutS held only between two bytes: a keep-alive every few seconds kept a turn waiting
    for ever. A whole request is bounded now, and a stream that brings no chunk for that long."""
    provider = build(route, keep_alive_server, retries=0, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        await provider.chat(MESSAGES, on_delta=_sink([]) if stream else None)
    assert info.value.kind == "timeout", info.value
    assert time.monotonic() - started < 30  # not for ever (the test's own timeout is 120 s)


@pytest.mark.parametrize("body", ["{not json", '{"object": "chat.completion", "id": "x"}'])
async def test_malformed_json_is_retried_then_reported(
    route: str, body: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(Reply(raw_body=body), Reply(content="good again"))
    assert (await build(route, fake_llm.url).chat(MESSAGES)).content == "good again"
    fake_llm.push(*[Reply(raw_body=body)] * 2)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES)
    assert info.value.kind == "malformed" and "malformed" in str(info.value)


async def test_a_login_page_instead_of_a_completion_is_malformed_not_a_server_failure(
    route: str, fake_llm: FakeLLMServer
) -> None:
    """A proxy's HTML page with status 200 read as "the provider is failing (HTTP 500)"."""
    page = Reply(raw_body="<html><body>Login required</body></html>", headers={"Content-Type": "text/html"})
    fake_llm.push(page, page)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES)
    assert info.value.kind == "malformed" and "HTTP 500" not in str(info.value), info.value


async def test_malformed_stream_is_reported(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[Reply(raw_body="{not json")] * 2)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES, on_delta=_sink([]))
    assert info.value.kind == "malformed"


async def test_rejected_key_is_not_retried_and_not_echoed(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=401, error_message="bad key sk-verysecret"))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url).chat(MESSAGES)
    assert (info.value.kind, info.value.status) == ("auth", 401)
    assert "credentials" in str(info.value) and "sk-verysecret" not in str(info.value)
    assert len(fake_llm.requests) == 1


async def test_bad_request_fails_fast(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=400, error_message="messages malformed"))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=3).chat(MESSAGES)
    assert (info.value.kind, info.value.status) == ("bad_request", 400) and len(fake_llm.requests) == 1


async def test_unreachable_endpoint_is_a_connection_error(route: str) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LLMError) as info:
        await build(route, f"http://127.0.0.1:{port}/v1", retries=1).chat(MESSAGES)
    assert info.value.kind == "connection"


async def test_stream_split_across_reads_with_crlf_line_ends(route: str, fake_llm: FakeLLMServer) -> None:
    deltas: list[str] = []
    fake_llm.push(
        Reply(content="alpha beta gamma", stream_piece_bytes=7, stream_line_end="\r\n", completion_tokens=3),
        Reply(
            content=None,
            tool_calls=[{"id": "t1", "name": "save_memory", "arguments": {"a": "split"}}],
            stream_piece_bytes=5,
        ),
    )
    provider = build(route, fake_llm.url)
    response = await provider.chat(MESSAGES, on_delta=_sink(deltas))
    assert response.content == "alpha beta gamma" and "".join(deltas) == "alpha beta gamma"
    assert response.usage.completion_tokens == 3
    response = await provider.chat(MESSAGES, TOOLS, on_delta=_sink(deltas))
    assert response.tool_calls[0].id == "t1" and response.tool_calls[0].arguments == {"a": "split"}


async def test_streamed_tool_calls_without_an_index_stay_apart(route: str, fake_llm: FakeLLMServer) -> None:
    """Some OpenAI-compatible servers stream tool calls without `index`: two calls were glued into one
    (`list_dirlist_dir`, arguments `{...}{...}`), an unknown tool."""
    calls = [{"id": "call_a", "name": "list_dir", "arguments": {"path": "."}},
             {"id": "call_b", "name": "list_dir", "arguments": {"path": "memory"}}]
    fake_llm.push(Reply(content=None, tool_calls=calls, stream_without_call_index=True))
    response = await build(route, fake_llm.url).chat(MESSAGES, TOOLS, on_delta=_sink([]))
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_a", "list_dir", {"path": "."}), ("call_b", "list_dir", {"path": "memory"})
    ]


async def test_malformed_event_in_a_stream_is_retried_then_reported(
    route: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(Reply(content="x", stream_bad_event="{not json"), Reply(content="clean"))
    assert (await build(route, fake_llm.url).chat(MESSAGES, on_delta=_sink([]))).content == "clean"
    fake_llm.push(*[Reply(content="x", stream_bad_event="{not json")] * 2)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES, on_delta=_sink([]))
    assert info.value.kind == "malformed" and len(fake_llm.requests) == 4


async def test_a_stream_cut_before_the_model_finished_is_retried_not_taken_as_the_answer(
    route: str, fake_llm: FakeLLMServer
) -> None:
    """The body of a server-sent stream often ends with the connection: one that closes in the middle
    of the answer (a proxy's idle limit, a server restarting) looked like a complete, shorter reply."""
    whole = "The appointment is on Monday at nine, not on Tuesday."
    fake_llm.push(Reply(content=whole, stream_cut_after=4), Reply(content=whole))
    deltas: list[str] = []
    response = await build(route, fake_llm.url).chat(MESSAGES, on_delta=_sink(deltas))
    assert response.content == whole and len(fake_llm.requests) == 2
    # the retry's text is not streamed into the preview again ("The appointment is The appointment...")
    assert "".join(deltas) == "The appointment is on ", deltas
    fake_llm.push(*[Reply(content=whole, stream_cut_after=4)] * 2)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES, on_delta=_sink([]))
    # the provider was reached: the user is told the answer was cut off, not to check its address
    assert info.value.kind == "cut_off" and "cut off" in str(info.value), info.value


async def test_a_rate_limit_too_long_to_wait_says_how_long(route: str, fake_llm: FakeLLMServer) -> None:
    """"try again in a moment" for a provider that asked for two minutes."""
    fake_llm.push(Reply(status=429, headers={"Retry-After": "120"}))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=2).chat(MESSAGES)
    assert info.value.kind == "rate_limit" and "wait 120 s" in str(info.value), info.value
    fake_llm.push(Reply(status=429, headers={"Retry-After": "Fri, 31 Dec 2100 23:59:59 GMT"}))
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=2).chat(MESSAGES)
    assert re.search(r"wait \d+ days before", str(info.value)), info.value  # not "2300464315 s"


async def test_stream_429_waits_for_retry_after(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=429, headers={"Retry-After": "0.4"}), Reply(content="streamed after"))
    provider = build(route, fake_llm.url)
    provider.retry_base_delay_s = 20.0  # type: ignore[attr-defined]
    start = time.perf_counter()
    response = await provider.chat(MESSAGES, on_delta=_sink([]))
    assert response.content == "streamed after" and 0.4 <= time.perf_counter() - start < 5.0


async def test_stream_500_is_reported_as_a_server_error(route: str, fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[Reply(status=502, error_message="upstream down")] * 2)
    with pytest.raises(LLMError) as info:
        await build(route, fake_llm.url, retries=1).chat(MESSAGES, on_delta=_sink([]))
    assert (info.value.kind, info.value.status) == ("server", 502) and len(fake_llm.requests) == 2


async def test_a_real_servers_stream_is_taken_whole(route: str, llama_server) -> None:  # noqa: ANN001
    """A stream counts as whole only once a chunk carries a finish_reason (else it was cut off): the
    demo model behind `llama_cpp.server`, stopped by the token limit, ends its stream with one."""
    deltas: list[str] = []
    provider = build(route, llama_server.api_base, retries=0, timeout_s=120.0)
    messages = [{"role": "user", "content": "Count from one to twenty in words."}]
    response = await provider.chat(messages, max_tokens=12, temperature=0, on_delta=_sink(deltas))
    assert response.finish_reason == "length", response
    assert response.content and "".join(deltas) == response.content


def _completion_body(message: dict, usage: dict) -> str:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [choice], "usage": usage})


async def test_usage_counts_that_are_no_numbers_keep_the_answer(fake_llm: FakeLLMServer) -> None:
    """Counts sent as strings failed the turn ("something went wrong: TypeError") and threw the
    answer away; a negative one was added to the totals."""
    usage = {"prompt_tokens": "12", "completion_tokens": -5}
    fake_llm.push(Reply(raw_body=_completion_body({"content": "Your code is 4711."}, usage)))
    response = await build("direct", fake_llm.url).chat(MESSAGES)
    assert response.content == "Your code is 4711."
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 0)


async def test_a_tool_call_name_that_is_no_text_is_a_malformed_answer(fake_llm: FakeLLMServer) -> None:
    """A number for a tool's name was a TypeError (kind "other", not asked again)."""
    call = {"id": "c1", "type": "function", "function": {"name": 7, "arguments": "{}"}}
    body = _completion_body({"content": None, "tool_calls": [call]}, {})
    fake_llm.push(Reply(raw_body=body), Reply(raw_body=body))
    with pytest.raises(LLMError) as info:
        await build("direct", fake_llm.url, retries=1).chat(MESSAGES, tools=TOOLS)
    assert info.value.kind == "malformed" and len(fake_llm.requests) == 2


async def test_an_endless_retry_after_is_no_wait(fake_llm: FakeLLMServer) -> None:
    """`Retry-After: 1e999` told the user to "wait inf days"; it is no usable value (backoff instead)."""
    fake_llm.push(*[Reply(status=429, headers={"Retry-After": "1e999"})] * 2)
    with pytest.raises(LLMError) as info:
        await build("direct", fake_llm.url, retries=1).chat(MESSAGES)
    assert info.value.kind == "rate_limit" and "inf" not in str(info.value), info.value
    assert len(fake_llm.requests) == 2  # asked again after the backoff


async def test_a_rate_limit_reported_inside_a_stream_is_a_rate_limit(fake_llm: FakeLLMServer) -> None:
    """OpenAI's error event (a text code) was taken for HTTP 500: "the provider is failing"."""
    event = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    fake_llm.push(*[Reply(raw_body=f"data: {json.dumps(event)}\n\n")] * 2)
    with pytest.raises(LLMError) as info:
        await build("direct", fake_llm.url, retries=1).chat(MESSAGES, on_delta=_sink([]))
    assert (info.value.kind, info.value.status) == ("rate_limit", 429), info.value


async def test_a_key_the_error_page_echoes_at_the_cut_is_masked_whole(
    fake_llm: FakeLLMServer, logs: list[str]
) -> None:
    """The error text was cut at 300 characters before it was masked: a key across the cut kept its
    first 20 characters in the log."""
    from nanobot.secrets import register_secret

    key = "zzSECRETkey123456789abcdefg"
    register_secret(key)
    fake_llm.push(Reply(status=502, error_message="x" * 270 + " x-api-key: " + key))
    with pytest.raises(LLMError):
        await build("direct", fake_llm.url, retries=0).chat(MESSAGES)
    failure = [line for line in logs if "LLM call failed" in line]
    assert failure and not any(key[:8] in line for line in logs), failure


def _sse(*deltas: dict, finish: str = "tool_calls") -> str:
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def _whole(name: str, arguments: object, call_id: str | None = None) -> dict:
    call: dict = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return call if call_id is None else {**call, "id": call_id}


@pytest.mark.parametrize(
    "deltas",
    [
        # each call whole in its own delta, no index, no id / the same id each time
        [{"tool_calls": [_whole("list_dir", '{"path": "."}')]}, {"tool_calls": [_whole("read_file", '{"path": "x"}')]}],
        [
            {"tool_calls": [_whole("list_dir", '{"path": "."}', "call_0")]},
            {"tool_calls": [_whole("read_file", '{"path": "x"}', "call_0")]},
        ],
        # both in one delta
        [{"tool_calls": [_whole("list_dir", '{"path": "."}'), _whole("read_file", '{"path": "x"}')]}],
        # the arguments as an object, not as text
        [{"tool_calls": [_whole("list_dir", {"path": "."})]}, {"tool_calls": [_whole("read_file", {"path": "x"})]}],
    ],
    ids=["no-id", "same-id", "one-delta", "object-arguments"],
)
async def test_whole_tool_calls_streamed_without_an_index_stay_apart(fake_llm: FakeLLMServer, deltas: list) -> None:
    """Servers that stream each call whole, without `index` and without distinct ids: the calls
    were glued into one unknown tool (`list_dirread_file`); arguments sent as an object failed the
    turn with a TypeError, never asked again."""
    fake_llm.push(Reply(raw_body=_sse(*deltas)))
    response = await build("direct", fake_llm.url).chat(MESSAGES, TOOLS, on_delta=_sink([]))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("list_dir", {"path": "."}), ("read_file", {"path": "x"})
    ]


async def test_a_server_repeating_the_name_in_every_piece_gives_one_call(fake_llm: FakeLLMServer) -> None:
    """A server that names the call in every piece of it: one call, not `read_fileread_file`."""
    pieces = [
        {"tool_calls": [{"index": 0, "function": {"name": "read_file", "arguments": a}}]}
        for a in ("", '{"pa', 'th": "x"}', "")  # as OpenAI opens a call, then the name again, nothing more
    ]
    fake_llm.push(Reply(raw_body=_sse(*pieces)))
    response = await build("direct", fake_llm.url).chat(MESSAGES, TOOLS, on_delta=_sink([]))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("read_file", {"path": "x"})]


async def test_a_rate_limit_answered_with_200_is_a_rate_limit(fake_llm: FakeLLMServer) -> None:
    """A 200 whose body is only an error object was "a malformed response", asked again at once;
    streamed, the same answer was already a rate limit."""
    body = json.dumps({"error": {"message": "Rate limit reached", "code": 429}})
    fake_llm.push(*[Reply(raw_body=body)] * 2)
    with pytest.raises(LLMError) as info:
        await build("direct", fake_llm.url, retries=1).chat(MESSAGES)
    assert (info.value.kind, info.value.status) == ("rate_limit", 429), info.value


async def test_a_name_streamed_in_pieces_is_one_name(fake_llm: FakeLLMServer) -> None:
    """Review catch: `read` then `_file` became two unknown tools once a new name started a call."""
    pieces = [
        {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"name": "_file", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "x"}'}}]},
    ]
    fake_llm.push(Reply(raw_body=_sse(*pieces)))
    response = await build("direct", fake_llm.url).chat(MESSAGES, TOOLS, on_delta=_sink([]))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("read_file", {"path": "x"})]


def test_the_first_litellm_call_is_not_timed_out_by_its_import(fake_llm: FakeLLMServer) -> None:
    """litellm's import (~5 s) ran inside the first request's timeout: the first attempt failed
    unsent (CI saw a retried timeout make one request instead of two), and with no retries the
    first message of a fresh gateway failed. It runs before, in a thread."""
    import subprocess
    import sys

    fake_llm.push(Reply(content="hello back"))
    script = (
        "import asyncio, sys\n"
        "from tests.test_provider_contract import build, MESSAGES\n"
        "provider = build('litellm', sys.argv[1], retries=0, timeout_s=3.0)\n"
        "print(asyncio.run(provider.chat(MESSAGES)).content)\n"
    )
    from pathlib import Path

    done = subprocess.run(
        [sys.executable, "-c", script, fake_llm.url],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "hello back"


async def test_litellm_that_will_not_import_is_a_model_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported before the request's try, its failure escaped chat() as a raw exception: the user
    got "something went wrong" and the memory's callers, which catch LLMError, a traceback."""
    import sys

    from nanobot.providers import litellm as litellm_route

    monkeypatch.setattr(litellm_route, "_litellm", None)
    monkeypatch.setitem(sys.modules, "litellm", None)  # `import litellm` raises ModuleNotFoundError
    provider = litellm_route.LiteLLMProvider("anthropic/claude-3-5-haiku", api_key="k", max_retries=0)
    with pytest.raises(LLMError, match="ModuleNotFoundError"):
        await provider.chat(MESSAGES)
