"""Unit tests: Channel base (allow-list, retries, typing) and ChannelManager routing, with a fake channel."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.base import Channel
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import ChannelsConfig, Config


class Transient(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("transient")
        self.retry_after = retry_after


class FakeChannel(Channel):
    name = "fake"

    def __init__(self, *args: Any, fail_start: bool = False, send_delay_s: float = 0.0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sent: list[OutboundMessage] = []
        self.typing_calls: list[str] = []
        self.typing_done: list[str] = []
        self.typing_delay_s = 0.0  # how long one typing request is in flight
        self.typing_gate: asyncio.Event | None = None  # when set up: requests stay in flight until it is set
        self.failures: list[Exception] = []
        self.fail_start = fail_start
        self.send_delay_s = send_delay_s
        self.retry_base_delay_s = 0.001

    async def start(self) -> None:
        if self.fail_start:
            raise RuntimeError("boom")
        self._set_state("running")

    async def stop(self) -> None:
        await self._stop_all_typing()
        self._set_state("stopped")

    async def _send_text(self, msg: OutboundMessage) -> None:
        async def once() -> None:
            if self.failures:
                raise self.failures.pop(0)
            await asyncio.sleep(self.send_delay_s)
            self.sent.append(msg)

        await self._with_retry("send", once)

    async def _send_typing(self, chat_id: str) -> None:
        self.typing_calls.append(chat_id)
        if self.typing_gate is not None:
            await self.typing_gate.wait()
        await asyncio.sleep(self.typing_delay_s)
        self.typing_done.append(chat_id)

    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        if isinstance(exc, Transient):
            return exc.retry_after if exc.retry_after is not None else self._backoff(attempt)
        return None


async def wait_until(predicate: Any, timeout_s: float = 5.0) -> None:
    """Poll until `predicate()` holds: a fixed sleep is no proof on a loaded machine (a full GC
    stalls the loop for a few hundred ms and fires several timers in one iteration)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


def make(allow: list[str], **kw: Any) -> FakeChannel:
    return FakeChannel(SimpleNamespace(allow_from=allow, streaming=False), MessageBus(), Path("/tmp"), **kw)


@pytest.mark.parametrize(
    ("allow", "sender", "username", "expected"),
    [
        (["*"], "1", None, True),
        ([], "1", "alice", False),
        (["1"], "1", None, True),
        (["1"], "2", None, False),
        (["alice"], "2", "alice", True),
        (["@alice"], "2", "Alice", True),
        (["alice"], "2", "@alice", True),
        (["alice"], "2", None, False),
        (["alice"], "alice", None, True),  # an id that happens to equal the entry
        (["bob"], "2", "alice", False),
        (["@alice"], "666", "alice_x", False),  # a stranger picking a name that begins with one
        (["@alice"], "667", "alicebot", False),
        (["555"], "900", "555", False),  # nor a username equal to an allowed id
    ],
)
def test_allow_list_semantics(allow: list[str], sender: str, username: str | None, expected: bool) -> None:
    assert make(allow).is_allowed(sender, username) is expected


async def test_publish_denied_never_reaches_bus_and_logs_once(logs: list[str]) -> None:
    channel = make(["1"])
    for _ in range(3):
        assert not await channel._publish(InboundMessage("fake", "9", "9", "hi"))
    assert channel.bus.inbound.empty()
    assert len([line for line in logs if "sender 9" in line]) == 1
    assert await channel._publish(InboundMessage("fake", "1", "1", "hi"))
    assert (await channel.bus.consume_inbound()).content == "hi"
    await channel.stop()


async def test_typing_runs_until_reply_and_is_capped() -> None:
    channel = make(["*"])
    channel.typing_interval_s = 0.01
    await channel._publish(InboundMessage("fake", "1", "c1", "hi"))
    await wait_until(lambda: channel.typing_calls.count("c1") >= 2)  # renewed
    await channel.send(OutboundMessage("fake", "c1", "progress", kind="progress"))
    assert "c1" in channel._typing  # progress notes do not end the turn
    await channel.send(OutboundMessage("fake", "c1", "answer"))
    count = len(channel.typing_calls)
    await asyncio.sleep(0.03)
    assert len(channel.typing_calls) == count and "c1" not in channel._typing
    channel.typing_max_s = 0.03
    channel.start_typing("c2")
    await wait_until(lambda: "c2" not in channel._typing)  # capped (it would renew for ever)


async def test_stopping_typing_never_cancels_the_request_in_flight() -> None:
    channel = make(["*"])
    channel.typing_gate = gate = asyncio.Event()  # each typing request stays in flight until set
    channel.start_typing("c1")
    await wait_until(lambda: channel.typing_calls == ["c1"])  # the first typing request is in flight
    await channel.send(OutboundMessage("fake", "c1", "answer"))
    assert channel.sent and "c1" not in channel._typing and channel.typing_done == []  # no waiting
    gate.set()
    await wait_until(lambda: channel.typing_done == ["c1"])
    await asyncio.sleep(0.05)
    assert channel.typing_calls == ["c1"] and channel.typing_done == ["c1"]  # finished, not renewed
    gate.clear()
    channel.start_typing("c2")
    await wait_until(lambda: "c2" in channel.typing_calls)
    asyncio.get_running_loop().call_later(0.05, gate.set)  # answered while stop() waits for it
    await channel.stop()  # shutdown lets in-flight requests finish before the client closes
    assert channel.typing_done == ["c1", "c2"]
    channel.start_typing("c3")
    await channel.stop_typing("c3")  # stopped before its first request: none is sent
    await asyncio.sleep(0.01)
    assert "c3" not in channel.typing_calls


async def test_retry_honours_retry_after_and_max_retries() -> None:
    channel = make(["*"], channels=ChannelsConfig(send_max_retries=2))
    channel.failures = [Transient(retry_after=0.05), Transient()]
    started = asyncio.get_running_loop().time()
    await channel.send(OutboundMessage("fake", "c", "ok"))
    assert [m.content for m in channel.sent] == ["ok"]
    assert asyncio.get_running_loop().time() - started >= 0.05
    channel.failures = [Transient(), Transient(), Transient()]
    with pytest.raises(Transient):
        await channel.send(OutboundMessage("fake", "c", "lost"))
    channel.failures = [ValueError("permanent")]
    with pytest.raises(ValueError):
        await channel.send(OutboundMessage("fake", "c", "bad"))
    assert len(channel.sent) == 1


def manager_with(channels: dict[str, FakeChannel], **channels_cfg: Any) -> ChannelManager:
    config = Config.model_validate({"channels": channels_cfg})
    bus = MessageBus()
    for ch in channels.values():
        ch.bus = bus
    return ChannelManager(config, bus, Path("/tmp"), channels=dict(channels))


async def test_manager_filters_kinds_by_config() -> None:
    a = make(["*"])
    manager = manager_with({"a": a}, sendProgress=False, sendToolHints=False)
    await manager.start_all()
    for kind in ("progress", "tool_hint", "stream_delta", "message"):
        await manager.bus.publish_outbound(OutboundMessage("a", "c", kind, kind=kind))  # type: ignore[arg-type]
    await manager.stop_all()
    assert [m.content for m in a.sent] == ["message"]

    b = make(["*"])
    manager = manager_with({"b": b}, sendProgress=True, sendToolHints=True)
    await manager.start_all()
    for kind in ("progress", "tool_hint", "message"):
        await manager.bus.publish_outbound(OutboundMessage("b", "c", kind, kind=kind))  # type: ignore[arg-type]
    await manager.stop_all()
    assert [m.content for m in b.sent] == ["progress", "tool_hint", "message"]


async def test_manager_isolates_failures_and_routes_by_channel(logs: list[str]) -> None:
    broken, slow, ok = make(["*"], fail_start=True), make(["*"], send_delay_s=0.5), make(["*"])
    ok.failures = [ValueError("send exploded")]
    manager = manager_with({"broken": broken, "slow": slow, "ok": ok})
    await manager.start_all()
    assert manager.status()["broken"] == {"state": "failed", "error": "RuntimeError: boom"}
    await manager.bus.publish_outbound(OutboundMessage("slow", "c", "later"))
    await manager.bus.publish_outbound(OutboundMessage("ok", "c", "first"))  # raises inside send
    await manager.bus.publish_outbound(OutboundMessage("ok", "c", "second"))
    await manager.bus.publish_outbound(OutboundMessage("broken", "c", "dropped"))
    await manager.bus.publish_outbound(OutboundMessage("nobody", "c", "dropped"))
    async with asyncio.timeout(0.3):  # the slow channel does not hold the others back
        while [m.content for m in ok.sent] != ["second"]:
            await asyncio.sleep(0.005)
    assert any("send exploded" in line for line in logs)
    await manager.stop_all()
    assert [m.content for m in slow.sent] == ["later"]  # drained on stop
    assert manager.status()["ok"]["state"] == "stopped"
