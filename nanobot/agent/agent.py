"""Agent: handles one inbound message — a slash command or a turn — for one session.

The AgentLoop guarantees that calls for the same session never overlap; different sessions run
concurrently. A turn: persist the user message, build the prompt (stable system prompt + history +
runtime block), make room through the memory lifecycle, run the TurnRunner (persisting each
iteration as it finishes), then schedule background memory work.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from nanobot.agent.commands import HELP_TEXT, parse_command
from nanobot.agent.context import ContextBuilder
from nanobot.agent.runner import TurnRunner
from nanobot.agent.subagents import SubagentManager
from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.schema import Config
from nanobot.memory.lifecycle import MemoryLifecycle
from nanobot.memory.seam import FileMemory, LongTermMemory, TurnRecord
from nanobot.memory.store import MemoryStore
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.providers.tokens import count_message
from nanobot.session.history import build_history, history_indices, history_tokens
from nanobot.session.store import Session, SessionStore
from nanobot.timeutil import now as tz_now
from nanobot.util.text import truncate_middle

NEW_SESSION_REPLY = "New session started."


@dataclass
class AgentSettings:
    model: str | None = None
    max_user_message_chars: int = 32_000
    max_tool_result_chars: int = 16_000
    stream: bool = False
    tool_names: set[str] | None = None  # None: all registered tools


@dataclass
class AgentStats:
    started_at: float = field(default_factory=time.time)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_prompt_tokens: int = 0


class Agent:
    def __init__(
        self,
        *,
        provider: LLMProvider,
        bus: MessageBus,
        sessions: SessionStore,
        tools: ToolRegistry,
        context: ContextBuilder,
        runner: TurnRunner,
        lifecycle: MemoryLifecycle,
        long_term: LongTermMemory | None = None,
        settings: AgentSettings | None = None,
        status_extra: Callable[[], list[str]] | None = None,
        memory: MemoryStore | None = None,
        config: Config | None = None,
    ) -> None:
        self.memory = memory
        self.config = config
        self.provider = provider
        self.bus = bus
        self.sessions = sessions
        self.tools = tools
        self.context = context
        self.runner = runner
        self.lifecycle = lifecycle
        self.long_term = long_term or FileMemory()
        self.settings = settings or AgentSettings()
        sessions.count_caps.update(
            user=self.settings.max_user_message_chars, tool=self.settings.max_tool_result_chars
        )
        self.stats = AgentStats()
        self.status_extra = status_extra
        self.on_close: list[Callable[[], Any]] = []
        self.subagents: SubagentManager | None = None
        self.last_turn_failed = False
        self.cron: Any = None  # the CronService behind the cron tool (started by the gateway)
        self.mcp: Any = None  # the MCPManager when MCP servers are configured
        self.on_first_turn: list[Callable[[], Any]] = []  # async set-up run once, lazily
        self._ready = False
        lifecycle.estimator = self.estimate_base_tokens

    # ------------------------------------------------------------------ entry points
    async def handle(self, msg: InboundMessage) -> OutboundMessage | None:
        """Process one message (a command or a turn) and return the reply for its chat."""
        try:
            return await self._handle(msg)
        finally:
            msg.ack()  # commands, failures: handled either way (a no-op once persisted)

    async def _handle(self, msg: InboundMessage) -> OutboundMessage | None:
        channel, chat_id = msg.channel, msg.chat_id
        if msg.channel == "system":  # a sub-agent result routed back into its session
            channel = msg.metadata.get("origin_channel", "cli")
            chat_id = msg.metadata.get("origin_chat_id", msg.chat_id)
        command = parse_command(msg.content)
        if command == "new":
            return OutboundMessage(
                channel=channel, chat_id=chat_id, content=await self.new_session(msg.session_key)
            )
        if command == "help":
            return OutboundMessage(channel=channel, chat_id=chat_id, content=HELP_TEXT)
        if command == "status":
            return OutboundMessage(
                channel=channel, chat_id=chat_id, content=self.status_text(msg.session_key)
            )
        if command == "stop":
            return OutboundMessage(channel=channel, chat_id=chat_id, content="Nothing is running.")
        reply = await self.run_turn(msg, channel, chat_id)
        if not reply:  # nothing to say (the `message` tool already answered)
            return None
        return OutboundMessage(
            channel=channel,
            chat_id=chat_id,
            content=reply,
            metadata={"stream_id": msg.metadata.get("stream_id")} if self.settings.stream else {},
        )

    async def process_direct(
        self,
        text: str,
        session_key: str = "cli:direct",
        channel: str = "cli",
        chat_id: str = "direct",
        sender_id: str = "user",
    ) -> str:
        """One message from code (CLI, cron, heartbeat): returns the reply text."""
        msg = InboundMessage(
            channel=channel,
            sender_id=sender_id,
            chat_id=chat_id,
            content=text,
            session_key_override=session_key,
        )
        out = await self.handle(msg)
        return out.content if out else ""

    # ------------------------------------------------------------------ commands
    async def new_session(self, session_key: str) -> str:
        """/new: archive the transcript (kept on disk) and start afresh; memory work runs later."""
        session = self.sessions.get(session_key)
        await self.lifecycle.start_new_session(session)
        await self.long_term.on_new_session(session_key)
        return NEW_SESSION_REPLY

    def status_text(self, session_key: str) -> str:
        session = self.sessions.get(session_key)
        uptime = int(time.time() - self.stats.started_at)
        lines = [
            f"Model: {self.settings.model or self.provider.default_model} ({self.provider.name})",
            f"Session: {session_key} — {len(session.messages)} messages, "
            f"{len(session.messages) - session.last_consolidated} not yet consolidated",
            f"Context: ~{self.stats.last_prompt_tokens} of {self.lifecycle.budget_tokens} prompt tokens",
            f"Tokens used since start: {self.stats.prompt_tokens} in / {self.stats.completion_tokens} out "
            f"over {self.stats.turns} turns",
            f"Tools: {len(self.tools)}{self._mcp_status()}; memory: {self.long_term.name}; "
            f"background memory tasks: {self.lifecycle.pending()}",
            f"Uptime: {uptime // 3600}h {uptime % 3600 // 60}m",
        ]
        if self.status_extra is not None:
            lines.extend(self.status_extra())
        return "\n".join(lines)

    # ------------------------------------------------------------------ turns
    def estimate_base_tokens(self, session: Session, is_group: bool) -> int:
        """System prompt + tool schemas + the session's history, as the next turn would send them."""
        system = self.context.system_prompt(is_group)
        return self._history_tokens(session, system, self._tool_tokens())

    def _tool_tokens(self) -> int:
        return self.tools.schema_tokens(self._tool_names())

    @staticmethod
    def _history_tokens(session: Session, system: str, tool_tokens: int) -> int:
        # count_message memoises the (long, stable) system prompt; the history sum is memoised too
        return count_message({"role": "system", "content": system}) + tool_tokens + history_tokens(session)

    def _prompt_messages(
        self, session: Session, system: str, user_msg: dict[str, Any], tool_tokens: int
    ) -> tuple[list[dict[str, Any]], int]:
        indices = history_indices(session)
        history = build_history(
            session, indices, self.settings.max_user_message_chars, self.settings.max_tool_result_chars
        )
        tokens = self._history_tokens(session, system, tool_tokens) + count_message(user_msg)
        return [{"role": "system", "content": system}, *history, user_msg], tokens

    async def _ensure_ready(self) -> None:
        """Lazy set-up (e.g. MCP servers connect on first need); failures are logged, never fatal."""
        if self._ready:
            return
        self._ready = True
        for hook in self.on_first_turn:
            try:
                outcome = hook()
                if asyncio.iscoroutine(outcome):
                    await outcome
            except Exception as exc:  # noqa: BLE001
                logger.warning("set-up step failed: {}", exc)

    async def run_turn(self, msg: InboundMessage, channel: str, chat_id: str) -> str | None:
        await self._ensure_ready()
        session = self.sessions.get(msg.session_key)
        tz = self.context.tz
        user_text = msg.content
        memory_context = ""
        try:
            memory_context = await self.long_term.context_for(
                user_text, msg.session_key, msg.sender_id, msg.is_group
            )
        except Exception as exc:  # noqa: BLE001 - a failing memory backend never fails a turn
            logger.warning("memory backend {} failed to give context: {}", self.long_term.name, exc)
        runtime = self.context.runtime_block(channel, chat_id, msg.sender_id, msg.is_group, memory_context)
        llm_text = truncate_middle(user_text, self.settings.max_user_message_chars)
        user_msg = self.context.user_message(
            llm_text, runtime, msg.media, vision=bool(msg.media) and self._vision()
        )
        stored: dict[str, Any] = {"role": "user", "content": user_text, "timestamp": tz_now(tz).isoformat()}
        if msg.media:
            stored["media"] = list(msg.media)
        if msg.channel == "system":
            stored["name"] = "system"
        system = self.context.system_prompt(msg.is_group)
        tool_names = self._tool_names()
        tool_tokens = self._tool_tokens()
        user_tokens = count_message(user_msg)

        def estimate() -> int:  # tokens only: the history itself is built once, below
            return self._history_tokens(session, system, tool_tokens) + user_tokens

        await self.lifecycle.ensure_fits(session, estimate, is_group=msg.is_group)
        messages, prompt_tokens = self._prompt_messages(session, system, user_msg, tool_tokens)
        if not session.messages and "is_group" not in session.metadata:
            self.sessions.set_metadata(session, is_group=msg.is_group)
        self.sessions.append(session, stored)
        msg.ack()  # on disk: the channel may confirm it to the platform now
        ctx = ToolContext(
            channel=channel,
            chat_id=chat_id,
            session_key=msg.session_key,
            sender_id=msg.sender_id,
            is_group=msg.is_group,
        )

        def persist(new: list[dict[str, Any]]) -> None:
            stamp = tz_now(tz).isoformat()
            self.sessions.append(session, *({**m, "timestamp": stamp} for m in new))

        async def progress(kind: str, text: str) -> None:
            await self.bus.publish_outbound(
                OutboundMessage(channel=channel, chat_id=chat_id, content=text, kind=kind)
            )  # type: ignore[arg-type]

        on_delta = None
        if self.settings.stream:
            stream_id = f"{msg.session_key}:{time.monotonic_ns()}"
            msg.metadata["stream_id"] = stream_id

            async def on_delta(delta: str) -> None:
                await self.bus.publish_outbound(
                    OutboundMessage(
                        channel=channel,
                        chat_id=chat_id,
                        content=delta,
                        kind="stream_delta",
                        metadata={"stream_id": stream_id},
                    )
                )

        self.stats.last_prompt_tokens = prompt_tokens
        self.last_turn_failed = False
        try:
            result = await self.runner.run(
                messages,
                ctx,
                tool_names=tool_names,
                on_messages=persist,
                on_progress=progress,
                on_delta=on_delta,
            )
        except LLMError as exc:
            self.last_turn_failed = True
            reply = f"Sorry, I could not get an answer from the model: {exc}"
            self.sessions.append(
                session, {"role": "assistant", "content": reply, "timestamp": tz_now(tz).isoformat()}
            )
            self.lifecycle.after_turn(session, is_group=msg.is_group)
            return reply
        self.stats.turns += 1
        self.stats.prompt_tokens += result.usage.prompt_tokens
        self.stats.completion_tokens += result.usage.completion_tokens
        logger.info(
            "turn {}: {} iteration(s), {} prompt + {} completion tokens, tools {}",
            msg.session_key,
            result.iterations,
            result.usage.prompt_tokens,
            result.usage.completion_tokens,
            result.tools_used or "none",
        )
        self.lifecycle.after_turn(session, is_group=msg.is_group)
        self._record_long_term(msg, user_text, result.content)
        return result.content

    def _record_long_term(self, msg: InboundMessage, user_text: str, reply: str) -> None:
        if isinstance(self.long_term, FileMemory):
            return
        record = TurnRecord(
            session_key=msg.session_key,
            sender_id=msg.sender_id,
            user_text=user_text,
            reply=reply,
            is_group=msg.is_group,
            timestamp=tz_now(self.context.tz).isoformat(),
        )
        self.lifecycle.track(self.long_term.record_turn(record), f"record:{msg.session_key}")

    def _tool_names(self) -> set[str] | None:
        return self.settings.tool_names

    def _vision(self) -> bool:
        if self.provider.is_small_local:
            return False
        return self.provider.supports_vision(self.settings.model or self.provider.default_model)

    def _mcp_status(self) -> str:
        if self.mcp is None:
            return ""
        servers = self.mcp.status()
        ready = sum(1 for s in servers if s.get("state") == "ready")
        tools = sum(len(s.get("tools") or []) for s in servers)
        return f" (MCP: {ready}/{len(servers)} servers ready, {tools} tools)"

    def cancel_subagents(self, session_key: str) -> int:
        return self.subagents.cancel_for(session_key) if self.subagents else 0

    # ------------------------------------------------------------------ shutdown
    async def drain(self, timeout_s: float) -> bool:
        """Wait for background memory work; True when everything finished in time."""
        return await self.lifecycle.drain(timeout_s)

    async def aclose(self, drain_timeout_s: float = 3.0) -> None:
        if self.subagents is not None:
            await self.subagents.drain(drain_timeout_s)
        await self.drain(drain_timeout_s)
        for closer in self.on_close:
            try:
                outcome = closer()
                if asyncio.iscoroutine(outcome):
                    await asyncio.wait_for(outcome, timeout=5)
            except Exception as exc:  # noqa: BLE001
                logger.warning("error while closing: {}", exc)
        try:
            await self.long_term.aclose()
        except Exception as exc:  # noqa: BLE001
            logger.warning("closing memory backend failed: {}", exc)
        self.sessions.close()
