"""AgentLoop through the bus and the real litellm: ordering, concurrency, /stop, commands, pruning."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from nanobot.agent.agent import Agent
from nanobot.agent.loop import NOTHING_RUNNING_REPLY, STOPPED_REPLY, AgentLoop
from nanobot.bus.commands import HELP_TEXT, parse_command
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from tests.agent_helpers import (
    drain_outbound,
    make_runtime,
    messages_of,
    next_outbound,
    read_jsonl,
    user_text,
    wait_for,
)
from tests.fakes.llm_server import FakeLLMServer, Reply

SLOW_REPLY_S = 5.0


@pytest.fixture
async def running(make_config) -> AsyncIterator[tuple[AgentLoop, Agent, MessageBus]]:
    config, _ = make_config()
    bus = MessageBus()
    runtime = make_runtime(config, bus)
    runtime.loop.start()
    yield runtime.loop, runtime.agent, bus
    await runtime.loop.stop_accepting()
    await runtime.loop.finish(grace_s=1.0)
    await runtime.aclose()


def inbound(text: str, chat_id: str = "c1", channel: str = "telegram") -> InboundMessage:
    return InboundMessage(channel=channel, sender_id="u1", chat_id=chat_id, content=text)


def test_parse_command() -> None:
    assert parse_command("/new") == "new"
    assert parse_command("  /STOP@my_bot ") == "stop"
    assert parse_command("/help") == "help"
    assert parse_command("/status") == "status"
    assert parse_command("/etc/hosts") is None
    assert parse_command("/new please") is None
    assert parse_command("/unknown") is None
    assert parse_command("/new\nmore") is None
    assert parse_command("hello /new") is None


async def test_twenty_messages_on_one_session_are_answered_in_order(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    in_flight = {"now": 0, "max": 0}
    lock = threading.Lock()

    def responder(body: dict) -> Reply:
        with lock:
            in_flight["now"] += 1
            in_flight["max"] = max(in_flight["max"], in_flight["now"])
        try:
            threading.Event().wait(0.01)  # long enough for overlap to show if there were any
            return Reply(content=f"re: {user_text(body)}")
        finally:
            with lock:
                in_flight["now"] -= 1

    fake_llm.responder = responder
    for i in range(20):
        await bus.publish_inbound(inbound(f"message {i}"))
    replies = [(await next_outbound(bus, timeout_s=30)).content for _ in range(20)]
    assert replies == [f"re: message {i}" for i in range(20)]
    assert in_flight["max"] == 1
    stored = messages_of(agent.sessions.path_for("telegram:c1"))
    assert [m["content"] for m in stored if m["role"] == "user"] == [f"message {i}" for i in range(20)]
    # each request saw every earlier exchange: the turns really ran one after another
    assert len(fake_llm.requests[-1]["messages"]) == 1 + 2 * 19 + 1


async def test_sessions_run_concurrently(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    sessions = 4
    barrier = threading.Barrier(sessions, timeout=10)

    def responder(body: dict) -> Reply:
        barrier.wait()  # only passes when all four sessions are at the LLM at the same time
        return Reply(content=f"re: {user_text(body)}")

    fake_llm.responder = responder
    for i in range(sessions):
        await bus.publish_inbound(inbound(f"hello {i}", chat_id=f"chat{i}"))
    replies = {}
    for _ in range(sessions):
        out = await next_outbound(bus, timeout_s=30)
        replies[out.chat_id] = out.content
    assert replies == {f"chat{i}": f"re: hello {i}" for i in range(sessions)}
    assert not barrier.broken


async def test_a_queued_turn_turns_the_typing_indicator_back_on(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """The first reply stops the chat's typing indicator; the message queued behind it was then
    answered after seconds of silence, with no sign that anything was happening."""
    loop, agent, bus = running
    fake_llm.responder = lambda body: Reply(content=f"re: {user_text(body)}")
    await bus.publish_inbound(inbound("first"))
    await bus.publish_inbound(inbound("second"))
    events: list[tuple[str, str]] = []
    while len([k for k, _ in events if k == "message"]) < 2:
        out = await asyncio.wait_for(bus.consume_outbound(), timeout=30)
        events.append((out.kind, out.content))
    kinds = [k for k, _ in events if k in ("message", "typing")]
    assert kinds == ["message", "typing", "message"], events
    assert [c for k, c in events if k == "message"] == ["re: first", "re: second"]


async def test_stop_cancels_the_running_turn_ahead_of_the_queue(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    fake_llm.push(Reply(content="too late", delay_s=SLOW_REPLY_S))
    await bus.publish_inbound(inbound("a long task"))
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await bus.publish_inbound(inbound("queued behind it"))
    started = asyncio.get_running_loop().time()
    await bus.publish_inbound(inbound("/stop"))
    out = await next_outbound(bus, timeout_s=SLOW_REPLY_S)
    assert out.content == STOPPED_REPLY
    assert asyncio.get_running_loop().time() - started < SLOW_REPLY_S / 2
    # the queued message is not lost: it is answered after the cancelled turn
    queued = await next_outbound(bus, timeout_s=30)
    assert queued.content == "ok"
    await wait_for(lambda: not loop.in_flight())
    path = agent.sessions.path_for("telegram:c1")
    assert [m["content"] for m in messages_of(path)] == ["a long task", "queued behind it", "ok"]
    # the session goes on normally afterwards, with the interrupted question in its history
    fake_llm.push(Reply(content="fresh answer"))
    await bus.publish_inbound(inbound("next question"))
    assert (await next_outbound(bus)).content == "fresh answer"
    sent = fake_llm.requests[-1]["messages"]
    assert sent[1]["content"] == "a long task" and sent[2]["content"].endswith("queued behind it")
    assert [m["content"] for m in messages_of(path)][-2:] == ["next question", "fresh answer"]


async def test_stop_during_a_streamed_answer_keeps_what_the_chat_was_shown(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """The chat kept the part of the answer streamed before /stop; the session kept nothing of it,
    so the model did not know what the user had read ("go on" started over)."""
    config, _ = make_config(**{"agents.defaults.stream": True, "channels.telegram.streaming": True})
    bus = MessageBus()
    runtime = make_runtime(config, bus)
    runtime.loop.start()
    fake_llm.push(Reply(content="PARTIAL " + " ".join(f"w{i}" for i in range(60)), stream_piece_bytes=1))
    shown: list[str] = []
    try:
        await bus.publish_inbound(inbound("tell me a story"))
        while "w3" not in "".join(shown):
            shown.append((await next_outbound(bus, kind="stream_delta", timeout_s=30)).content)
        await bus.publish_inbound(inbound("/stop"))
        assert (await next_outbound(bus, timeout_s=30)).content == STOPPED_REPLY
        await wait_for(lambda: not runtime.loop.in_flight())
    finally:
        await runtime.loop.stop_accepting()
        await runtime.aclose()
    saved = messages_of(runtime.agent.sessions.path_for("telegram:c1"))
    assert [m["role"] for m in saved] == ["user", "assistant"], saved
    assert saved[1]["content"].startswith("PARTIAL w0 w1 w2 w3") and "stopped by the user" in saved[1]["content"]
    assert "w59" not in saved[1]["content"]


async def test_stop_on_a_channel_that_does_not_stream_saves_nothing_as_shown(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """With agents.defaults.stream on, a Discord chat (no streaming there) was shown nothing before
    /stop, yet the session saved the streamed text as the answer the user had read."""
    config, _ = make_config(**{"agents.defaults.stream": True})  # Telegram's streaming stays off
    bus = MessageBus()
    runtime = make_runtime(config, bus)
    runtime.loop.start()
    story = "PARTIAL " + " ".join(f"w{i}" for i in range(400))
    # slow either way: streamed a byte a millisecond, or whole after 3 s
    fake_llm.responder = lambda body: Reply(content=story, stream_piece_bytes=1) if body.get("stream") else Reply(
        content=story, delay_s=3.0
    )
    try:
        for channel in ("discord", "telegram"):
            await bus.publish_inbound(inbound("tell me a story", channel=channel))
            await wait_for(lambda: fake_llm.requests)
            await asyncio.sleep(0.5)  # the answer is streaming from the model
            await bus.publish_inbound(inbound("/stop", channel=channel))
            assert (await next_outbound(bus, timeout_s=30)).content == STOPPED_REPLY
            await wait_for(lambda: not runtime.loop.in_flight())
    finally:
        await runtime.loop.stop_accepting()
        await runtime.aclose()
    for key in ("discord:c1", "telegram:c1"):
        saved = messages_of(runtime.agent.sessions.path_for(key))
        assert "PARTIAL" not in str(saved), (key, saved)


async def test_stop_in_a_chat_stops_a_report_streaming_into_it_from_a_jobs_session(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """A heartbeat's or cron job's sub-agent reports in the job's session, answering into the chat:
    the user watched it come, sent /stop and was told "Nothing is running." while it ran on."""
    loop, agent, bus = running
    fake_llm.push(Reply(content="the weather report, finished after the stop", delay_s=SLOW_REPLY_S))
    report = InboundMessage(
        channel="system", sender_id="u1", chat_id="c1", content="[sub-agent report] the weather",
        session_key_override="heartbeat:main", metadata={"origin_channel": "telegram", "origin_chat_id": "c1"},
    )
    await bus.publish_inbound(report)
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await bus.publish_inbound(inbound("/stop", chat_id="other"))  # another chat's /stop reaches nothing
    assert (await next_outbound(bus, timeout_s=10)).content == NOTHING_RUNNING_REPLY
    await bus.publish_inbound(inbound("/stop"))
    assert (await next_outbound(bus, timeout_s=10)).content == STOPPED_REPLY
    await wait_for(lambda: not loop.in_flight())
    await asyncio.sleep(SLOW_REPLY_S + 0.5)  # when the report's answer would have come
    assert not [out for out in drain_outbound(bus) if out.kind == "message"]


async def test_stop_in_a_chat_leaves_a_cron_jobs_own_turn_alone(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """The cross-session /stop reached a cron job's own turn too (it shows nothing in the chat): the
    user's /stop of their own answer lost a reminder due then, recorded as run "ok"."""
    from nanobot.agent.cron_turn import run_cron_job
    from nanobot.scheduler.cron_run import run_and_deliver
    from nanobot.scheduler.cron_store import CronJob, CronSchedule, DeliverTo

    loop, agent, bus = running
    fake_llm.push(Reply(content="REMINDER: take the pills", delay_s=SLOW_REPLY_S),
                  Reply(content="my long answer", delay_s=SLOW_REPLY_S))
    job = CronJob("j1", "pills", "remind me to take the pills",
                  CronSchedule(kind="at", at="2026-01-01T09:00:00+00:00"), deliver_to=DeliverTo("telegram", "c1"))
    delivered: list[str] = []

    async def deliver(channel: str, chat_id: str, text: str) -> None:
        delivered.append(text)

    job_run = asyncio.create_task(run_and_deliver(job, lambda j: run_cron_job(bus, j, agent.sessions), deliver))
    await wait_for(lambda: len(fake_llm.requests) == 1)  # the job's turn is running
    await bus.publish_inbound(inbound("write me a long essay"))
    await wait_for(lambda: len(fake_llm.requests) == 2)
    await bus.publish_inbound(inbound("/stop"))  # meant for the essay
    assert (await next_outbound(bus, timeout_s=10)).content == STOPPED_REPLY
    await asyncio.wait_for(job_run, SLOW_REPLY_S + 5)
    assert delivered == ["REMINDER: take the pills"]


async def test_stop_gives_up_only_the_stopped_turn(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """/stop recorded the session's length after waiting for the cancelled turn: by then the queued
    message had been saved, so it counted as given up and a restart before its answer never
    answered it (nanobot/gateway/missed.py skips what the user stopped)."""
    loop, agent, bus = running
    fake_llm.push(Reply(content="too late", delay_s=SLOW_REPLY_S), Reply(content="answered", delay_s=2.0))
    await bus.publish_inbound(inbound("a long task"))
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await bus.publish_inbound(inbound("queued behind it"))
    await bus.publish_inbound(inbound("/stop"))
    assert (await next_outbound(bus, timeout_s=SLOW_REPLY_S)).content == STOPPED_REPLY
    path = agent.sessions.path_for("telegram:c1")
    await wait_for(lambda: len(messages_of(path)) == 2)  # the queued turn runs; a crash now ...
    stops = [o["stopped_through"] for o in read_jsonl(path) if "stopped_through" in o]
    assert stops == [1], stops  # ... must leave "queued behind it" to be answered after the restart
    assert (await next_outbound(bus, timeout_s=30)).content == "answered"


async def test_stop_mid_tool_group_leaves_no_half_group(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    fake_llm.push(
        Reply(content=None, tool_calls=[{"id": "s", "name": "exec", "arguments": {"command": "sleep 30"}}])
    )
    await bus.publish_inbound(inbound("run something slow"))
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await asyncio.sleep(0.3)  # the exec tool is running now
    await bus.publish_inbound(inbound("/stop"))
    assert (await next_outbound(bus)).content == STOPPED_REPLY
    roles = [m["role"] for m in messages_of(agent.sessions.path_for("telegram:c1"))]
    assert roles == ["user"]  # the assistant call without its result never reached the disk


async def test_stop_with_nothing_running(running: tuple[AgentLoop, Agent, MessageBus]) -> None:
    _, _, bus = running
    await bus.publish_inbound(inbound("/stop"))
    assert (await next_outbound(bus)).content == "Nothing is running."


async def test_status_is_answered_while_a_turn_runs(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    fake_llm.push(Reply(content="slow answer", delay_s=1.5))
    await bus.publish_inbound(inbound("think hard"))
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await bus.publish_inbound(inbound("/status"))
    first = await next_outbound(bus)
    assert first.content.startswith("Model: ")
    assert "Session: telegram:c1 — 1 messages" in first.content
    second = await next_outbound(bus)
    assert second.content == "slow answer"


async def test_status_in_a_group_tells_its_own_tools_and_not_the_owners_use(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """A group's /status said "Tools: 11" (the owner's count; the group is offered fewer) and every
    chat's token use."""
    loop, agent, bus = running
    await bus.publish_inbound(inbound("/status"))
    private = (await next_outbound(bus)).content
    group = InboundMessage(channel="telegram", sender_id="u2", chat_id="-100", content="/status", is_group=True)
    await bus.publish_inbound(group)
    shared = (await next_outbound(bus)).content

    def tools(text: str) -> int:
        return int(text.split("Tools: ", 1)[1].split(";")[0].split(" ")[0])

    offered = agent.tools.offered(None, agent.context_of(group).tool_context())
    assert offered is not None and tools(shared) == len(offered) < tools(private) == len(agent.tools)
    assert "Tokens used since start" in private and "in all chats" in private
    assert "Tokens used" not in shared


async def test_help_and_unknown_slash_text(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    await bus.publish_inbound(inbound("/help"))
    assert (await next_outbound(bus)).content == HELP_TEXT
    assert not fake_llm.requests
    fake_llm.responder = lambda body: Reply(content=f"llm saw: {user_text(body)}")
    await bus.publish_inbound(inbound("/frobnicate the widget"))
    assert (await next_outbound(bus)).content == "llm saw: /frobnicate the widget"
    await bus.publish_inbound(inbound("/etc/hosts has a typo?"))
    assert (await next_outbound(bus)).content == "llm saw: /etc/hosts has a typo?"


async def test_new_through_the_loop_archives(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    await bus.publish_inbound(inbound("remember this"))
    await next_outbound(bus)
    path = agent.sessions.path_for("telegram:c1")
    before = path.read_bytes()
    await bus.publish_inbound(inbound("/new"))
    assert (await next_outbound(bus)).content == "New session started."
    archived = list((path.parent / "archive").glob("telegram_c1-*.jsonl"))
    assert len(archived) == 1 and archived[0].read_bytes().startswith(before)
    assert not path.exists() or not messages_of(path)


async def test_idle_session_slots_are_pruned(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running
    for i in range(10):
        await bus.publish_inbound(inbound("hi", chat_id=f"p{i}"))
    for _ in range(10):
        await next_outbound(bus)
    await wait_for(lambda: loop.active_sessions == 0)
    assert loop.in_flight() == []


async def test_a_failing_turn_reports_and_the_loop_goes_on(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug in the runner")

    original = agent.runner.run
    agent.runner.run = broken  # type: ignore[method-assign]
    await bus.publish_inbound(inbound("trigger"))
    out = await next_outbound(bus)
    assert out.content == "Sorry, something went wrong: RuntimeError."
    agent.runner.run = original  # type: ignore[method-assign]
    await bus.publish_inbound(inbound("again"))
    assert (await next_outbound(bus)).content == "ok"


async def test_subagent_result_failure_is_reported_to_the_origin_chat(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    loop, agent, bus = running

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    agent.runner.run = broken  # type: ignore[method-assign]
    await bus.publish_inbound(
        InboundMessage(
            channel="system",
            sender_id="subagent",
            chat_id="c9",
            content="[Sub-agent 'x' finished]",
            session_key_override="telegram:c9",
            metadata={"origin_channel": "telegram", "origin_chat_id": "c9"},
        )
    )
    out = await next_outbound(bus)
    assert (out.channel, out.chat_id) == ("telegram", "c9")
    assert out.content.startswith("Sorry, something went wrong")


def hold_turns_before_saving(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every turn stops in a long consolidation before it saves its message; the list grows by one
    as each turn gets there."""
    entered: list[int] = []

    async def long_consolidation(*_args: object, **_kwargs: object) -> None:
        entered.append(1)
        await asyncio.sleep(60)

    monkeypatch.setattr(agent.lifecycle, "ensure_fits", long_consolidation)
    return entered


async def test_turns_cancelled_before_saving_their_message_do_not_ack_it(
    running: tuple[AgentLoop, Agent, MessageBus], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At shutdown, a turn still making room (a long consolidation) has not saved its message: no
    ack, so the channel never confirms it and the platform serves it again. /stop does ack (the
    user gave that message up)."""
    loop, agent, bus = running
    entered = hold_turns_before_saving(agent, monkeypatch)
    acks: list[str] = []
    for text in ("given up with /stop", "cut by the shutdown", "queued behind it"):
        msg = inbound(text)
        msg.on_persisted = lambda text=text: acks.append(text)
        await bus.publish_inbound(msg)
    await wait_for(lambda: len(entered) == 1)
    await bus.publish_inbound(inbound("/stop"))
    assert (await next_outbound(bus, timeout_s=10)).content == STOPPED_REPLY
    assert acks == ["given up with /stop"]
    await wait_for(lambda: len(entered) == 2)  # the next one is making room now
    await loop.stop_accepting()
    await loop.finish(grace_s=0.2)
    assert not loop.in_flight()
    assert acks == ["given up with /stop"]
    # the given-up message is kept (the user's words, unanswered); the other two are not saved
    assert [m["content"] for m in messages_of(agent.sessions.path_for("telegram:c1"))] == ["given up with /stop"]


async def test_a_shutdown_keeps_messages_a_platform_will_not_send_again(
    running: tuple[AgentLoop, Agent, MessageBus], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discord does not replay events: a message queued behind a running turn (or cut before it was
    saved) when the gateway stopped was lost without a trace. It is saved at the shutdown now, so the
    next start answers it (gateway/missed.py); a /stop-ped one is kept as given up."""
    from nanobot.gateway.missed import unanswered_index

    loop, agent, bus = running
    entered = hold_turns_before_saving(agent, monkeypatch)
    queued = [f"queued behind it {n}" for n in range(1, 7)]
    for text in ("given up with /stop", "cut by the shutdown", *queued):
        await bus.publish_inbound(inbound(text, channel="discord"))
    await wait_for(lambda: len(entered) == 1)
    await bus.publish_inbound(inbound("/stop", channel="discord"))
    assert (await next_outbound(bus, timeout_s=10)).content == STOPPED_REPLY
    await wait_for(lambda: len(entered) == 2)
    await loop.stop_accepting()
    await loop.finish(grace_s=0.2)
    path = agent.sessions.path_for("discord:c1")
    # in the order they were sent (the tasks once sat in a set, and were kept in its hash order)
    # the /stop-ped one is kept too (the user's words), as given up: the next start does not answer it
    assert [m["content"] for m in messages_of(path)] == ["given up with /stop", "cut by the shutdown", *queued]
    session = type(agent.sessions)(agent.context.workspace).get("discord:c1")
    assert session.metadata["stopped_through"] == 1
    assert unanswered_index(session) == 7  # the next start answers the newest, the rest in its history


async def test_a_new_queued_at_shutdown_is_done_when_its_platform_will_not_send_it_again(
    running: tuple[AgentLoop, Agent, MessageBus], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discord: a /new queued behind a running turn was dropped at a graceful stop, and the next start
    answered the message after it inside the conversation the user had asked to leave."""
    from nanobot.gateway.missed import unanswered_index

    loop, agent, bus = running
    entered = hold_turns_before_saving(agent, monkeypatch)
    for text in ("the old topic", "/new", "a fresh question"):
        await bus.publish_inbound(inbound(text, channel="discord"))
    await wait_for(lambda: len(entered) == 1)
    await loop.stop_accepting()
    await loop.finish(grace_s=0.2)
    archives = list((agent.sessions.path_for("discord:c1").parent / "archive").glob("discord_c1-*.jsonl"))
    assert len(archives) == 1 and "the old topic" in archives[0].read_text(encoding="utf-8")
    assert list(archives[0].parent.glob("*.pending"))  # its memory work runs at the next start
    assert [m["content"] for m in messages_of(agent.sessions.path_for("discord:c1"))] == ["a fresh question"]
    session = type(agent.sessions)(agent.context.workspace).get("discord:c1")
    assert unanswered_index(session) == 0  # the next start answers it, in the fresh session


def stop_with_id(message_id: int) -> InboundMessage:
    return InboundMessage("telegram", "u1", "c1", "/stop", metadata={"message_id": message_id})


async def test_a_stop_served_again_after_a_restart_does_not_cancel_the_resumed_turn(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """Telegram serves again every update after the oldest unconfirmed one: a /stop handled before
    the restart came back and cancelled the turn the restart had resumed (never answered), and the
    user got a "Stopped." they had not sent."""
    loop, agent, bus = running
    await bus.publish_inbound(stop_with_id(7))
    assert (await next_outbound(bus)).content == NOTHING_RUNNING_REPLY
    fake_llm.push(Reply(content="the answer", delay_s=1.0))
    answer = asyncio.create_task(bus.request(inbound("the resumed question")))
    await wait_for(lambda: len(fake_llm.requests) == 1)
    await bus.publish_inbound(stop_with_id(7))  # the same update, served again
    out = await asyncio.wait_for(answer, 30)
    assert out is not None and out.content == "the answer"
    assert [m.kind for m in drain_outbound(bus) if m.kind == "message"] == []  # no second "Stopped."


async def test_stop_reaches_a_turn_waiting_for_a_free_turn_slot(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """With every turn slot busy, /stop said "Nothing is running." and the waiting turn then ran; a
    message given up before its turn saved it was lost (also while waiting for a consolidation)."""
    config, _ = make_config(**{"agents.defaults.maxConcurrentTurns": 1})
    bus = MessageBus()
    runtime = make_runtime(config, bus)
    runtime.loop.start()
    try:
        fake_llm.push(Reply(content="A done", delay_s=1.5))
        first = asyncio.create_task(bus.request(inbound("a long task", chat_id="A")))
        await wait_for(lambda: len(fake_llm.requests) == 1)
        waiting = asyncio.create_task(bus.request(inbound("my locker code is 4711, do the thing", chat_id="B")))
        await asyncio.sleep(0.1)
        await bus.publish_inbound(inbound("/stop", chat_id="B"))
        assert (await next_outbound(bus)).content == STOPPED_REPLY
        assert await asyncio.wait_for(waiting, 10) is None  # given up: no answer
        assert (await asyncio.wait_for(first, 10)).content == "A done"
    finally:
        await runtime.aclose()
    assert len(fake_llm.requests) == 1  # B's turn never reached the model
    saved = messages_of(runtime.agent.sessions.path_for("telegram:B"))
    assert [m["content"] for m in saved] == ["my locker code is 4711, do the thing"]  # kept, unanswered


async def test_stop_is_answered_while_every_pending_place_is_taken(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """With as many messages pending as the loop takes (4 per turn slot), the loop read no more of
    the bus: a /stop waited behind the flood for the turn it was meant to stop, then cancelled a
    message the user had not given up."""
    config, _ = make_config(**{"agents.defaults.maxConcurrentTurns": 1})
    bus = MessageBus()
    runtime = make_runtime(config, bus)
    runtime.loop.start()
    try:
        fake_llm.push(Reply(content="too late", delay_s=SLOW_REPLY_S))
        await bus.publish_inbound(inbound("a long task"))
        await wait_for(lambda: len(fake_llm.requests) == 1)
        flood = [f"message {n}" for n in range(1, 7)]  # more than the 4 pending places
        for text in flood:
            await bus.publish_inbound(inbound(text))
        await wait_for(lambda: len(runtime.loop.in_flight()) == runtime.loop.max_pending)
        started = asyncio.get_running_loop().time()
        await bus.publish_inbound(inbound("/stop"))
        assert (await next_outbound(bus, timeout_s=SLOW_REPLY_S)).content == STOPPED_REPLY
        assert asyncio.get_running_loop().time() - started < SLOW_REPLY_S / 2
        replies = [(await next_outbound(bus, timeout_s=30)).content for _ in flood]
        assert replies == ["ok"] * len(flood)  # every one of them answered, none given up
        await wait_for(lambda: not runtime.loop.in_flight())
    finally:
        await runtime.aclose()
    saved = [m["content"] for m in messages_of(runtime.agent.sessions.path_for("telegram:c1"))]
    assert saved[0] == "a long task" and "too late" not in saved
    assert [text for text in saved if text.startswith("message")] == flood


async def test_messages_left_on_the_bus_at_shutdown_are_kept_when_not_sent_again(
    running: tuple[AgentLoop, Agent, MessageBus],
) -> None:
    """A Discord message that arrived after the loop stopped reading (a graceful stop's grace) sat on
    the bus and was lost; a Telegram one stays unconfirmed (Telegram serves it again)."""
    loop, agent, bus = running
    await loop.stop_accepting()
    await bus.publish_inbound(inbound("sent while stopping", channel="discord"))
    served_again = inbound("served again later")
    served_again.on_persisted = lambda: None
    await bus.publish_inbound(served_again)
    await bus.publish_inbound(inbound("/status", channel="discord"))
    assert loop.keep_waiting() == 1
    assert bus.waiting() == 0
    assert [m["content"] for m in messages_of(agent.sessions.path_for("discord:c1"))] == ["sent while stopping"]
    assert not agent.sessions.path_for("telegram:c1").exists()


async def test_a_message_served_again_after_new_is_not_answered_again(
    running: tuple[AgentLoop, Agent, MessageBus], fake_llm: FakeLLMServer
) -> None:
    """Telegram serves a chat's answered update again after a restart when another chat held the
    confirmation back; after a /new it was no longer in the (new) session: answered a second time,
    and the old conversation came back into the fresh one."""
    _loop, agent, bus = running

    def said(text: str, message_id: int) -> InboundMessage:
        return InboundMessage("telegram", "u1", "c1", text, metadata={"message_id": message_id})

    fake_llm.push(Reply(content="reply: question B1"))
    assert (await bus.request(said("question B1", 3))).content == "reply: question B1"
    assert (await bus.request(said("/new", 4))).content == "New session started."
    served_again = said("question B1", 3)
    await bus.publish_inbound(served_again)
    await wait_for(lambda: served_again.saved)
    await asyncio.sleep(0.1)
    turns = [r for r in fake_llm.requests if "Chat: c1" in str(r["messages"][-1].get("content"))]  # not /new's
    assert len(turns) == 1 and [m.content for m in drain_outbound(bus)] == []
    assert agent.sessions.get("telegram:c1").messages[:] == []
