"""A sub-agent's report reaches its chat: across a gateway stop, from a heartbeat, and in `agent -m`.

The user is told "its result will be delivered to this chat". Before, a report due while the gateway
stopped went onto a bus nobody read (lost without a log line), a sub-agent the stop cancelled left no
trace, a heartbeat's sub-agent reported on the internal `heartbeat` channel (dropped), and `agent -m`
waited for the sub-agent and then threw its report away.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall
from tests.agent_helpers import status_of
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.test_gateway_lifecycle import CHAT, Harness, kill_self

REPO = Path(__file__).resolve().parent.parent


class SpawningProvider(LLMProvider):
    """A user message `spawn:<task>` (or the heartbeat's task list) starts one sub-agent; the
    sub-agent answers `RESULT-<task>` after `sub_delay_s`; a report is relayed as `relayed: ...`."""

    name = "scripted"

    def __init__(self, sub_delay_s: float) -> None:
        self.sub_delay_s = sub_delay_s

    @property
    def default_model(self) -> str:
        return "scripted-model"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kw: Any):
        system = str(messages[0].get("content") or "")
        last = str(messages[-1].get("content") or "")
        if system.startswith("You are a sub-agent"):
            await asyncio.sleep(self.sub_delay_s)
            return LLMResponse(content=f"RESULT-{last}")
        if messages[-1].get("role") == "tool":
            return LLMResponse(content="started")
        if "[Sub-agent" in last:
            return LLMResponse(content="relayed: " + last[last.index("[Sub-agent") :].splitlines()[0])
        task = "weather" if "[Heartbeat]" in last else last.rsplit("spawn:", 1)[-1].strip()
        return LLMResponse(tool_calls=[ToolCall("s1", "spawn", {"task": task, "label": "job"})])


async def _sent(h: Harness, prefix: str, timeout_s: float = 10.0) -> str:
    async with asyncio.timeout(timeout_s):
        while True:
            found = [text for text in h.channel.sent if text.startswith(prefix)]
            if found:
                return found[0]
            await asyncio.sleep(0.01)


async def test_a_report_due_during_the_stop_is_kept_and_answered_at_the_next_start(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=3.0, provider=SpawningProvider(sub_delay_s=1.0)).start()
    await h.say("spawn:backup")
    await h.wait_sent("started")
    kill_self()  # the sub-agent finishes a second later, while the gateway stops
    code, _ = await h.stopped()
    assert code == 0
    reports = [m for m in h.messages() if m.get("name") == "system"]
    assert len(reports) == 1 and reports[0]["content"].startswith("[Sub-agent 'job' finished]")
    assert "RESULT-backup" in reports[0]["content"]

    again = Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0))
    again.channel.allow_from = ["u1"]  # who started it is checked, as for any message kept at a stop
    await again.start()
    assert await _sent(again, "relayed:") == "relayed: [Sub-agent 'job' finished]"
    kill_self()
    await again.stopped()


async def test_a_sub_agent_the_stop_cuts_short_leaves_a_note_the_next_start_tells(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=0.5, drain_s=0.5, provider=SpawningProvider(sub_delay_s=60.0)).start()
    await h.say("spawn:long survey")
    await h.wait_sent("started")
    kill_self()
    code, took_s = await h.stopped()
    assert code == 0 and took_s < 10
    notes = [m for m in h.messages() if m.get("name") == "system"]
    assert len(notes) == 1 and notes[0]["content"].startswith("[Sub-agent 'job' stopped]")
    assert "long survey" in notes[0]["content"]

    again = await Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0)).start()
    assert await _sent(again, "relayed:") == "relayed: [Sub-agent 'job' stopped]"
    kill_self()
    await again.stopped()


async def test_a_sub_agent_a_kill_stranded_is_told_at_the_next_start_once(tmp_path: Path) -> None:
    """kill -9 (or OOM, a power cut) while a sub-agent ran: no shutdown left its note, and the user,
    told its result would come, never heard of it again."""
    h = await Harness(tmp_path, grace_s=0.5, drain_s=0.5, provider=SpawningProvider(sub_delay_s=60.0)).start()
    await h.say("spawn:long survey")
    await h.wait_sent("started")
    at_the_kill = h.session_path.read_bytes()  # what a kill -9 leaves on disk: no note
    kill_self()
    await h.stopped()
    h.session_path.write_bytes(at_the_kill)

    again = await Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0)).start()
    assert await _sent(again, "relayed:") == "relayed: [Sub-agent 'job' stopped]"
    kill_self()
    await again.stopped()
    notes = [m for m in again.messages() if m.get("name") == "system"]
    assert len(notes) == 1 and "long survey" in notes[0]["content"]
    third = await Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0)).start()
    await asyncio.sleep(0.5)
    kill_self()
    await third.stopped()
    assert len([m for m in third.messages() if m.get("name") == "system"]) == 1  # noted once


async def test_a_heartbeat_sub_agent_reports_to_the_heartbeat_target(tmp_path: Path) -> None:
    h = Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0), heartbeat_target=f"test:{CHAT}")
    (h.workspace).mkdir(parents=True, exist_ok=True)
    (h.workspace / "HEARTBEAT.md").write_text("- send me a background weather report\n", encoding="utf-8")
    await h.start()
    assert h.gateway.heartbeat is not None
    assert await h.gateway.heartbeat.tick() == "started"
    assert await _sent(h, "relayed:") == "relayed: [Sub-agent 'job' finished]"
    kill_self()
    await h.stopped()


async def test_a_heartbeat_sub_agent_the_stop_cuts_short_is_told_in_the_target_chat(tmp_path: Path) -> None:
    """The note was kept in the heartbeat's own session, which no start answers: the user never
    heard that the background task was stopped."""
    provider = SpawningProvider(sub_delay_s=60.0)
    h = Harness(tmp_path, grace_s=0.5, drain_s=0.5, provider=provider, heartbeat_target=f"test:{CHAT}")
    h.workspace.mkdir(parents=True, exist_ok=True)
    (h.workspace / "HEARTBEAT.md").write_text("- send me a background weather report\n", encoding="utf-8")
    await h.start()
    sessions = h.gateway.agent.sessions  # the owner's chat, whose user is on allowFrom
    sessions.set_metadata(sessions.get(f"test:{CHAT}"), is_group=False, sender_id="u1")
    assert h.gateway.heartbeat is not None
    assert await h.gateway.heartbeat.tick() == "started"
    kill_self()
    code, _ = await h.stopped()
    assert code == 0
    notes = [m for m in h.messages() if m.get("name") == "system"]  # in the target chat's session
    assert len(notes) == 1 and notes[0]["content"].startswith("[Sub-agent 'job' stopped]")

    # the heartbeat's turn has no real sender: its note was dropped at the start as a message from
    # someone no longer allowed
    again = Harness(tmp_path, provider=SpawningProvider(sub_delay_s=0.0))
    again.channel.allow_from = ["u1"]
    await again.start()
    assert await _sent(again, "relayed:") == "relayed: [Sub-agent 'job' stopped]"
    kill_self()
    await again.stopped()


def _agent_m(
    home: Path, respond: Callable[[dict[str, Any]], Reply | str], message: str
) -> subprocess.CompletedProcess[str]:
    """`nanobot agent -m message` in a fresh home, the fake model answering with `respond`."""
    home.mkdir()
    with FakeLLMServer() as server:
        server.responder = respond
        config = {
            "agents": {"defaults": {"provider": "custom", "model": "fake-model", "llmMaxRetries": 0}},
            "providers": {"custom": {"apiBase": server.url, "apiKey": "x"}},
        }
        (home / "config.json").write_text(json.dumps(config))
        env = {**os.environ, "NANOBOT_HOME": str(home), "NO_PROXY": "127.0.0.1,localhost"}
        return subprocess.run(
            [sys.executable, "-m", "nanobot", "agent", "-m", message],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )


def test_agent_m_prints_the_report_of_a_sub_agent_it_started(tmp_path: Path) -> None:
    def respond(body: dict[str, Any]) -> Reply | str:
        messages = body["messages"]
        system, last = str(messages[0]["content"]), messages[-1]
        if system.startswith("You are a sub-agent"):
            return "RESULT-42"
        if last["role"] == "tool":
            return "I started a background job."
        if "[Sub-agent" in str(last["content"]):
            return "The background job says RESULT-42."
        return Reply(content=None, tool_calls=[{"name": "spawn", "arguments": {"task": "compute", "label": "calc"}}])

    done = _agent_m(tmp_path / "home", respond, "work out 6 times 7 in the background")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["I started a background job.", "The background job says RESULT-42."]


def test_a_model_that_spawns_from_every_report_stops_two_levels_down(tmp_path: Path) -> None:
    """Each report is a turn with every tool: a model steered to spawn again from every report ran
    (and billed) hundreds of sub-agents a minute from one message, until /stop."""
    spawns: list[str] = []

    def respond(body: dict[str, Any]) -> Reply | str:
        messages = body["messages"]
        system, last = str(messages[0]["content"]), messages[-1]
        if system.startswith("You are a sub-agent"):
            return "RESULT"
        if last["role"] == "tool":
            return f"tool said: {last['content']}"
        spawns.append(str(last["content"])[:40])
        return Reply(content=None, tool_calls=[{"name": "spawn", "arguments": {"task": "again", "label": "loop"}}])

    done = _agent_m(tmp_path / "home", respond, "start the job")
    assert done.returncode == 0, done.stderr
    assert len(spawns) == 3  # the user's turn, the first report's, the second report's (refused)
    lines = done.stdout.splitlines()
    assert sum("started" in line for line in lines) == 2, lines
    assert "only 1 level(s) deep" in lines[-1], lines


async def test_sub_agents_are_bounded_counted_stoppable_and_cut_visibly(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """Four per chat was the only bound (ten strangers ran 40 beside maxConcurrentTurns 2); /status
    left their tokens out; /stop in a chat did not reach a heartbeat's sub-agent reporting there; and a
    long result was cut at 8,000 characters without a word, its conclusion lost."""
    from nanobot.agent.subagents import MAX_RESULT_CHARS
    from nanobot.agent.tools.base import ToolContext
    from tests.agent_helpers import make_runtime

    config, _ = make_config(**{"agents.defaults.maxConcurrentTurns": 4})  # sub-agents: 2 in all
    runtime = make_runtime(config)
    manager = runtime.agent.subagents
    assert manager is not None and manager.max_running == 2

    def chat(n: int, session: str | None = None) -> ToolContext:
        return ToolContext(channel="telegram", chat_id=str(n), session_key=session or f"telegram:{n}", sender_id=str(n))

    fake_llm.responder = lambda body: Reply(content="slow", delay_s=30)
    try:
        tools = runtime.agent.tools
        assert "started" in await tools.execute("spawn", {"task": "a"}, chat(1))
        assert "started" in await tools.execute("spawn", {"task": "b"}, chat(2, session="heartbeat:main"))
        refused = await tools.execute("spawn", {"task": "c"}, chat(3))
        assert refused.startswith("Error:") and "for all chats" in refused, refused
        assert runtime.agent.cancel_subagents("telegram:2") == 1  # the heartbeat's, reporting to chat 2
        assert runtime.agent.cancel_subagents("telegram:1") == 1
        await asyncio.sleep(0.1)
        assert manager.running() == 0
        # a long result keeps its end, and says it was cut; its tokens are counted
        conclusion = "CONCLUSION: 3 files are corrupt"
        fake_llm.responder = lambda body: Reply(content="x" * 9_000 + conclusion, prompt_tokens=200_000)
        assert "started" in await tools.execute("spawn", {"task": "scan"}, chat(4))
        report = await asyncio.wait_for(runtime.bus.consume_inbound(), 10)
        status = status_of(runtime, "telegram:4")
    finally:
        await runtime.aclose()
    assert conclusion in report.content and "truncated" in report.content
    assert len(report.content) < MAX_RESULT_CHARS + 1_000
    assert "sub-agents 200000 in" in status, status


async def test_guests_and_groups_leave_sub_agent_slots_to_the_owner(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Two strangers of an open dmPolicy started four sub-agents each and took every slot: the
    owner's own spawn was refused until theirs ended."""
    from nanobot.agent.tools.base import ToolContext
    from tests.agent_helpers import make_runtime

    config, _ = make_config(**{"agents.defaults.maxConcurrentTurns": 16})  # sub-agents: 8 in all
    runtime = make_runtime(config)
    manager = runtime.agent.subagents
    assert manager is not None and manager.max_running == 8

    def guest(n: int) -> ToolContext:
        return ToolContext(channel="telegram", chat_id=str(n), session_key=f"telegram:{n}", sender_id=str(n),
                           guest=True)

    fake_llm.responder = lambda body: Reply(content="slow", delay_s=30)
    try:
        tools = runtime.agent.tools
        answers = [await tools.execute("spawn", {"task": f"t{i}"}, guest(660 + i // 4)) for i in range(8)]
        assert sum("started" in a for a in answers) == 4, answers  # half of the slots at most
        assert "sub-agents of group and guest chats are running" in answers[-1]
        owner = ToolContext(channel="telegram", chat_id="555", session_key="telegram:555", sender_id="555")
        assert "started" in await tools.execute("spawn", {"task": "mine"}, owner)
    finally:
        await runtime.aclose()
    # with few slots one stays the owner's (maxConcurrentTurns 3: one sub-agent in all, a review catch)
    config, _ = make_config(**{"agents.defaults.maxConcurrentTurns": 3})
    runtime = make_runtime(config)
    try:
        assert runtime.agent.subagents.max_running == 1
        refused = await runtime.agent.tools.execute("spawn", {"task": "t"}, guest(700))
        assert refused.startswith("Error:") and "kept for the owner's chats" in refused, refused
        assert "started" in await runtime.agent.tools.execute("spawn", {"task": "mine"}, owner)
    finally:
        await runtime.aclose()


async def test_a_stopped_sub_agent_still_counts_what_it_spent(make_config, fake_llm: FakeLLMServer) -> None:  # noqa: ANN001
    """Only a sub-agent that finished was counted: one stopped after 150,000 tokens showed 0."""
    from nanobot.agent.tools.base import ToolContext
    from tests.agent_helpers import make_runtime

    config, _ = make_config()
    runtime = make_runtime(config)
    calls: list[int] = []

    def responder(body: dict[str, Any]) -> Reply:
        calls.append(1)
        if len(calls) == 1:  # the sub-agent's first step: a tool call, then a slow second one
            return Reply(content=None, tool_calls=[{"name": "list_dir", "arguments": {"path": "."}}],
                         prompt_tokens=150_000)
        return Reply(content="slow", delay_s=30)

    fake_llm.responder = responder
    ctx = ToolContext(channel="telegram", chat_id="1", session_key="telegram:1", sender_id="1")
    try:
        assert "started" in await runtime.agent.tools.execute("spawn", {"task": "survey"}, ctx)
        async with asyncio.timeout(10):
            while len(calls) < 2:
                await asyncio.sleep(0.01)
        assert runtime.agent.cancel_subagents("telegram:1") == 1
        await asyncio.sleep(0.1)
        status = status_of(runtime, "telegram:1")
    finally:
        await runtime.aclose()
    assert "sub-agents 150000 in" in status, status


async def test_a_sub_agent_of_a_chat_whose_user_became_a_guest_is_stopped_and_its_report_dropped(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """A user taken off allowFrom (now a guest of an open dmPolicy) had a sub-agent running: its
    report's turn ran with the owner's trust it was started under (MEMORY.md in the prompt, exec and
    write_file offered) and answered the guest, archiving the guest's new session on the way."""
    from nanobot.agent.tools.base import ToolContext
    from nanobot.bus.events import InboundMessage
    from tests.agent_helpers import make_runtime

    config, _ = make_config()
    runtime = make_runtime(config)
    owner_ctx = ToolContext(channel="telegram", chat_id="42", session_key="telegram:42", sender_id="42")
    def sub_agents_slow(body: dict[str, Any]) -> Reply:
        sub = str(body["messages"][0].get("content") or "").startswith("You are a sub-agent")
        return Reply(content="slow", delay_s=30) if sub else Reply(content="hi guest")

    fake_llm.responder = sub_agents_slow
    try:
        await runtime.ask("hello", session_key="telegram:42", channel="telegram", chat_id="42")
        assert "started" in await runtime.agent.tools.execute("spawn", {"task": "research"}, owner_ctx)
        async with asyncio.timeout(5):  # its first model call is on its way
            while not any("research" in json.dumps(r) for r in fake_llm.requests):
                await asyncio.sleep(0.01)
        guest = InboundMessage("telegram", "42", "42", "I am a guest now", guest=True)
        assert (await runtime.agent.handle(guest)).content == "hi guest"
        await asyncio.sleep(0.1)
        assert runtime.agent.subagents.running("telegram:42") == 0  # stopped with the former trust
        # a report already on its way when the trust changed
        report = runtime.agent.subagents._message("abc", owner_ctx, "[Sub-agent 'research' finished]")
        sent = len(fake_llm.requests)
        assert await runtime.agent.handle(report) is None
        assert len(fake_llm.requests) == sent
        assert runtime.agent.sessions.get("telegram:42").metadata.get("guest") is True
    finally:
        await runtime.aclose()


class SpawnFromEverything(LLMProvider):
    """Every user message and every report: spawn again (as a page a sub-agent read could ask);
    the sub-agent's first level answers at once, the next runs `second_s`. Spawn results are kept."""

    name = "scripted"

    def __init__(self, second_s: float) -> None:
        self.second_s = second_s
        self.spawned: list[str] = []
        self.n = 0

    @property
    def default_model(self) -> str:
        return "scripted-model"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kw: Any):
        if str(messages[0].get("content") or "").startswith("You are a sub-agent"):
            await asyncio.sleep(self.second_s if "level 2" in str(messages[-1]["content"]) else 0.0)
            return LLMResponse(content="RESULT")
        if messages[-1].get("role") == "tool":
            self.spawned.append(str(messages[-1]["content"]))
            return LLMResponse(content="started")
        self.n += 1
        return LLMResponse(tool_calls=[ToolCall(f"s{self.n}", "spawn", {"task": f"level {self.n}", "label": "job"})])


async def test_a_report_kept_at_a_stop_keeps_its_spawn_depth(tmp_path: Path) -> None:
    """A report kept at a stop was answered at the next start as an ordinary message (depth 0): its
    turn could spawn again, two more levels per restart for a model that spawns from every report."""
    first = SpawnFromEverything(second_s=30.0)
    h = await Harness(tmp_path, grace_s=0.5, drain_s=0.5, provider=first).start()
    await h.say("go")
    async with asyncio.timeout(10):  # the first report's turn started the second level
        while len(first.spawned) < 2:
            await asyncio.sleep(0.01)
    assert all(s.startswith("Sub-agent") for s in first.spawned), first.spawned
    kill_self()  # the second level is cut short: its note (2 deep) is kept
    await h.stopped()
    later = SpawnFromEverything(second_s=0.0)
    again = Harness(tmp_path, provider=later)
    again.channel.allow_from = ["u1"]
    await again.start()
    async with asyncio.timeout(10):
        while not later.spawned:
            await asyncio.sleep(0.01)
    kill_self()
    await again.stopped()
    assert later.spawned[0].startswith("Error: sub-agents may start sub-agents only"), later.spawned
