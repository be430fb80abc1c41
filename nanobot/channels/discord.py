"""Discord channel through discord.py: DMs, guild channels and threads; replies keep Markdown.

discord.py reconnects and resumes the gateway itself; we restart the client with backoff only when
it gives up (login over an unreachable API, a closed gateway), and stop for good on a bad token.

Delivery is at-most-once: the gateway does not replay MESSAGE_CREATE events after a restart (a
RESUME only covers a dropped connection of a live session), so there is nothing to confirm late and
`InboundMessage.on_persisted` stays unset. A message received but not yet saved when the process
dies is lost; reading the channel history on start-up would be the only way to recover it.

Only what people write is a turn: system messages (a member joined, a message was pinned, a thread
was created...) and messages with neither text nor attachments are ignored.

Sends are retried by nanobot under `channels.sendMaxRetries` and its retry-after cap. discord.py
retries 429s and some 5xx on its own (up to 5 tries) before raising; those errors are not retried
again, and a rate limit longer than `MAX_RATELIMIT_WAIT_S` is raised to us instead of waited.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from typing import Any, BinaryIO

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from loguru import logger

from nanobot.bus.commands import answered_ahead, for_another_bot, starts_with_command
from nanobot.bus.events import OutboundMessage
from nanobot.channels.base import Channel
from nanobot.channels.connection import RETRY_AFTER_MAX_S, PermanentChannelError
from nanobot.channels.markdown import markdown_to_discord
from nanobot.channels.media import MediaItem
from nanobot.channels.split import DISCORD_MAX_CHARS, SentSteps, capped_parts, split_message
from nanobot.util.keyed_locks import KeyedLocks
from nanobot.util.text import unlabelled

GUILD_READY_TIMEOUT_S = 2.0  # discord.py's wait for GUILD_CREATEs after READY
REIDENTIFY_DELAY_S = 5.0  # discord.py's default pause before a non-initial IDENTIFY
STOP_TIMEOUT_S = 5.0
MESSAGE_CACHE = 200  # messages discord.py keeps (it resolves replies from this cache)
# A longer retry_after raises discord.RateLimited (nanobot waits it, capped) instead of discord.py
# sleeping it inside send(); 30 s is the smallest value discord.py accepts.
MAX_RATELIMIT_WAIT_S = 30.0
_ANY_MENTION = re.compile(r"<@[!&]?\d+>")  # a user's or a role's: `@bot /stop` in a guild
# A send routed while the client logs in (the replies sent again at start) or logs in again waits this
# long for it: failing at once, the reply waited for the chat's next message, which may never come.
CONNECT_WAIT_S = 30.0
# What discord.py's HTTPClient.request retries itself before raising: 5xx it calls transient, and
# connection resets by errno (macOS/BSD, Windows).
_LIBRARY_RETRIED_STATUSES = frozenset({500, 502, 504, 524})
_LIBRARY_RETRIED_ERRNOS = frozenset({54, 10054})
# Messages people write; every other type (joins, pins, boosts, thread created...) is a system one.
_USER_MESSAGE_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_BAD_TOKEN_CLOSE = 4004
_NO_MENTIONS_BUT_USERS = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=False)


def _library_retried(exc: discord.HTTPException) -> bool:
    """Whether discord.py already spent its own tries on this error before raising it.

    It retries the transient 5xx, and a 429 that came from Discord's API (answers carry a Via
    header); a 429 without one is Cloudflare's, raised at once.
    """
    if exc.status in _LIBRARY_RETRIED_STATUSES:
        return True
    headers = getattr(exc.response, "headers", None) or {}
    return exc.status == 429 and bool(headers.get("Via"))


class _Client(discord.Client):
    """discord.Client forwarding events to its DiscordChannel."""

    def __init__(self, owner: DiscordChannel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owner = owner

    async def on_ready(self) -> None:
        self.owner._set_state("running")
        logger.info("discord: connected as {} ({})", self.user, getattr(self.user, "id", "?"))

    async def on_resumed(self) -> None:
        self.owner._set_state("running")

    async def on_message(self, message: discord.Message) -> None:
        try:
            await self.owner._on_message(message)
        except Exception:  # one bad message must not disturb the gateway task
            logger.exception("discord: failed to handle message {}", message.id)

    async def before_identify_hook(self, _shard_id: int | None, *, initial: bool = False) -> None:
        if not initial:
            await asyncio.sleep(self.owner.reidentify_delay_s)


class DiscordChannel(Channel):
    name = "discord"
    allows_by_username = False  # README: Discord allowFrom entries are user ids
    typing_interval_s = 8.0  # Discord shows typing for 10 s

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client: _Client | None = None
        self._chat_locks = KeyedLocks()
        self.guild_ready_timeout_s = GUILD_READY_TIMEOUT_S
        self.reidentify_delay_s = REIDENTIFY_DELAY_S
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self._ready_to_start():
            return
        # discord.py reads both endpoints from class attributes: one Discord bot per process.
        discord.http.Route.BASE = self.config.api_base.rstrip("/")
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.config.gateway_url)
        self._stopping = False
        self._set_state("starting")
        self._task = asyncio.create_task(self._run(), name="discord-gateway")

    def _make_client(self) -> _Client:
        # Voice is never used: skip discord.py's "PyNaCl/davey is not installed" warnings.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        intents = discord.Intents.default()
        intents.message_content = True
        return _Client(
            self,
            intents=intents,
            chunk_guilds_at_startup=False,
            max_messages=MESSAGE_CACHE,
            guild_ready_timeout=self.guild_ready_timeout_s,
            allowed_mentions=_NO_MENTIONS_BUT_USERS,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
        )

    async def _run(self) -> None:
        await self._keep_connected(self._session, stopping=lambda: self._stopping)

    def _reconnect_delay(self, exc: BaseException, failures: int) -> tuple[float, str]:
        """Discord's own wait when it rate-limits the login (the backoff tried again within seconds,
        each early try earning another 429)."""
        if isinstance(exc, discord.RateLimited):
            delay = min(max(exc.retry_after, 0.0), RETRY_AFTER_MAX_S)
            return delay, f"rate limited by Discord (retry after {delay:.0f}s)"
        return super()._reconnect_delay(exc, failures)

    async def _session(self) -> None:
        """One client from login until discord.py gives up (it resumes dropped connections itself)."""
        client = self.client = self._make_client()
        try:
            await client.start(self.config.token, reconnect=True)
            if not self._stopping:
                raise ConnectionError("the gateway connection closed")
        except discord.LoginFailure:
            raise PermanentChannelError(
                "the bot token was rejected by Discord (401); check channels.discord.token"
            ) from None
        except discord.PrivilegedIntentsRequired:
            raise PermanentChannelError(
                "enable the Message Content intent for this bot in the Developer Portal"
            ) from None
        except discord.ConnectionClosed as exc:
            if exc.code == _BAD_TOKEN_CLOSE:
                raise PermanentChannelError("the gateway rejected the bot token (4004)") from None
            raise ConnectionError(f"gateway closed ({exc.code})") from None
        finally:
            if not client.is_closed():
                with contextlib.suppress(Exception):
                    await client.close()

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def stop(self) -> None:
        self._stopping = True
        await self._stop_all_typing()
        if self.client is not None and not self.client.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.close(), STOP_TIMEOUT_S)
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, STOP_TIMEOUT_S)
            except (asyncio.CancelledError, Exception):
                self._task.cancel()
            self._task = None
        self.client = None
        if self.state != "failed":
            self._set_state("stopped")

    # ------------------------------------------------------------------ inbound
    def _addressed(self, message: discord.Message, me_id: int) -> bool:
        """In a guild under groupPolicy "mention": a mention of the bot (or of its own role, which
        Discord's autocomplete offers beside it), a reply to it, or a command."""
        if any(user.id == me_id for user in message.mentions) or self._own_roles(message, me_id):
            return True
        ref = message.reference
        if ref is not None and isinstance(ref.resolved, discord.Message) and ref.resolved.author.id == me_id:
            return True
        return starts_with_command(message.content)

    @staticmethod
    def _own_roles(message: discord.Message, me_id: int) -> list[int]:
        """Ids of the roles mentioned in `message` that are the bot's own (its managed role)."""
        return [
            role.id
            for role in message.role_mentions
            if role.tags is not None and role.tags.bot_id == me_id
        ]

    async def _on_message(self, message: discord.Message) -> None:
        # discord.py runs each message's handler as a task of its own: a message after a photo was
        # published while the photo still downloaded, and answered without it. One chat's messages
        # take this lock in the order they came (asyncio locks are fair), other chats do not wait.
        # /stop, /status and /help are answered ahead of the chat's queue: behind the lock, /stop
        # waited for a photo's download, or for a flood's turns, before it could stop anything.
        if not message.attachments and answered_ahead(_ANY_MENTION.sub("", message.content).strip()):
            await self._handle_message(message)
            return
        async with self._chat_locks.hold(message.channel.id):
            await self._handle_message(message)

    async def _handle_message(self, message: discord.Message) -> None:
        assert self.client is not None and self.client.user is not None
        me_id = self.client.user.id
        if message.author.bot or message.author.id == me_id:
            return
        if message.type not in _USER_MESSAGE_TYPES:
            logger.debug("discord: ignoring system message {} ({})", message.id, message.type.name)
            return
        # a guild the client has not cached (its channel a PartialMessageable) is still a guild: the
        # message was taken for a private one, with the owner's trust and a pairing reply in public
        is_group = message.guild is not None or getattr(message.channel, "guild_id", None) is not None
        if is_group and for_another_bot(message.content, self.client.user.name):
            return  # `/new@OtherBot` must not archive this channel's conversation
        if is_group and self.config.group_policy == "mention" and not self._addressed(message, me_id):
            return
        content = re.sub(rf"<@!?{me_id}>", "", message.content)
        for role_id in self._own_roles(message, me_id):
            content = content.replace(f"<@&{role_id}>", "")
        content = unlabelled(content.strip())  # what they typed cannot pass for one of the labels
        attachments = list(message.attachments)
        for snapshot in getattr(message, "message_snapshots", None) or []:
            # a forward carries its message in a snapshot: someone else's words, labelled (as on
            # Telegram), never a command of the owner's; it got no reply and no log line
            attachments += snapshot.attachments
            forwarded = unlabelled(snapshot.content.strip())
            content = "\n".join(part for part in (content, "[forwarded message]", forwarded) if part)
        if not content and not attachments:
            # A bare mention, a sticker or an embed only; in a guild, also what a bot without the
            # Message Content intent receives for messages that do not mention it.
            logger.debug("discord: ignoring message {} with no text or attachments", message.id)
            return
        sender = str(message.author.id)
        # Checked before downloading anything they sent.
        channel_id, name = str(message.channel.id), message.author.name
        if not await self._admit(sender, chat_id=channel_id, is_group=is_group, display_name=name):
            return
        voice = bool(message.flags.voice)
        items = [MediaItem(a.filename, a.content_type, a.size, voice, a) for a in attachments]

        async def fetch(item: MediaItem, out: BinaryIO) -> None:
            await item.handle.save(out, seek_begin=False)

        got = await self._download_media(
            message.channel.id, message.id, items, fetch, (discord.HTTPException, aiohttp.ClientError, OSError)
        )
        channel = message.channel
        metadata: dict[str, Any] = {
            "message_id": str(message.id),
            "username": message.author.name,
            "display_name": message.author.display_name,
            "guild_id": str(message.guild.id) if message.guild else None,
        }
        if isinstance(channel, discord.Thread):
            metadata["thread_id"], metadata["parent_id"] = str(channel.id), str(channel.parent_id)
        await self._publish(
            self._inbound(sender, str(channel.id), content, got, is_group=is_group, metadata=metadata)
        )

    # ------------------------------------------------------------------ outbound
    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        if isinstance(exc, discord.RateLimited):  # longer than MAX_RATELIMIT_WAIT_S: not tried yet
            return exc.retry_after
        if isinstance(exc, discord.HTTPException):
            if _library_retried(exc):
                return None
            if isinstance(exc, discord.DiscordServerError) or exc.status == 429:
                return self._backoff(attempt)
            return None
        if isinstance(exc, OSError) and exc.errno in _LIBRARY_RETRIED_ERRNOS:
            return None
        if isinstance(exc, (aiohttp.ClientError, OSError, asyncio.TimeoutError)):
            return self._backoff(attempt)
        return None

    def worth_sending_later(self, exc: BaseException) -> bool:
        # a 5xx or 429 discord.py already retried is not retried now, but may pass later
        if isinstance(exc, discord.HTTPException) and _library_retried(exc):
            return True
        return super().worth_sending_later(exc)

    def _target(self, chat_id: str) -> discord.PartialMessageable:
        if self.client is None:
            raise RuntimeError("discord channel is not started")
        if self.client.is_closed() or self.client.user is None:
            # between a failed login and the next one: an outage, so the manager keeps the reply
            # and sends it when the channel is back (the closed client's error was taken for a refusal)
            raise ConnectionError("discord is reconnecting")
        return self.client.get_partial_messageable(int(chat_id))

    async def _send_typing(self, chat_id: str) -> None:
        if self.client is not None and self.state == "running":
            await self.client.http.send_typing(int(chat_id))

    async def _connected_target(self, chat_id: str) -> discord.PartialMessageable:
        """`_target`, once the client is logged in: waited for (at most CONNECT_WAIT_S) while the
        channel is starting or retrying its connection."""
        deadline = asyncio.get_running_loop().time() + CONNECT_WAIT_S
        while (
            self.state in ("starting", "retrying")
            and not self._stopping
            and (self.client is None or self.client.is_closed() or self.client.user is None)
            and asyncio.get_running_loop().time() < deadline
        ):
            await asyncio.sleep(0.1)
        return self._target(chat_id)

    async def _send_text(self, msg: OutboundMessage) -> None:
        target = await self._connected_target(msg.chat_id)
        parts = capped_parts(split_message(markdown_to_discord(msg.content), DISCORD_MAX_CHARS), str)
        steps = SentSteps(msg)  # a reply sent again after an outage goes on where it stopped
        for index, part in enumerate(parts):
            if steps.done():
                continue
            reference = None
            if index == 0 and msg.reply_to:
                reference = discord.MessageReference(
                    message_id=int(msg.reply_to), channel_id=int(msg.chat_id), fail_if_not_exists=False
                )
            await self._with_retry("send", lambda p=part, r=reference: target.send(p, reference=r))  # type: ignore[misc]
            steps.sent()
        if msg.files and not steps.done():
            await self._with_retry(
                "send files",
                lambda: target.send(files=[discord.File(io.BytesIO(f.data), filename=f.name) for f in msg.files]),
            )
            steps.sent()
