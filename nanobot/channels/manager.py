"""ChannelManager: starts the enabled channels and routes outbound messages to them.

Isolation: each channel has its own outbound queue and worker, so a channel that is rate limited,
retrying or failed never delays another; a failure starting or sending is logged and reflected in
`status()`, never raised into the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Callable
from pathlib import Path

from loguru import logger

from nanobot.bus.events import RESUME_KEY, ChannelUnavailable, InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.base import Channel
from nanobot.channels.connection import PermanentChannelError
from nanobot.channels.pairing import PairingStore
from nanobot.config.schema import Config
from nanobot.util.extras import install_hint

# Channel name (its `channels.<name>` config section) -> (module, class, the library it needs).
# Imported only when enabled: a gateway without Discord never loads discord.py.
CHANNEL_CLASSES: dict[str, tuple[str, str, str]] = {
    "telegram": ("nanobot.channels.telegram", "TelegramChannel", "python-telegram-bot"),
    "discord": ("nanobot.channels.discord", "DiscordChannel", "discord.py"),
}
STOP_TIMEOUT_S = 5.0  # per channel
DEFAULT_DRAIN_TIMEOUT_S = 3.0


MAX_UNDELIVERED_PER_CHAT = 5  # replies kept to send again before a chat's next message
MAX_KEPT_TRIES = 3  # a kept reply is given up after failing before this many later messages
KEPT_TRIES_KEY = "kept_tries"
MAX_KEPT_FILE_BYTES = 5 * 1024 * 1024  # a reply with more attachments is not held in memory to resend
SEND_WORKER_IDLE_S = 60.0  # a chat's send worker ends after this long without anything to send


class ChannelManager:
    def __init__(
        self,
        config: Config,
        bus: MessageBus,
        workspace: Path,
        channels: dict[str, Channel] | None = None,
        pairing: PairingStore | None = None,
    ) -> None:
        self.config = config
        self.bus = bus
        self.workspace = Path(workspace)
        self.pairing = pairing
        self.channels: dict[str, Channel] = {}
        self._load_errors: dict[str, str] = {}
        # One send queue and worker per chat, made on demand and retired when idle: a chat waiting out
        # its platform's rate limit (a 429 with retry_after) holds no other chat's replies back.
        self._started: set[str] = set()
        self._queues: dict[tuple[str, str], asyncio.Queue[OutboundMessage]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._undelivered: dict[tuple[str, str], list[OutboundMessage]] = {}  # see _keep_undelivered
        self._dispatcher: asyncio.Task[None] | None = None
        # Called after a reply is delivered (the gateway records it in the session; see gateway/missed.py).
        self.on_delivered: Callable[[OutboundMessage], None] | None = None
        if channels is not None:
            self.channels = dict(channels)
        else:
            self._build_enabled()

    def _build_enabled(self) -> None:
        cfg = self.config.channels
        common = {"channels": cfg, "providers": self.config.providers, "pairing": self.pairing}
        for name, (module_name, class_name, package) in CHANNEL_CLASSES.items():
            section = getattr(cfg, name)
            if not section.enabled:
                continue
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except ImportError as exc:
                self._load_errors[name] = f"{package} is not installed ({exc}); install it {install_hint(name)}"
                continue
            self.channels[name] = cls(section, self.bus, self.workspace, **common)
        for name, error in self._load_errors.items():
            logger.error("{}: channel failed: {}", name, error)

    # ------------------------------------------------------------------ lifecycle
    async def start_all(self) -> None:
        """Start every channel (a failure is isolated to that channel) and the outbound dispatcher."""
        for name, channel in self.channels.items():
            try:
                await channel.start()
            except Exception as exc:
                logger.exception("{}: failed to start", name)
                channel._set_state("failed", f"{type(exc).__name__}: {exc}")
            self._started.add(name)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="channel-dispatcher")
        if not self.channels and not self._load_errors:
            sections = " / ".join(f"channels.{name}.enabled" for name in CHANNEL_CLASSES)
            logger.warning("no channels are enabled ({})", sections)

    async def stop_all(self, drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S) -> None:
        """Deliver what is already queued (up to `drain_timeout_s`), then stop every channel."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
            self._dispatcher = None
        # Route what the agent already published so final replies are not lost on shutdown.
        while not self.bus.outbound.empty():
            self._route(self.bus.outbound.get_nowait())
        pending = [q.join() for q in self._queues.values()]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending), drain_timeout_s)
        workers = list(self._workers.values())
        for task in workers:
            task.cancel()
        for task in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for queue in self._queues.values():  # not sent within the drain: their publishers hear so
            while not queue.empty():
                queue.get_nowait().settle(ChannelUnavailable("the gateway stopped before it was sent"))
        self._workers.clear()
        self._queues.clear()
        self._started.clear()
        for name, channel in self.channels.items():
            try:
                await asyncio.wait_for(channel.stop(), STOP_TIMEOUT_S)
            except Exception as exc:
                logger.warning("{}: did not stop cleanly: {}", name, exc)

    def admits(
        self, channel: str, sender_id: str, username: str | None = None, is_group: bool = False
    ) -> bool:
        """Whether `channel` would let this sender's message in now (see Channel.admits_now)."""
        found = self.channels.get(channel)
        return found is not None and found.admits_now(sender_id, username, is_group=is_group)

    def admits_queued(self, msg: InboundMessage) -> bool:
        """For a channel's message about to start its turn after waiting in the queue: False when its
        sender is no longer let in (`pairing revoke`, or allowFrom edited meanwhile); a private-chat
        sender let in now only by dmPolicy "open" goes on as a guest (`msg.guest` set). What was
        admitted at arrival must not keep that trust while it waits behind a long turn. Messages of
        other origins (terminal, cron, heartbeat, sub-agents, turns resumed after a restart, which
        were checked then) pass unchanged."""
        found = self.channels.get(msg.channel)
        if found is None or msg.reply_future is not None or msg.metadata.get(RESUME_KEY):
            return True
        username = msg.metadata.get("username")
        if not found.admits_now(msg.sender_id, username, is_group=msg.is_group):
            return False
        if not msg.is_group and not msg.guest and not found.is_allowed(msg.sender_id, username):
            msg.guest = True
        return True

    def lists(self, channel: str, sender_id: str, username: str | None = None) -> bool:
        """Whether this sender is on `channel`'s allowFrom or approved by pairing (open DMs aside)."""
        found = self.channels.get(channel)
        return found is not None and found.is_allowed(sender_id, username)

    def status(self) -> dict[str, dict[str, str | None]]:
        """Per channel: {"state": ..., "error": ...}, including channels that could not be loaded."""
        out: dict[str, dict[str, str | None]] = {
            name: {"state": "failed", "error": error} for name, error in self._load_errors.items()
        }
        for name, channel in self.channels.items():
            out[name] = {"state": channel.state, "error": channel.last_error}
        return out

    # ------------------------------------------------------------------ routing
    def wanted(self, msg: OutboundMessage, channel: Channel) -> bool:
        """Config filter on kinds: progress and tool hints are opt-in/out; deltas need streaming."""
        cfg = self.config.channels
        if msg.kind == "progress":
            # a streaming chat saw this text arrive in a preview: the message finishes it, whatever
            # sendProgress says (left out, the preview stayed half-written for good)
            return cfg.send_progress or (channel.streaming and bool(msg.metadata.get("stream_id")))
        if msg.kind == "tool_hint":
            return cfg.send_tool_hints
        if msg.kind == "stream_delta":
            return channel.streaming
        return True

    def _route(self, msg: OutboundMessage) -> None:
        channel = self.channels.get(msg.channel)
        if channel is None or msg.channel not in self._started:
            # a reply nobody will see is worth a warning (a job for a channel that is not enabled);
            # progress and typing events are not
            (logger.warning if msg.kind == "message" else logger.debug)(
                "outbound {} for channel {!r}, which is not running: dropped", msg.kind, msg.channel
            )
            msg.settle(ChannelUnavailable(f"channel {msg.channel!r} is not running"))
            return
        if channel.state == "failed":
            if msg.kind == "message":
                logger.warning(
                    "{}: channel failed ({}); reply to chat {} dropped",
                    msg.channel,
                    channel.last_error,
                    msg.chat_id,
                )
            msg.settle(ChannelUnavailable(f"channel {msg.channel!r} failed: {channel.last_error}"))
            return
        if self.wanted(msg, channel):
            self._queue_for(msg.channel, msg.chat_id, channel).put_nowait(msg)

    def _queue_for(self, name: str, chat_id: str, channel: Channel) -> asyncio.Queue[OutboundMessage]:
        key = (name, chat_id)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = asyncio.Queue()
            self._workers[key] = asyncio.create_task(
                self._worker(key, channel, queue), name=f"send-{name}-{chat_id}"
            )
        return queue

    async def _dispatch(self) -> None:
        while True:
            msg = await self.bus.consume_outbound()
            self._route(msg)

    async def _worker(
        self, key: tuple[str, str], channel: Channel, queue: asyncio.Queue[OutboundMessage]
    ) -> None:
        name = key[0]
        while True:
            try:
                msg = await asyncio.wait_for(queue.get(), SEND_WORKER_IDLE_S)
            except TimeoutError:
                if queue.empty():  # nothing awaits between this check and the removal
                    del self._queues[key], self._workers[key]
                    return
                continue
            try:
                if msg.kind == "message":
                    await self._send_undelivered(key, channel)
                await channel.send(msg)
                msg.settle()
                # while an earlier reply is kept undelivered, later ones are not marked delivered: a
                # restart sends from the kept one on (at least once: a later one may come twice)
                if msg.kind == "message" and self.on_delivered is not None and not self._undelivered.get(key):
                    self.on_delivered(msg)
            except asyncio.CancelledError:
                msg.settle(ChannelUnavailable(f"channel {name!r} stopped before the message was sent"))
                raise
            except Exception as exc:
                msg.settle(exc)
                kept = self._keep_undelivered(key, channel, msg, exc)
                logger.error(
                    "{}: could not deliver a {} to chat {}: {}: {}{}",
                    name,
                    msg.kind,
                    msg.chat_id,
                    type(exc).__name__,
                    exc,
                    " (sent again before the chat's next message)" if kept else "",
                )
            finally:
                queue.task_done()

    def _keep_undelivered(
        self, key: tuple[str, str], channel: Channel, msg: OutboundMessage, exc: Exception
    ) -> bool:
        """Keep a reply whose send failed after its retries (a platform outage longer than them) to
        send before the chat's next message: it was logged and dropped, and the next reply to that
        chat marked it delivered too, so not even a restart sent it. Not kept: what retrying cannot
        fix (a blocked bot, a file too large), and a message whose sender was told it failed (the
        message tool reports it to the model)."""
        if msg.kind != "message" or msg.sent is not None or isinstance(exc, PermanentChannelError):
            return False
        if not channel.worth_sending_later(exc) or sum(len(f.data) for f in msg.files) > MAX_KEPT_FILE_BYTES:
            return False
        kept = self._undelivered.setdefault(key, [])
        if not any(earlier is msg for earlier in kept):  # (a kept one failing again is still there)
            kept.append(msg)
        for lost in kept[:-MAX_UNDELIVERED_PER_CHAT]:
            logger.error("{}: a reply to chat {} is given up: more than {} wait to be sent ({:.60})",
                         key[0], key[1], MAX_UNDELIVERED_PER_CHAT, lost.content)
        del kept[:-MAX_UNDELIVERED_PER_CHAT]
        return True

    async def _send_undelivered(self, key: tuple[str, str], channel: Channel) -> None:
        """Send the chat's kept replies, oldest first, before its next message; one that fails again
        stays (up to MAX_UNDELIVERED_PER_CHAT per chat), and the next message goes on regardless."""
        kept = self._undelivered.get(key)
        while kept:
            oldest = kept[0]
            try:
                await channel.send(oldest)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - still failing: kept for the next message, a while
                tries = oldest.metadata[KEPT_TRIES_KEY] = int(oldest.metadata.get(KEPT_TRIES_KEY, 0)) + 1
                if tries < MAX_KEPT_TRIES:
                    logger.warning("{}: a kept reply to chat {} failed again: {}", key[0], key[1], exc)
                    return
                logger.error("{}: a reply to chat {} is given up after {} more tries: {} ({:.60})",
                             key[0], key[1], tries, exc, oldest.content)
                kept.pop(0)
                continue
            kept.pop(0)
            if self.on_delivered is not None:
                self.on_delivered(oldest)
        self._undelivered.pop(key, None)
