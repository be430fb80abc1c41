"""Whole turns through the real litellm to the local OpenAI-compatible fake: replies, tools, streaming,
retries, failures, and the transcript each leaves on disk."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.providers.base import LLMError
from tests.agent_helpers import (
    ask_for_reply,
    drain_outbound,
    make_runtime,
    messages_of,
    read_jsonl,
    session_path,
)
from tests.fakes.llm_server import FakeLLMServer, Reply

RENDEZVOUS_TIMEOUT_S = 5.0


class RendezvousTool(Tool):
    """Succeeds only if its partner runs at the same time: proves tool calls run concurrently."""

    parameters = {"type": "object", "properties": {}}

    def __init__(self, name: str, mine: asyncio.Event, partner: asyncio.Event) -> None:
        self.name = name
        self.description = "test tool"
        self.mine = mine
        self.partner = partner

    async def execute(self, ctx: ToolContext, **kwargs: Any) -> str:
        self.mine.set()
        try:
            await asyncio.wait_for(self.partner.wait(), RENDEZVOUS_TIMEOUT_S)
        except TimeoutError:
            raise ToolError(f"{self.name} ran alone") from None
        return f"{self.name} met its partner"


async def test_plain_reply_is_returned_and_persisted(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    fake_llm.push(Reply(content="Hello, human."))
    try:
        reply = await rt.ask("hi there")
    finally:
        await rt.aclose()
    assert reply == "Hello, human."
    request = fake_llm.requests[-1]
    assert request["model"] == "fake-model"
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1]["role"] == "user"
    assert request["messages"][-1]["content"].endswith("\n\nhi there")
    assert "Channel: cli | Chat: direct" in request["messages"][-1]["content"]
    stored = messages_of(session_path(config))
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "hi there"),
        ("assistant", "Hello, human."),
    ]
    assert all("+" in m["timestamp"] or m["timestamp"].endswith("Z") for m in stored)


async def test_system_prompt_is_byte_identical_across_turns(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    try:
        await rt.ask("one")
        await rt.ask("two")
    finally:
        await rt.aclose()
    first, second = fake_llm.requests[-2], fake_llm.requests[-1]
    assert first["messages"][0] == second["messages"][0]
    assert first["tools"] == second["tools"]
    # the second request carries the first exchange as history
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][1]["content"] == "one"


async def test_two_tool_calls_in_one_response_run_concurrently(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    a_started, b_started = asyncio.Event(), asyncio.Event()
    rt.agent.tools.register(RendezvousTool("meet_a", a_started, b_started))
    rt.agent.tools.register(RendezvousTool("meet_b", b_started, a_started))
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {"id": "call_a", "name": "meet_a", "arguments": {}},
                {"id": "call_b", "name": "meet_b", "arguments": {}},
            ],
        ),
        Reply(content="both met"),
    )
    try:
        reply = await rt.ask("go")
    finally:
        await rt.aclose()
    assert reply == "both met"
    tool_msgs = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [
        ("call_a", "meet_a met its partner"),
        ("call_b", "meet_b met its partner"),
    ]
    assistant = fake_llm.requests[-1]["messages"][-3]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    roles = [m["role"] for m in messages_of(session_path(config))]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]


async def test_real_tools_results_reach_the_llm(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    fake_llm.push(
        Reply(
            content="Let me write that.",
            tool_calls=[
                {"id": "w", "name": "write_file", "arguments": {"path": "notes/a.txt", "content": "alpha"}},
                {"id": "x", "name": "exec", "arguments": {"command": "echo beta"}},
            ],
        ),
        Reply(
            content=None, tool_calls=[{"id": "r", "name": "read_file", "arguments": {"path": "notes/a.txt"}}]
        ),
        Reply(content="all done"),
    )
    bus: MessageBus = rt.bus
    try:  # a chat's message (a reply the channels deliver: they are also given the interim notes)
        out = await rt.agent.handle(
            InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="write and run")
        )
    finally:
        await rt.aclose()
    assert out is not None and out.content == "all done"
    assert (config.workspace_path / "notes" / "a.txt").read_text() == "alpha"
    second = {
        m["tool_call_id"]: m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"
    }
    assert second["w"].startswith("Wrote 5 characters")
    assert second["x"].strip() == "beta"
    third = [m for m in fake_llm.requests[2]["messages"] if m["role"] == "tool"]
    assert third[-1]["tool_call_id"] == "r" and third[-1]["content"] == "alpha"
    events = drain_outbound(bus)
    kinds = [e.kind for e in events]
    assert "progress" in kinds and "tool_hint" in kinds  # flagged so channels can drop them
    assert any(e.kind == "progress" and e.content == "Let me write that." for e in events)
    assert any(e.kind == "tool_hint" and 'exec("echo beta")' in e.content for e in events)


async def test_streaming_publishes_deltas_on_the_bus(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True})
    rt = make_runtime(config)
    fake_llm.push(Reply(content="streamed words arrive one by one"))
    try:
        out = await rt.agent.handle(
            InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="stream please")
        )
    finally:
        await rt.aclose()
    assert fake_llm.requests[-1]["stream"] is True
    assert out is not None and out.content == "streamed words arrive one by one"
    deltas = [e for e in drain_outbound(rt.bus) if e.kind == "stream_delta"]
    assert len(deltas) >= 3
    assert "".join(d.content for d in deltas) == out.content
    assert {d.metadata["stream_id"] for d in deltas} == {out.metadata["stream_id"]}
    assert all((d.channel, d.chat_id) == ("telegram", "42") for d in deltas)
    assert messages_of(session_path(config, "telegram:42"))[-1]["content"] == out.content


async def test_a_streamed_preview_never_shows_reasoning_or_control_tokens(make_config, fake_llm: FakeLLMServer) -> None:
    """The final reply dropped a reasoning model's <think> block, but the streamed preview showed it
    (for seconds, and as the push notification), in every response of the turn."""
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True})
    rt = make_runtime(config)
    fake_llm.push(
        Reply(content="<think>the user is Bob, hint rosebud</think>Let me look.",
              tool_calls=[{"id": "l", "name": "list_dir", "arguments": {"path": "."}}]),
        Reply(content="<thinking>Bob again: rosebud</thinking>Here is my answer.<|im_end|>"),
    )
    try:
        out = await rt.agent.handle(
            InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="stream please")
        )
    finally:
        await rt.aclose()
    assert out is not None and out.content == "Here is my answer."
    deltas = [e.content for e in drain_outbound(rt.bus) if e.kind == "stream_delta"]
    assert deltas and not any("rosebud" in d or "think" in d or "<|" in d for d in deltas), deltas
    assert "".join(deltas) == "Let me look.Here is my answer."


async def test_a_reply_its_publisher_delivers_is_not_streamed(make_config, fake_llm: FakeLLMServer) -> None:
    """A cron job's turn (or the heartbeat's) streamed a preview into the chat, then the job sent its
    result as a new message: the reply showed twice (and a heartbeat's HEARTBEAT_OK showed at all)."""
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True})
    rt = make_runtime(config)
    fake_llm.push(Reply(content="Time to take your pills!"))
    rt.loop.start()
    try:
        out = await rt.bus.request(
            InboundMessage(channel="telegram", sender_id="user", chat_id="42", content="job: remind me")
        )
    finally:
        await rt.aclose()
    assert out is not None and out.content == "Time to take your pills!"
    assert [e for e in drain_outbound(rt.bus) if e.kind in ("stream_delta", "stream_end")] == []


async def test_streaming_turn_with_tool_calls(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True})
    rt = make_runtime(config)
    fake_llm.push(
        Reply(content="", tool_calls=[{"id": "l", "name": "list_dir", "arguments": {"path": "."}}]),
        Reply(content="listed"),
    )
    try:
        reply = await rt.ask("list")
    finally:
        await rt.aclose()
    assert reply == "listed"
    tool_msg = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"][0]
    assert tool_msg["tool_call_id"] == "l" and "memory/" in tool_msg["content"]


async def test_each_model_call_of_a_streamed_turn_streams_into_its_own_message(
    make_config, fake_llm: FakeLLMServer
) -> None:
    """One stream id per turn: the text before a tool call and the answer went into the same
    preview, the answer ended in the first message, above the interim notes sent after it."""
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True,
                               "channels.sendProgress": False})
    rt = make_runtime(config)
    fake_llm.push(
        Reply(content="Let me look first. ", tool_calls=[{"id": "l", "name": "list_dir", "arguments": {}}]),
        Reply(content="FINAL answer"),
    )
    try:
        out = await rt.agent.handle(
            InboundMessage(channel="telegram", sender_id="1", chat_id="42", content="what is there?")
        )
        events = drain_outbound(rt.bus)
    finally:
        await rt.aclose()
    streams: dict[str, str] = {}
    for e in events:
        if e.kind == "stream_delta":
            streams[e.metadata["stream_id"]] = streams.get(e.metadata["stream_id"], "") + e.content
    assert list(streams.values()) == ["Let me look first. ", "FINAL answer"], streams
    first, last = list(streams)
    interim = [e for e in events if e.kind == "progress"]  # sent to finish the first preview
    assert [(e.content, e.metadata["stream_id"]) for e in interim] == [("Let me look first.", first)]
    assert out is not None and out.content == "FINAL answer" and out.metadata["stream_id"] == last


async def test_429_then_success(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    fake_llm.push(Reply(status=429, error_message="slow down"), Reply(content="after the wait"))
    try:
        out = await ask_for_reply(rt, "hello")
    finally:
        await rt.aclose()
    assert out.content == "after the wait"
    assert len(fake_llm.requests) == 2
    assert not out.metadata.get("failed")
    assert [m["role"] for m in messages_of(session_path(config))] == ["user", "assistant"]


async def test_repeated_500s_give_a_clear_error_and_keep_the_transcript(
    make_config, fake_llm: FakeLLMServer
) -> None:
    config, _ = make_config(**{"agents.defaults.llmMaxRetries": 2})
    rt = make_runtime(config)
    fake_llm.push(Reply(content="first answer"))
    try:
        await rt.ask("first question")
        fake_llm.push(*[Reply(status=500, error_message="upstream exploded")] * 3)
        failed = await ask_for_reply(rt, "second question")
        reply = failed.content
        assert failed.metadata.get("failed")
        fake_llm.push(Reply(content="back again"))
        third = await rt.ask("third question")
    finally:
        await rt.aclose()
    assert "HTTP 500" in reply and "try again" in reply
    assert "upstream exploded" not in reply  # provider internals stay in the log
    assert len(fake_llm.requests) == 1 + 3 + 1
    assert third == "back again"
    path = session_path(config)
    objs = read_jsonl(path)  # every line is valid JSON
    contents = [(m["role"], m["content"]) for m in objs if "role" in m]
    assert contents[:3] == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
    ]
    assert contents[3][0] == "assistant" and "HTTP 500" in contents[3][1]
    assert contents[4:] == [("user", "third question"), ("assistant", "back again")]


async def test_llm_error_surfaces_from_the_provider(fake_llm: FakeLLMServer) -> None:
    from nanobot.providers.litellm import LiteLLMProvider

    provider = LiteLLMProvider("openai/fake-model", api_key="k", api_base=fake_llm.url, max_retries=0)
    fake_llm.push(Reply(status=401, error_message="bad key sk-verysecret"))
    try:
        await provider.chat([{"role": "user", "content": "x"}])
    except LLMError as exc:
        assert "credentials" in str(exc) and "sk-verysecret" not in str(exc)
    else:
        raise AssertionError("expected LLMError")


@pytest.mark.parametrize("stream", [False, True])
async def test_forced_tool_choice_rejected_with_422_falls_back(fake_llm: FakeLLMServer, stream: bool) -> None:
    """A 422 is retried inside litellm and then swallowed (it returns None): we still fall back."""
    from nanobot.providers.litellm import LiteLLMProvider

    def responder(body: dict) -> Reply:
        if body.get("tool_choice") not in (None, "auto"):
            return Reply(status=422, error_message="tool_choice 'required' is not supported by this model")
        return Reply(content=None, tool_calls=[{"id": "s", "name": "save_memory", "arguments": '{"a": "b"}'}])

    fake_llm.responder = responder
    provider = LiteLLMProvider("openai/fake-model", api_key="k", api_base=fake_llm.url, max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {"name": "save_memory", "description": "x", "parameters": {"type": "object"}},
        }
    ]
    deltas: list[str] = []

    async def on_delta(d: str) -> None:
        deltas.append(d)

    response = await provider.chat(
        [{"role": "user", "content": "save"}],
        tools,
        tool_choice="required",
        on_delta=on_delta if stream else None,
    )
    assert response.tool_calls[0].name == "save_memory"
    assert response.tool_calls[0].arguments == {"a": "b"}
    choices = [r.get("tool_choice") for r in fake_llm.requests]
    assert choices[-1] == "auto" and set(choices[:-1]) == {"required"}
    assert all(bool(r.get("stream")) == stream for r in fake_llm.requests)


async def test_plain_422_is_a_clear_error(fake_llm: FakeLLMServer) -> None:
    from nanobot.providers.litellm import LiteLLMProvider

    fake_llm.responder = lambda body: Reply(status=422, error_message="unprocessable")
    provider = LiteLLMProvider("openai/fake-model", api_key="k", api_base=fake_llm.url, max_retries=2)
    with pytest.raises(LLMError, match="HTTP 422"):
        await provider.chat([{"role": "user", "content": "x"}])


async def test_iteration_limit_ends_the_turn_with_a_final_answer(
    make_config, fake_llm: FakeLLMServer
) -> None:
    config, _ = make_config(**{"agents.defaults.maxToolIterations": 3})
    rt = make_runtime(config)

    def responder(body: dict) -> Reply:
        if not body.get("tools"):  # the last call, without tools, after the limit
            return Reply(content="Here is where I got to.")
        return Reply(content=None, tool_calls=[{"id": f"c{len(body['messages'])}", "name": "list_dir"}])

    fake_llm.responder = responder
    try:
        reply = await rt.ask("loop forever")
    finally:
        await rt.aclose()
    assert reply == "Here is where I got to."
    assert len(fake_llm.requests) == 3 + 1 and "tools" not in fake_llm.requests[-1]
    stored = messages_of(session_path(config))
    assert [m["role"] for m in stored] == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    assert stored[-1]["content"] == reply
    assert json.dumps(stored)  # serialisable, nothing half-written


async def test_tool_results_that_fill_the_window_end_the_turn_and_the_next_turn_still_fits(
    make_config, fake_llm: FakeLLMServer
) -> None:
    """A small model read the same file again and again until the request exceeded its 4,096-token
    window: the server refused it (HTTP 400), and the next turn, whose history held those results
    and whose consolidation the model could not do, was refused too."""
    from nanobot.providers.tokens import count_message

    window = 4096
    config, _ = make_config(
        **{
            "agents.defaults.contextWindowTokens": window,
            "agents.defaults.maxTokens": 256,
            "agents.defaults.maxToolIterations": 40,
            "memory.flush.enabled": False,
        }
    )
    rt = make_runtime(config)
    (config.workspace_path / "notes.txt").write_text("a line of notes about the garden\n" * 120)

    chats: list[dict] = []  # the turns' requests (consolidation runs beside them, in the background)

    def responder(body: dict) -> Reply:
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        if "save_memory" in tools:
            return Reply(content="I cannot do that.")  # consolidation fails, as a small model's did
        chats.append(body)
        if not tools:
            return Reply(content="The notes are about the garden.")
        if "how are you" in json.dumps(body["messages"][-1]):
            return Reply(content="Fine.")
        call = {"id": f"c{len(body['messages'])}", "name": "read_file", "arguments": {"path": "notes.txt"}}
        return Reply(content=None, tool_calls=[call])

    fake_llm.responder = responder
    try:
        first = await rt.ask("read my notes")
        steps = len(chats) - 1  # the last request of the turn has no tools
        second = await rt.ask("how are you?")
    finally:
        await rt.aclose()
    assert first == "The notes are about the garden."
    assert 1 < steps < 40 and "tools" not in chats[steps] and all("tools" in r for r in chats[:steps])
    for request in chats:  # what each request asked of a 4,096-token window, with the reply's 256
        tokens = (
            sum(count_message(m) for m in request["messages"])
            + len(json.dumps(request.get("tools") or [])) // 4
        )
        assert tokens + 256 <= window, tokens
    assert second == "Fine."
    stored = [m for m in messages_of(session_path(config)) if m["role"] == "tool"]
    assert len(stored) == steps  # the transcript keeps every result the requests left out


async def test_memory_edit_shows_in_the_next_system_prompt(make_config, fake_llm: FakeLLMServer) -> None:
    config, _ = make_config()
    rt = make_runtime(config)
    fake_llm.push(
        Reply(
            content=None,
            tool_calls=[
                {
                    "id": "m",
                    "name": "write_file",
                    "arguments": {"path": "memory/MEMORY.md", "content": "- owns a cat\n"},
                }
            ],
        ),
        Reply(content="noted"),
        Reply(content="you own a cat"),
    )
    try:
        await rt.ask("remember I own a cat")
        await rt.ask("what do I own?")
    finally:
        await rt.aclose()
    assert "owns a cat" not in fake_llm.requests[0]["messages"][0]["content"]
    assert "owns a cat" in fake_llm.requests[-1]["messages"][0]["content"]  # no stale cached prompt


async def test_one_replys_tool_calls_run_a_few_at_a_time_and_not_without_end() -> None:
    """All tool calls of one reply ran at once: 30 `exec` calls were 30 sandboxes (90 processes)
    together, each with its own limits; a reply of 300 calls would have been 300."""
    from nanobot.agent.runner import MAX_PARALLEL_TOOL_CALLS, MAX_TOOL_CALLS_PER_REPLY, TurnRunner
    from nanobot.agent.tools.base import Tool, ToolContext
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall

    class Slow(Tool):
        name = "slow"
        description = "waits a little"
        running = peak = runs = 0

        async def execute(self, ctx: ToolContext, **_: object) -> str:
            Slow.running += 1
            Slow.runs += 1
            Slow.peak = max(Slow.peak, Slow.running)
            await asyncio.sleep(0.05)
            Slow.running -= 1
            return "done"

    class Flood(LLMProvider):
        name = "flood"
        default_model = "flood"

        async def chat(self, messages, tools=None, **_: object) -> LLMResponse:  # noqa: ANN001
            if messages[-1].get("role") == "tool":
                return LLMResponse(content="finished")
            return LLMResponse(tool_calls=[ToolCall(f"c{i}", "slow", {}) for i in range(30)])

    tools = ToolRegistry(None)
    tools.register(Slow())
    result = await TurnRunner(Flood(), tools).run([{"role": "user", "content": "go"}], ToolContext())
    assert result.content == "finished"
    assert Slow.runs == MAX_TOOL_CALLS_PER_REPLY and Slow.peak == MAX_PARALLEL_TOOL_CALLS
    outputs = [m["content"] for m in result.messages if m.get("role") == "tool"]
    assert len(outputs) == 30 and outputs[-1].startswith("Error: not run: one reply may call at most")


async def test_a_group_sharing_memory_gets_the_relevant_facts_of_a_long_memory_file(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """With memory.shareInGroups on, a group's prompt carried the head and tail of a long MEMORY.md
    but never the relevant facts of its middle, which private chats get: the model said it did not know."""
    config, _ = make_config(**{"memory.shareInGroups": True})
    rt = make_runtime(config)
    facts = [f"- Fact {n}: the {n}th thing worth remembering about the garden shed and its shelves" for n in range(600)]
    facts[300] = "- Our dentist is Dr. Zamboni on Elm Street."
    (config.workspace_path / "memory" / "MEMORY.md").write_text("# Memory\n" + "\n".join(facts) + "\n")
    fake_llm.push(Reply(content="Dr. Zamboni"), Reply(content="Dr. Zamboni"))
    try:
        for chat_id, is_group in (("-100", True), ("42", False)):
            await rt.agent.handle(InboundMessage(
                channel="telegram", sender_id="42", chat_id=chat_id, content="who is our dentist?", is_group=is_group
            ))
    finally:
        await rt.aclose()
    group, private = (json.dumps(request["messages"]) for request in fake_llm.requests[-2:])
    assert "Fact 599" in group and "Fact 300" not in group  # the long file's tail is there, its middle not
    assert "Zamboni" in private and "Zamboni" in group
