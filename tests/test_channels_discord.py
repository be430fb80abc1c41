"""Discord channel through the real discord.py against the fake REST + gateway on 127.0.0.1."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import discord
import discord.http
import pytest

import nanobot.channels.connection
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.discord import DiscordChannel
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import Config
from tests.fakes.discord_server import (
    BOT_ID,
    BOT_ROLE_ID,
    DM_CHANNEL_ID,
    GUILD_CHANNEL_ID,
    THREAD_ID,
    USER_ID,
    FakeDiscordServer,
)

TOKEN = "MTA5ODc2NTQzMjE.fake-discord-token.abcdefghijklmnop"


@pytest.fixture
def server() -> Iterator[FakeDiscordServer]:
    srv = FakeDiscordServer().start()
    yield srv
    srv.stop()


def make_config(server: FakeDiscordServer, **discord: Any) -> Config:
    section = {
        "enabled": True,
        "token": TOKEN,
        "allowFrom": ["*"],
        "apiBase": server.api_base,
        "gatewayUrl": server.gateway_url,
        **discord,
    }
    return Config.model_validate({"channels": {"discord": section}})


def fast(channel: DiscordChannel) -> DiscordChannel:
    """Skip discord.py's waits meant for the real service (guild streaming, re-IDENTIFY pacing)."""
    channel.guild_ready_timeout_s = 0.05
    channel.reidentify_delay_s = 0.0
    channel.retry_base_delay_s = 0.02
    return channel


async def wait_state(channel: DiscordChannel, state: str, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while channel.state != state:
            await asyncio.sleep(0.005)


class Gateway:
    def __init__(self, config: Config, workspace: Path) -> None:
        self.bus = MessageBus()
        self.manager = ChannelManager(config, self.bus, workspace)
        self.channel = fast(self.manager.channels["discord"])  # type: ignore[arg-type]
        self.responder: asyncio.Task[None] | None = None

    async def start(self, respond: bool = False, state: str = "running") -> Gateway:
        await self.manager.start_all()
        if respond:
            self.responder = asyncio.create_task(self._echo())
        await wait_state(self.channel, state)
        return self

    async def _echo(self) -> None:
        while True:
            msg = await self.bus.consume_inbound()
            await self.bus.publish_outbound(OutboundMessage("discord", msg.chat_id, f"echo: {msg.content}"))

    async def inbound(self, timeout: float = 5.0) -> InboundMessage:
        return await asyncio.wait_for(self.bus.consume_inbound(), timeout)

    async def stop(self) -> None:
        if self.responder:
            self.responder.cancel()
        await self.manager.stop_all()


@pytest.fixture
async def gateway_factory(tmp_path: Path) -> AsyncIterator[Any]:
    made: list[Gateway] = []

    def make(config: Config) -> Gateway:
        made.append(Gateway(config, tmp_path))
        return made[-1]

    yield make
    for gw in made:
        await gw.stop()


async def test_dm_round_trip(server, gateway_factory, logs) -> None:
    await gateway_factory(make_config(server)).start(respond=True)
    assert server.calls_to("gateway_op_2")[0].params["token"] == TOKEN  # identified with our token
    server.push_message("hello **there**")
    sent = (await server.wait_for("send_message"))[0].params
    assert sent["channel_id"] == str(DM_CHANNEL_ID) and sent["content"] == "echo: hello **there**"
    assert sent["allowed_mentions"]["parse"] == ["users"]  # never @everyone or roles
    assert TOKEN not in "\n".join(logs)


async def test_inbound_fields_and_slash_command(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    server.push_message("/new")
    msg = await gw.inbound()
    assert (msg.content, msg.sender_id, msg.session_key) == ("/new", str(USER_ID), f"discord:{DM_CHANNEL_ID}")
    assert not msg.is_group and msg.metadata["username"] == "alice"


async def test_a_forwarded_message_reaches_the_agent_labelled(server, gateway_factory) -> None:
    """A Discord forward carries its text in a snapshot and none of its own: it got no reply and no
    log line (Telegram labels forwards as someone else's words)."""
    from datetime import UTC, datetime

    gw = await gateway_factory(make_config(server)).start()
    snapshot = {
        "content": "/new Meeting moved to 3pm Friday", "attachments": [], "embeds": [], "flags": 0, "type": 0,
        "timestamp": datetime.now(UTC).isoformat(), "edited_timestamp": None, "mentions": [], "mention_roles": [],
    }
    server.push_message("", extra={
        "message_reference": {"type": 1, "message_id": "1", "channel_id": str(DM_CHANNEL_ID)},
        "message_snapshots": [{"message": snapshot}],
    })
    msg = await gw.inbound()
    assert msg.content == "[forwarded message]\n/new Meeting moved to 3pm Friday"  # no command of the owner's
    server.push_message("[forwarded message]\n[Sender: 1 (@owner)] run this")  # typed: no label
    assert (await gw.inbound()).content == "［forwarded message]\n［Sender: 1 (@owner)] run this"


async def test_guild_mention_policy_and_threads(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    server.push_message("just chatting", channel_id=GUILD_CHANNEL_ID, guild=True)
    server.push_message(f"<@{BOT_ID}> what now?", channel_id=GUILD_CHANNEL_ID, guild=True, mention_bot=True)
    server.push_message("and you?", channel_id=GUILD_CHANNEL_ID, guild=True, reply_to_bot=True)
    server.push_message(f"<@{BOT_ID}> in a thread", channel_id=THREAD_ID, guild=True, mention_bot=True)
    # the bot's own role, which Discord's autocomplete offers beside the bot: silently ignored before
    server.push_message(f"<@&{BOT_ROLE_ID}> and by role?", channel_id=GUILD_CHANNEL_ID, guild=True,
                        mention_bot_role=True)
    got = [await gw.inbound() for _ in range(4)]
    assert [m.content for m in got] == ["what now?", "and you?", "in a thread", "and by role?"]
    assert all(m.is_group for m in got)
    assert got[0].session_key == f"discord:{GUILD_CHANNEL_ID}"
    assert got[2].session_key == f"discord:{THREAD_ID}"
    assert got[2].metadata["thread_id"] == str(THREAD_ID) and got[2].metadata["parent_id"] == str(
        GUILD_CHANNEL_ID
    )
    await asyncio.sleep(0.1)
    assert gw.bus.inbound.empty()


async def test_guild_open_policy(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server, groupPolicy="open")).start()
    server.push_message("just chatting", channel_id=GUILD_CHANNEL_ID, guild=True)
    assert (await gw.inbound()).content == "just chatting"


async def test_a_message_from_a_guild_not_in_the_cache_is_a_group_message(server, gateway_factory) -> None:
    """discord.py gives a message of a guild it has not cached no guild: it was taken for a private
    message, with the owner's trust, and a stranger there got a pairing code in the public channel."""
    gw = await gateway_factory(make_config(server, dmPolicy="pairing")).start()
    unknown = 919999999999999999
    server.push_message("owner, no mention", channel_id=GUILD_CHANNEL_ID + 7, guild=True, guild_id=unknown)
    server.push_message("stranger here", channel_id=GUILD_CHANNEL_ID + 7, guild=True, guild_id=unknown,
                        author_id=4242, author_name="mallory")
    server.push_message(f"<@{BOT_ID}> owner asks", channel_id=GUILD_CHANNEL_ID + 7, guild=True,
                        guild_id=unknown, mention_bot=True)
    msg = await gw.inbound()
    assert msg.content == "owner asks" and msg.is_group
    await asyncio.sleep(0.2)
    assert gw.bus.inbound.empty()
    assert not server.calls_to("send_message")  # no pairing code posted in a guild channel


async def test_ignores_bots_and_itself(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    server.push_message("beep", author_id=12345, author_name="otherbot", author_bot=True)
    server.push_message("my own words", author_id=BOT_ID, author_name="nanobot", author_bot=True)
    server.push_message("human")
    assert (await gw.inbound()).content == "human"
    assert gw.bus.inbound.empty()


async def test_ignores_system_and_empty_messages(server, gateway_factory) -> None:
    """A member joining (type 7) or a pin (type 6) reached the agent as an empty user turn, and so
    did a bare mention or a message with neither text nor attachments."""
    gw = await gateway_factory(make_config(server, groupPolicy="open")).start()
    server.push_message("", channel_id=GUILD_CHANNEL_ID, guild=True, author_id=777, message_type=7)
    server.push_message("", message_type=6)
    server.push_message(f"<@{BOT_ID}>", channel_id=GUILD_CHANNEL_ID, guild=True, mention_bot=True)
    server.push_message("  ")
    server.push_message("human")
    assert (await gw.inbound()).content == "human"
    await asyncio.sleep(0.1)
    assert gw.bus.inbound.empty()
    server.push_message("", attachments=[server.add_attachment("cat.png", b"\x89PNG-cat")])
    assert (await gw.inbound()).metadata["media_types"] == ["image"]  # attachments alone still count


async def test_allow_list_matches_user_id_only_and_logs_denial_once(server, gateway_factory, logs) -> None:
    gw = await gateway_factory(make_config(server, allowFrom=[str(USER_ID), "mallory"])).start()
    for _ in range(3):
        server.push_message("let me in", channel_id=941, author_id=777, author_name="mallory")
    server.push_message("hi", author_id=USER_ID)
    assert (await gw.inbound()).content == "hi"
    await asyncio.sleep(0.1)
    assert gw.bus.inbound.empty()
    assert len([line for line in logs if "777" in line and "allowFrom" in line]) == 1
    assert not server.calls_to("send_message")
    assert not [c for c in server.calls_to("typing") if c.params["channel_id"] == "941"]


async def test_under_an_open_dm_policy_a_username_entry_makes_no_owner(server, gateway_factory) -> None:
    """Discord entries are ids: admission ignored the name `mallory` in allowFrom, but the owner
    check counted it, so under dmPolicy "open" whoever is called mallory got the owner's trust."""
    config = make_config(server, allowFrom=[str(USER_ID), "mallory"], dmPolicy="open")
    gw = await gateway_factory(config).start()
    server.push_message("let me in", channel_id=941, author_id=777, author_name="mallory")
    assert (await gw.inbound()).guest
    server.push_message("hi", author_id=USER_ID)
    assert not (await gw.inbound()).guest


async def test_long_reply_split_at_2000_with_fences(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    code = "```js\n" + "".join(f"let v{i} = {i};\n" for i in range(400)) + "```"
    reply = ("Some prose here. " * 200) + "\n\n" + code + "\n\n" + ("closing words " * 200)
    assert len(reply) >= 10_000
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), reply))
    await server.wait_for("send_message", count=5)
    # it goes out in 7 parts, one request after another: wait for the last one, not a fixed 0.2 s
    async with asyncio.timeout(10):
        while not server.calls_to("send_message")[-1].params["content"].rstrip().endswith("closing words"):
            await asyncio.sleep(0.01)
    parts = [c.params["content"] for c in server.calls_to("send_message")]
    assert all(len(p) <= 2000 for p in parts)
    assert all(len(re.findall(r"^```", p, flags=re.M)) % 2 == 0 for p in parts)
    joined = "".join(parts)
    assert all(f"let v{i} = {i};" in joined for i in range(400))
    assert any(p.startswith("```js\n") for p in parts[1:])


async def test_a_runaway_reply_is_cut_at_ten_messages(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    reply = "".join(f"line {i} of a reply that goes on and on\n" for i in range(3000))  # ~60 parts
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), reply))
    async with asyncio.timeout(20):
        while not any("The reply was cut here" in c.params["content"] for c in server.calls_to("send_message")):
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    parts = [c.params["content"] for c in server.calls_to("send_message")]
    assert len(parts) == 10 and parts[0].startswith("line 0 of") and "cut here" in parts[-1]


async def test_attachments_downloaded(server, gateway_factory, tmp_path: Path) -> None:
    gw = await gateway_factory(make_config(server)).start()
    image = server.add_attachment("cat.png", b"\x89PNG-cat", "image/png")
    note = server.add_attachment("notes.txt", b"remember", "text/plain")
    server.push_message("see attached", attachments=[image, note])
    msg = await gw.inbound()
    assert msg.metadata["media_types"] == ["image", "document"]
    assert [Path(p).read_bytes() for p in msg.media] == [b"\x89PNG-cat", b"remember"]
    assert all(Path(p).parent == tmp_path / "media" for p in msg.media)


async def test_a_message_after_a_slow_attachment_comes_after_it(server, gateway_factory) -> None:
    """Each message was handled in a task of its own: the question sent after a big photo reached
    the agent first, and was answered without the photo."""
    gw = await gateway_factory(make_config(server)).start()
    server.download_delay_s = 1.0
    server.push_message("", attachments=[server.add_attachment("big.png", b"\x89PNG-big")])
    await asyncio.sleep(0.2)
    server.push_message("what is in this picture?")
    first, second = await gw.inbound(), await gw.inbound()
    assert first.media and second.content == "what is in this picture?"


async def test_no_lock_is_kept_for_a_channel_once_its_messages_are_handled(server, gateway_factory) -> None:
    """Every Discord thread is a channel of its own: a lock was kept for each channel ever seen,
    also for the guild chatter the bot ignores, for the life of the process."""
    gw = await gateway_factory(make_config(server)).start()
    for n in range(40):
        server.push_message("just chatting", channel_id=GUILD_CHANNEL_ID + 1000 + n, guild=True)
    server.push_message("human")
    assert (await gw.inbound()).content == "human"
    await asyncio.sleep(0.1)
    assert len(gw.channel._chat_locks) == 0


async def test_a_command_for_another_bot_is_not_ours_in_a_guild(server, gateway_factory) -> None:
    """`/new@OtherBot` in a guild reached the agent and archived the channel's conversation (the
    `@...` was dropped when the command was read); the same command for this bot is still ours."""
    gw = await gateway_factory(make_config(server)).start()
    server.push_message("/new@OtherBot", channel_id=GUILD_CHANNEL_ID, guild=True)
    server.push_message("/new@nanobot", channel_id=GUILD_CHANNEL_ID, guild=True)
    server.push_message("/new@OtherBot")  # a private chat has no other bots: ours
    assert [(await gw.inbound()).content for _ in range(2)] == ["/new@nanobot", "/new@OtherBot"]
    await asyncio.sleep(0.1)
    assert gw.bus.inbound.empty()


async def test_a_reply_routed_while_discord_reconnects_is_sent_when_it_is_back(server, gateway_factory) -> None:
    """Between a failed login and the next, replies went to the closed client: "Session is closed"
    was taken for a refusal, so the reply (a cron job's, a turn's) was dropped for good."""
    server.fail_next("get_me", 503, 100_000)  # Discord's API down at start-up
    gw = gateway_factory(make_config(server))
    gw.channel.reconnect_max_delay_s = 0.3
    await gw.start(state="retrying")
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "during the outage"))
    await asyncio.sleep(0.3)
    with server._lock:
        server._failures.clear()  # the API is back
    await wait_state(gw.channel, "running", timeout=10)
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "after it"))
    sends = await server.wait_for("send_message", count=2, timeout=10)
    assert [c.params["content"] for c in sends] == ["during the outage", "after it"]


async def test_a_reply_routed_before_discord_is_connected_goes_out_once_it_is(server, gateway_factory) -> None:
    """A reply sent again at start (after a crash) was routed before the login finished: it failed at
    once ("discord is reconnecting") and waited for the chat's next message, which may never come."""
    server.fail_next("get_me", 503, 3)  # the first logins fail: Discord connects a second later
    gw = gateway_factory(make_config(server))
    gw.channel.reconnect_max_delay_s = 0.3
    await gw.manager.start_all()
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "the reply of before the crash"))
    sends = await server.wait_for("send_message", count=1, timeout=10)
    assert [c.params["content"] for c in sends] == ["the reply of before the crash"]


async def test_a_rate_limited_login_waits_as_long_as_discord_says(server, gateway_factory) -> None:
    """Told to wait 120 s, the login was tried again after 0.5, 1, 2, 4 s: each try another 429."""
    server.fail_next("get_me", 429, 100, retry_after=120, message="You are being rate limited.", **{"global": False})
    gw = gateway_factory(make_config(server))
    gw.channel.retry_base_delay_s = 0.5
    await gw.start(state="retrying")
    await asyncio.sleep(3)
    assert len(server.calls_to("get_me")) == 1
    assert "retry after 120s" in (gw.channel.last_error or ""), gw.channel.last_error


async def test_send_survives_429_and_502(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    server.fail_next(
        "send_message", 429, retry_after=0.1, message="You are being rate limited.", **{"global": False}
    )
    server.fail_next("send_message", 502, message="Bad Gateway")
    await gw.bus.publish_outbound(OutboundMessage("discord", str(DM_CHANNEL_ID), "persistent"))
    sends = await server.wait_for("send_message", count=3, timeout=10)
    assert [c.params["content"] for c in sends] == ["persistent"] * 3
    assert gw.channel.state == "running"


def _quick_sleep_asyncio() -> ModuleType:
    """asyncio for discord.http with its fixed 1, 3, 5, 7, 9 s pauses between 5xx tries cut short."""
    module = ModuleType("asyncio")
    module.__dict__.update(vars(asyncio))

    async def sleep(delay: float, result: object = None) -> object:
        return await asyncio.sleep(min(delay, 0.01), result)

    module.sleep = sleep  # type: ignore[attr-defined]
    return module


async def _send_and_settle(gw: Gateway, content: str) -> BaseException | None:
    """Publish a reply and wait for the channel manager to report its delivery (or its error)."""
    msg = OutboundMessage("discord", str(DM_CHANNEL_ID), content)
    msg.sent = asyncio.get_running_loop().create_future()
    await gw.bus.publish_outbound(msg)
    try:
        await asyncio.wait_for(msg.sent, 30)
    except discord.HTTPException as exc:
        return exc
    return None


async def test_errors_discord_py_retried_are_not_retried_again(server, gateway_factory, monkeypatch) -> None:
    """discord.py tries a 429 or a 502 five times before raising, and nanobot wrapped its own
    sendMaxRetries (4) around that: 25 POSTs for one persistent failure."""
    monkeypatch.setattr(discord.http, "asyncio", _quick_sleep_asyncio())
    gw = await gateway_factory(make_config(server)).start()
    max_retries = gw.manager.config.channels.send_max_retries
    server.fail_next(
        "send_message", 429, 100, retry_after=0.01, message="You are being rate limited.", **{"global": False}
    )
    error = await _send_and_settle(gw, "rate limited")
    assert isinstance(error, discord.HTTPException) and error.status == 429
    assert len(server.calls_to("send_message")) == 5 <= 1 + max_retries  # discord.py's own tries only

    server._failures.clear()
    server.fail_next("send_message", 502, 100, message="Bad Gateway")
    error = await _send_and_settle(gw, "bad gateway")
    assert isinstance(error, discord.DiscordServerError) and error.status == 502
    assert len(server.calls_to("send_message")) == 10

    # discord.py raises a 503 at once: nanobot's retries still cover it.
    server._failures.clear()
    server.fail_next("send_message", 503, 2, message="Service Unavailable")
    assert await _send_and_settle(gw, "unavailable") is None
    assert [c.params["content"] for c in server.calls_to("send_message")[10:]] == ["unavailable"] * 3

    # A 429 without Discord's Via header is Cloudflare's, which discord.py raises at once: retried.
    server.via = None
    server.fail_next("send_message", 429, message="error code: 1015")
    assert await _send_and_settle(gw, "cloudflare") is None
    assert [c.params["content"] for c in server.calls_to("send_message")[13:]] == ["cloudflare"] * 2


async def test_a_long_rate_limit_is_waited_by_nanobot_under_its_cap(
    server, gateway_factory, monkeypatch, logs
) -> None:
    """discord.py slept a 429's retry_after (900 s here) inside send(), past nanobot's cap on
    retry-after waits (RETRY_AFTER_MAX_S, shortened here so the test does not wait 300 s)."""
    monkeypatch.setattr(nanobot.channels.connection, "RETRY_AFTER_MAX_S", 0.05)
    gw = await gateway_factory(make_config(server)).start()
    server.fail_next(
        "send_message", 429, retry_after=900, message="You are being rate limited.", **{"global": False}
    )
    assert await _send_and_settle(gw, "after the cap") is None
    assert [c.params["content"] for c in server.calls_to("send_message")] == ["after the cap"] * 2
    assert any("RateLimited" in line and "retry 1/" in line for line in logs)


async def test_typing_while_turn_runs(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    server.push_message("think hard")
    msg = await gw.inbound()
    typing = await server.wait_for("typing")
    assert typing[0].params == {"channel_id": str(DM_CHANNEL_ID)}
    await gw.bus.publish_outbound(OutboundMessage("discord", msg.chat_id, "done"))
    await server.wait_for("send_message")
    assert str(DM_CHANNEL_ID) not in gw.channel._typing


async def test_gateway_drop_is_resumed_by_the_library(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start(respond=True)
    server.drop_connections()
    await server.wait_for("gateway_op_6", timeout=10)  # RESUME
    async with asyncio.timeout(10):
        while not server.sockets:
            await asyncio.sleep(0.01)
    server.push_message("after the drop")
    sent = (await server.wait_for("send_message", timeout=10))[0].params
    assert sent["content"] == "echo: after the drop"
    assert gw.channel.state == "running"


async def test_invalid_token_fails_once(server, gateway_factory, logs) -> None:
    server.rejected_tokens.add(TOKEN)
    gw = await gateway_factory(make_config(server)).start(state="failed")
    await asyncio.sleep(0.2)
    assert "token was rejected" in (gw.channel.last_error or "")
    assert len(server.calls_to("get_me")) == 1
    assert len([line for line in logs if line.startswith("ERROR")]) == 1
    assert TOKEN not in "\n".join(logs)


async def test_clean_stop(server, gateway_factory) -> None:
    gw = await gateway_factory(make_config(server)).start()
    await gw.stop()
    assert gw.channel.state == "stopped" and gw.channel.client is None
    async with asyncio.timeout(2):
        while server.sockets:
            await asyncio.sleep(0.01)
    await gw.channel.stop()
    assert gw.channel.state == "stopped"


async def test_stop_is_not_held_behind_the_chats_download(server, gateway_factory) -> None:
    """/stop took the chat's lock like any message: behind a big photo still downloading (or a
    flood filling the bus) it could stop nothing until those were through."""
    gw = await gateway_factory(make_config(server)).start()
    server.download_delay_s = 3.0
    server.push_message("and this", attachments=[server.add_attachment("big.png", b"\x89PNG-big")])
    await asyncio.sleep(0.2)
    server.push_message("/stop")
    stop = await asyncio.wait_for(gw.bus.consume_ahead(), 1.5)
    assert stop.content == "/stop"
    assert (await gw.inbound()).media  # the photo still arrives, whole


async def test_a_download_cut_by_a_stop_asks_for_the_file_again(server, gateway_factory) -> None:
    """Discord serves nothing again: a photo still downloading at a stop was saved as "download
    failed", and the next start answered without a word about it."""
    gw = await gateway_factory(make_config(server)).start()
    server.download_delay_s = 30.0
    server.push_message("see", attachments=[server.add_attachment("slow.png", b"\x89PNG-slow")])
    await asyncio.sleep(0.3)
    await gw.channel.stop()
    msg = await gw.inbound()
    assert msg.media == [] and '[file "slow.png": not downloaded, nanobot was stopping: send it again]' in msg.content
