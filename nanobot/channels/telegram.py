"""Telegram channel: long polling through python-telegram-bot's Bot, replies as HTML.

The polling loop is ours (on `Bot.get_updates`) so the channel's state is exact: "running" while
polls succeed, "retrying" with backoff on 429/5xx/network drops, "failed" once on a rejected token.

Delivery is at-least-once: the offset confirmed to Telegram never passes an update whose message
the agent has not yet saved (`InboundMessage.ack()`, see delivery.py), so after a crash Telegram
serves the unsaved updates again. While updates are pending, Telegram answers getUpdates at once
(it re-serves them), so the loop then polls without a long-poll timeout, every
PENDING_POLL_INTERVAL_S or as soon as an ack moves the offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from html import escape
from typing import Any

from loguru import logger
from telegram import Bot, BotCommand, Message, ReplyParameters, Update
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.request import HTTPXRequest

from nanobot.bus.commands import COMMANDS, for_another_bot
from nanobot.bus.events import OutboundFile, OutboundMessage
from nanobot.channels.base import Channel
from nanobot.channels.connection import PermanentChannelError
from nanobot.channels.delivery import AckWindow
from nanobot.channels.markdown import telegram_parts
from nanobot.channels.media import Received
from nanobot.channels.split import TELEGRAM_MAX_CHARS, SentSteps, capped_parts
from nanobot.channels.telegram_media import (
    Albums,
    album_of,
    chat_of,
    download_media,
    inbound_metadata,
    paste_key,
    paste_of,
    sender_of,
    shared_as_text,
    with_origin,
    with_reply_context,
)
from nanobot.channels.telegram_stream import StreamPreviews, retry_after_s
from nanobot.channels.telegram_updates import addressed, mention_pattern, readable_updates

REQUEST_TIMEOUT_S = 20.0
CONNECT_TIMEOUT_S = 10.0
POLL_READ_SLACK_S = 10.0  # added to the long-poll timeout before the read times out
STOP_CONFIRM_TIMEOUT_S = 2.0
PREVIEW_MARK_TIMEOUT_S = 2.0  # at the stop, for marking the previews of replies left unfinished
PENDING_POLL_INTERVAL_S = 0.5  # new updates wait at most this long while older ones are unsaved
RECONNECT_MAX_DELAY_S = 30.0
CONNECTION_POOL_SIZE = 16
_GROUP_TYPES = frozenset({"group", "supergroup"})


TELEGRAM_MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # the Bot API's limit for files a bot sends


class FileTooLarge(Exception):
    """An attachment over what the platform accepts: not sent, and not retried."""


def split_chat(chat_id: str) -> tuple[str, int | None]:
    """(Telegram chat id, forum topic or None) of a chat named by `chat_of`."""
    chat, _, topic = chat_id.partition(":")
    return chat, int(topic) if topic.isdigit() else None


class TelegramChannel(Channel):
    name = "telegram"
    typing_interval_s = 4.0  # Telegram shows a chat action for 5 s
    reconnect_max_delay_s = RECONNECT_MAX_DELAY_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bot: Bot | None = None
        self._task: asyncio.Task[None] | None = None
        self._acks = AckWindow(self.name)
        self._confirmed: int | None = None  # the offset of the last successful getUpdates
        self._bot_id: int | None = None
        self._bot_username = ""
        self.previews = StreamPreviews(lambda: self.bot)
        self._newest: dict[int, asyncio.Task[None]] = {}  # each chat's latest update being handled
        self._handlers: set[asyncio.Task[None]] = set()
        self._albums = Albums()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self._ready_to_start():
            return
        self._set_state("starting")
        self.bot = self._make_bot()
        self._task = asyncio.create_task(self._run(), name="telegram-poll")

    def _make_bot(self) -> Bot:
        proxy = self.config.proxy or None
        request = HTTPXRequest(
            connection_pool_size=CONNECTION_POOL_SIZE,
            proxy=proxy,
            read_timeout=REQUEST_TIMEOUT_S,
            write_timeout=REQUEST_TIMEOUT_S,
            connect_timeout=CONNECT_TIMEOUT_S,
            pool_timeout=REQUEST_TIMEOUT_S,
        )
        updates_request = HTTPXRequest(
            connection_pool_size=1,
            proxy=proxy,
            read_timeout=POLL_READ_SLACK_S,
            connect_timeout=CONNECT_TIMEOUT_S,
            pool_timeout=CONNECT_TIMEOUT_S,
        )
        return Bot(
            self.config.token,
            base_url=self.config.base_url,
            base_file_url=self.config.base_file_url,
            request=request,
            get_updates_request=updates_request,
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        for handler in self._handlers:
            handler.cancel()  # its update stays unconfirmed: Telegram serves it again
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._stop_all_typing()
        await self.previews.interrupt_all(PREVIEW_MARK_TIMEOUT_S)
        if self.bot is not None:
            offset = self._acks.offset
            if offset is not None and offset != self._confirmed and self.state != "failed":
                # Confirm what is saved so a restart does not see it again; unsaved updates stay.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self.bot.get_updates(offset=offset, timeout=0), STOP_CONFIRM_TIMEOUT_S
                    )
            with contextlib.suppress(Exception):
                await self.bot.shutdown()
            self.bot = None
        if self.state != "failed":
            self._set_state("stopped")

    async def _connect(self) -> None:
        assert self.bot is not None
        await self.bot.initialize()  # getMe: rejects a bad token with InvalidToken
        self._bot_id, self._bot_username = self.bot.id, self.bot.username or ""
        await self.bot.delete_webhook(drop_pending_updates=False)
        commands = [BotCommand(c.name, c.description) for c in COMMANDS.values()]
        await self.bot.set_my_commands(commands)
        logger.info("telegram: connected as @{}", self._bot_username)

    async def _run(self) -> None:
        assert self.bot is not None
        self._connected = False
        await self._keep_connected(self._step, stopping=lambda: False)  # stop() cancels the task

    async def _step(self) -> None:
        """Connect when needed, then one poll; while updates wait for their save, a short pause."""
        # A token rejected at the start, or revoked while running (then getUpdates says so): the
        # channel has failed for good; "retrying" forever kept `nanobot health` at exit 0.
        try:
            if not self._connected:
                await self._connect()
                self._connected = True
                self._set_state("running")
            await self._poll_once()
        except InvalidToken:
            raise PermanentChannelError(
                "the bot token was rejected by Telegram (401 Unauthorized); check channels.telegram.token"
            ) from None
        if self.state != "running":
            self._set_state("running")
        if self._acks.pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._acks.advanced.wait(), PENDING_POLL_INTERVAL_S)

    def _reconnect_delay(self, exc: BaseException, failures: int) -> tuple[float, str]:
        if isinstance(exc, RetryAfter):
            delay = retry_after_s(exc)
            return delay, f"rate limited by Telegram (retry after {delay:.0f}s)"
        if not isinstance(exc, TelegramError):  # network drops, 5xx, a competing poller are expected
            logger.opt(exception=exc).error("telegram: unexpected error in the polling loop")
        return super()._reconnect_delay(exc, failures)

    async def _poll_once(self) -> None:
        """One getUpdates (confirming what is saved), then handle the updates not seen before."""
        assert self.bot is not None
        self._acks.advanced.clear()  # before reading the offset, so no ack is missed
        offset = self._acks.offset
        # Pending updates are re-served at once, so a long poll would not wait anyway.
        timeout = 0 if self._acks.pending else self.config.poll_timeout_s
        poll = self._albums.poll_started()
        try:
            updates = await self.bot.get_updates(offset=offset, timeout=timeout, allowed_updates=["message"])
        except (TypeError, KeyError, ValueError) as exc:  # one update the library cannot read
            updates = await readable_updates(self.bot, offset, self._acks, exc)
        self._albums.poll_done(poll)
        self._confirmed = offset
        for update in updates:
            if not self._acks.is_new(update.update_id):
                continue
            self._acks.receive(update.update_id)
            try:
                self._dispatch(update)
            except Exception as exc:  # noqa: BLE001 - one update that cannot be handled is dropped
                # Kept pending, it held the confirmed offset for good: served first at every poll
                # (and after a restart), it failed again, and once Telegram's 100 pending updates
                # were behind it no message reached the bot, while status said "running".
                logger.opt(exception=exc).error("telegram: update {} cannot be handled: dropped", update.update_id)
                self._acks.handled(update.update_id)
                self._acks.release(update.update_id)

    def _dispatch(self, update: Update) -> None:
        """Handle the update in a task of its own, after its chat's earlier ones: one chat's slow
        download or voice transcription holds no other chat back (and no poll), and a chat's
        messages still reach the agent in order."""
        album = album_of(update) or paste_of(update, self._albums)
        parts = self._albums.join(album, update) if album is not None else None
        if album is not None and parts is None:
            return  # the album's first part gathers it
        if (paste := paste_key(update.message)) is not None and paste != album:
            self._albums.close(paste)  # this message comes after what the sender's paste holds
        chat = update.effective_chat.id if update.effective_chat is not None else 0
        task = asyncio.create_task(self._handle_in_turn(update, self._newest.get(chat), album, parts))
        self._newest[chat] = task
        self._handlers.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._handlers.discard(finished)
            if self._newest.get(chat) is finished:
                del self._newest[chat]

        task.add_done_callback(done)

    async def _handle_in_turn(
        self,
        update: Update,
        before: asyncio.Task[None] | None,
        album: tuple[int, str] | None = None,
        parts: list[Update] | None = None,
    ) -> None:
        updates = [update]
        try:
            if before is not None:
                await asyncio.wait([before])
            if album is not None and parts is not None:
                updates = await self._albums.gather(album, parts)
            published = await self._handle_update(updates)
        except asyncio.CancelledError:
            raise  # stays pending: Telegram serves it again
        except Exception:  # one broken update must neither stop the channel nor hold others back
            logger.exception("telegram: could not handle update {}; skipping it", update.update_id)
            published = False
        finally:
            for part in updates:
                self._acks.handled(part.update_id)
        if not published:
            for part in updates:
                self._acks.release(part.update_id)

    # ------------------------------------------------------------------ inbound
    async def _handle_update(self, updates: list[Update]) -> bool:
        """Publish the message of the update (or the one message of an album's updates); False when
        it is filtered out (nothing for the agent)."""
        message = updates[0].message
        user = sender_of(message) if message is not None else None
        if message is None or user is None:
            return False
        chat = message.chat
        parts = [u.message for u in updates if u.message is not None]
        is_group = chat.type in _GROUP_TYPES
        # the messages' own text: a forward's label naming the bot (a copy of its own message) is no mention
        typed = "\n".join(m.text or m.caption or "" for m in parts)
        text = "\n".join(t for t in (with_origin(m, self._without_mention(m, is_group)) for m in parts) if t)
        if is_group and for_another_bot(text, self._bot_username):
            return False  # another bot's /new must not archive this group's conversation
        if is_group and self.config.group_policy == "mention" and not addressed(
            message, typed, text, self._bot_id, self._bot_username
        ):
            return False
        # Check the sender before downloading anything they sent.
        if not await self._admit(str(user.id), user.username, chat_id=str(chat.id), is_group=is_group):
            return False
        text = with_reply_context(message, text, self._bot_id)
        got = Received()
        for part in parts:
            got.extend(await download_media(self, part))
        if not text and not got.paths and not got.notes:
            return False  # a bare @mention, a sticker without emoji, a poll: nothing to answer
        metadata = inbound_metadata(message, user)
        inbound = self._inbound(str(user.id), chat_of(message), text, got, is_group=is_group, metadata=metadata)
        self._acks.track([u.update_id for u in updates], inbound)
        return await self._publish(inbound, user.username)

    def _without_mention(self, message: Message, is_group: bool) -> str:
        """A message's text without the `@bot` a group addresses the bot with; a private chat's
        text and a forwarded one are the sender's words as they are (ops@bot.dev stays an address)."""
        text = message.text or message.caption or shared_as_text(message)
        if not self._bot_username or message.forward_origin is not None:
            return text
        bot = re.escape(self._bot_username)
        text = re.sub(rf"^(\s*/\w+)@{bot}\b", r"\1", text, flags=re.I)  # /new@bot: our /new
        return mention_pattern(self._bot_username).sub("", text).strip() if is_group else text

    # ------------------------------------------------------------------ outbound
    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        if isinstance(exc, RetryAfter):
            return retry_after_s(exc)
        if isinstance(exc, (BadRequest, Forbidden, InvalidToken, ChatMigrated)):
            return None
        if isinstance(exc, NetworkError) and "entity too large" in str(exc).lower():
            return None  # HTTP 413 arrives as a NetworkError: the same upload is refused again
        if isinstance(exc, (TimedOut, NetworkError)):  # 5xx answers arrive as NetworkError
            return self._backoff(attempt)
        return None

    async def _send_typing(self, chat_id: str) -> None:
        if self.bot is not None and self.state == "running":
            chat, topic = split_chat(chat_id)
            await self.bot.send_chat_action(chat, ChatAction.TYPING, message_thread_id=topic)

    async def _send_text(self, msg: OutboundMessage) -> None:
        if self.bot is None:
            raise RuntimeError("telegram channel is not started")
        stream = await self.previews.take(str(msg.metadata.get("stream_id", "")))
        parts = capped_parts(telegram_parts(msg.content, TELEGRAM_MAX_CHARS), lambda note: (escape(note), note))
        steps = SentSteps(msg)  # a reply sent again after an outage goes on where it stopped
        for index, (html, part) in enumerate(parts):
            if steps.done():
                continue
            if index == 0 and stream is not None and stream.message_id is not None:
                await self._edit_part(msg.chat_id, stream.message_id, html, part)
            else:
                reply_to = msg.reply_to if index == 0 else None
                await self._send_part(msg.chat_id, html, part, reply_to)
            steps.sent()
        for file in msg.files:
            if steps.done():
                continue
            await self._with_retry("sendDocument", lambda f=file: self._send_document(msg.chat_id, f))
            steps.sent()

    async def _send_document(self, chat_id: str, file: OutboundFile) -> None:
        assert self.bot is not None
        size = len(file.data)
        if size > TELEGRAM_MAX_UPLOAD_BYTES:  # refused after the whole upload, five times over
            raise FileTooLarge(f"{file.name} is {size / 2**20:.0f} MB; Telegram bots can send up to 50 MB")
        chat, topic = split_chat(chat_id)
        try:
            await self.bot.send_document(chat, document=file.data, filename=file.name, message_thread_id=topic)
        except ChatMigrated as exc:
            logger.warning("telegram: group {} is now supergroup {}; sending there", chat, exc.new_chat_id)
            await self.bot.send_document(exc.new_chat_id, document=file.data, filename=file.name)

    async def _send_part(self, chat_id: str, html: str, part: str, reply_to: str | None) -> Message:
        """Send one part as HTML; when Telegram rejects it, its Markdown source as plain text. A
        group upgraded to a supergroup has a new id, which Telegram names: the part goes there."""
        try:
            return await self._send_part_to(chat_id, html, part, reply_to)
        except ChatMigrated as exc:
            logger.warning("telegram: group {} is now supergroup {}; sending there", chat_id, exc.new_chat_id)
            return await self._send_part_to(str(exc.new_chat_id), html, part, None)

    async def _send_part_to(self, chat_id: str, html: str, part: str, reply_to: str | None) -> Message:
        assert self.bot is not None
        bot = self.bot
        chat, topic = split_chat(chat_id)
        reply = ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None
        try:
            return await self._with_retry(
                "sendMessage",
                lambda: bot.send_message(
                    chat, html, parse_mode="HTML", reply_parameters=reply, message_thread_id=topic
                ),
            )
        except BadRequest as exc:
            logger.info("telegram: HTML rejected ({}); resending as plain text", exc)
            return await self._with_retry(
                "sendMessage",
                lambda: bot.send_message(chat, part, reply_parameters=reply, message_thread_id=topic),
            )

    async def _edit_part(self, chat_id: str, message_id: int, html: str, part: str) -> None:
        assert self.bot is not None
        bot = self.bot
        chat = split_chat(chat_id)[0]
        try:
            await self._with_retry(
                "editMessageText",
                lambda: bot.edit_message_text(html, chat_id=chat, message_id=message_id, parse_mode="HTML"),
            )
        except BadRequest as exc:
            if "not modified" in str(exc).lower():
                return
            logger.info("telegram: HTML rejected ({}); editing as plain text", exc)
            try:
                await self._with_retry(
                    "editMessageText",
                    lambda: bot.edit_message_text(part, chat_id=chat, message_id=message_id),
                )
            except BadRequest as plain_exc:
                if "not modified" in str(plain_exc).lower():
                    return  # the plain text is already shown
                # the preview is gone (deleted while the answer streamed): the answer goes out anew
                logger.info("telegram: cannot edit the streamed message ({}); sending it anew", plain_exc)
                await self._send_part(chat_id, html, part, None)

    # ------------------------------------------------------------------ streaming
    async def _send_stream_delta(self, msg: OutboundMessage) -> None:
        chat, topic = split_chat(msg.chat_id)
        await self.previews.add(str(msg.metadata.get("stream_id", msg.chat_id)), chat, topic, msg.content)

    async def _end_stream(self, msg: OutboundMessage) -> None:
        key = str(msg.metadata.get("stream_id", ""))
        if msg.metadata.get("interrupted"):
            await self.previews.interrupt(key)
        else:  # one model call of a turn ended in tool calls without text to show
            self.previews.end(key)
