"""Adaptive compaction: oversized messages left out with a note, progressive chunk summaries, fallback."""

from __future__ import annotations

from nanobot.memory.compaction import (
    BASE_CHUNK_RATIO,
    MIN_CHUNK_RATIO,
    chunk_ratio,
    compact_transcript,
    fallback_summary,
)
from nanobot.providers.litellm import LiteLLMProvider
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.memory_llm import MemoryScript


def provider(server: FakeLLMServer) -> LiteLLMProvider:
    p = LiteLLMProvider("openai/fake", api_key="k", api_base=server.url, max_retries=0, timeout_s=10)
    p.retry_base_delay_s = 0.01
    return p


def test_chunk_ratio_bounds() -> None:
    assert abs(chunk_ratio(10, 100_000) - BASE_CHUNK_RATIO) < 0.001
    assert chunk_ratio(50_000, 100_000) == MIN_CHUNK_RATIO
    assert MIN_CHUNK_RATIO < chunk_ratio(10_000, 100_000) < BASE_CHUNK_RATIO


async def test_small_batch_is_verbatim(fake_llm: FakeLLMServer) -> None:
    msgs = [{"role": "user", "content": "FACT-1: tea"}, {"role": "assistant", "content": "ok"}]
    out = await compact_transcript(provider(fake_llm), msgs, 8192)
    assert "USER: FACT-1: tea" in out and not fake_llm.requests


async def test_oversized_message_left_out_and_progressive_summary(fake_llm: FakeLLMServer) -> None:
    script = MemoryScript()
    fake_llm.responder = script.responder
    huge = "x " * 60_000  # ~60k tokens: larger than half of the 8k window
    msgs = []
    for i in range(40):
        msgs.append({"role": "user", "content": f"FACT-{i}: item {i} " + "word " * 150})
        msgs.append({"role": "assistant", "content": "noted"})
    msgs.insert(10, {"role": "tool", "name": "exec", "tool_call_id": "t", "content": huge})
    msgs.insert(11, {"role": "user", "content": huge})
    out = await compact_transcript(provider(fake_llm), msgs, 8192, reserved_tokens=1000)
    assert "[omitted 2 oversized messages, ~" in out  # the tool result and the pasted text
    assert out.startswith("[progressive summary of")
    assert all(f"FACT-{i}:" in out for i in range(40))  # the running summary carries every fact
    assert script.calls["summary"] >= 2  # several chunks
    for req in fake_llm.requests:  # no call ever carried the huge message
        assert sum(len(str(m.get("content"))) for m in req["messages"]) < 60_000


async def test_summary_calls_ask_no_more_than_the_configured_max_tokens(fake_llm: FakeLLMServer) -> None:
    """Each summary call asked for 1,024 tokens whatever agents.defaults.maxTokens said: a slow small
    model wrote all of them, over a minute per call, before the turn could answer."""
    script = MemoryScript()
    fake_llm.responder = script.responder
    msgs = [{"role": "user", "content": f"FACT-{i}: " + "word " * 300} for i in range(12)]
    await compact_transcript(provider(fake_llm), msgs, 2048, reserved_tokens=500, max_tokens=200)
    assert fake_llm.requests and all(req["max_tokens"] <= 200 for req in fake_llm.requests)


async def test_failed_summary_falls_back_with_counts(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(*[Reply(status=500)] * 5)
    msgs = [
        {"role": "user", "content": "word " * 1500, "timestamp": "2026-01-02T10:00:00+00:00"}
        for _ in range(6)
    ]
    out = await compact_transcript(provider(fake_llm), msgs, 4096, reserved_tokens=500)
    assert "[summary unavailable: 6 messages, 6 from the user" in out
    assert fallback_summary(msgs, "").startswith("[summary unavailable")


async def test_huge_tool_result_is_truncated_before_the_llm(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    from nanobot.agent.factory import build_runtime

    config, _ = make_config(**{"agents.defaults.maxToolResultChars": 2000})
    (config.workspace_path).mkdir(parents=True, exist_ok=True)
    (config.workspace_path / "big.txt").write_text("y" * 500_000)
    fake_llm.push(
        Reply(content=None, tool_calls=[{"id": "r", "name": "read_file", "arguments": {"path": "big.txt"}}]),
        Reply(content="done"),
    )
    rt = build_runtime(config)
    assert await rt.ask("read big.txt") == "done"
    tool_msg = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"][0]
    assert len(tool_msg["content"]) <= 2200 and "truncated" in tool_msg["content"]
    await rt.aclose()
