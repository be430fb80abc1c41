"""The heartbeat's turn has the trust of the chat it answers in, as a cron job's has: a group as
target gets no MEMORY.md and no owner tools; a reminder it sets up for the owner runs (the
heartbeat's sender is nobody, so it is not re-checked against allowFrom). Fake LLM on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

from nanobot.bus.events import InboundMessage
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import Config
from nanobot.gateway.runtime import Gateway
from nanobot.scheduler.cron_run import run_and_deliver
from tests.conftest import config_dict
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.test_gateway_lifecycle import RecordingChannel

OWNER = "555"
SECRET = "OWNER-SECRET-PIN-4242"


def gateway(tmp_path: Path, url: str, target: str) -> Gateway:
    settings = {"agents.defaults.workspace": str(tmp_path / "ws"), "gateway.heartbeat": {"enabled": True}}
    settings["gateway.heartbeat"]["target"] = target
    data = config_dict(url, **settings)
    gw = Gateway(Config.model_validate(data), str(tmp_path / "config.json"))
    allow = type("Allow", (), {"allow_from": [OWNER]})()  # the owner only, as a real config has it
    channel = RecordingChannel(allow, gw.bus, gw.workspace)
    gw.channels = ChannelManager(gw.config, gw.bus, gw.workspace, channels={"test": channel})
    (gw.workspace / "memory").mkdir(parents=True, exist_ok=True)
    (gw.workspace / "memory" / "MEMORY.md").write_text(f"- The owner's bank PIN is {SECRET}\n")
    return gw


async def test_a_group_as_heartbeat_target_gets_no_memory_and_no_owner_tools(tmp_path: Path) -> None:
    with FakeLLMServer() as llm:
        gw = gateway(tmp_path, llm.url, "test:-100777")
        (gw.workspace / "HEARTBEAT.md").write_text("- post a friendly good-morning note\n")
        gw.loop.start()
        try:
            llm.push("Good morning everyone!")
            assert await gw.heartbeat.tick() == "Good morning everyone!"
        finally:
            await gw.runtime.aclose()
    request = llm.requests[-1]
    tools = {t["function"]["name"] for t in request.get("tools", [])}
    assert SECRET not in json.dumps(request["messages"])
    assert not tools & {"exec", "memory_search", "memory_get"}, tools


async def test_a_reminder_the_heartbeat_sets_up_for_the_owner_runs(tmp_path: Path) -> None:
    with FakeLLMServer() as llm:
        gw = gateway(tmp_path, llm.url, f"test:{OWNER}")
        (gw.workspace / "HEARTBEAT.md").write_text("- every morning at 9, remind me to take my pills\n")
        gw.loop.start()
        try:
            llm.push("Hello!")  # the owner talked once: the chat is theirs
            await gw.bus.request(InboundMessage(channel="test", sender_id=OWNER, chat_id=OWNER, content="hi"))
            add = {"action": "add", "message": "Remind the user to take the pills", "cron_expr": "0 9 * * *"}
            llm.push(Reply(content=None, tool_calls=[{"name": "cron", "arguments": add}]), "Reminder set.")
            await gw.heartbeat.tick()
            (job,) = gw.cron.list()
            assert SECRET in json.dumps(llm.requests[-1]["messages"])  # the owner's own chat: their memory
            llm.push("Time for your pills!")
            delivered: list[tuple[object, ...]] = []

            async def deliver(*args: object) -> None:
                delivered.append(args)

            outcome = await run_and_deliver(job, gw.cron._on_job, deliver)
        finally:
            await gw.runtime.aclose()
    assert not outcome.status.startswith("skipped"), outcome.status
    assert delivered and "Time for your pills!" in str(delivered[-1])
