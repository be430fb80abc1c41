"""Where a cron job's result goes, and what happens when it cannot get there.

A result its chat never received is recorded as a failure: the gateway put it on the bus and
returned, the channel's refusal (a user who blocked the bot, a channel not enabled, a typo in
--channel) was only logged, and `cron list` said `ok`. A job nobody could receive is refused when
it is made: one asked for in the terminal (its results went to a terminal that is not there when the
job runs) or given an unknown --channel.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.cron import CronTool
from nanobot.bus.events import OutboundMessage
from nanobot.cli import cron as cron_cli
from nanobot.scheduler.cron import CronService, DeliverTo
from tests.test_gateway_lifecycle import Harness, kill_self


class Forbidden(Exception):
    """What a platform answers for a chat that blocked the bot."""


async def test_a_refused_or_undeliverable_result_is_recorded_as_failed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    real_send = h.channel._send_text

    async def send(msg: OutboundMessage) -> None:
        if msg.chat_id == "blocked":
            raise Forbidden("bot was blocked by the user")
        await real_send(msg)

    h.channel._send_text = send  # type: ignore[method-assign]
    await h.start()
    cron = h.gateway.cron
    jobs = {
        "ok": cron.add("fine", "say hi", every_s=3600, deliver_to=DeliverTo("test", "chat1")),
        "blocked": cron.add("blocked", "say hi", every_s=3600, deliver_to=DeliverTo("test", "blocked")),
        "typo": cron.add("typo", "say hi", every_s=3600, deliver_to=DeliverTo("telgram", "555")),
    }
    for job in jobs.values():
        await cron.run_now(job.id)
    status = {name: cron.get(job.id).last_status for name, job in jobs.items()}
    kill_self()
    await h.stopped()
    assert status["ok"] == "ok" and "reply: " in h.channel.sent[0]
    assert status["blocked"].startswith("error: delivery failed") and "blocked by the user" in status["blocked"]
    assert status["typo"].startswith("error: delivery failed") and "'telgram' is not running" in status["typo"]


async def test_the_tool_refuses_a_job_asked_for_in_the_terminal(tmp_path: Path) -> None:
    service = CronService(tmp_path / "jobs.json", lambda job: None, "UTC")  # type: ignore[arg-type,return-value]
    tool = CronTool(service)
    terminal = ToolContext(channel="cli", chat_id="direct", session_key="cli:direct", sender_id="user")
    with pytest.raises(ToolError, match="cannot receive scheduled results"):
        await tool.execute(terminal, action="add", message="tea is ready", every_seconds=3600)
    assert service.list() == []
    chat = ToolContext(channel="telegram", chat_id="555", session_key="telegram:555", sender_id="555")
    assert "Scheduled job" in await tool.execute(chat, action="add", message="tea is ready", every_seconds=3600)


def test_cli_add_refuses_an_unknown_channel_and_warns_of_a_disabled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}}))
    add = ["add", "-c", str(config), "-m", "water the plants", "--every", "3600", "--to", "555"]
    typo = CliRunner().invoke(cron_cli.app, [*add, "--channel", "telgram"])
    assert typo.exit_code == 2 and "unknown channel 'telgram'" in typo.stderr
    disabled = CliRunner().invoke(cron_cli.app, [*add, "--channel", "discord"])
    assert disabled.exit_code == 0 and "channels.discord.enabled is false" in disabled.stderr
    listed = json.loads(CliRunner().invoke(cron_cli.app, ["list", "--json", "-c", str(config)]).stdout)
    assert [job["deliver_to"]["channel"] for job in listed] == ["discord"]


async def test_a_job_for_a_group_runs_with_the_groups_trust(make_config, fake_llm) -> None:  # noqa: ANN001
    """`cron add --channel telegram --to -100123`: the job's turn ran as the owner (MEMORY.md in its
    prompt, memory_search offered) and posted what it wrote into the group."""
    from nanobot.agent.cron_turn import run_cron_job
    from nanobot.bus.events import InboundMessage
    from tests.agent_helpers import make_runtime
    from tests.fakes.llm_server import Reply

    config, _ = make_config()
    runtime = make_runtime(config)
    runtime.memory.write_memory("- The owner's bank PIN is 4242.\n")
    for chat, group in (("-100123", True), ("555", False)):  # both chats began before the jobs
        msg = InboundMessage(channel="telegram", sender_id="555", chat_id=chat, content="hi", is_group=group)
        runtime.agent.records.keep_unanswered(msg, runtime.agent.context_of(msg))
    runtime.loop.start()
    seen: dict[str, str] = {}
    try:
        for chat in ("-100123", "555"):
            search = {"name": "memory_search", "arguments": {"query": "bank PIN"}}
            fake_llm.push(Reply(content=None, tool_calls=[search]), Reply(content="summary"))
            job = runtime.cron.add(chat, "summarise my week", every_s=3600, deliver_to=DeliverTo("telegram", chat))
            await run_cron_job(runtime.bus, job, runtime.agent.sessions)
            seen[chat] = repr(fake_llm.requests[-1]["messages"])  # the system prompt and the search's result
    finally:
        await runtime.aclose()
    assert "4242" not in seen["-100123"] and "not available in group chats" in seen["-100123"]
    assert "4242" in seen["555"]


async def test_a_chat_keeps_its_owner_after_new(make_config, fake_llm) -> None:  # noqa: ANN001
    """/new started a session that did not say whose chat it was: until the user wrote again, the
    owner's reminders ran with a stranger's trust (no MEMORY.md, no memory tools, no exec) and the
    heartbeat found no chat to report to."""
    from nanobot.agent.cron_turn import job_chat, run_cron_job
    from nanobot.bus.events import InboundMessage
    from tests.agent_helpers import make_runtime
    from tests.fakes.llm_server import Reply

    config, _ = make_config()
    runtime = make_runtime(config)
    runtime.memory.write_memory("- The owner's bank PIN is 4242.\n")
    runtime.loop.start()
    try:
        hello = InboundMessage(channel="telegram", sender_id="555", chat_id="555", content="hi",
                               metadata={"username": "owner"})
        await runtime.bus.request(hello)
        await runtime.bus.request(InboundMessage(channel="telegram", sender_id="555", chat_id="555", content="/new"))
        sessions = runtime.agent.sessions
        chat = job_chat(sessions, DeliverTo("telegram", "555"))
        assert not chat.shared and chat.user == "555" and chat.username == "owner"
        assert sessions.last_private_chat(()) == ("telegram", "555")
        fake_llm.push(Reply(content="Your reminder."))
        job = runtime.cron.add("555", "remind me of my PIN", every_s=3600, deliver_to=DeliverTo("telegram", "555"))
        await run_cron_job(runtime.bus, job, sessions)
    finally:
        await runtime.aclose()
    assert "4242" in repr(fake_llm.requests[-1]["messages"])  # the owner's memory, as before /new


async def test_a_guest_later_put_on_allow_from_gets_the_owners_trust_in_reminders(make_config, fake_llm) -> None:  # noqa: ANN001
    """The chat's first message recorded its user as a guest for good: after the owner listed them,
    their own turns had the owner's tools and memory, their reminders still a guest's."""
    from nanobot.agent.cron_turn import run_cron_job
    from tests.agent_helpers import make_runtime
    from tests.fakes.llm_server import Reply

    config, _ = make_config()
    runtime = make_runtime(config)
    runtime.memory.write_memory("- The owner's bank PIN is 4242.\n")
    sessions = runtime.agent.sessions
    sessions.set_metadata(sessions.get("telegram:666"), is_group=False, sender_id="666", guest=True)
    runtime.loop.start()
    try:
        fake_llm.push(Reply(content="Your reminder."))
        job = runtime.cron.add("r", "remind me", every_s=3600, deliver_to=DeliverTo("telegram", "666"))
        await run_cron_job(runtime.bus, job, sessions, lambda channel, sender, username: sender == "666")
        listed_prompt = repr(fake_llm.requests[-1]["messages"])
        fake_llm.push(Reply(content="Your reminder."))
        await run_cron_job(runtime.bus, job, sessions, lambda channel, sender, username: sender != "666")
    finally:
        await runtime.aclose()
    assert "4242" in listed_prompt  # listed now: the owner's trust
    # (the trust changed twice: each time the session so far was archived, and memory work on the
    # owner-era one asked the model too; the turn is the last request offering the agent's tools)
    memory_calls = {"save_memory", "save_session_note", "write_daily_note"}
    turns = [r for r in fake_llm.requests
             if not memory_calls & {t["function"]["name"] for t in r.get("tools") or []}]
    assert "4242" not in repr(turns[-1]["messages"])


def test_a_session_an_earlier_new_started_takes_its_identity_from_the_archive(tmp_path: Path) -> None:
    """An earlier version's /new left a session that said nothing of whose it was: after the
    upgrade, until the owner wrote again, their reminders ran with a stranger's trust and the
    heartbeat found no chat."""
    from nanobot.agent.cron_turn import job_chat
    from nanobot.session.store import SessionStore

    sessions_dir = tmp_path / "sessions"
    (sessions_dir / "archive").mkdir(parents=True)
    identity = {"_type": "metadata", "format": 1, "is_group": False, "session_key": "telegram:555",
                "sender_id": "555", "username": "owner"}
    (sessions_dir / "archive" / "telegram_555-20261101T090000.jsonl").write_text(
        json.dumps(identity) + "\n" + json.dumps({"role": "user", "content": "hi"}) + "\n"
    )
    (sessions_dir / "telegram_555.jsonl").write_text(
        json.dumps({"_type": "metadata", "format": 1, "answered_before_new": [1], "new_by": 100}) + "\n"
    )
    sessions = SessionStore(tmp_path)
    chat = job_chat(sessions, DeliverTo("telegram", "555"))
    assert not chat.shared and chat.user == "555" and chat.username == "owner"
    assert sessions.last_private_chat(()) == ("telegram", "555")
