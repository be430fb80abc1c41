"""AgentRuntime: the assembled agent and the handles its hosts (gateway, terminal, `cron run`) use.

`build_runtime` (factory.py) returns one complete. `ask` sends one message through the bus and the
loop and returns the reply text; `background_work` and `settle` tell a one-shot host when the
sub-agents and their reports are done; `aclose` stops the loop (turns still running get a grace
period, then are cancelled safely), drains background memory work and runs the `closers` (the
memory index, MCP sessions) in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.agent.agent import Agent
from nanobot.agent.loop import AgentLoop
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.schema import Config
from nanobot.memory.store import MemoryStore
from nanobot.scheduler.cron import CronService

if TYPE_CHECKING:
    from nanobot.agent.tools.mcp import MCPManager

DEFAULT_SESSION_KEY = "cli:direct"
CLOSE_TIMEOUT_S = 5.0
CLOSE_GRACE_S = 3.0  # turns still running at close (e.g. the terminal interrupted by Ctrl-C)
SETTLE_POLL_S = 0.05


@dataclass
class AgentRuntime:
    """The assembled agent and the handles its hosts (gateway, terminal, `cron run`) use."""

    config: Config
    bus: MessageBus
    agent: Agent
    loop: AgentLoop  # the one way into a turn
    cron: CronService  # started and stopped by the gateway
    memory: MemoryStore
    mcp: MCPManager | None = None
    #: closed after the agent (the memory index, MCP sessions); sync or async callables
    closers: list[Callable[[], Any]] = field(default_factory=list)

    async def ask(
        self,
        text: str,
        *,
        session_key: str = DEFAULT_SESSION_KEY,
        channel: str | None = None,
        chat_id: str | None = None,
        sender_id: str = "user",
    ) -> str:
        """One message through the bus and the loop (started if need be); the reply text, "" if none.

        Channel and chat default to the session key's two parts."""
        key_channel, _, key_chat = session_key.partition(":")
        self.loop.start()
        out = await self.bus.request(
            InboundMessage(
                channel=channel or key_channel or "cli",
                sender_id=sender_id,
                chat_id=chat_id or key_chat or "direct",
                content=text,
                session_key_override=session_key,
            )
        )
        return out.content if out is not None else ""

    def background_work(self) -> int:
        """Sub-agents running, plus messages taken or waiting and not yet answered (their reports)."""
        running = self.agent.subagents.running() if self.agent.subagents is not None else 0
        return running + len(self.loop.in_flight()) + self.bus.waiting()

    async def settle(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until the sub-agents have finished and their reports are
        answered; True when nothing is left. For one-shot use: the terminal's `agent -m`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.background_work():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(SETTLE_POLL_S)
        return True

    async def aclose(
        self,
        drain_timeout_s: float = 3.0,
        grace_s: float = CLOSE_GRACE_S,
        subagents_timeout_s: float | None = None,
    ) -> None:
        """Stop the loop (turns still running get `grace_s`, then are cancelled safely), finish
        background memory work within `drain_timeout_s` (sub-agents within `subagents_timeout_s`,
        default the same), close everything the runtime opened."""
        await self.loop.stop_accepting()
        await self.loop.finish(grace_s)
        await self.agent.aclose(drain_timeout_s, subagents_timeout_s)
        for closer in self.closers:
            try:
                outcome = closer()
                if asyncio.iscoroutine(outcome):
                    await asyncio.wait_for(outcome, timeout=CLOSE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001
                logger.warning("error while closing: {}", exc)
