"""One turn path: every message — terminal, chat channel, cron job, heartbeat — goes through the bus and
the AgentLoop, so the per-session lock, the concurrency limit, /stop and the bound on pending turns
hold for all of them.

In-process tests use the real Gateway / runtime with an in-process provider that records which
turns overlap; the /stop test drives a real `nanobot agent` subprocess over a pipe against the fake
OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import io
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from nanobot.agent.factory import build_runtime
from nanobot.agent.message_context import MessageContext
from nanobot.bus.commands import parse_command, starts_with_command
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.cli import TerminalChannel
from nanobot.config.schema import Config
from nanobot.gateway.runtime import Gateway
from nanobot.providers.base import LLMProvider, LLMResponse
from nanobot.scheduler.heartbeat import HEARTBEAT_PROMPT
from tests.agent_helpers import messages_of, session_path, wait_for
from tests.conftest import REPO
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.test_gateway_lifecycle import with_recording_channel

_CHAT = re.compile(r"Channel: (\S+) \| Chat: (\S+)")


class OverlapProvider(LLMProvider):
    """In-process LLM that records, per chat and overall, how many turns are inside the model at once.

    Each call waits until `release` is set (set from the start unless a test holds it)."""

    name = "overlap"

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.release = asyncio.Event()
        self.release.set()
        self.now: dict[str, int] = {}
        self.max_per_chat: dict[str, int] = {}
        self.total = 0
        self.max_total = 0
        self.prompts: list[str] = []

    @property
    def default_model(self) -> str:
        return "overlap-model"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> LLMResponse:
        user = str(messages[-1].get("content") or "")
        self.prompts.append(user)
        found = _CHAT.search(user)
        chat = ":".join(found.groups()) if found else "?"
        self.now[chat] = self.now.get(chat, 0) + 1
        self.max_per_chat[chat] = max(self.max_per_chat.get(chat, 0), self.now[chat])
        self.total += 1
        self.max_total = max(self.max_total, self.total)
        try:
            await self.release.wait()
            await asyncio.sleep(self.delay_s)
        finally:
            self.now[chat] -= 1
            self.total -= 1
        return LLMResponse(content="re: " + user.rsplit("\n\n", 1)[-1])


def _config(tmp_path: Path, **defaults: Any) -> Config:
    return Config.model_validate(
        {
            "agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "overlap-model", **defaults}},
            "memory": {"search": {"enabled": False}},
        }
    )


# ------------------------------------------------------------------ one decision per message
def test_message_context_is_decided_once_for_everything_downstream() -> None:
    group = InboundMessage(channel="telegram", sender_id="7", chat_id="-100", content="/new", is_group=True)
    ctx = MessageContext.of(group, share_memory_in_groups=False)
    assert ctx.command == "new" and ctx.session_key == "telegram:-100"
    assert ctx.is_group and not ctx.memory_private
    assert MessageContext.of(group, share_memory_in_groups=True).memory_private
    tool = ctx.tool_context()
    assert (tool.channel, tool.chat_id, tool.session_key, tool.sender_id, tool.is_group) == (
        "telegram",
        "-100",
        "telegram:-100",
        "7",
        True,
    )
    # a sub-agent's report comes back on the internal channel: replies and tools target the origin
    # chat, and its text is never taken for a command
    report = InboundMessage(
        channel="system",
        sender_id="subagent",
        chat_id="c9",
        content="/stop",
        session_key_override="discord:c9",
        metadata={"origin_channel": "discord", "origin_chat_id": "c9"},
    )
    sub = MessageContext.of(report, share_memory_in_groups=False)
    assert sub.command is None and sub.from_system
    assert (sub.reply_channel, sub.reply_chat_id) == ("discord", "c9")
    assert (sub.tool_context().channel, sub.reply("x").channel) == ("discord", "discord")


def test_commands_are_parsed_by_one_parser() -> None:
    assert parse_command(" /STOP@my_bot ") == "stop"
    assert parse_command("/new please") is None and starts_with_command("/new please")
    assert parse_command("/etc/hosts") is None and not starts_with_command("/etc/hosts")


# ------------------------------------------------------------------ the terminal and a chat channel
async def test_terminal_and_gateway_turns_on_one_session_never_overlap(tmp_path: Path) -> None:
    """`nanobot agent -s telegram:42` beside the gateway's Telegram chat 42, in one process."""
    provider = OverlapProvider(delay_s=0.05)
    gateway = Gateway(_config(tmp_path, maxConcurrentTurns=8), provider=provider)
    gateway.loop.start()
    out = io.StringIO()
    terminal = TerminalChannel(gateway.bus, "telegram:42", tty=False, stdout=out)
    try:

        async def gateway_chat(i: int) -> None:  # what the Telegram channel publishes
            await gateway.bus.publish_inbound(
                InboundMessage(channel="telegram", sender_id="42", chat_id="42", content=f"from telegram {i}")
            )

        async def other_chat(i: int) -> None:
            await gateway.bus.publish_inbound(
                InboundMessage(channel="telegram", sender_id="43", chat_id="43", content=f"other {i}")
            )

        await asyncio.gather(
            *(terminal.one_shot(f"from the terminal {i}") for i in range(5)),
            *(gateway_chat(i) for i in range(5)),
            *(other_chat(i) for i in range(5)),
        )
        replies = []
        while len(replies) < 10:
            msg = await asyncio.wait_for(gateway.bus.consume_outbound(), 30)
            if msg.kind == "message":
                replies.append(msg)
        await wait_for(lambda: not gateway.loop.in_flight())
    finally:
        await gateway.runtime.aclose()
    assert sorted(out.getvalue().splitlines()) == sorted(f"re: from the terminal {i}" for i in range(5))
    assert sorted(m.content for m in replies if m.chat_id == "42") == [
        f"re: from telegram {i}" for i in range(5)
    ]
    assert provider.max_per_chat["telegram:42"] == 1  # one session: one turn at a time
    assert provider.max_total >= 2  # while another session ran beside it (the limit is 8)
    users = [
        m["content"] for m in messages_of(session_path(gateway.config, "telegram:42")) if m["role"] == "user"
    ]
    assert len(users) == 10


# ------------------------------------------------------------------ cron jobs and the heartbeat
async def test_cron_and_heartbeat_turns_honour_the_concurrency_limit(tmp_path: Path) -> None:
    provider = OverlapProvider(delay_s=0.1)
    config = _config(tmp_path, maxConcurrentTurns=2)
    config.gateway.heartbeat.enabled = True
    config.gateway.heartbeat.target = "test:42"
    gateway = with_recording_channel(Gateway(config, provider=provider))  # where the heartbeat reports
    (gateway.workspace / "HEARTBEAT.md").write_text("- water the plants\n", encoding="utf-8")
    jobs = [gateway.cron.add(f"job {i}", f"cron task {i}", every_s=3600) for i in range(4)]
    gateway.loop.start()
    try:
        assert gateway.heartbeat is not None
        results = await asyncio.wait_for(
            asyncio.gather(
                *(gateway.cron.run_now(job.id) for job in jobs),
                gateway.heartbeat.tick(),
                gateway.bus.request(
                    InboundMessage(channel="telegram", sender_id="5", chat_id="5", content="hi")
                ),
            ),
            60,
        )
    finally:
        await gateway.runtime.aclose()
    assert results[:4] == [f"re: cron task {i}" for i in range(4)]
    assert results[4] is not None and "water the plants" in results[4]
    assert provider.max_total == 2  # seven turns, never more than maxConcurrentTurns at once
    assert set(provider.max_per_chat) >= {"test:42", "telegram:5"}  # the heartbeat answers in its target
    heartbeat_prompt = next(p for p in provider.prompts if "water the plants" in p)
    assert heartbeat_prompt.count(HEARTBEAT_PROMPT.strip()[:40]) == 1  # the instructions once, not twice
    assert "[Heartbeat]" in heartbeat_prompt and heartbeat_prompt.count("[Heartbeat]") == 1


# ------------------------------------------------------------------ back-pressure
async def test_a_flood_of_inbound_messages_keeps_pending_work_bounded(tmp_path: Path) -> None:
    provider = OverlapProvider(delay_s=0.0)
    provider.release.clear()  # the model hangs: nothing finishes until the test says so
    bus = MessageBus(max_queue=5)
    runtime = build_runtime(_config(tmp_path, maxConcurrentTurns=2), bus, provider=provider)
    loop = runtime.loop
    assert loop.max_pending == 8
    loop.start()
    flood = 100

    async def publish() -> None:  # a channel polling as fast as it can, one chat per message
        for i in range(flood):
            await bus.publish_inbound(
                InboundMessage(channel="telegram", sender_id="1", chat_id=f"c{i}", content="x")
            )

    publisher = asyncio.create_task(publish())
    try:
        await wait_for(lambda: bus.inbound.full() and len(loop.in_flight()) == loop.max_pending)
        for _ in range(20):  # let everything that could still run, run
            await asyncio.sleep(0)
        assert len(loop.in_flight()) == loop.max_pending  # taken off the bus: 8, not 100
        assert bus.inbound.qsize() == 5  # the rest waits in the bounded queue ...
        assert not publisher.done()  # ... and the publisher (the channel's polling) waits for room
        assert provider.total == 2  # inside the model: maxConcurrentTurns
        provider.release.set()
        answered = 0
        while answered < flood:
            msg = await asyncio.wait_for(bus.consume_outbound(), 30)
            answered += msg.kind == "message"
        await publisher
        await wait_for(lambda: not loop.in_flight())
    finally:
        provider.release.set()
        publisher.cancel()
        await runtime.aclose()
    assert provider.max_total == 2


# ------------------------------------------------------------------ /stop in the interactive terminal
def _lines(stream: Any) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_stop_works_in_the_interactive_terminal_over_a_pipe(
    home: Path, make_config, fake_llm: FakeLLMServer
) -> None:
    _, path = make_config()
    fake_llm.push(Reply(content="too late", delay_s=60.0), Reply(content="after the stop"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env |= {"NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanobot", "agent", "-c", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert proc.stdin is not None and proc.stdout is not None
    out = _lines(proc.stdout)
    try:
        proc.stdin.write("a very long question\n")
        proc.stdin.flush()
        deadline = 120.0  # a cold start on a busy host
        while not fake_llm.requests and deadline > 0:
            threading.Event().wait(0.05)
            deadline -= 0.05
        assert fake_llm.requests, "the turn never reached the model"
        proc.stdin.write("/stop\n")
        proc.stdin.flush()
        assert out.get(timeout=30) == "Stopped."  # long before the 60 s answer
        proc.stdin.write("next question\n")
        proc.stdin.flush()
        assert out.get(timeout=60) == "after the stop"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.empty()  # "too late" was never printed
    stored = messages_of(home / "workspace" / "sessions" / "cli_direct.jsonl")
    assert [m["content"] for m in stored] == ["a very long question", "next question", "after the stop"]


async def test_a_file_sent_without_text_in_the_terminal_is_shown_and_settled() -> None:
    """The message tool waits for a file's send; the terminal settled only messages with text, so a
    file sent alone kept the turn waiting 30 s and was never shown."""
    from nanobot.agent.tools.base import ToolContext
    from nanobot.agent.tools.message import MessageTool
    from nanobot.bus.queue import MessageBus

    bus = MessageBus()
    out = io.StringIO()
    terminal = TerminalChannel(bus, "cli:direct", tty=False, stdout=out)
    printer = asyncio.create_task(terminal.show_outbound())
    workspace = Path(__file__).parent  # any folder with a file in it
    tool = MessageTool(bus, workspace, confirm_timeout_s=5)
    try:
        said = await asyncio.wait_for(
            tool.execute(ToolContext(channel="cli", chat_id="direct"), content="", media=["conftest.py"]), 3
        )
    finally:
        printer.cancel()
    assert said.startswith("Message sent") and "conftest.py" in out.getvalue()
