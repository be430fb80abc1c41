"""Messages and control events carried by the bus between channels and the agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

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
    session_key_override: str | None = None
    received_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def session_key(self) -> str:
        return self.session_key_override or f"{self.channel}:{self.chat_id}"


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
    media: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
