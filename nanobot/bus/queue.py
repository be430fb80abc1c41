"""MessageBus: bounded asyncio queues, inbound (channels → agent) and outbound (agent → channels).

Back-pressure policy: both queues are bounded. `publish_inbound` waits while the inbound queue is
full, which slows the channel's own polling (Telegram/Discord keep the undelivered updates on their
side, nothing is dropped). The agent loop stops reading it while its bounded number of pending
turns is reached, so a flood waits here, bounded, instead of in memory. Outbound
progress/typing/stream events are best-effort: when the outbound queue is full they are dropped;
replies always wait for room.

Commands answered ahead of every queue (`/stop`, `/status`, `/help`) travel on a queue of their own,
`ahead`, which the agent loop reads whatever is pending: behind a flood on `inbound` a `/stop` would
otherwise wait for the turns it is meant to stop, then cancel a message the user never gave up.
"""

from __future__ import annotations

import asyncio

from loguru import logger

from nanobot.bus.commands import answered_ahead
from nanobot.bus.events import SYSTEM_CHANNEL, InboundMessage, OutboundMessage

DEFAULT_MAX_QUEUE = 1000
MAX_AHEAD = 64  # commands waiting to be answered ahead; a flood of /status waits (bounded) beyond it
_BEST_EFFORT_KINDS = frozenset({"progress", "tool_hint", "typing", "stream_delta", "stream_end"})


class MessageBus:
    def __init__(self, max_queue: int = DEFAULT_MAX_QUEUE) -> None:
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue(maxsize=max_queue)
        self.ahead: asyncio.Queue[InboundMessage] = asyncio.Queue(maxsize=MAX_AHEAD)
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue(maxsize=max_queue)

    async def publish_inbound(self, msg: InboundMessage) -> None:
        # a sub-agent's report (the internal channel) is never a command, whatever its text
        if msg.channel != SYSTEM_CHANNEL and answered_ahead(msg.content):
            await self.ahead.put(msg)
        else:
            await self.inbound.put(msg)

    def waiting(self) -> int:
        """Inbound messages no one has taken yet."""
        return self.inbound.qsize() + self.ahead.qsize()

    async def request(self, msg: InboundMessage) -> OutboundMessage | None:
        """Publish `msg` and wait for its reply, which the agent loop hands back here instead of to
        the channels (None when there is none, e.g. a turn cancelled by /stop). For in-process
        publishers: the terminal, cron jobs, the heartbeat."""
        reply: asyncio.Future[OutboundMessage | None] = asyncio.get_running_loop().create_future()
        msg.reply_future = reply
        await self.publish_inbound(msg)
        return await reply

    async def consume_inbound(self) -> InboundMessage:
        return await self.inbound.get()

    async def consume_ahead(self) -> InboundMessage:
        return await self.ahead.get()

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        if msg.kind in _BEST_EFFORT_KINDS:
            self.offer_outbound(msg)
            return
        await self.outbound.put(msg)

    def offer_outbound(self, msg: OutboundMessage) -> None:
        """Queue a best-effort event without waiting (also from code that cannot await: a cancelled
        turn's cleanup); dropped when the queue is full."""
        try:
            self.outbound.put_nowait(msg)
        except asyncio.QueueFull:
            logger.debug("outbound queue full: dropped a {} event", msg.kind)

    async def consume_outbound(self) -> OutboundMessage:
        return await self.outbound.get()
