"""AgentLoop: the one way into a turn. It consumes the inbound bus and dispatches every message.

Every message — from a chat channel, the terminal, a cron job, the heartbeat or a sub-agent —
arrives on the bus and is handled here:
- serial within a session (a FIFO per-session lock), concurrent across sessions (a semaphore of
  `maxConcurrentTurns`);
- bounded: at most `max_pending` messages are taken off the bus and not yet answered. When that
  many are pending the loop stops reading the bus, the bounded inbound queue fills, and the
  channels' `publish_inbound` waits, which slows their polling instead of growing memory;
- slash commands are dispatched here and only here. `/stop`, `/status` and `/help` are answered
  ahead of every queue (they come on the bus's own `ahead` queue, read whatever is pending, so a
  flood of messages never holds them back): `/stop` cancels the running turn (what was already persisted
  stays; a half-finished tool group never reaches the disk) and the session's sub-agents; the
  messages queued behind the cancelled turn are kept and answered in order (they are the user's
  words). `/new` runs in order with the session's turns.
- a message is acked to its channel once it is saved (or handled: answered, failed, given up with
  `/stop`), never because its turn was cancelled at shutdown: what was not saved then stays
  unconfirmed, and the platform serves it again after the restart.

A reply goes to the publisher's `reply_future` when it set one (the terminal, cron, heartbeat),
otherwise onto the outbound bus for the channels.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from nanobot.agent.agent import Agent
from nanobot.agent.message_context import SYSTEM_CHANNEL, MessageContext
from nanobot.bus.commands import COMMANDS, HELP_TEXT
from nanobot.bus.events import TERMINAL_CHANNEL, InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.scheduler.heartbeat import HEARTBEAT_SESSION_KEY
from nanobot.session.store import StorageError
from nanobot.util.fs import cannot_write
from nanobot.util.tasks import finish_or_cancel

STOPPED_REPLY = "Stopped."
NOTHING_RUNNING_REPLY = "Nothing is running."
#: pending messages allowed per concurrent turn: enough to keep every turn slot busy with a
#: queue behind it, small enough that a flood waits on the bus (bounded) rather than in memory
PENDING_PER_CONCURRENT_TURN = 4
STOP_WAIT_S = 5.0


@dataclass
class _SessionSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The session's messages in arrival order (a dict keeps it): a shutdown cancels them in that
    # order, so those it saves (SessionRecords.keep_unanswered) land in the transcript as they were sent.
    tasks: dict[asyncio.Task[None], None] = field(default_factory=dict)
    running: asyncio.Task[None] | None = None
    reply_target: tuple[str, str] | None = None  # the chat a running sub-agent report answers
    user_stopped: bool = False  # the running turn is being cancelled by /stop


class AgentLoop:
    def __init__(
        self,
        bus: MessageBus,
        agent: Agent,
        max_concurrent: int = 8,
        max_pending: int | None = None,
        admits_queued: Callable[[InboundMessage], bool] | None = None,
    ) -> None:
        """`admits_queued(msg)`: asked as a message's turn starts (the gateway's channels, see
        ChannelManager.admits_queued): False drops a message whose sender was removed while it waited."""
        self.bus = bus
        self.agent = agent
        self._admits_queued = admits_queued
        self.max_pending = max_pending or max_concurrent * PENDING_PER_CONCURRENT_TURN
        self._semaphore = asyncio.Semaphore(max_concurrent)
        self._room = asyncio.Semaphore(self.max_pending)  # one unit per message taken, not answered
        self._slots: dict[str, _SessionSlot] = {}
        self._accepting = True
        self._consumers: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> asyncio.Task[None]:
        """Start reading the bus; the task returned ends only when the loop stops or fails."""
        if not self._consumers:
            self._consumers = [
                asyncio.create_task(self._consume(), name="agent-loop"),
                asyncio.create_task(self._consume_ahead(), name="agent-loop-commands"),
            ]
        return self._consumers[0]

    @property
    def started(self) -> bool:
        return bool(self._consumers)

    async def stop_accepting(self) -> None:
        """Stop taking new messages; turns already dispatched go on. Sub-agents' reports, which no
        platform sends again, are kept in their sessions from now on (those already waiting on the
        bus included), for the next start to answer."""
        self._accepting = False
        for consumer in self._consumers:
            consumer.cancel()
            try:
                await consumer
            except asyncio.CancelledError:
                pass
        self.agent.hold_subagent_results()
        waiting: list[InboundMessage] = []
        while not self.bus.inbound.empty():
            waiting.append(self.bus.inbound.get_nowait())
        for msg in waiting:
            if msg.channel == SYSTEM_CHANNEL:
                self.agent.records.keep_result(msg)
            else:  # kept by keep_waiting once the turns before them are done
                self.bus.inbound.put_nowait(msg)

    def keep_waiting(self) -> int:
        """At shutdown, once every turn is done and the channels are stopped: keep the messages no
        one took off the bus. A platform that does not send them again (Discord) would lose them;
        they are saved in their sessions for the next start to answer (Telegram's stay unconfirmed
        and are served again). The number kept."""
        kept = 0
        for queue in (self.bus.inbound, self.bus.ahead):
            while not queue.empty():
                msg = queue.get_nowait()
                try:
                    if msg.channel == SYSTEM_CHANNEL:
                        self.agent.records.keep_result(msg)
                    else:
                        kept += self._keep(msg, self.agent.context_of(msg))
                except Exception as exc:  # noqa: BLE001 - a full disk: say what was lost, keep the rest
                    logger.error("{}: a message could not be kept at shutdown: {}", msg.session_key, exc)
                msg.resolve(None)
        return kept

    def _keep(self, msg: InboundMessage, ctx: MessageContext) -> bool:
        """A message a shutdown leaves unanswered: saved for the next start, or a `/new` done now
        (when its platform will not send them again); True when a message was saved."""
        if ctx.command == "new":
            self.agent.keep_new(msg, ctx)
            return False
        return self.agent.records.keep_unanswered(msg, ctx)

    def in_flight(self) -> list[asyncio.Task[None]]:
        """Messages taken off the bus and not yet answered (running or queued behind a session)."""
        return [t for slot in self._slots.values() for t in slot.tasks]

    async def finish(self, grace_s: float) -> None:
        """Let in-flight turns finish within `grace_s`, then cancel the rest safely."""
        left = await finish_or_cancel(self.in_flight(), grace_s, unwind_s=2.0)
        if left:
            logger.warning(
                "cancelled {} turn(s) still running after the {:.0f} s grace period", len(left), grace_s
            )

    @property
    def active_sessions(self) -> int:
        return len(self._slots)

    # ------------------------------------------------------------------ dispatch
    async def _consume(self) -> None:
        while self._accepting:
            await self._room.acquire()  # back-pressure: no room, no reading from the bus
            try:
                msg = await self.bus.consume_inbound()
            except BaseException:
                self._room.release()
                raise
            await self._take(msg, has_room=True)

    async def _consume_ahead(self) -> None:
        """The commands answered ahead: read whatever is pending, since they hold no room."""
        while self._accepting:
            await self._take(await self.bus.consume_ahead(), has_room=False)

    async def _take(self, msg: InboundMessage, has_room: bool) -> None:
        """Answer an immediate command now, or queue the message behind its session; a queued
        message holds one unit of room until it is answered (`has_room`: already taken for it)."""
        queued = False
        try:
            ctx = self.agent.context_of(msg)
            command = COMMANDS.get(ctx.command or "")
            if command is not None and command.immediate:
                await self._answer_now(msg, ctx)
            else:
                if not has_room:
                    await self._room.acquire()
                    has_room = True
                self._queue(msg, ctx)
                queued = True
        except Exception as exc:  # noqa: BLE001 - one bad message never stops the loop
            logger.opt(exception=exc).error("dispatch failed for {}", msg.session_key)
            msg.ack()  # handled (it failed): served again it would only fail again
            msg.resolve(None)  # a waiting publisher must not wait forever
        finally:
            if has_room and not queued:
                self._room.release()

    async def _answer_now(self, msg: InboundMessage, ctx: MessageContext) -> None:
        msg.ack()
        # Served again after a restart (Telegram), a /stop would cancel the turn the restart
        # resumed, and the user would get a "Stopped." they did not send: only confirmed.
        if not self.agent.records.command_served_again(msg, ctx):
            await self._deliver(msg, ctx.reply(await self._immediate(ctx) + files_not_read(msg)))
        else:
            msg.resolve(None)

    def _queue(self, msg: InboundMessage, ctx: MessageContext) -> None:
        slot = self._slots.get(ctx.session_key)
        if slot is None:
            slot = self._slots[ctx.session_key] = _SessionSlot()
        task = asyncio.create_task(self._run(msg, ctx, slot), name=f"turn:{ctx.session_key}")
        slot.tasks[task] = None
        task.add_done_callback(lambda t, key=ctx.session_key: self._done(key, t))

    async def _immediate(self, ctx: MessageContext) -> str:
        if ctx.command == "stop":
            return await self.stop_session(ctx.session_key, (ctx.reply_channel, ctx.reply_chat_id))
        if ctx.command == "status":
            return self.agent.status_text(ctx)
        return HELP_TEXT

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        self._room.release()
        slot = self._slots.get(key)
        if slot is None:
            return
        slot.tasks.pop(task, None)
        if not slot.tasks and not slot.lock.locked():
            del self._slots[key]  # idle sessions keep no lock around

    async def _run(self, msg: InboundMessage, ctx: MessageContext, slot: _SessionSlot) -> None:
        out: OutboundMessage | None = None
        given_up = False  # cancelled by /stop (not by a shutdown)
        queued = slot.lock.locked()  # behind a turn whose reply stops the chat's typing indicator
        try:
            async with slot.lock:
                # running from here: a /stop also reaches a turn still waiting for a free turn slot
                # (it said "Nothing is running." and the turn then ran anyway)
                slot.running = asyncio.current_task()
                # a sub-agent's report streams into its chat from another session (a heartbeat's,
                # a cron job's), and a heartbeat's turn acts there (the message tool, sub-agents)
                # every interval: that chat's /stop reaches them. A cron job's own turn shows
                # nothing there (its reply is delivered by the job, which a /stop would lose).
                acts_in_chat = msg.channel == SYSTEM_CHANNEL or ctx.session_key == HEARTBEAT_SESSION_KEY
                slot.reply_target = (ctx.reply_channel, ctx.reply_chat_id) if acts_in_chat else None
                try:
                    async with self._semaphore:
                        if not self._admitted_still(msg):
                            return
                        ctx = self.agent.context_of(msg)  # the trust may have changed meanwhile
                        if queued and msg.reply_future is None:
                            self.bus.offer_outbound(ctx.reply("", kind="typing"))  # working on it again
                        out = await self._execute(msg, ctx)
                except asyncio.CancelledError:
                    logger.info("turn for {} cancelled", ctx.session_key)
                    given_up = slot.user_stopped
                    if given_up:  # /stop: the user gave this message up
                        # not answered, but kept: stopped before its turn saved it (waiting for a
                        # turn slot, or for the consolidation its prompt needed), it was lost
                        self.agent.records.save_given_up(msg, ctx)
                        msg.ack()
                        # A restart must not answer it (nanobot/gateway/missed.py). Recorded here,
                        # with the session still locked: once the lock is released the next queued
                        # message is saved, and a position taken then would give that one up too.
                        session = self.agent.sessions.get(ctx.session_key)
                        self.agent.sessions.set_metadata(session, stopped_through=len(session.messages))
                    # Otherwise (shutdown) no ack: a message saved before the cancellation was
                    # acked then; one not yet saved stays unconfirmed and is served again.
                    raise
                except Exception as exc:  # noqa: BLE001
                    if isinstance(exc, StorageError):  # the message says it all: no traceback
                        logger.error("turn for {} failed: {}", ctx.session_key, exc)
                    else:
                        logger.opt(exception=exc).error("turn for {} failed", ctx.session_key)
                    # in-process publishers (cron) see the exception itself, the user a short note
                    out = ctx.reply(_failure_note(exc, ctx), metadata={"failed": True, "exception": exc})
                    if msg.saved and not isinstance(exc, StorageError):
                        # the message was answered (with this note): a restart must not answer it again
                        out.metadata.update(self.agent.records.record_failure_reply(ctx, out.content))
                finally:
                    slot.running = None
                    slot.reply_target = None
                    slot.user_stopped = False
                msg.ack()  # handled, answered or failed (a no-op once persisted)
        except asyncio.CancelledError:
            if not given_up:  # a shutdown: queued or cut short, it must not vanish
                try:
                    self._keep(msg, ctx)
                except Exception as exc:  # noqa: BLE001 - a full disk: say what was lost
                    logger.error("{}: a message could not be kept at shutdown: {}", ctx.session_key, exc)
            msg.resolve(None)  # a waiting publisher learns there is no reply
            self._end_stream(msg, ctx, out)
            raise
        self._end_stream(msg, ctx, out)
        await self._deliver(msg, out)

    def _admitted_still(self, msg: InboundMessage) -> bool:
        """Whether the message may run now; one that may not is handled (acked) and never answered."""
        if self._admits_queued is None or self._admits_queued(msg):
            return True
        logger.warning(
            "{}: a waiting message is not answered: its sender {} is no longer allowed", msg.session_key, msg.sender_id
        )
        msg.ack()
        msg.resolve(None)
        return False

    def _end_stream(self, msg: InboundMessage, ctx: MessageContext, out: OutboundMessage | None) -> None:
        """A streamed turn that ends without its final reply (stopped, failed, cancelled) tells the
        channel, which otherwise keeps the partial preview's state for good."""
        stream_id = msg.metadata.get("stream_id")
        if not stream_id or (out is not None and out.metadata.get("stream_id") == stream_id):
            return
        self.bus.offer_outbound(
            ctx.reply("", kind="stream_end", metadata={"stream_id": stream_id, "interrupted": True})
        )

    async def _execute(self, msg: InboundMessage, ctx: MessageContext) -> OutboundMessage | None:
        """A message in its session's order: `/new`, or a turn."""
        if ctx.command == "new":
            reply = await self.agent.new_session(ctx.session_key, msg.metadata.get("message_id"))
            return ctx.reply(reply + files_not_read(msg)) if reply is not None else None
        return await self.agent.handle(msg, ctx)

    async def _deliver(self, msg: InboundMessage, out: OutboundMessage | None) -> None:
        if msg.resolve(out) or out is None:
            return
        await self.bus.publish_outbound(out)

    async def stop_session(self, session_key: str, chat: tuple[str, str] | None = None) -> str:
        """Cancel the session's running turn and sub-agents, and any other session's turn answering
        into `chat` (a sub-agent's report of a heartbeat or cron job runs in that job's session: the
        user watched it stream, sent /stop and was told nothing was running). The messages queued
        behind a turn are still answered (they are the user's words: dropping them would lose them)."""
        slots = [
            slot for key, slot in self._slots.items()
            if key == session_key or (chat is not None and slot.reply_target == chat)
        ]
        stopped = [slot.running for slot in slots if slot.running is not None and not slot.running.done()]
        for slot in slots:
            if slot.running is not None and not slot.running.done():
                slot.user_stopped = True
                slot.running.cancel()
        if stopped:
            await asyncio.wait(stopped, timeout=STOP_WAIT_S)  # each records where it stopped
        cancelled_sub = self.agent.cancel_subagents(session_key)
        if not stopped and not cancelled_sub:
            return NOTHING_RUNNING_REPLY
        return STOPPED_REPLY


def files_not_read(msg: InboundMessage) -> str:
    """What a command's reply adds when files came with it (a photo captioned `/new`): the command
    is done, the files are kept in media/ but nobody read them, which the user was not told."""
    if not msg.media:
        return ""
    names = ", ".join(Path(path).name for path in msg.media)
    return f"\n\n(Attached {names}: kept in media/ but not read. Send it again without a command.)"


DISK_FAILURE_NOTE = (
    "Sorry, that could not be done: the assistant's disk is full or read-only right now. Please try "
    "again later (the owner finds the cause in the log)."
)
STORAGE_FAILURE_NOTE = (
    "I could not save your message: the assistant's disk is full or read-only right now, so it was "
    "not processed. Please send it again later (the owner finds the cause in the log)."
)


def _failure_note(exc: Exception, ctx: MessageContext) -> str:
    """What the chat is told of a turn that failed. A full disk or a read-only workspace is said as
    such, with its path only in the terminal (the owner's): a group was shown the owner's home
    folder and told to free disk space."""
    if isinstance(exc, StorageError):
        return str(exc) if ctx.channel == TERMINAL_CHANNEL else STORAGE_FAILURE_NOTE
    if cannot_write(exc):  # e.g. /new archiving on a full disk
        if ctx.channel == TERMINAL_CHANNEL:
            return f"Sorry, that could not be done: {exc}. Free disk space or make the workspace writable."
        return DISK_FAILURE_NOTE
    return f"Sorry, something went wrong: {type(exc).__name__}."
