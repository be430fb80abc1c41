"""MessageContext: what a message is and who it is for, decided once when the AgentLoop takes it.

Everything downstream reads this one object instead of re-deriving it from the raw message: the
command dispatcher (`command`), the reply (`reply_channel`/`reply_chat_id`: a sub-agent's result,
which arrives on the internal `system` channel, answers in the chat that spawned it), the tools
(`tool_context()`), the system prompt and the memory lifecycle (`memory_private`: whether the
owner's long-term memory may be shown and written from this chat).

Private chats of allowed senders and the terminal are owner contexts; group chats are shared
contexts, where the owner's memory stays out unless `memory.shareInGroups` is true; a stranger let
in by `dmPolicy: "open"` (a guest) is a shared context whose memory always stays out.
"""

from __future__ import annotations

from dataclasses import dataclass

from nanobot.agent.tools.base import ToolContext
from nanobot.bus.commands import parse_command
from nanobot.bus.events import SYSTEM_CHANNEL, InboundMessage, OutboundMessage
from nanobot.memory.seam import memory_private

#: metadata of a sub-agent's report: how many sub-agents deep it comes from
SPAWN_DEPTH_KEY = "spawn_depth"


@dataclass(frozen=True)
class MessageContext:
    channel: str  # the channel the message arrived on ("system" for a sub-agent result)
    chat_id: str
    sender_id: str
    session_key: str
    is_group: bool
    guest: bool  # see InboundMessage.guest
    spawn_depth: int  # 0, or how many sub-agents deep the report this message carries comes from
    memory_private: bool
    reply_channel: str  # where replies, progress and the tools' "this chat" go
    reply_chat_id: str
    command: str | None  # a slash command's name, None for a turn

    @classmethod
    def of(cls, msg: InboundMessage, *, share_memory_in_groups: bool) -> MessageContext:
        reply_channel, reply_chat_id = msg.channel, msg.chat_id
        if msg.channel == SYSTEM_CHANNEL:
            reply_channel = msg.metadata.get("origin_channel", "cli")
            reply_chat_id = msg.metadata.get("origin_chat_id", msg.chat_id)
        return cls(
            channel=msg.channel,
            chat_id=msg.chat_id,
            sender_id=msg.sender_id,
            session_key=msg.session_key,
            is_group=msg.is_group,
            guest=msg.guest,
            # a report, also one answered again after a restart on its chat's channel
            spawn_depth=int(msg.metadata.get(SPAWN_DEPTH_KEY, 1 if msg.channel == SYSTEM_CHANNEL else 0)),
            memory_private=memory_private(msg.is_group, share_memory_in_groups, msg.guest),
            reply_channel=reply_channel,
            reply_chat_id=reply_chat_id,
            # a sub-agent's report is never a command, whatever its text looks like
            command=None if msg.channel == SYSTEM_CHANNEL else parse_command(msg.content),
        )

    @property
    def shared(self) -> bool:
        """A group or a guest: no owner trust."""
        return self.is_group or self.guest

    @property
    def from_system(self) -> bool:
        return self.channel == SYSTEM_CHANNEL

    def tool_context(self) -> ToolContext:
        return ToolContext(
            channel=self.reply_channel,
            chat_id=self.reply_chat_id,
            session_key=self.session_key,
            sender_id=self.sender_id,
            is_group=self.is_group,
            guest=self.guest,
            spawn_depth=self.spawn_depth,
        )

    def reply(self, content: str, **fields: object) -> OutboundMessage:
        """An outbound message to this message's chat."""
        return OutboundMessage(
            channel=self.reply_channel,
            chat_id=self.reply_chat_id,
            content=content,
            **fields,  # type: ignore[arg-type]
        )
