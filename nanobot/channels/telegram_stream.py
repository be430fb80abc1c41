"""Streamed replies on Telegram: one preview message per reply, sent once and edited as text arrives.

A preview is best-effort: the final reply (sent by the channel, with retries) replaces it. At most
one send or edit goes out every STREAM_EDIT_INTERVAL_S per reply, and a 429 from Telegram pauses
every preview of the bot for the `retry_after` it names (the flood limit is the bot's, not the
chat's): without that pause a reply streamed during a flood wait sent one message per delta, which
only lengthens the wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger
from telegram import Bot
from telegram.error import RetryAfter, TelegramError

from nanobot.channels.split import TELEGRAM_MAX_CHARS, cut_to, split_message
from nanobot.util.retry import parse_retry_after

INTERRUPTED_MARK = " …\n\n[interrupted: this answer was not finished]"
CONTINUED_MARK = " …\n\n[interrupted: what came before the stop follows below]"
STREAM_EDIT_INTERVAL_S = 0.5  # at most two edits a second per streamed reply (Telegram flood limits)


def retry_after_s(exc: RetryAfter) -> float:
    value = getattr(exc, "_retry_after", None) or exc.retry_after
    return parse_retry_after(value) or 0.0


@dataclass
class Preview:
    chat_id: str
    topic: int | None  # a forum topic's message_thread_id
    message_id: int | None = None
    text: str = ""
    shown: str = ""
    last_edit: float = 0.0
    flush: asyncio.Task[None] | None = None
    sending: bool = False  # a send or edit is under way: cancelled, its message may still appear


class StreamPreviews:
    """The previews of the replies being streamed, by stream id."""

    def __init__(self, bot: Callable[[], Bot | None]) -> None:
        self.streams: dict[str, Preview] = {}
        self._bot = bot
        self._paused_until = 0.0  # monotonic time before which no preview is sent or edited

    async def add(self, key: str, chat_id: str, topic: int | None, delta: str) -> None:
        preview = self.streams.setdefault(key, Preview(chat_id, topic))
        preview.text += delta
        if preview.flush is not None and not preview.flush.done():
            return  # a flush is already scheduled; it will show the accumulated text
        ready_at = max(preview.last_edit + STREAM_EDIT_INTERVAL_S, self._paused_until)
        wait_s = ready_at - time.monotonic()
        if wait_s <= 0:
            await self._flush(preview)
        else:
            preview.flush = asyncio.create_task(self._flush_later(preview, wait_s))

    async def take(self, key: str) -> Preview | None:
        """The preview of a reply that is complete now (its pending flush cancelled), if any."""
        preview = self.streams.pop(key, None)
        if preview is not None and preview.flush is not None:
            if not preview.sending:  # still waiting: the final reply supersedes it
                preview.flush.cancel()
            # A send under way is waited for: cancelled, Telegram still made the message, which
            # then stayed half-written above the answer sent anew (after a flood-limit pause).
            await asyncio.gather(preview.flush, return_exceptions=True)
        return preview

    async def interrupt(self, key: str) -> None:
        """A reply that will not be completed (stopped, failed, the gateway stopping): its preview,
        if one was shown, says so instead of passing for the whole answer, and shows all the text
        that came (after /stop the session keeps that as what the user was shown; the last half
        second of it was still waiting for the next edit)."""
        preview = await self.take(key)
        bot = self._bot()
        if preview is None or preview.message_id is None or bot is None:
            return
        # Longer than one message: the rest follows in messages of its own (the session keeps it all).
        # The preview is marked first, so a send that fails (a flood limit, the stop's time running
        # out) never leaves it looking complete.
        parts = split_message(preview.text.rstrip() + INTERRUPTED_MARK, TELEGRAM_MAX_CHARS)
        if len(parts) > 1:  # room in the first part for its own mark; the mark at the end never split
            parts = split_message(preview.text.rstrip(), TELEGRAM_MAX_CHARS - len(CONTINUED_MARK))
            parts[-1] = parts[-1].rstrip() + INTERRUPTED_MARK
        first = parts[0] if len(parts) == 1 else parts[0].rstrip() + CONTINUED_MARK
        try:
            await bot.edit_message_text(first, chat_id=preview.chat_id, message_id=preview.message_id)
            for part in parts[1:]:
                await bot.send_message(preview.chat_id, part, message_thread_id=preview.topic)
        except TelegramError as exc:
            logger.debug("telegram: could not mark a stopped preview: {}", exc)

    async def interrupt_all(self, within_s: float) -> None:
        """At the channel's stop: every preview still open is marked, for at most `within_s`."""
        keys = list(self.streams)
        try:
            await asyncio.wait_for(asyncio.gather(*(self.interrupt(k) for k in keys)), within_s)
        except TimeoutError:
            logger.debug("telegram: stopped previews not all marked within {:.0f}s", within_s)
        for key in list(self.streams):
            self.end(key)

    def end(self, key: str) -> None:
        preview = self.streams.pop(key, None)
        if preview is not None and preview.flush is not None:
            preview.flush.cancel()

    async def _flush_later(self, preview: Preview, wait_s: float) -> None:
        await asyncio.sleep(wait_s)
        await self._flush(preview)

    async def _flush(self, preview: Preview) -> None:
        preview.sending = True
        try:
            await self._show(preview)
        finally:
            preview.sending = False

    async def _show(self, preview: Preview) -> None:
        """Show the accumulated text (plain, cut to the limit) by sending or editing one message."""
        bot = self._bot()
        text = cut_to(preview.text, TELEGRAM_MAX_CHARS)  # counted as Telegram counts: UTF-16 units
        if bot is None or not text.strip() or text == preview.shown:
            return
        preview.last_edit = time.monotonic()
        try:
            if preview.message_id is None:
                sent = await bot.send_message(preview.chat_id, text, message_thread_id=preview.topic)
                preview.message_id = sent.message_id
            else:
                await bot.edit_message_text(text, chat_id=preview.chat_id, message_id=preview.message_id)
            preview.shown = text
        except RetryAfter as exc:
            wait_s = retry_after_s(exc)
            self._paused_until = max(self._paused_until, time.monotonic() + wait_s)
            logger.info("telegram: flood limit; streamed previews wait {:.0f}s", wait_s)
        except TelegramError as exc:
            logger.debug("telegram: stream update failed: {}", exc)
