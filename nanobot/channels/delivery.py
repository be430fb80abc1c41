"""At-least-once bookkeeping for platforms that confirm updates by offset (Telegram's getUpdates).

Telegram keeps every update until a getUpdates call passes an `offset` above its id. The channel
therefore confirms only up to the oldest update whose message is not yet safely handled: the agent
acks a message (`InboundMessage.ack()`) once it is written to the session file, and what a crash
leaves unacked is served again on the next start. Until then a re-served update that is still
pending in this process is not published twice. A message dropped unsaved in this process (its
turn cancelled at shutdown) is never confirmed: it stays pending and is published again.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence

from loguru import logger

from nanobot.bus.events import InboundMessage


class AckWindow:
    """Which received updates are still pending, and the offset that may be confirmed."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.pending: set[int] = set()  # received, not yet acked: they hold the offset back
        self._published: set[int] = set()  # pending ids whose message is live in this process
        self._acked: set[int] = set()  # acked ids Telegram may still serve (not yet below the offset)
        self._handling: set[int] = set()  # received, still being handled (a download, say)
        self._next_id: int | None = None  # one above the highest update id received
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id: int | None = None
        #: set whenever the confirmable offset moves up (the poll loop waits on it while updates pend)
        self.advanced = asyncio.Event()

    @property
    def offset(self) -> int | None:
        """The getUpdates offset to send: confirms every update below it. None before any update."""
        offset = min(self.pending) if self.pending else self._next_id
        if offset is not None and self._acked:
            self._acked = {i for i in self._acked if i >= offset}
        return offset

    def is_new(self, update_id: int) -> bool:
        """False for an update that is acked or already published in this process (a re-serve)."""
        offset = self.offset  # never decreases, so Telegram serves nothing below it again
        if offset is not None and update_id < offset:
            return False
        return (
            update_id not in self._published
            and update_id not in self._acked
            and update_id not in self._handling
        )

    def receive(self, update_id: int) -> None:
        """Note an update as pending before it is handled (a crash mid-handling keeps it unconfirmed);
        until `handled`, a poll that serves it again does not hand it out twice."""
        self._bind_loop()
        self.pending.add(update_id)
        self._handling.add(update_id)
        self._next_id = max(self._next_id or 0, update_id + 1)

    def track(self, update_ids: Sequence[int], msg: InboundMessage) -> None:
        """Hand `msg` the ack callback for its updates (one, or an album's; set it before
        publishing the message)."""
        ids = tuple(update_ids)
        self._published.update(ids)

        def persisted() -> None:
            for update_id in ids:
                self._release_threadsafe(update_id)

        msg.on_persisted = persisted
        # A message dropped in this process without an ack (a turn cancelled at shutdown before it
        # saved the message) must not be confirmed: it stays pending, so Telegram serves it again.
        for update_id in ids:
            finalizer = weakref.finalize(msg, self._dropped_threadsafe, update_id)
            finalizer.atexit = False

    def handled(self, update_id: int) -> None:
        """Its handling ended (published, filtered out, failed or cancelled)."""
        self._handling.discard(update_id)

    def release(self, update_id: int) -> None:
        """The update is handled (acked, or filtered out): it no longer holds the offset back."""
        if update_id not in self.pending:
            return
        was_oldest = update_id == min(self.pending)
        self.pending.discard(update_id)
        self._published.discard(update_id)
        self._acked.add(update_id)
        if was_oldest:
            self.advanced.set()

    def _bind_loop(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._thread_id = threading.get_ident()

    def _on_loop(self, action: Callable[[int], None], update_id: int) -> None:
        # Acks and finalizers may run off the loop's thread (garbage collection runs anywhere).
        if self._loop is None or threading.get_ident() == self._thread_id:
            action(update_id)
            return
        try:
            self._loop.call_soon_threadsafe(action, update_id)
        except RuntimeError:  # the loop is closed: the process is ending; Telegram will re-serve it
            pass

    def _release_threadsafe(self, update_id: int) -> None:
        self._on_loop(self.release, update_id)

    def _dropped_threadsafe(self, update_id: int) -> None:
        self._on_loop(self.dropped, update_id)

    def dropped(self, update_id: int) -> None:
        """The message of `update_id` is gone from this process unsaved: keep it pending (it holds the
        offset back) and let the next poll publish it again; after a restart Telegram serves it."""
        if update_id in self._published:
            logger.info(
                "{}: the message of update {} was dropped before it was saved; it stays unconfirmed",
                self.channel,
                update_id,
            )
            self._published.discard(update_id)
