"""Agent: runs one turn, or `/new`, for one session, and says its `/status` (status.py); built complete by the factory.

The AgentLoop is its only caller: it decides each message's context once (`context_of`),
dispatches slash commands, and guarantees that calls for the same session never overlap while
different sessions run concurrently. A turn: persist the user message, build the prompt (stable
system prompt + history + runtime block), make room through the memory lifecycle, run the
TurnRunner (persisting each iteration as it finishes), then schedule background memory work.
What a session keeps beside the turn's messages (the chat's identity, platform messages served
again, messages kept without a turn, what `/new` carries over) is its `records` (session_records.py).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.agent.context import ContextBuilder
from nanobot.agent.message_context import MessageContext
from nanobot.agent.prompt_fit import (
    fit_history,
    fit_user_text,
    run_within_window,
)
from nanobot.agent.prompt_tokens import PromptEstimator
from nanobot.agent.runner import TurnResult, TurnRunner
from nanobot.agent.session_records import STREAMED_KEY, SessionRecords
from nanobot.agent.status import status_report
from nanobot.agent.subagents import SubagentManager
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.bus.events import DELIVERY_KEY, RESUME_KEY, InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.memory.lifecycle import MemoryLifecycle
from nanobot.memory.seam import FileMemory, LongTermMemory, TurnRecord
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.providers.tokens import count_message
from nanobot.scheduler.heartbeat import HEARTBEAT_SESSION_KEY, is_heartbeat_ok
from nanobot.session.history import build_history, history_indices
from nanobot.session.session import delivery_of
from nanobot.session.store import Session, SessionStore
from nanobot.timeutil import now as tz_now

if TYPE_CHECKING:
    from nanobot.agent.tools.mcp import MCPManager

NEW_SESSION_REPLY = "New session started."


@dataclass(frozen=True)
class AgentSettings:
    max_user_message_chars: int = 32_000
    max_tool_result_chars: int = 16_000
    stream: bool = False
    streaming_channels: frozenset[str] = frozenset()  # channels that show a streamed reply as it grows
    tool_names: set[str] | None = None  # None: all registered tools
    share_memory_in_groups: bool = False  # memory.shareInGroups


@dataclass
class AgentStats:
    started_at: float = field(default_factory=time.time)
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    last_prompt_tokens: int = 0  # the last turn's prompt (any chat's)


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
        estimator: PromptEstimator,
        long_term: LongTermMemory | None = None,
        settings: AgentSettings | None = None,
        subagents: SubagentManager | None = None,
        mcp: MCPManager | None = None,
    ) -> None:
        self.provider = provider
        self.bus = bus
        self.sessions = sessions
        self.tools = tools
        self.context = context
        self.runner = runner
        self.lifecycle = lifecycle
        self.estimator = estimator
        self.long_term = long_term or FileMemory()
        self.settings = settings or AgentSettings()
        self.subagents = subagents
        self.mcp = mcp  # its servers connect on the first turn (they may be slow or absent)
        self.stats = AgentStats()
        self.records = SessionRecords(sessions, context.tz, self.context_of)
        self._ready = False
        self._mcp_listing = 0  # MCPManager.listing_changes when the tools were last registered

    def context_of(self, msg: InboundMessage) -> MessageContext:
        """The one decision about a message's context (channel, chat, sender, privacy, reply target)."""
        return MessageContext.of(msg, share_memory_in_groups=self.settings.share_memory_in_groups)

    # ------------------------------------------------------------------ commands
    async def new_session(self, session_key: str, message_id: Any = None) -> str | None:
        """/new: archive the transcript (kept on disk) and start afresh; memory work runs later.
        None for a `/new` its platform served again after a crash (`message_id`, recorded in the new
        session): done already, it must not archive what was said since."""
        session = self.sessions.get(session_key)
        if self.records.new_done_before(session, message_id):
            return None
        answered = self.records.answered_ids(session)
        await self.lifecycle.start_new_session(session)
        self.records.carry_into_new(session_key, session.metadata, answered, message_id)
        await self.long_term.on_new_session(session_key)
        return NEW_SESSION_REPLY

    async def _new_trust(self, session: Session, ctx: MessageContext) -> Session:
        """The chat's sender is a guest now (taken off allowFrom) or no longer one (approved): what
        was said under the other trust is archived as a /new would, and consolidated (or not) by
        the trust it was said under; this message starts a fresh session. The first message's
        trust was the session's for good: a removed user's words went into the owner's MEMORY.md,
        and an approved guest's never did."""
        logger.info(
            "{}: the chat is {} now; the conversation so far is archived under its former trust",
            ctx.session_key, "a guest's" if ctx.guest else "shared" if ctx.is_group else "the owner's",
        )
        if cancelled := self.cancel_subagents(ctx.session_key):  # they work under the former trust
            logger.info("{}: {} sub-agent(s) of the former trust stopped", ctx.session_key, cancelled)
        answered = self.records.answered_ids(session)
        await self.lifecycle.start_new_session(session)
        self.records.carry_into_new(ctx.session_key, {}, answered, None)  # whose it is: this message says
        await self.long_term.on_new_session(ctx.session_key)
        return self.sessions.get(ctx.session_key)

    def keep_new(self, msg: InboundMessage, ctx: MessageContext) -> None:
        """A `/new` a shutdown cancelled before it ran, from a platform that will not send it again
        (Discord): done now, so what the user sent after it goes into the fresh session (it was
        dropped, and the next start answered those messages with the old conversation, which the
        user had asked to leave, in their context). The reply "New session started." is not sent."""
        if msg.on_persisted is not None or msg.reply_future is not None:
            return  # served again by its platform (Telegram), or an in-process caller that is told
        session = self.sessions.get(ctx.session_key)
        message_id = msg.metadata.get("message_id")
        if self.records.new_done_before(session, message_id):
            return
        answered = self.records.answered_ids(session)
        if not self.lifecycle.archive_at_shutdown(session):
            logger.warning("{}: a /new could not be done at shutdown (memory work on it ran); send it again",
                           ctx.session_key)
            return
        self.records.carry_into_new(ctx.session_key, session.metadata, answered, message_id)
        logger.info("{}: a /new the shutdown left undone was done; its reply is not sent", ctx.session_key)

    def status_text(self, ctx: MessageContext) -> str:
        """/status for the chat of `ctx` (nanobot/agent/status.py)."""
        return status_report(self, ctx)

    # ------------------------------------------------------------------ turns
    def _prompt_messages(
        self, session: Session, system: str, user_msg: dict[str, Any], tool_tokens: int, resumed: bool = False
    ) -> tuple[list[dict[str, Any]], int]:
        indices = history_indices(session)
        history = build_history(
            session, indices, self.settings.max_user_message_chars, self.settings.max_tool_result_chars
        )
        tokens = self.estimator.with_system(session, system, tool_tokens) + count_message(user_msg)
        if tokens > self.lifecycle.budget_tokens:
            history, tokens = fit_history(session, indices, history, tokens, self.lifecycle.budget_tokens, resumed)
        last_user = next((k for k in range(len(history) - 1, -1, -1) if history[k]["role"] == "user"), None)
        if resumed and last_user is not None:
            # A missed turn run again (nanobot/gateway/missed.py): its saved message takes the runtime
            # block in place; tool steps it already completed stay after it.
            history[last_user] = user_msg
            return [{"role": "system", "content": system}, *history], tokens
        return [{"role": "system", "content": system}, *history, user_msg], tokens

    async def _ensure_ready(self) -> None:
        """Lazy set-up: MCP servers connect on first need; failures are logged, never fatal. While a
        server has never shown its tools (it failed its first start: still installing, briefly down)
        every turn asks again, so they come without a restart; one in its retry backoff costs nothing."""
        if self.mcp is None or (self._ready and self.mcp.listing_changes == self._mcp_listing):
            return
        self._mcp_listing = self.mcp.listing_changes
        try:
            await self.mcp.register_into(self.tools)
        except Exception as exc:  # noqa: BLE001
            logger.warning("set-up step failed: {}", exc)
        # done once every server has shown its tools (a server that lost its session later
        # reconnects on its next call; its tools stay registered), until one lists others
        self._ready = all(server.get("tools") or server.get("state") == "ready" for server in self.mcp.status())

    async def handle(self, msg: InboundMessage, ctx: MessageContext | None = None) -> OutboundMessage | None:
        """Run one turn for `msg` and return the reply for its chat (`metadata["failed"]` when the
        model could not answer); None when there is nothing to say (the `message` tool answered)."""
        ctx = ctx or self.context_of(msg)
        if self.records.served_again(msg, ctx):
            return None
        if ctx.from_system and self.records.trust_changed(self.sessions.get(ctx.session_key), ctx):
            # a sub-agent started under the chat's former trust: its report's turn ran with that
            # trust (the owner's memory and tools, answering a user made a guest meanwhile)
            logger.warning("{}: a sub-agent's report from before the chat's trust changed is dropped", ctx.session_key)
            return None
        reply, failed = await self._turn(msg, ctx)
        heartbeat_ok = ctx.session_key == HEARTBEAT_SESSION_KEY and msg.reply_future is None and is_heartbeat_ok(reply)
        if not reply or heartbeat_ok:  # a sub-agent's report answered in the heartbeat's words
            return None
        metadata: dict[str, Any] = (
            {"stream_id": msg.metadata.get("stream_id")} if self.settings.stream else {}
        )
        if failed:
            metadata["failed"] = True
        # Which saved messages this reply answers: the gateway records its delivery (gateway/missed.py).
        metadata[DELIVERY_KEY] = delivery_of(self.sessions.get(ctx.session_key))
        return ctx.reply(reply, metadata=metadata)

    async def _turn(self, msg: InboundMessage, ctx: MessageContext) -> tuple[str, bool]:
        await self._ensure_ready()
        session = self.sessions.get(ctx.session_key)
        if self.records.trust_changed(session, ctx) and not msg.metadata.get(RESUME_KEY):
            session = await self._new_trust(session, ctx)
        tz = self.context.tz
        user_text = msg.content
        memory_context = ""
        try:
            # the one privacy rule (memory_private) decides; a backend alone saw "a group or not",
            # so with shareInGroups on a guest got the owner's backend memory
            if ctx.memory_private:
                memory_context = await self.long_term.context_for(
                    user_text, ctx.session_key, ctx.sender_id, ctx.shared
                )
        except Exception as exc:  # noqa: BLE001 - a failing memory backend never fails a turn
            logger.warning("memory backend {} failed to give context: {}", self.long_term.name, exc)
        runtime = self.context.runtime_block(
            ctx.reply_channel, ctx.reply_chat_id, ctx.sender_id, ctx.is_group, memory_context,
            sender_name=str(msg.metadata.get("username") or ""),
        )
        vision = bool(msg.media) and self._vision()

        stored = self.records.stored(msg, ctx)
        system, tool_names, tool_tokens = self.estimator.prompt(ctx.memory_private, ctx.tool_context())
        budget = self.lifecycle.budget_tokens
        system_tokens = count_message({"role": "system", "content": system})
        image_room = (budget - system_tokens - tool_tokens) // 2  # the rest for the text and the history

        def as_message(text: str) -> dict[str, Any]:
            return self.context.user_message(text, runtime, msg.media, vision=vision, image_room_tokens=image_room)

        llm_text = fit_user_text(
            user_text, as_message, budget - system_tokens - tool_tokens, self.settings.max_user_message_chars
        )
        user_msg = as_message(llm_text)
        user_tokens = count_message(user_msg)

        def estimate() -> int:  # tokens only: the history itself is built once, below
            return self.estimator.with_system(session, system, tool_tokens) + user_tokens

        await self.lifecycle.ensure_fits(session, estimate, private=ctx.memory_private)
        resumed = bool(msg.metadata.get(RESUME_KEY))  # already saved before a crash: not saved twice
        messages, prompt_tokens = self._prompt_messages(session, system, user_msg, tool_tokens, resumed)
        self.records.record_identity(session, ctx, msg)
        if not resumed:
            self.sessions.append(session, stored)
        msg.saved = True
        msg.ack()  # on disk: the channel may confirm it to the platform now

        stepped: list[int] = []  # tool steps this turn saved (a retry must not leave them out)

        def persist(new: list[dict[str, Any]]) -> None:
            stamp = tz_now(tz).isoformat()
            self.sessions.append(session, *({**m, "timestamp": stamp} for m in new))
            stepped.append(len(new))

        # Only a reply the channels deliver is streamed: one an in-process publisher takes (a cron job
        # sends it itself, the heartbeat drops HEARTBEAT_OK) would show in the chat twice, or at all.
        # Each model call streams into a message of its own (msg.metadata["stream_id"] names the
        # current one): a call's text before its tool calls becomes that message, the answer comes
        # below it (it was written into the first message, above the interim notes).
        # A channel that shows no stream (Discord, Telegram without `streaming`) is sent the answer
        # whole: what /stop saves as shown must be what the chat was shown.
        streamed = (
            self.settings.stream and msg.reply_future is None and ctx.reply_channel in self.settings.streaming_channels
            and ctx.session_key != HEARTBEAT_SESSION_KEY  # its HEARTBEAT_OK would show as it is typed
        )
        stream_base = f"{ctx.session_key}:{time.monotonic_ns()}"
        later_calls = itertools.count(1)
        if streamed:
            msg.metadata["stream_id"] = stream_base

        async def progress(kind: str, text: str) -> None:
            stream_id = msg.metadata.get("stream_id") if streamed else None
            # the call's text: its streamed preview becomes this message
            ids = {"stream_id": stream_id} if stream_id and kind == "progress" else {}
            await self.bus.publish_outbound(ctx.reply(text, kind=kind, metadata=ids))
            if stream_id and kind == "tool_hint":  # the call ended in tool calls: the next one streams anew
                await self.bus.publish_outbound(ctx.reply("", kind="stream_end", metadata={"stream_id": stream_id}))
                msg.metadata["stream_id"] = f"{stream_base}.{next(later_calls)}"
                msg.metadata[STREAMED_KEY] = ""

        on_delta = None
        if streamed:

            async def on_delta(delta: str) -> None:
                # what the chat is shown of the answer so far: kept if the user stops it (SessionRecords)
                msg.metadata[STREAMED_KEY] = msg.metadata.get(STREAMED_KEY, "") + delta
                await self.bus.publish_outbound(
                    ctx.reply(delta, kind="stream_delta", metadata={"stream_id": msg.metadata["stream_id"]})
                )

        self.stats.last_prompt_tokens = prompt_tokens

        async def run(prompt: list[dict[str, Any]], tokens: int | None) -> TurnResult:
            return await self.runner.run(
                prompt,
                ctx.tool_context(),
                tool_names=tool_names,
                on_messages=persist,
                # interim notes only where the reply goes too (the heartbeat posted them before
                # a HEARTBEAT_OK that is never delivered)
                on_progress=progress if msg.reply_future is None else None,
                on_delta=on_delta,
                prompt_tokens=tokens,
            )

        try:
            result = await run_within_window(run, messages, prompt_tokens, stepped, ctx.session_key)
        except LLMError as exc:
            reply = f"Sorry, I could not get an answer from the model: {exc}"
            self.sessions.append(
                session, {"role": "assistant", "content": reply, "timestamp": tz_now(tz).isoformat()}
            )
            self.lifecycle.after_turn(session, private=ctx.memory_private)
            return reply, True
        self.stats.turns += 1
        self.stats.prompt_tokens += result.usage.prompt_tokens
        self.stats.completion_tokens += result.usage.completion_tokens
        logger.info(
            "turn {}: {} iteration(s), {} prompt + {} completion tokens, tools {}",
            ctx.session_key,
            result.iterations,
            result.usage.prompt_tokens,
            result.usage.completion_tokens,
            result.tools_used or "none",
        )
        self.lifecycle.after_turn(session, private=ctx.memory_private)
        self._record_long_term(ctx, user_text, result.content)
        return result.content, False

    def _record_long_term(self, ctx: MessageContext, user_text: str, reply: str) -> None:
        if self.long_term.owns_memory_file:  # MEMORY.md is its record: nothing to send per turn
            return
        if not ctx.memory_private:  # a guest's (or an unshared group's) turn is not the owner's memory
            return
        record = TurnRecord(
            session_key=ctx.session_key,
            sender_id=ctx.sender_id,
            user_text=user_text,
            reply=reply,
            is_group=ctx.shared,
            timestamp=tz_now(self.context.tz).isoformat(),
        )
        self.lifecycle.track(self.long_term.record_turn(record), f"record:{ctx.session_key}")

    def _vision(self) -> bool:
        if self.provider.is_small_local or self.provider.images_refused:
            return False
        return self.provider.supports_vision()

    def cancel_subagents(self, session_key: str) -> int:
        return self.subagents.cancel_for(session_key) if self.subagents else 0

    def hold_subagent_results(self) -> None:
        """The loop stops taking messages: sub-agents' reports are kept in their sessions from now on."""
        if self.subagents is not None:
            self.subagents.hold_results(self.records.keep_result)

    # ------------------------------------------------------------------ shutdown
    async def drain(self, timeout_s: float) -> bool:
        """Wait for background memory work; True when everything finished in time."""
        return await self.lifecycle.drain(timeout_s)

    async def aclose(self, drain_timeout_s: float = 3.0, subagents_timeout_s: float | None = None) -> None:
        if self.subagents is not None:  # those still running then are cancelled; their note is kept
            await self.subagents.drain(
                drain_timeout_s if subagents_timeout_s is None else subagents_timeout_s
            )
        await self.drain(drain_timeout_s)
        try:
            await self.long_term.aclose()
        except Exception as exc:  # noqa: BLE001
            logger.warning("closing memory backend failed: {}", exc)
        self.sessions.close()
