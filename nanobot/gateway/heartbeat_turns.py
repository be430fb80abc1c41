"""The heartbeat's side of the gateway: where it reports, how its tasks run, when it last ran.

- `target()`: gateway.heartbeat.target, or the owner's last private chat; None on a channel that is
  not running (the tasks would cost a model call every beat for a reply nobody can be sent).
- `run(prompt, target)`: the tasks as one inbound message in the heartbeat's session, through the
  agent loop like any chat message, with the trust of the target chat (as a cron job's).
- `last_beat()`: when the tasks last ran, read from that session, so a gateway restarted more
  often than `intervalS` still runs them, and one restarted just after a beat does not run it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from loguru import logger

from nanobot.agent.cron_turn import chat_trust, job_chat
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.scheduler.cron_store import DeliverTo
from nanobot.scheduler.heartbeat import HEARTBEAT_SESSION_KEY, resolve_heartbeat_target
from nanobot.timeutil import parse_iso_or_none

if TYPE_CHECKING:
    from nanobot.agent.agent import Agent
    from nanobot.channels.manager import ChannelManager

#: channels no private chat of a person is on: never a heartbeat target by default
INTERNAL_CHANNELS = ("cli", "cron", "heartbeat", "system")


class HeartbeatTurns:
    def __init__(
        self, configured_target: str, agent: Agent, bus: MessageBus, channels: Callable[[], ChannelManager]
    ) -> None:
        self.configured_target = configured_target
        self.agent = agent
        self.bus = bus
        self._channels = channels  # the gateway's, looked up when used
        self._unreachable: tuple[str, str] | None = None  # said once per target, not every beat

    def target(self) -> tuple[str, str] | None:
        """Where the heartbeat reports: gateway.heartbeat.target, or the owner's last private chat
        (a user still on allowFrom, or paired); None on a channel that is not running."""
        channels = self._channels()
        target = resolve_heartbeat_target(
            self.configured_target,
            lambda: self.agent.sessions.last_private_chat(INTERNAL_CHANNELS, channels.lists),
        )
        if target is not None and target[0] not in channels.channels:
            if self._unreachable != target:
                self._unreachable = target
                logger.error(
                    "heartbeat: gateway.heartbeat.target {}:{} is on channel {!r}, which is not running "
                    "(running: {}); the heartbeat's tasks are not done",
                    *target,
                    target[0],
                    ", ".join(channels.channels) or "none",
                )
            return None
        return target

    async def run(self, prompt: str, target: tuple[str, str]) -> str | None:
        """The heartbeat's prompt (its instructions and HEARTBEAT.md) in the heartbeat's own
        session, answering in the target chat: a sub-agent it starts reports there, and so does the
        `message` tool. A group (or a guest's chat) as target gets a group's tools and no MEMORY.md;
        its session starts afresh when that trust differs from the one it recorded (a private
        beat's replies quoted MEMORY.md, which a group's turn must not read in its history)."""
        channel, chat_id = target
        chat = job_chat(self.agent.sessions, DeliverTo(channel, chat_id))
        shared, guest = chat_trust(chat, channel, self._channels().lists)
        out = await self.bus.request(
            InboundMessage(
                channel=channel,
                sender_id="user",
                chat_id=chat_id,
                content=prompt,
                session_key_override=HEARTBEAT_SESSION_KEY,
                is_group=shared,
                guest=guest,
            )
        )
        if out is not None and out.metadata.get("failed"):
            # The user did not ask for this beat: a failure notice every interval while the
            # provider is down would only be noise. The next beat tries again.
            logger.warning("heartbeat: the tasks could not be done: {}", out.content)
            return None
        return out.content if out is not None else None

    def last_beat(self) -> float | None:
        """The Unix time the tasks last ran (the newest beat's prompt in the heartbeat's session;
        a sub-agent's report there is not a beat), None when never."""
        for message in reversed(self.agent.sessions.get(HEARTBEAT_SESSION_KEY).messages):
            if message.get("role") == "user" and message.get("name") != "system":
                moment = parse_iso_or_none(message.get("timestamp"))
                return moment.timestamp() if moment is not None else None
        return None
