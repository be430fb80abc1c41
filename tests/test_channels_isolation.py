"""Both channels in one ChannelManager: one failing never takes down the other (real libraries)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanobot.bus.events import OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import Config
from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscordServer
from tests.fakes.telegram_server import FakeTelegramServer

TG_TOKEN = "123456789:AAIsolationTokenForTests_abcdefghijk"
DC_TOKEN = "MTA5ODc2NTQzMjE.isolation-discord-token.abcdefgh"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def servers() -> Iterator[tuple[FakeTelegramServer, FakeDiscordServer]]:
    tg, dc = FakeTelegramServer().start(), FakeDiscordServer().start()
    yield tg, dc
    tg.stop()
    dc.stop()


def make_manager(
    tg: FakeTelegramServer, dc: FakeDiscordServer, workspace: Path
) -> tuple[ChannelManager, MessageBus]:
    config = Config.model_validate(
        {
            "channels": {
                "telegram": {
                    "enabled": True,
                    "token": TG_TOKEN,
                    "allowFrom": ["*"],
                    "baseUrl": tg.base_url,
                    "baseFileUrl": tg.base_file_url,
                    "pollTimeoutS": 5,
                },
                "discord": {
                    "enabled": True,
                    "token": DC_TOKEN,
                    "allowFrom": ["*"],
                    "apiBase": dc.api_base,
                    "gatewayUrl": dc.gateway_url,
                },
            }
        }
    )
    bus = MessageBus()
    manager = ChannelManager(config, bus, workspace)
    manager.channels["discord"].guild_ready_timeout_s = 0.05  # type: ignore[attr-defined]
    for channel in manager.channels.values():
        channel.retry_base_delay_s = 0.02
    return manager, bus


async def settle(manager: ChannelManager, expected: dict[str, str]) -> None:
    async with asyncio.timeout(5):
        while {n: s["state"] for n, s in manager.status().items()} != expected:
            await asyncio.sleep(0.01)


async def round_trip(bus: MessageBus) -> None:
    msg = await asyncio.wait_for(bus.consume_inbound(), 5)
    await bus.publish_outbound(OutboundMessage(msg.channel, msg.chat_id, f"echo: {msg.content}"))


async def test_telegram_invalid_token_leaves_discord_working(servers, tmp_path: Path) -> None:
    tg, dc = servers
    tg.rejected_tokens.add(TG_TOKEN)
    manager, bus = make_manager(tg, dc, tmp_path)
    await manager.start_all()
    try:
        await settle(manager, {"telegram": "failed", "discord": "running"})
        assert "token" in (manager.status()["telegram"]["error"] or "")
        dc.push_message("are you there?")
        await round_trip(bus)
        assert (await dc.wait_for("send_message"))[0].params["content"] == "echo: are you there?"
        # Replies addressed to the failed channel are dropped without blocking anything.
        await bus.publish_outbound(OutboundMessage("telegram", "1", "nobody hears this"))
        await bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "still here"))
        await dc.wait_for("send_message", count=2)
    finally:
        await manager.stop_all()
    assert manager.status() == {
        "telegram": {"state": "failed", "error": manager.status()["telegram"]["error"]},
        "discord": {"state": "stopped", "error": None},
    }


async def test_discord_invalid_token_leaves_telegram_working(servers, tmp_path: Path) -> None:
    tg, dc = servers
    dc.rejected_tokens.add(DC_TOKEN)
    manager, bus = make_manager(tg, dc, tmp_path)
    await manager.start_all()
    try:
        await settle(manager, {"telegram": "running", "discord": "failed"})
        tg.push_message("ping")
        await round_trip(bus)
        assert (await tg.wait_for("sendMessage"))[0].params["text"] == "echo: ping"
    finally:
        await manager.stop_all()
    assert manager.status()["telegram"] == {"state": "stopped", "error": None}


async def test_rate_limited_telegram_does_not_delay_discord(servers, tmp_path: Path) -> None:
    tg, dc = servers
    manager, bus = make_manager(tg, dc, tmp_path)
    await manager.start_all()
    try:
        await settle(manager, {"telegram": "running", "discord": "running"})
        tg.fail_next("sendMessage", 429, parameters={"retry_after": 2})
        await bus.publish_outbound(OutboundMessage("telegram", "555", "slow"))
        await bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "fast"))
        sent = await dc.wait_for("send_message", timeout=1.0)  # well before Telegram's retry_after
        assert sent[0].params["content"] == "fast"
        # Telegram's first (rate-limited) attempt may reach its server after Discord's send; its
        # retry must not come before retry_after
        await tg.wait_for("sendMessage", count=1, timeout=1.0)
        assert len(tg.calls_to("sendMessage")) == 1
        await tg.wait_for("sendMessage", count=2, timeout=5)
    finally:
        await manager.stop_all()
