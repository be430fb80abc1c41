"""Sub-agents: background turns with a reduced tool set; results return to the originating chat.

The result is published as an inbound `system` message into the originating session, so the main
agent (serial per session, one owner of the transcript) tells the user about it in its own words.

Once the agent loop stops taking messages (a shutdown), nothing would read that message: from then
on (`hold_results`) a result is saved in its session instead, and a sub-agent the shutdown cancels
leaves a note there that it was stopped. The gateway answers both at its next start like any
message a shutdown left unanswered (gateway/missed.py), so the user hears of the task either way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from loguru import logger

from nanobot.agent.message_context import SPAWN_DEPTH_KEY
from nanobot.agent.runner import TurnRunner
from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.providers.base import Usage
from nanobot.util.tasks import finish_or_cancel
from nanobot.util.text import truncate_middle

SUBAGENT_TOOLS = frozenset(
    {"read_file", "write_file", "edit_file", "list_dir", "exec", "web_fetch", "web_search"}
)
MAX_SUBAGENT_ITERATIONS = 15
MAX_RESULT_CHARS = 8_000
UNWIND_S = 0.5  # a cancelled sub-agent only saves a short note
MAX_RUNNING_PER_SESSION = 4  # one chat (a group member, a page the model read) cannot fan out further
#: group and guest chats together take at most this share of the slots: two strangers of an open
#: dmPolicy took all eight, and the owner's own spawn was refused
MAX_SHARED_SHARE = 0.5

#: what a chat is told of a sub-agent a restart stopped (a shutdown's, or a kill's: gateway/stranded.py)
STOPPED_NOTE = (
    "[Sub-agent '{label}' stopped]\n\nTask: {task}\n\nThe assistant was restarted before this "
    "background task finished, so it has no result. Tell the user briefly and offer to start it again."
)

SUBAGENT_SYSTEM = """You are a sub-agent of nanobot, working on one task in the background.
Complete the task with the tools you have, then answer with a concise report of the result
(what you did, what you found, file paths you wrote). You cannot talk to the user directly."""


class SubagentManager:
    def __init__(
        self, runner: TurnRunner, bus: MessageBus, workspace_note: str = "", max_running: int = 8
    ) -> None:
        self.runner = runner
        self.bus = bus
        self.workspace_note = workspace_note
        # in all chats at once: 4 per chat alone let strangers of an open dmPolicy run 40 beside
        # maxConcurrentTurns 2, each with up to 15 model calls and their tools
        self.max_running = max(1, max_running)
        self.usage = Usage()  # what every sub-agent since start spent (told by /status)
        # task id -> (the session that spawned it, the chat it reports to, its task); a heartbeat's
        # or a job's sub-agent has the turn's own session but reports to a chat, whose /stop stops it
        self._tasks: dict[str, tuple[str, str, asyncio.Task[None]]] = {}
        self._shared: set[str] = set()  # the task ids of those a group or a guest started
        self._keep: Callable[[InboundMessage], None] | None = None  # set at shutdown

    def hold_results(self, keep: Callable[[InboundMessage], None]) -> None:
        """From now on hand results (and notes of sub-agents cancelled) to `keep` instead of the bus."""
        self._keep = keep

    def spawn(self, task: str, label: str, ctx: ToolContext) -> str:
        if self.running(ctx.session_key) >= MAX_RUNNING_PER_SESSION:
            raise ToolError(
                f"{MAX_RUNNING_PER_SESSION} sub-agents are already running for this chat; "
                "wait for their results before starting more"
            )
        if self.running() >= self.max_running:
            raise ToolError(
                f"{self.max_running} sub-agents are running for all chats; wait for their results, "
                "or do this task yourself"
            )
        # at least one slot stays the owner's (with one slot in all, none is a group's or a guest's)
        shared_slots = min(max(1, int(self.max_running * MAX_SHARED_SHARE)), self.max_running - 1)
        if ctx.shared and len(self._shared) >= shared_slots:
            raise ToolError(
                f"{shared_slots} sub-agents of group and guest chats are running; wait for their "
                "results, or do this task yourself"
                if shared_slots
                else "sub-agents are kept for the owner's chats here; do this task yourself"
            )
        task_id = uuid.uuid4().hex[:8]
        job = asyncio.create_task(self._run(task_id, task, label, ctx), name=f"subagent:{task_id}")
        self._tasks[task_id] = (ctx.session_key, f"{ctx.channel}:{ctx.chat_id}", job)
        if ctx.shared:
            self._shared.add(task_id)
        job.add_done_callback(lambda _t: self._ended(task_id))
        return task_id

    def _ended(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)
        self._shared.discard(task_id)

    def running(self, session_key: str | None = None) -> int:
        return sum(1 for key, _, _ in self._tasks.values() if session_key is None or key == session_key)

    def cancel_for(self, session_key: str) -> int:
        """Cancel the sub-agents a session started and those reporting to its chat."""
        jobs = [job for key, chat, job in self._tasks.values() if session_key in (key, chat) and not job.done()]
        for job in jobs:
            job.cancel()
        return len(jobs)

    async def drain(self, timeout_s: float) -> None:
        """Let running sub-agents finish within `timeout_s`; cancel the rest and give them
        UNWIND_S to leave their note (see `hold_results`)."""
        await finish_or_cancel([job for _, _, job in self._tasks.values()], timeout_s, unwind_s=UNWIND_S)

    async def _run(self, task_id: str, task: str, label: str, ctx: ToolContext) -> None:
        messages = [
            {
                "role": "system",
                "content": SUBAGENT_SYSTEM + ("\n\n" + self.workspace_note if self.workspace_note else ""),
            },
            {"role": "user", "content": task},
        ]
        spent = Usage()  # counted call by call: a sub-agent stopped or failed half-way spent too
        try:
            result = await self.runner.run(messages, ctx, tool_names=set(SUBAGENT_TOOLS), usage=spent)
            status, text = "finished", result.content
            logger.info(
                "sub-agent {} ('{}') of {}: {} iteration(s), {} prompt + {} completion tokens, tools {}",
                task_id,
                label,
                ctx.session_key,
                result.iterations,
                spent.prompt_tokens,
                spent.completion_tokens,
                result.tools_used or "none",
            )
        except asyncio.CancelledError:
            self.usage.add(spent)
            if self._keep is not None:  # a shutdown, not /stop: the user was promised a result
                logger.warning(
                    "sub-agent {} ('{}') was stopped by the shutdown before it finished", task_id, label
                )
                self._keep(self._message(task_id, ctx, STOPPED_NOTE.format(label=label, task=task)))
            raise
        except Exception as exc:  # noqa: BLE001 - reported back to the chat instead
            logger.warning("sub-agent {} failed after {} prompt + {} completion tokens: {}", task_id,
                           spent.prompt_tokens, spent.completion_tokens, exc)
            status, text = "failed", f"{type(exc).__name__}: {exc}"
        self.usage.add(spent)
        content = (
            f"[Sub-agent '{label}' {status}]\n\nTask: {task}\n\nResult:\n{truncate_middle(text, MAX_RESULT_CHARS)}\n\n"
            "Tell the user about this result briefly."
        )
        message = self._message(task_id, ctx, content)
        if self._keep is not None:
            self._keep(message)
        else:
            await self.bus.publish_inbound(message)

    @staticmethod
    def _message(task_id: str, ctx: ToolContext, content: str) -> InboundMessage:
        """A sub-agent's report as an inbound `system` message of the session that spawned it."""
        return InboundMessage(
            channel="system",
            # the user who started it: a report kept at a stop is answered at the next start only
            # while that user is still allowed (gateway/missed.py)
            sender_id=ctx.sender_id,
            chat_id=ctx.chat_id,
            content=content,
            session_key_override=ctx.session_key,
            is_group=ctx.is_group,
            guest=ctx.guest,
            metadata={
                "origin_channel": ctx.channel,
                "origin_chat_id": ctx.chat_id,
                "subagent_id": task_id,
                SPAWN_DEPTH_KEY: ctx.spawn_depth + 1,  # its turn may not start sub-agents without end
            },
        )
