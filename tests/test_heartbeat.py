"""HeartbeatService: silent without tasks, runs and delivers with them, HEARTBEAT_OK stays quiet."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import nanobot.scheduler.heartbeat as heartbeat_module
from nanobot.scheduler.heartbeat import (
    HEARTBEAT_OK,
    HeartbeatService,
    is_actionable,
    is_heartbeat_ok,
    parse_target,
    resolve_heartbeat_target,
    task_lines,
)
from tests.fakes.llm_server import FakeLLMServer

TEMPLATE = """# Heartbeat tasks

<!-- nanobot reads this file every gateway.heartbeat.intervalS seconds.
Add tasks below as list items, e.g.
- check the weather and tell me if it will rain
-->

## Active tasks

-
- [ ]

## Completed

---
"""


class Calls:
    def __init__(self, reply: str | None = "It will rain at 5 pm.") -> None:
        self.prompts: list[str] = []
        self.delivered: list[tuple[str, str, str]] = []
        self.reply = reply
        self.target: tuple[str, str] | None = ("telegram", "42")

    async def on_tasks(self, prompt: str, _target: tuple[str, str]) -> str | None:
        self.prompts.append(prompt)
        return self.reply

    def resolve_target(self) -> tuple[str, str] | None:
        return self.target

    async def deliver(self, channel: str, chat_id: str, text: str) -> None:
        self.delivered.append((channel, chat_id, text))


def make(tmp_path: Path, content: str | None, calls: Calls, interval_s: float = 1800) -> HeartbeatService:
    if content is not None:
        (tmp_path / "HEARTBEAT.md").write_text(content, encoding="utf-8")
    return HeartbeatService(tmp_path, interval_s, calls.on_tasks, calls.resolve_target, calls.deliver)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "actionable"),
    [
        (TEMPLATE, False),
        ("", False),
        ("# Only a heading\n\n   \n", False),
        ("<!-- a comment\nspanning lines -->\n* \n1.\n- [x]\n***\n", False),
        ("<!-- never closed\n- do something", False),
        (TEMPLATE + "- check the weather\n", True),
        ("Remind me to stretch", True),
        ("#hashtag is not a heading", True),
        ("- [ ] call mum", True),
    ],
)
def test_actionable(text: str, actionable: bool) -> None:
    assert is_actionable(text) is actionable


def test_shipped_template_is_not_actionable() -> None:
    import nanobot

    template = Path(nanobot.__file__).parent / "templates" / "HEARTBEAT.md"
    assert not is_actionable(template.read_text(encoding="utf-8"))


def test_task_lines_keep_only_content() -> None:
    assert task_lines(TEMPLATE + "- water the plants\n<!-- x -->Send the report\n") == [
        "- water the plants",
        "Send the report",
    ]


@pytest.mark.parametrize(
    ("reply", "ok"),
    [
        (None, True),
        ("", True),
        ("  \n", True),
        (HEARTBEAT_OK, True),
        ("**HEARTBEAT_OK**", True),
        ("`HEARTBEAT_OK`.", True),
        ("HEARTBEAT_OK but also the server is down", False),
        ("Rain at 5", False),
    ],
)
def test_heartbeat_ok_detection(reply: str | None, ok: bool) -> None:
    assert is_heartbeat_ok(reply) is ok


def test_parse_target() -> None:
    assert parse_target("telegram:12345") == ("telegram", "12345")
    assert parse_target(" discord : 99 ") == ("discord", "99")
    assert parse_target("") is None
    assert parse_target("telegram") is None
    assert parse_target("telegram:") is None


def test_target_resolution_prefers_configured_then_last_private_chat() -> None:
    last = lambda: ("telegram", "7")  # noqa: E731
    assert resolve_heartbeat_target("discord:123", last) == ("discord", "123")
    assert resolve_heartbeat_target("", last) == ("telegram", "7")
    assert resolve_heartbeat_target("", lambda: None) is None
    assert resolve_heartbeat_target("nonsense", last) is None


async def test_template_only_file_is_skipped_silently(tmp_path: Path) -> None:
    calls = Calls()
    hb = make(tmp_path, TEMPLATE, calls)
    assert await hb.tick() is None
    assert calls.prompts == [] and calls.delivered == []


async def test_missing_file_is_skipped(tmp_path: Path) -> None:
    calls = Calls()
    assert await make(tmp_path, None, calls).tick() is None
    assert calls.prompts == []


async def test_tasks_run_and_reply_goes_to_the_target(tmp_path: Path) -> None:
    calls = Calls()
    hb = make(tmp_path, TEMPLATE + "- check the weather and tell me if it will rain\n", calls)
    assert await hb.tick() == "It will rain at 5 pm."
    assert len(calls.prompts) == 1 and "check the weather and tell me if it will rain" in calls.prompts[0]
    assert HEARTBEAT_OK in calls.prompts[0]
    assert calls.delivered == [("telegram", "42", "It will rain at 5 pm.")]


async def test_a_task_after_a_long_comment_is_done_and_a_long_file_is_cut_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file was cut at 20,000 characters before its comments were taken out: a task after a long
    comment was never done, silently; and the whole file was read on every beat (a 400 MB file that
    a command kept appending to took 800 MB)."""
    calls = Calls()
    hb = make(tmp_path, "<!-- " + "notes " * 5_000 + "-->\n- remind me to stretch\n", calls)
    assert await hb.tick() is not None
    assert "remind me to stretch" in calls.prompts[0] and "notes" not in calls.prompts[0]
    read: list[int] = []
    real_read = heartbeat_module.read_regular_head

    def spy(path: Path, max_bytes: int, **kw: object) -> tuple[str, bool]:
        read.append(max_bytes)
        return real_read(path, max_bytes, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(heartbeat_module, "read_regular_head", spy)
    (tmp_path / "HEARTBEAT.md").write_text("- do this\n" + "x" * 100 + "\n" * 3_000_000, encoding="utf-8")
    assert hb.read_tasks() is not None and read == [heartbeat_module.MAX_HEARTBEAT_READ_BYTES]
    (tmp_path / "HEARTBEAT.md").write_text("- task line\n" * 5_000, encoding="utf-8")
    tasks = hb.read_tasks()
    assert tasks is not None and len(tasks) < heartbeat_module.MAX_HEARTBEAT_CHARS + 100
    assert tasks.endswith("[HEARTBEAT.md goes on; the rest is not shown]")


def test_a_task_past_a_comment_longer_than_what_is_read_is_warned_about(tmp_path: Path) -> None:
    from loguru import logger

    hb = make(tmp_path, "<!-- " + "notes " * 200_000 + "-->\n- water the plants\n", Calls())
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        assert hb.read_tasks() is None
    finally:
        logger.remove(sink)
    assert any("hold no task" in w and "HEARTBEAT.md" in w for w in warnings), warnings


@pytest.mark.parametrize("reply", [HEARTBEAT_OK, "", None, " **HEARTBEAT_OK** "])
async def test_heartbeat_ok_reply_delivers_nothing(tmp_path: Path, reply: str | None) -> None:
    calls = Calls(reply=reply)
    hb = make(tmp_path, "- anything due?\n", calls)
    assert await hb.tick() is None
    assert len(calls.prompts) == 1 and calls.delivered == []


async def test_no_target_means_no_llm_call(tmp_path: Path) -> None:
    calls = Calls()
    calls.target = None
    hb = make(tmp_path, "- anything due?\n", calls)
    assert await hb.tick() is None
    assert calls.prompts == [] and calls.delivered == []


async def test_loop_beats_and_survives_a_failing_beat(tmp_path: Path) -> None:
    calls = Calls()
    outcomes: list[str] = []

    async def flaky(prompt: str, _target: tuple[str, str]) -> str | None:
        outcomes.append(prompt)
        if len(outcomes) == 1:
            raise RuntimeError("provider down")
        return "done"

    hb = HeartbeatService(tmp_path, 0.05, flaky, calls.resolve_target, calls.deliver)  # type: ignore[arg-type]
    (tmp_path / "HEARTBEAT.md").write_text("- do it\n")
    await hb.start()
    try:
        for _ in range(100):
            if calls.delivered:
                break
            await asyncio.sleep(0.02)
    finally:
        await hb.stop()
    assert len(outcomes) >= 2 and calls.delivered[0] == ("telegram", "42", "done")


async def test_through_litellm_and_the_fake_llm_server(tmp_path: Path) -> None:
    """The real litellm client against the local fake server: run path, OK path and skip path."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    calls = Calls()
    with FakeLLMServer() as server:

        async def on_tasks(prompt: str, _target: tuple[str, str]) -> str | None:
            resp = await litellm.acompletion(
                model="openai/fake",
                api_base=server.url,
                api_key="x",
                messages=[{"role": "user", "content": prompt}],
            )
            return resp.choices[0].message.content

        hb = HeartbeatService(tmp_path, 1800, on_tasks, calls.resolve_target, calls.deliver)
        hb_file = tmp_path / "HEARTBEAT.md"

        hb_file.write_text(TEMPLATE)
        assert await hb.tick() is None
        assert server.requests == []  # nothing to do: no LLM call at all

        hb_file.write_text(TEMPLATE + "- remind me to water the plants\n")
        server.push("Time to water the plants!")
        assert await hb.tick() == "Time to water the plants!"
        assert calls.delivered == [("telegram", "42", "Time to water the plants!")]
        sent = server.requests[-1]["messages"][-1]["content"]
        assert "remind me to water the plants" in sent

        server.push(HEARTBEAT_OK)
        assert await hb.tick() is None
        assert len(server.requests) == 2 and len(calls.delivered) == 1


async def test_a_target_on_a_channel_that_is_not_running_costs_no_model_call(tmp_path: Path, fake_llm) -> None:  # noqa: ANN001
    """`target: "telgram:42"`: every beat paid the model to do the tasks, then dropped the reply
    ("channel 'telgram' is not running"). Now the beat does nothing, and says why once."""
    from loguru import logger

    from nanobot.config.schema import Config
    from nanobot.gateway.runtime import Gateway
    from tests.conftest import config_dict
    from tests.test_gateway_lifecycle import with_recording_channel

    data = config_dict(fake_llm.url, **{"agents.defaults.workspace": str(tmp_path / "ws"),
                                        "gateway.heartbeat": {"enabled": True, "target": "telgram:42"}})
    gateway = with_recording_channel(Gateway(Config.model_validate(data), str(tmp_path / "config.json")))
    assert gateway.heartbeat is not None
    (tmp_path / "ws" / "HEARTBEAT.md").write_text(TEMPLATE + "- remind me to water the plants\n")
    errors: list[str] = []
    sink = logger.add(lambda m: errors.append(m.record["message"]), level="ERROR")
    gateway.loop.start()
    try:
        assert await gateway.heartbeat.tick() is None
        assert await gateway.heartbeat.tick() is None
    finally:
        logger.remove(sink)
        await gateway.runtime.aclose()
    assert fake_llm.requests == []
    assert len(errors) == 1 and "'telgram'" in errors[0] and "running: test" in errors[0], errors


async def test_a_beat_the_model_could_not_answer_tells_the_user_nothing(tmp_path: Path, fake_llm) -> None:  # noqa: ANN001
    """While the provider was down, every beat (48 a day) sent "Sorry, I could not get an answer"
    to a user who had asked for nothing; the failure is logged and the next beat tries again."""
    from nanobot.config.schema import Config
    from nanobot.gateway.runtime import Gateway
    from tests.conftest import config_dict
    from tests.fakes.llm_server import Reply
    from tests.test_gateway_lifecycle import with_recording_channel

    data = config_dict(
        fake_llm.url,
        **{
            "agents.defaults.workspace": str(tmp_path / "ws"),
            "agents.defaults.llmMaxRetries": 0,
            "gateway.heartbeat": {"enabled": True, "target": "test:42"},
        },
    )
    gateway = with_recording_channel(Gateway(Config.model_validate(data), str(tmp_path / "config.json")))
    assert gateway.heartbeat is not None
    (tmp_path / "ws" / "HEARTBEAT.md").write_text(TEMPLATE + "- remind me to water the plants\n")
    gateway.loop.start()
    try:
        fake_llm.responder = lambda body: Reply(status=500, content="down")
        assert await gateway.heartbeat.tick() is None
        assert gateway.bus.outbound.empty()
        fake_llm.responder = lambda body: Reply(content="Time to water the plants!")
        assert await gateway.heartbeat.tick() == "Time to water the plants!"
    finally:
        await gateway.runtime.aclose()


async def test_a_silent_heartbeat_posts_nothing_not_even_its_interim_text(make_config, fake_llm) -> None:  # noqa: ANN001
    """HEARTBEAT_OK is not delivered, yet the text the beat's model wrote before a tool call went
    to the target chat at every beat (sendProgress is on by default)."""
    from nanobot.gateway.runtime import Gateway
    from tests.agent_helpers import wait_for
    from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscordServer
    from tests.fakes.llm_server import Reply
    from tests.test_channels_discord import TOKEN, fast

    server = FakeDiscordServer().start()
    config, path = make_config(**{
        "gateway.heartbeat": {"enabled": True, "target": f"discord:{DM_CHANNEL_ID}"},
        "channels.discord": {"enabled": True, "token": TOKEN, "allowFrom": ["*"],
                             "apiBase": server.api_base, "gatewayUrl": server.gateway_url},
    })
    gateway = Gateway(config, str(path), force_exit=lambda code: None)
    (config.workspace_path / "HEARTBEAT.md").write_text("- Check that the backup folder exists; quiet if it does.\n")
    fast(gateway.channels.channels["discord"])
    await gateway.channels.start_all()
    gateway.loop.start()
    fake_llm.push(Reply(content="Let me look at the workspace first.",
                        tool_calls=[{"name": "list_dir", "arguments": {"path": "."}}]),
                  Reply(content="HEARTBEAT_OK"))
    try:
        await wait_for(lambda: gateway.channels.channels["discord"].state == "running")
        result = await gateway.heartbeat.tick()
        await asyncio.sleep(0.5)  # what the manager was given meanwhile is sent
    finally:
        await gateway.loop.stop_accepting()
        await gateway.runtime.aclose()
        await gateway.channels.stop_all()
        server.stop()
    assert len(fake_llm.requests) == 2  # the beat ran its tool step
    assert result is None and server.calls_to("send_message") == []
