"""LiteLLMProvider through the real litellm against the local OpenAI-compatible fake."""

from __future__ import annotations

import pytest

from nanobot.providers.base import LLMError
from nanobot.providers.litellm import LiteLLMProvider
from tests.fakes.llm_server import FakeLLMServer, Reply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "x",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]
MESSAGES = [{"role": "user", "content": "hello"}]


def provider(server: FakeLLMServer, retries: int = 2) -> LiteLLMProvider:
    p = LiteLLMProvider(
        "openai/fake-model", api_key="k", api_base=server.url, max_retries=retries, timeout_s=10
    )
    p.retry_base_delay_s = 0.01
    return p


async def test_plain_reply_and_usage(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(content="hi there", prompt_tokens=12, completion_tokens=3))
    response = await provider(fake_llm).chat(MESSAGES)
    assert response.content == "hi there"
    assert not response.tool_calls
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 3)
    assert fake_llm.requests[-1]["messages"][0]["content"] == "hello"
    assert fake_llm.requests[-1]["model"] == "fake-model"


async def test_two_tool_calls_in_one_response(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {"id": "a", "name": "read_file", "arguments": {"path": "x.md"}},
                {"id": "b", "name": "list_dir", "arguments": '{"path": "."}'},
            ],
        )
    )
    response = await provider(fake_llm).chat(MESSAGES, TOOLS)
    assert [c.name for c in response.tool_calls] == ["read_file", "list_dir"]
    assert response.tool_calls[0].arguments == {"path": "x.md"}
    assert response.tool_calls[1].arguments == {"path": "."}
    assert fake_llm.requests[-1]["tools"][0]["function"]["name"] == "save_memory"


async def test_streaming_delivers_deltas_and_tool_calls(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(content="one two three"))
    deltas: list[str] = []

    async def on_delta(d: str) -> None:
        deltas.append(d)

    response = await provider(fake_llm).chat(MESSAGES, on_delta=on_delta)
    assert response.content == "one two three"
    assert "".join(deltas) == "one two three" and len(deltas) >= 3
    assert fake_llm.requests[-1]["stream"] is True
    fake_llm.push(Reply(content="", tool_calls=[{"id": "c1", "name": "save_memory", "arguments": {"a": 1}}]))
    response = await provider(fake_llm).chat(MESSAGES, TOOLS, on_delta=on_delta)
    assert response.tool_calls[0].name == "save_memory" and response.tool_calls[0].arguments == {"a": 1}


async def test_429_then_success_is_retried(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=429, error_message="rate limited"), Reply(content="after retry"))
    response = await provider(fake_llm).chat(MESSAGES)
    assert response.content == "after retry"
    assert len(fake_llm.requests) == 2


async def test_repeated_500s_raise_a_clear_error(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[Reply(status=500, error_message="boom")] * 3)
    with pytest.raises(LLMError) as info:
        await provider(fake_llm, retries=2).chat(MESSAGES)
    assert "HTTP 500" in str(info.value) or "failing" in str(info.value)
    assert len(fake_llm.requests) == 3


async def test_non_retryable_400_fails_fast(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(Reply(status=400, error_message="bad request: messages malformed"))
    with pytest.raises(LLMError):
        await provider(fake_llm, retries=3).chat(MESSAGES)
    assert len(fake_llm.requests) == 1


async def test_forced_tool_choice_rejected_falls_back_to_auto(fake_llm: FakeLLMServer) -> None:
    def responder(body: dict) -> Reply:
        if isinstance(body.get("tool_choice"), dict):
            return Reply(status=400, error_message="this model does not support forcing tool_choice")
        return Reply(content=None, tool_calls=[{"id": "s", "name": "save_memory", "arguments": {}}])

    fake_llm.responder = responder
    forced = {"type": "function", "function": {"name": "save_memory"}}
    response = await provider(fake_llm).chat(MESSAGES, TOOLS, tool_choice=forced)
    assert response.tool_calls[0].name == "save_memory"
    assert [r.get("tool_choice") for r in fake_llm.requests] == [forced, "auto"]
