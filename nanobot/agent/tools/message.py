"""The `message` tool: send a message to a chat (the current one by default)."""

from __future__ import annotations

from typing import Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.bus.events import OutboundMessage
from nanobot.bus.queue import MessageBus


class MessageTool(Tool):
    name = "message"
    description = (
        "Send a message to the user now (e.g. a progress update or a file), or to another chat by "
        "channel and chat_id. Your final answer is delivered anyway; do not repeat it here."
    )
    parameters = {
        "type": "object",
        "properties": {
            "content": {"type": "string"},
            "channel": {"type": "string", "description": "telegram, discord, cli (default: this chat's)"},
            "chat_id": {"type": "string", "description": "target chat (default: this chat)"},
            "media": {"type": "array", "items": {"type": "string"}, "description": "file paths to attach"},
        },
        "required": ["content"],
    }

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self.sent_in_turn: dict[str, int] = {}

    async def execute(
        self,
        ctx: ToolContext,
        content: str,
        channel: str | None = None,
        chat_id: str | None = None,
        media: list[str] | None = None,
        **_: Any,
    ) -> str:
        if not content.strip() and not media:
            raise ToolError("content is empty")
        target_channel = channel or ctx.channel
        target_chat = chat_id or ctx.chat_id
        await self.bus.publish_outbound(
            OutboundMessage(
                channel=target_channel, chat_id=target_chat, content=content, media=list(media or [])
            )
        )
        self.sent_in_turn[ctx.session_key] = self.sent_in_turn.get(ctx.session_key, 0) + 1
        return f"Message sent to {target_channel}:{target_chat}"
