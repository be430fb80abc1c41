"""Messages and control events carried by the bus between channels and the agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nanobot.util.text import valid_unicode

#: the internal channel on which sub-agent results come back into their session
SYSTEM_CHANNEL = "system"
TERMINAL_CHANNEL = "cli"  # `nanobot agent`: the owner at their terminal

RESUME_KEY = "resume"  # InboundMessage.metadata flag: the user message is already in the session
DELIVERY_KEY = "delivery"  # OutboundMessage.metadata: {"session": key, "through": message count, "first"}
#: the reply sent when the model gave none (the heartbeat takes it for "nothing to report")
NO_ANSWER_REPLY = "(The model gave no answer. Please try again or rephrase.)"

OutboundKind = Literal["message", "progress", "tool_hint", "typing", "stream_delta", "stream_end"]


@dataclass
class InboundMessage:
    """A message from a user, arriving on some channel."""

    channel: str  # "telegram", "discord", "cli", "system"
    sender_id: str
    chat_id: str
    content: str
    media: list[str] = field(default_factory=list)  # local file paths inside the workspace
    metadata: dict[str, Any] = field(default_factory=dict)
    is_group: bool = False
    #: a private-chat sender on neither allowFrom nor the pairing list, let in by dmPolicy "open":
    #: a shared context like a group (no owner memory, the group's tools), never the owner's
    guest: bool = False
    session_key_override: str | None = None
    saved: bool = field(default=False, compare=False)  #: in its session file (set by the agent)
    #: called once the message is safely on disk (or fully handled): a channel may then confirm it
    #: to its platform (e.g. advance Telegram's update offset), so a crash never drops it unseen
    on_persisted: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    #: set by an in-process publisher that delivers the reply itself (the terminal prints it, cron
    #: records and delivers it, the heartbeat drops HEARTBEAT_OK): the agent loop resolves it with
    #: the reply (None when there is none, e.g. a turn cancelled by /stop) instead of publishing it
    reply_future: asyncio.Future[OutboundMessage | None] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # undecodable input bytes (a terminal in another encoding) must not fail the turn later
        if isinstance(self.content, str):
            self.content = valid_unicode(self.content)
        # ...nor in the ids (a terminal's -s session key): they reach the prompt's runtime block
        if isinstance(self.chat_id, str):
            self.chat_id = valid_unicode(self.chat_id)
        if isinstance(self.sender_id, str):
            self.sender_id = valid_unicode(self.sender_id)
        if isinstance(self.session_key_override, str):
            self.session_key_override = valid_unicode(self.session_key_override)

    def ack(self) -> None:
        """Confirm the message to its channel (once; later calls do nothing)."""
        callback, self.on_persisted = self.on_persisted, None
        if callback is not None:
            callback()

    @property
    def session_key(self) -> str:
        return self.session_key_override or f"{self.channel}:{self.chat_id}"

    def resolve(self, reply: OutboundMessage | None) -> bool:
        """Hand `reply` to the waiting publisher; False when nobody waits (publish it instead)."""
        future = self.reply_future
        if future is None:
            return False
        if not future.done():
            future.set_result(reply)
        return True


class ChannelUnavailable(Exception):
    """A message could not be handed to its channel: not enabled, not running, or failed."""


@dataclass(frozen=True)
class OutboundFile:
    """An attachment as the sender read it: the bytes travel, not a path the channel would open
    again later (a link swapped in meanwhile sent a group the owner's MEMORY.md)."""

    name: str
    data: bytes = field(repr=False)


@dataclass
class OutboundMessage:
    """Something for a channel to show: a reply, a progress note, a typing signal or a stream delta.

    `kind` lets channels drop what their config does not want (progress, tool hints).
    """

    channel: str
    chat_id: str
    content: str = ""
    kind: OutboundKind = "message"
    reply_to: str | None = None
    files: list[OutboundFile] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: set by a publisher that must know whether the message reached its chat (a cron job records
    #: a refused delivery as a failure): the channel manager resolves it once sent, or fails it with
    #: the error (the channel is not running, failed, or the platform refused the message)
    sent: asyncio.Future[None] | None = field(default=None, repr=False, compare=False)

    def settle(self, error: BaseException | None = None) -> None:
        """Tell a waiting publisher the outcome of this message's delivery (once)."""
        future = self.sent
        if future is None or future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
