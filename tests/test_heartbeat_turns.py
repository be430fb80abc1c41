"""The heartbeat's turns in a real gateway (recording channel, fake LLM on 127.0.0.1): the owner's
/stop reaches a beat posting into their chat; a sub-agent's report answered with HEARTBEAT_OK posts
nothing; a target moved from the owner's chat to a group starts the heartbeat's session afresh; the
first beat after a restart comes an interval after the last one that ran, not a whole interval
after the start."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from nanobot.bus.events import InboundMessage
from nanobot.config.schema import Config
from nanobot.gateway.runtime import Gateway
from nanobot.scheduler.heartbeat import OVERDUE_BEAT_DELAY_S, HeartbeatService
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.test_gateway_lifecycle import RecordingChannel
from tests.test_heartbeat_trust import OWNER, SECRET
from tests.test_heartbeat_trust import gateway as trust_gateway

GROUP = "-100777"


def gateway(tmp_path: Path, url: str, target: str, tasks: str) -> tuple[Gateway, RecordingChannel]:
    """The trust tests' gateway (owner-only allowFrom, a MEMORY.md holding SECRET), with `tasks`."""
    gw = trust_gateway(tmp_path, url, target)
    (gw.workspace / "HEARTBEAT.md").write_text(tasks)
    channel = gw.channels.channels["test"]
    assert isinstance(channel, RecordingChannel)
    return gw, channel


async def owner_says_hi(gw: Gateway, llm: FakeLLMServer) -> None:
    llm.push("Hello!")  # the chat is the owner's
    await gw.bus.request(InboundMessage(channel="test", sender_id=OWNER, chat_id=OWNER, content="hi"))


async def test_the_owners_stop_reaches_a_heartbeat_posting_into_their_chat(tmp_path: Path) -> None:
    """It said "Nothing is running." and the beat went on posting."""
    with FakeLLMServer() as llm:
        gw, channel = gateway(tmp_path, llm.url, f"test:{OWNER}", "- post a status update every few seconds\n")
        await gw.channels.start_all()
        gw.loop.start()
        try:
            await owner_says_hi(gw, llm)
            post = [{"name": "message", "arguments": {"content": "status"}}]
            llm.push(*[Reply(content=None, tool_calls=post, delay_s=0.4) for _ in range(8)], "final report")
            beat = asyncio.create_task(gw.heartbeat.tick())
            await asyncio.sleep(1.0)
            out = await gw.bus.request(InboundMessage(channel="test", sender_id=OWNER, chat_id=OWNER, content="/stop"))
            assert await asyncio.wait_for(beat, 5) is None
            calls = len(llm.requests)
            await asyncio.sleep(1.0)
        finally:
            await gw.runtime.aclose()
            await gw.channels.stop_all()
    assert out is not None and out.content == "Stopped."
    assert len(llm.requests) == calls < 8  # nothing more asked of the model after the /stop
    sent = list(channel.sent)
    assert "final report" not in sent and sent.count("status") < 4, sent


async def test_a_report_to_the_heartbeat_answered_heartbeat_ok_posts_nothing(tmp_path: Path) -> None:
    """The report's turn runs in the heartbeat's session, whose rule is to say HEARTBEAT_OK when
    there is nothing to report: the owner was sent a bare "HEARTBEAT_OK"."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if last["role"] == "user" and "[Heartbeat]" in str(last["content"]):
            return Reply(content=None, tool_calls=[{"name": "spawn", "arguments": {"task": "check the disk usage"}}])
        if len(messages) <= 3 and "check the disk usage" in str(last.get("content")):
            return Reply(content="Disk is 40% full.")  # the sub-agent
        return Reply(content="HEARTBEAT_OK")  # after the spawn, and the report's turn

    with FakeLLMServer() as llm:
        tasks = "- check the disk in the background; tell me if over 90%\n"
        gw, channel = gateway(tmp_path, llm.url, f"test:{OWNER}", tasks)
        await gw.channels.start_all()
        gw.loop.start()
        try:
            await owner_says_hi(gw, llm)
            llm.responder = respond
            assert await gw.heartbeat.tick() is None
            for _ in range(100):  # the report's turn
                if any("Disk is 40% full" in json.dumps(r["messages"][-1]) for r in llm.requests[2:]):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the sub-agent's report never came")
            await asyncio.sleep(0.5)
        finally:
            await gw.runtime.aclose()
            await gw.channels.stop_all()
    assert [text for text in channel.sent if text] == []


async def test_a_target_moved_to_a_group_does_not_take_the_private_beats_along(tmp_path: Path) -> None:
    """One session for every target: the group-trust beat was sent the owner's beats, which
    quoted MEMORY.md."""
    with FakeLLMServer() as llm:
        gw, _ = gateway(tmp_path, llm.url, f"test:{OWNER}", "- remind me about my bank card\n")
        gw.loop.start()
        try:
            await owner_says_hi(gw, llm)
            llm.push(f"Reminder: renew the card, PIN {SECRET}")
            assert SECRET in str(await gw.heartbeat.tick())
        finally:
            await gw.runtime.aclose()
        gw, _ = gateway(tmp_path, llm.url, f"test:{GROUP}", "- post a good-morning note to the family group\n")
        gw.loop.start()
        try:
            llm.push("Good morning everyone!")
            assert await gw.heartbeat.tick() == "Good morning everyone!"
        finally:
            await gw.runtime.aclose()
    (beat,) = [r for r in llm.requests if "good-morning note" in json.dumps(r["messages"][-1])]
    assert SECRET not in json.dumps(beat["messages"])
    archived = list((gw.workspace / "sessions" / "archive").glob("heartbeat_main-*.jsonl"))
    assert len(archived) == 1 and SECRET in archived[0].read_text()  # kept, as a /new keeps it


async def test_the_last_beat_is_read_from_the_heartbeats_session(tmp_path: Path) -> None:
    with FakeLLMServer() as llm:
        gw, _ = gateway(tmp_path, llm.url, f"test:{OWNER}", "- water the plants\n")
        gw.loop.start()
        try:
            assert gw.heartbeat_turns.last_beat() is None
            await owner_says_hi(gw, llm)
            llm.push("Water the plants today.")
            before = time.time()
            await gw.heartbeat.tick()
            last = gw.heartbeat_turns.last_beat()
            assert last is not None and before - 1 <= last <= time.time()
            assert gw.heartbeat is not None
            # the next start waits for the rest of the interval, not a whole one
            assert gw.heartbeat.first_delay_s(now=last + 600) == pytest.approx(1800 - 600)
        finally:
            await gw.runtime.aclose()


def service(last: float | None, interval_s: float = 1800) -> HeartbeatService:
    async def never(*_: object) -> None:
        raise AssertionError("not called")

    return HeartbeatService(Path("/nonexistent"), interval_s, never, lambda: None, never, last_beat=lambda: last)


def test_the_first_beat_after_a_restart() -> None:
    """Restarted more often than the interval, a gateway waited a whole one each time and never
    ran the tasks; restarted just after a beat it must not run them again at once."""
    now = 1_000_000.0
    assert service(None).first_delay_s(now) == 1800  # never ran: a whole interval
    assert service(now - 100).first_delay_s(now) == 1700  # just ran: the rest of the interval
    assert service(now - 5000).first_delay_s(now) == OVERDUE_BEAT_DELAY_S  # overdue: soon
    assert service(now + 9999).first_delay_s(now) == 1800  # a clock set back: at most an interval

    def broken() -> float:
        raise OSError("unreadable")

    crashed = service(None, interval_s=60)
    crashed._last_beat = broken
    assert crashed.first_delay_s(now) == 60


def test_an_interval_asyncio_cannot_wait_is_refused() -> None:
    """10**400 seconds passed the config and ended the heartbeat's task at its first sleep."""
    with pytest.raises(ValidationError, match="intervalS|interval_s"):
        Config.model_validate({"gateway": {"heartbeat": {"intervalS": 10**400}}})
    Config.model_validate({"gateway": {"heartbeat": {"intervalS": 366 * 24 * 3600}}})
