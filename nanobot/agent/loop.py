"""AgentLoop: consumes the inbound bus and dispatches to the Agent.

Serial within a session (a FIFO per-session lock), concurrent across sessions (a semaphore of
`maxConcurrentTurns`). `/stop` and `/status` are answered ahead of the session's queue: `/stop`
cancels the running turn (what was already persisted stays; a half-finished tool group never
reaches the disk) and drops the session's queued messages.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from loguru import logger

from nanobot.agent.agent import Agent
from nanobot.agent.commands import parse_command
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus

STOPPED_REPLY = "Stopped."


@dataclass
class _SessionSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    running: asyncio.Task[None] | None = None


class AgentLoop:
    def __init__(self, bus: MessageBus, agent: Agent, max_concurrent: int = 8) -> None:
        self.bus = bus
        self.agent = agent
        self._semaphore = asyncio.Semaphore(max_concurrent)
        self._slots: dict[str, _SessionSlot] = {}
        self._accepting = True
        self._consumer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> asyncio.Task[None]:
        self._consumer = asyncio.create_task(self._consume(), name="agent-loop")
        return self._consumer

    async def stop_accepting(self) -> None:
        """Stop taking new messages; turns already dispatched go on."""
        self._accepting = False
        if self._consumer is not None:
            self._consumer.cancel()
            try:
                await self._consumer
            except asyncio.CancelledError:
                pass

    def in_flight(self) -> list[asyncio.Task[None]]:
        return [t for slot in self._slots.values() for t in slot.tasks]

    async def finish(self, grace_s: float) -> None:
        """Let in-flight turns finish within `grace_s`, then cancel the rest safely."""
        tasks = self.in_flight()
        if not tasks:
            return
        _, left = await asyncio.wait(tasks, timeout=grace_s)
        for task in left:
            task.cancel()
        if left:
            logger.warning(
                "cancelled {} turn(s) still running after the {:.0f} s grace period", len(left), grace_s
            )
            await asyncio.wait(left, timeout=2.0)

    @property
    def active_sessions(self) -> int:
        return len(self._slots)

    # ------------------------------------------------------------------ dispatch
    async def _consume(self) -> None:
        while self._accepting:
            msg = await self.bus.consume_inbound()
            try:
                await self.dispatch(msg)
            except Exception as exc:  # noqa: BLE001 - one bad message never stops the loop
                logger.opt(exception=exc).error("dispatch failed for {}", msg.session_key)

    async def dispatch(self, msg: InboundMessage) -> None:
        command = parse_command(msg.content)
        if command == "stop":
            await self._reply(msg, await self.stop_session(msg.session_key))
            return
        if command == "status":
            await self._reply(msg, self.agent.status_text(msg.session_key))
            return
        slot = self._slots.get(msg.session_key)
        if slot is None:
            slot = self._slots[msg.session_key] = _SessionSlot()
        task = asyncio.create_task(self._run(msg, slot), name=f"turn:{msg.session_key}")
        slot.tasks.add(task)
        task.add_done_callback(lambda t, key=msg.session_key: self._done(key, t))

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        slot = self._slots.get(key)
        if slot is None:
            return
        slot.tasks.discard(task)
        if not slot.tasks and not slot.lock.locked():
            del self._slots[key]  # idle sessions keep no lock around

    async def _run(self, msg: InboundMessage, slot: _SessionSlot) -> None:
        async with slot.lock, self._semaphore:
            slot.running = asyncio.current_task()
            try:
                out = await self.agent.handle(msg)
            except asyncio.CancelledError:
                logger.info("turn for {} cancelled", msg.session_key)
                raise
            except Exception as exc:  # noqa: BLE001
                logger.opt(exception=exc).error("turn for {} failed", msg.session_key)
                channel, chat_id = _reply_target(msg)
                out = OutboundMessage(
                    channel=channel,
                    chat_id=chat_id,
                    content=f"Sorry, something went wrong: {type(exc).__name__}.",
                )
            finally:
                slot.running = None
            if out is not None:
                await self.bus.publish_outbound(out)

    async def stop_session(self, session_key: str) -> str:
        """Cancel the session's running turn; messages queued behind it are still answered
        (they are the user's words: dropping them would lose them)."""
        slot = self._slots.get(session_key)
        running = slot.running if slot is not None else None
        if running is not None and not running.done():
            running.cancel()
            await asyncio.wait([running], timeout=5.0)
        cancelled_sub = self.agent.cancel_subagents(session_key)
        if running is None and not cancelled_sub:
            return "Nothing is running."
        return STOPPED_REPLY

    async def _reply(self, msg: InboundMessage, text: str) -> None:
        msg.ack()
        channel, chat_id = _reply_target(msg)
        await self.bus.publish_outbound(OutboundMessage(channel=channel, chat_id=chat_id, content=text))


def _reply_target(msg: InboundMessage) -> tuple[str, str]:
    """Where a reply goes: a sub-agent's `system` message answers in the chat that spawned it."""
    if msg.channel != "system":
        return msg.channel, msg.chat_id
    return msg.metadata.get("origin_channel", "cli"), msg.metadata.get("origin_chat_id", msg.chat_id)
