"""Channel: what every chat platform adapter shares.

The allow-list decision (allowFrom, then `dmPolicy` in private chats: a pairing code through
nanobot/channels/pairing.py, silence, or open), publishing to the bus, the typing indicator, send
retries and reconnects with backoff (nanobot/channels/connection.py), received media
(nanobot/channels/media.py), a state for `nanobot status`, and the dispatch of outbound kinds. Platform classes
implement the I/O: `start`, `stop`, `_send_text`, `_send_typing`, `_retry_delay`.

Delivery guarantees differ by platform. A channel may set `InboundMessage.on_persisted` and confirm
a message to its platform only once the agent has saved it (Telegram does: unsaved updates are
served again after a crash). Where the platform cannot re-deliver (Discord's gateway does not replay
events), a message received but not yet saved when the process is killed is lost; a graceful stop
saves the messages it cancels before their turn saved them, and the next start answers them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from loguru import logger

from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels import media as media_util
from nanobot.channels.connection import Connection
from nanobot.channels.media import Fetch, MediaItem, Received
from nanobot.channels.pairing import PairingError, PairingStore, pairing_message
from nanobot.config.paths import MEDIA_DIR
from nanobot.config.schema import ChannelsConfig, ProvidersConfig
from nanobot.secrets import register_secret
from nanobot.util.fs import ensure_private_dir
from nanobot.util.tasks import finish_or_cancel
from nanobot.util.text import one_line, quoted

ChannelState = Literal["created", "starting", "running", "retrying", "failed", "stopped"]

TYPING_MAX_S = 300.0  # a turn longer than this stops showing "typing…"
TYPING_DRAIN_TIMEOUT_S = 2.0  # on shutdown, how long an in-flight typing request may take to finish


def allow_list_admits(allow_from: list[str], sender_id: str, username: str | None, *, by_username: bool) -> bool:
    """Whether an allowFrom list (its entries stripped) lets the sender in: "*", their id, or, where
    the channel matches names (`by_username`), their @username. The one copy of these rules: the
    channels and `nanobot pairing revoke`'s warning both ask here."""
    if "*" in allow_from:
        return True
    sid = str(sender_id)
    name = username.lstrip("@").lower() if username and by_username else ""
    # An all-digit entry is an id, never a username: a user who renames themselves to an allowed
    # id must not get in.
    return any(
        entry == sid or (name and not entry.isdigit() and entry.lstrip("@").lower() == name) for entry in allow_from
    )


@dataclass
class _Typing:
    task: asyncio.Task[None]
    stop: asyncio.Event


class Channel(Connection, ABC):
    """Base class of chat platform adapters. One instance per platform, owned by ChannelManager."""

    name: ClassVar[str] = "channel"
    typing_interval_s: ClassVar[float] = 4.0  # how often the platform needs the typing signal renewed

    def __init__(
        self,
        config: Any,
        bus: MessageBus,
        workspace: Path,
        *,
        channels: ChannelsConfig | None = None,
        providers: ProvidersConfig | None = None,
        pairing: PairingStore | None = None,
    ) -> None:
        self.config = config
        self.bus = bus
        self.workspace = Path(workspace)
        self.channels_config = channels or ChannelsConfig()
        self.providers = providers or ProvidersConfig()
        self.allow_from: list[str] = [str(a).strip() for a in getattr(config, "allow_from", [])]
        # Without a store (channels built outside a gateway) pairing cannot work: silence instead.
        self.pairing = pairing
        self.dm_policy: str = getattr(config, "dm_policy", "allowlist")
        self.state: ChannelState = "created"
        self.last_error: str | None = None
        self.typing_max_s = TYPING_MAX_S
        self._denied_logged: set[str] = set()
        self._pairing_error = ""  # the pairing store's last failure, logged once
        self._typing: dict[str, _Typing] = {}
        self._typing_tasks: set[asyncio.Task[None]] = set()  # including stopped ones still finishing

    # ------------------------------------------------------------------ lifecycle (platform)
    @abstractmethod
    async def start(self) -> None:
        """Connect and begin receiving. Returns promptly; failures show in `state`, never raise."""

    @abstractmethod
    async def stop(self) -> None:
        """Disconnect and release everything. Idempotent."""

    @abstractmethod
    async def _send_text(self, msg: OutboundMessage) -> None:
        """Deliver a text message (split and formatted for the platform)."""

    @abstractmethod
    async def _send_typing(self, chat_id: str) -> None:
        """Show the typing indicator once (the platform expires it after a few seconds)."""

    @abstractmethod
    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        """Seconds to wait before retrying after `exc`, or None when it must not be retried."""

    def worth_sending_later(self, exc: BaseException) -> bool:
        """Whether a send that failed with `exc` after its retries may succeed later (an outage:
        the manager sends it again before the chat's next message), not a refusal."""
        return self._retry_delay(exc, 0) is not None

    async def _send_stream_delta(self, msg: OutboundMessage) -> None:  # noqa: B027 (optional hook)
        """Show a partial reply. Channels without streaming ignore deltas."""

    async def _end_stream(self, msg: OutboundMessage) -> None:  # noqa: B027 (optional hook)
        """A streamed reply ended without a final message (stopped or failed): forget its state."""

    @property
    def streaming(self) -> bool:
        return bool(getattr(self.config, "streaming", False))

    # ------------------------------------------------------------------ outbound
    async def send(self, msg: OutboundMessage) -> None:
        """Deliver one outbound event of any kind (the manager has already filtered by config)."""
        if msg.kind == "stream_delta":
            if self.streaming:
                await self._send_stream_delta(msg)
            return
        if msg.kind == "typing":
            self.start_typing(msg.chat_id)
            return
        if msg.kind == "stream_end":
            await self._end_stream(msg)
            return
        if msg.kind == "message":
            await self.stop_typing(msg.chat_id)
        await self._send_text(msg)

    # ------------------------------------------------------------------ allow-list and inbound
    #: whether allowFrom entries may name a sender by username (Telegram), or by id only (Discord,
    #: whose names are not unique handles the owner can rely on)
    allows_by_username = True

    def is_allowed(self, sender_id: str, username: str | None = None) -> bool:
        """docs/contract.md, Access: ["*"] allows everyone, [] no one; entries match the id or the @username.
        Senders the owner approved with `nanobot pairing approve` count as listed."""
        if allow_list_admits(self.allow_from, sender_id, username, by_username=self.allows_by_username):
            return True
        return self.pairing is not None and self.pairing.is_approved(self.name, str(sender_id))

    def admits_now(self, sender_id: str, username: str | None = None, *, is_group: bool = False) -> bool:
        """Whether a message of this sender would be let in now, for work saved earlier (a turn
        answered again after a restart): listed, approved by pairing, or a private chat under an
        `open` dmPolicy. A sender removed from allowFrom meanwhile is not."""
        return self.is_allowed(sender_id, username) or (not is_group and self.dm_policy == "open")

    def _ready_to_start(self) -> bool:
        """What every token channel does first: keep the token out of logs, warn when nobody could
        write, and fail the channel (False) when the token is missing."""
        register_secret(self.config.token)
        self._warn_if_nobody_allowed()
        if not self.config.token:
            self._set_state("failed", f"channels.{self.name}.token is empty")
            return False
        return True

    def _warn_if_nobody_allowed(self) -> None:
        pairing = self.dm_policy == "pairing" and self.pairing is not None
        if not self.allow_from and not pairing and self.dm_policy != "open":
            logger.warning(
                "{}: allowFrom is empty, so NOBODY can talk to this bot. Add user ids to "
                'channels.{}.allowFrom (or ["*"] to allow everyone).',
                self.name,
                self.name,
            )
        elif not self.allow_from and pairing:
            logger.warning(
                "{}: allowFrom is empty: a new sender gets a pairing code in a private chat; admit them "
                "with `nanobot pairing approve CODE`",
                self.name,
            )

    async def _admit(
        self,
        sender_id: str,
        username: str | None = None,
        *,
        chat_id: str = "",
        is_group: bool = True,
        display_name: str = "",
    ) -> bool:
        """May this message go on to the agent? Unknown senders never reach it; in a private chat
        `dmPolicy` decides: `open` admits them, `pairing` sends them one pairing code (within the
        store's limits), `allowlist` stays silent. Groups never get a reply. Denials are logged once.
        `display_name` only labels a pairing request for the owner (it never grants access)."""
        if self.is_allowed(sender_id, username):
            return True
        if not is_group and self.dm_policy == "open":
            return True
        if not is_group and self.dm_policy == "pairing" and self.pairing is not None:
            await self._offer_pairing(str(sender_id), username or display_name, chat_id)
            return False
        if sender_id not in self._denied_logged:
            self._denied_logged.add(sender_id)
            logger.warning(
                "{}: ignoring messages from sender {} (username {!r}): not in allowFrom "
                "(logged once per sender)",
                self.name,
                sender_id,
                username,
            )
        return False

    async def _offer_pairing(self, sender_id: str, username: str, chat_id: str) -> None:
        """Send a pairing code to an unknown private-chat sender, at most once per code lifetime."""
        assert self.pairing is not None
        try:
            outcome, code = self.pairing.request(self.name, sender_id, username, chat_id)
        except (OSError, PairingError) as exc:  # a full disk or a damaged store: the sender gets nothing
            # said once while it lasts: every stranger's every message logged an ERROR line
            if str(exc) != self._pairing_error:
                self._pairing_error = str(exc)
                logger.error(
                    "{}: could not record a pairing request: {} (said once until it changes)", self.name, exc
                )
            return
        self._pairing_error = ""
        if outcome != "issued" or code is None:
            if sender_id not in self._denied_logged:
                self._denied_logged.add(sender_id)
                logger.warning(
                    "{}: unknown sender {} (username {!r}): no pairing code sent ({})",
                    self.name,
                    sender_id,
                    username,
                    outcome,
                )
            return
        logger.warning(
            "{}: unknown sender {} (username {!r}) got pairing code {}; approve with "
            "`nanobot pairing approve {}`",
            self.name,
            sender_id,
            username,
            code,
            code,
        )
        try:
            await self._send_text(
                OutboundMessage(channel=self.name, chat_id=chat_id, content=pairing_message(code))
            )
        except Exception as exc:  # the request stays pending; `nanobot pairing list` shows it
            logger.warning("{}: could not send the pairing code to {}: {}", self.name, chat_id, exc)

    async def _publish(self, msg: InboundMessage, username: str | None = None) -> bool:
        """Publish an inbound message if its sender is allowed; start typing. False when denied."""
        if not await self._admit(msg.sender_id, username, chat_id=msg.chat_id, is_group=msg.is_group):
            return False
        await self.bus.publish_inbound(msg)
        self.start_typing(msg.chat_id)
        return True

    # ------------------------------------------------------------------ typing indicator
    def start_typing(self, chat_id: str) -> None:
        """Keep the typing indicator on in `chat_id` until `stop_typing` or `typing_max_s`."""
        current = self._typing.get(chat_id)
        if current is not None and not current.task.done():
            return
        stop = asyncio.Event()
        typing = _Typing(asyncio.create_task(self._typing_loop(chat_id, stop)), stop)
        self._typing[chat_id] = typing
        self._typing_tasks.add(typing.task)
        typing.task.add_done_callback(self._typing_tasks.discard)

    async def stop_typing(self, chat_id: str) -> None:
        """End the indicator's loop. A typing request in flight is left to finish, not cancelled:
        cancelling it would drop its HTTP connection, and the reply would pay for a new one."""
        typing = self._typing.pop(chat_id, None)
        if typing is not None:
            typing.stop.set()

    async def _stop_all_typing(self) -> None:
        """Stop every indicator and wait (briefly) for in-flight requests before the client closes."""
        for chat_id in list(self._typing):
            await self.stop_typing(chat_id)
        await finish_or_cancel(self._typing_tasks, TYPING_DRAIN_TIMEOUT_S, unwind_s=None)

    async def _typing_loop(self, chat_id: str, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + self.typing_max_s
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    await self._send_typing(chat_id)
                except Exception as exc:  # typing is cosmetic: never let it disturb a turn
                    logger.debug("{}: typing indicator failed in {}: {}", self.name, chat_id, exc)
                # Only this wait is interrupted by stop_typing, never the request above.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.typing_interval_s)
        finally:
            entry = self._typing.get(chat_id)
            if entry is not None and entry.stop is stop:  # not a newer loop for the same chat
                del self._typing[chat_id]

    # ------------------------------------------------------------------ state
    def _set_state(self, state: ChannelState, error: str | None = None) -> None:
        error = None if error is None else one_line(error)  # a server's text: shown as one status line
        if state == self.state and error == self.last_error:
            return
        self.state = state
        if error is not None or state in ("running", "stopped"):
            self.last_error = error
        if state == "failed":
            logger.error("{}: channel failed: {}", self.name, error)
        elif state == "retrying":
            logger.warning("{}: connection problem, retrying: {}", self.name, error)
        else:
            logger.info("{}: {}", self.name, state)

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "error": self.last_error}

    @property
    def stopping(self) -> bool:
        """stop() has begun (a download it cuts short is no failure of the file)."""
        return False

    def media_dir(self) -> Path:
        return ensure_private_dir(self.workspace / MEDIA_DIR)

    async def _download_media(
        self,
        chat_id: str | int,
        message_id: str | int,
        items: list[MediaItem],
        fetch: Fetch,
        errors: tuple[type[BaseException], ...],
    ) -> Received:
        """Download a message's attachments into media/ (0600); too large or failed ones become notes,
        voice and audio get their transcript (or a note why not)."""
        got = Received()
        for item in items:
            shown = quoted(item.filename)  # in a note of the message text: a name cannot write a label
            if item.size > media_util.MAX_MEDIA_BYTES:
                got.notes.append(f"[file {shown}: {item.size} bytes, too large to download]")
                continue
            name = media_util.safe_filename(self.name, chat_id, message_id, item.filename, item.mime)
            try:
                # a new file, never over an earlier one, never through a link planted in media/
                path, out = media_util.create_free(self.workspace, self.media_dir(), name)
            except OSError as exc:
                logger.warning("{}: could not store {}: {}", self.name, item.filename, exc)
                got.notes.append(f"[file {shown}: download failed]")
                continue
            try:
                with out:
                    await fetch(item, media_util.CappedWriter(out, media_util.MAX_MEDIA_BYTES))  # type: ignore[arg-type]
            except media_util.TooLarge:
                path.unlink(missing_ok=True)
                limit = media_util.MAX_MEDIA_BYTES
                got.notes.append(f"[file {shown}: more than {limit} bytes, too large to download]")
                continue
            except errors as exc:
                # a download cut short (full disk, dropped connection) must not stay behind as a file
                path.unlink(missing_ok=True)
                logger.warning("{}: could not download {}: {}", self.name, item.filename, exc)
                # cut by a stop (Discord serves nothing again): the next start's answer asks for it
                why = "not downloaded, nanobot was stopping: send it again" if self.stopping else "download failed"
                got.notes.append(f"[file {shown}: {why}]")
                continue
            kind = media_util.media_type(item.mime, item.filename, voice=item.voice)
            got.paths.append(str(path))
            got.types.append(kind)
            if kind in ("voice", "audio"):
                rel = path.relative_to(self.workspace).as_posix()
                cfg = self.channels_config.transcription
                got.notes.append(await media_util.voice_note_text(path, rel, cfg, self.providers))
        return got

    def _inbound(
        self,
        sender_id: str,
        chat_id: str,
        text: str,
        got: Received,
        *,
        is_group: bool,
        metadata: dict[str, Any],
    ) -> InboundMessage:
        """The message for the bus: the text followed by the media notes, media paths and types."""
        return InboundMessage(
            channel=self.name,
            sender_id=sender_id,
            chat_id=chat_id,
            content="\n".join(part for part in [text, *got.notes] if part),
            media=got.paths,
            is_group=is_group,
            guest=not is_group and not self.is_allowed(sender_id, metadata.get("username")),
            metadata={**metadata, "media_types": got.types},
        )

