"""At-least-once delivery on Telegram: the update offset is confirmed only once the agent acks.

Unit tests of AckWindow, then the real python-telegram-bot against the fake Bot API on 127.0.0.1,
which keeps Telegram's rule: updates below the highest confirmed offset are gone, all others are
served again to whoever polls (a restarted bot included).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot.bus.events import InboundMessage
from nanobot.channels.delivery import AckWindow
from nanobot.channels.telegram import PENDING_POLL_INTERVAL_S
from tests.fakes.telegram_server import BOT_ID, FakeTelegramServer
from tests.test_channels_telegram import Gateway, make_config


@pytest.fixture
def server() -> Iterator[FakeTelegramServer]:
    srv = FakeTelegramServer().start()
    yield srv
    srv.stop()


@pytest.fixture
async def gateways(server: FakeTelegramServer, tmp_path: Path) -> AsyncIterator[Any]:
    """Start gateways (no responder: the test plays the agent and acks by hand) on the fake server."""
    made: list[Gateway] = []

    async def make(**telegram: Any) -> Gateway:
        made.append(Gateway(make_config(server, **telegram), tmp_path))
        return await made[-1].start(respond=False)

    yield make
    for gw in made:
        await gw.stop()


async def crash(gw: Gateway) -> None:
    """Like kill -9: polling ends mid-request and nothing is confirmed on the way out."""
    channel = gw.channel
    assert channel._task is not None and channel.bot is not None
    channel._task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await channel._task
    channel._task = None
    await channel.bot.shutdown()  # the sockets a dead process leaves behind are closed by the kernel
    channel.bot = None


async def wait_confirmed(server: FakeTelegramServer, offset: int, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while server.confirmed_offset < offset:
            await asyncio.sleep(0.005)


def offsets_polled(server: FakeTelegramServer) -> list[int]:
    return [int(c.params.get("offset") or 0) for c in server.calls_to("getUpdates")]


# ---------------------------------------------------------------------- AckWindow (unit)
def _message() -> InboundMessage:
    return InboundMessage("telegram", "1", "1", "hi")


async def test_window_offset_waits_for_the_oldest_unacked_update() -> None:
    window = AckWindow("telegram")
    assert window.offset is None  # nothing received: confirm nothing
    messages = {uid: _message() for uid in (5, 6, 7)}
    for uid, msg in messages.items():
        window.receive(uid)
        window.track([uid], msg)
    assert window.offset == 5 and not any(window.is_new(uid) for uid in messages)
    messages[7].ack()
    messages[6].ack()
    assert window.offset == 5 and not window.advanced.is_set()  # 5 is still unsaved
    messages[5].ack()
    assert window.offset == 8 and window.advanced.is_set() and not window.pending
    assert window.is_new(8) and not window.is_new(7)


async def test_window_never_confirms_a_message_dropped_without_ack(logs: list[str]) -> None:
    window = AckWindow("telegram")
    window.receive(3)
    window.track([3], _message())  # nobody holds it: gone at once (a turn cancelled at shutdown)
    window.handled(3)
    gc.collect()
    await asyncio.sleep(0)
    assert window.offset == 3  # unsaved: never confirmed, whatever happens next
    assert window.is_new(3)  # served again, it is published again
    assert any("update 3 was dropped before it was saved; it stays unconfirmed" in line for line in logs)
    again = _message()
    window.receive(3)
    window.track([3], again)
    window.handled(3)
    again.ack()
    assert window.offset == 4


async def test_window_republishes_an_update_interrupted_before_publishing() -> None:
    window = AckWindow("telegram")
    window.receive(9)
    assert not window.is_new(9)  # while it is being handled (a slow download), a re-serve is no new one
    window.handled(9)  # handling was cancelled before the message reached the bus
    assert window.offset == 9 and window.is_new(9)


async def test_window_ack_from_another_thread_reaches_the_loop() -> None:
    window = AckWindow("telegram")
    msg = _message()
    window.receive(1)
    window.track([1], msg)
    await asyncio.to_thread(msg.ack)
    await asyncio.wait_for(window.advanced.wait(), 1.0)
    assert window.offset == 2


# ---------------------------------------------------------------------- through the real library
async def test_unsaved_update_is_redelivered_after_a_crash(server, gateways) -> None:
    first = await gateways()
    uid = server.push_message("remember: the car is on level 3")
    msg = await first.inbound()  # published, but the turn never saved it
    await asyncio.sleep(2 * PENDING_POLL_INTERVAL_S)  # it is re-served meanwhile, never confirmed
    assert server.confirmed_offset <= uid and uid in server.held_ids()
    await crash(first)

    second = await gateways()
    again = await second.inbound()
    assert again.content == msg.content and again.metadata["message_id"] == msg.metadata["message_id"]
    again.ack()
    await wait_confirmed(server, uid + 1)
    assert server.held_ids() == []


async def test_a_message_dropped_unsaved_is_published_again_and_never_confirmed(server, gateways) -> None:
    first = await gateways()
    uid = server.push_message("dropped by a cancelled turn")
    msg = await first.inbound()
    del msg  # the turn holding it was cancelled before it saved the message
    gc.collect()
    again = await first.inbound()  # Telegram serves it again; this time it is published again
    assert again.content == "dropped by a cancelled turn"
    await asyncio.sleep(2 * PENDING_POLL_INTERVAL_S)
    assert server.confirmed_offset <= uid and uid in server.held_ids()
    del again
    gc.collect()
    await first.stop()  # a clean stop confirms only what was saved
    assert server.confirmed_offset == uid and server.held_ids() == [uid]


async def test_clean_stop_confirms_only_what_was_saved(server, gateways) -> None:
    first = await gateways()
    saved_id = server.push_message("saved")
    (await first.inbound()).ack()
    unsaved_id = server.push_message("not saved yet")
    unsaved = await first.inbound()  # still queued for the agent when the gateway stops
    await first.stop()
    assert server.confirmed_offset == unsaved_id > saved_id
    assert server.held_ids() == [unsaved_id]

    second = await gateways()
    assert (await second.inbound()).content == unsaved.content == "not saved yet"
    assert second.bus.inbound.empty()


async def test_acked_updates_are_not_redelivered(server, gateways) -> None:
    first = await gateways()
    ids = [server.push_message(f"m{i}") for i in range(3)]
    for _ in ids:
        (await first.inbound()).ack()
    await wait_confirmed(server, ids[-1] + 1)  # the next poll after the acks confirmed them
    await crash(first)

    second = await gateways()
    server.push_message("after restart")
    assert (await second.inbound()).content == "after restart"
    await asyncio.sleep(0.1)
    assert second.bus.inbound.empty()


async def test_no_duplicates_while_pending_and_offset_follows_the_oldest(server, gateways) -> None:
    gw = await gateways()
    first_id = server.push_message("one")
    one = await gw.inbound()
    second_id = server.push_message("two")
    third_id = server.push_message("three")
    two, three = await gw.inbound(), await gw.inbound()  # new updates still arrive while one pends
    assert [two.content, three.content] == ["two", "three"]
    await asyncio.sleep(3 * PENDING_POLL_INTERVAL_S)
    assert offsets_polled(server).count(first_id) >= 2  # "one" was re-served several times ...
    assert gw.bus.inbound.empty()  # ... and never published again

    three.ack()
    two.ack()
    await asyncio.sleep(2 * PENDING_POLL_INTERVAL_S)
    assert server.confirmed_offset == first_id  # the oldest unsaved update holds the offset
    one.ack()
    await wait_confirmed(server, third_id + 1, timeout=1.0)  # at once, not after an interval
    assert second_id < third_id and gw.bus.inbound.empty()


async def test_filtered_updates_count_as_acked(server, gateways) -> None:
    gw = await gateways(allowFrom=["555"])
    ids = [
        server.push_message("intruder", user_id=666, chat_id=666),
        server.push_message("chatter", chat_id=-100, chat_type="supergroup"),  # no mention
        server.push_update({"message": _bot_message()}),
    ]
    await wait_confirmed(server, ids[-1] + 1)
    assert gw.bus.inbound.empty()


async def test_a_broken_update_is_skipped_not_held(server, gateways, logs, monkeypatch) -> None:
    gw = await gateways()
    handle = gw.channel._handle_update

    async def flaky(updates: list[Any]) -> bool:
        if updates[0].message and updates[0].message.text == "poison":
            raise ValueError("cannot handle this one")
        return await handle(updates)

    monkeypatch.setattr(gw.channel, "_handle_update", flaky)
    poison_id = server.push_message("poison")
    server.push_message("fine")
    msg = await gw.inbound()
    assert msg.content == "fine"
    msg.ack()
    await wait_confirmed(server, poison_id + 2)
    assert any(f"could not handle update {poison_id}" in line for line in logs)
    assert gw.channel.state == "running"


def _bot_message() -> dict[str, Any]:
    bot = {"id": BOT_ID, "is_bot": True, "first_name": "Nano"}
    return {"message_id": 1, "date": 0, "chat": {"id": 555, "type": "private"}, "from": bot, "text": "x"}
