"""TurnRunner: one turn of LLM ↔ tools iterations, up to maxToolIterations.

A turn also ends when its tool results fill the prompt budget (a small window, a model calling the
same tool again and again): the next request would exceed the model's context window and fail.
Either way one last call without tools, with the oldest results left out as far as needed, asks
for an answer with what the steps found.

Independent tool calls of one response run concurrently. Each finished iteration (the assistant
message with its tool results) is handed to `on_messages` at once, so the caller can persist it
before anything else happens: a cancelled turn never leaves half a tool group on disk.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from nanobot.agent.reply import clean_reply, previewed
from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.bus.events import NO_ANSWER_REPLY
from nanobot.logs import prompts_logged
from nanobot.providers.base import LLMProvider, StreamCallback, ToolCall, Usage
from nanobot.providers.tokens import count_message, count_text, cut_to_tokens
from nanobot.util.text import truncate_head, truncate_middle

MessagesCallback = Callable[[list[dict[str, Any]]], Awaitable[None] | None]
ProgressCallback = Callable[[str, str], Awaitable[None]]  # (kind, text): kind "progress" | "tool_hint"
TOOL_HINT_MAX_CHARS = 80
LEFT_OUT_RESULT = "[result left out: the turn's tool results no longer fit in the context window]"
LONG_ARGUMENTS_CHARS = 2_000  # a tool call's arguments over this may be left out of a fitted prompt
#: one reply's tool calls run this many at a time, and no more than MAX_TOOL_CALLS_PER_REPLY of them
#: run at all: 300 `exec` calls in one reply ran 300 sandboxes at once, each with its own limits
MAX_PARALLEL_TOOL_CALLS = 4
MAX_TOOL_CALLS_PER_REPLY = 16
TOO_MANY_CALLS = (
    f"Error: not run: one reply may call at most {MAX_TOOL_CALLS_PER_REPLY} tools; "
    "call the rest in the next step if they are still needed"
)


@dataclass
class TurnResult:
    content: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    tools_used: list[str] = field(default_factory=list)
    answered_in_chat: bool = False  # a `message` call of this turn reached the chat the turn is for


def _to_this_chat(arguments: Any, ctx: ToolContext) -> bool:
    """Whether a `message` call went to the chat of the turn (its channel and chat default to it)."""
    args = arguments if isinstance(arguments, dict) else {}
    channel, chat = args.get("channel") or ctx.channel, args.get("chat_id") or ctx.chat_id
    return (str(channel), str(chat)) == (ctx.channel, ctx.chat_id)


def tool_hint(name: str, arguments: Any) -> str:
    """A one-line description of a tool call, e.g. `exec("ls -la")`."""
    if isinstance(arguments, dict) and arguments:
        first = next(iter(arguments.values()))
        shown = first if isinstance(first, str) else json.dumps(first, ensure_ascii=False)
        shown = truncate_head(shown, TOOL_HINT_MAX_CHARS)
        return f'{name}("{shown}")'
    return f"{name}()"


class TurnRunner:
    def __init__(
        self,
        provider: LLMProvider,
        tools: ToolRegistry,
        *,
        max_iterations: int = 40,
        max_tokens: int = 8192,
        temperature: float = 0.1,
        max_tool_result_chars: int = 16_000,
        prompt_budget_tokens: int | None = None,
        max_tokens_key: str = "agents.defaults.maxTokens",
    ) -> None:
        """`max_tokens_key`: the config key that sets `max_tokens` here, named when an answer is cut."""
        self.provider = provider
        self.tools = tools
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.max_tokens_key = max_tokens_key
        self.temperature = temperature
        self.max_tool_result_chars = max_tool_result_chars
        self.prompt_budget_tokens = prompt_budget_tokens  # None: no limit checked

    async def _final_answer(self, convo: list[dict[str, Any]], result: TurnResult, echo_source: str) -> str:
        """One last call without tools, so the user gets an answer rather than a dead end."""
        try:
            response = await self.provider.chat(
                [*convo, {"role": "user", "content": FINAL_ANSWER_NUDGE}],
                None,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
            )
        except Exception as exc:  # noqa: BLE001 - fall back to the fixed message
            logger.warning("final answer after the iteration limit failed: {}", exc)
            return ""
        result.usage.add(response.usage)
        return clean_reply(response.content, echo_source)

    def _tokens(self, convo: list[dict[str, Any]], tool_names: set[str] | None) -> int:
        return self.tools.schema_tokens(tool_names) + sum(count_message(m) for m in convo)

    async def _execute_all(
        self, calls: list[ToolCall], ctx: ToolContext, tool_names: set[str] | None
    ) -> list[str]:
        """One reply's tool calls, MAX_PARALLEL_TOOL_CALLS at a time, in their order; those past
        MAX_TOOL_CALLS_PER_REPLY are not run (their result says so)."""
        gate = asyncio.Semaphore(MAX_PARALLEL_TOOL_CALLS)

        async def run_call(index: int, call: ToolCall) -> str:
            if index >= MAX_TOOL_CALLS_PER_REPLY:
                return TOO_MANY_CALLS
            async with gate:
                return await self._execute(call.name, call.arguments, ctx, tool_names)

        return list(await asyncio.gather(*(run_call(i, c) for i, c in enumerate(calls))))

    async def _execute(self, name: str, arguments: Any, ctx: ToolContext, tool_names: set[str] | None) -> str:
        """A tool call, when its tool is one this run offered: a model may name any tool (a sub-agent
        told to `spawn`, `cron` or `message` by a page it read), not only those in its schema list."""
        if tool_names is not None and name not in tool_names:
            return f"Error: tool '{name}' is not available here. Available tools: {', '.join(sorted(tool_names))}"
        return await self.tools.execute(name, arguments, ctx)

    async def run(
        self,
        messages: list[dict[str, Any]],
        ctx: ToolContext,
        *,
        tool_names: set[str] | None = None,
        on_messages: MessagesCallback | None = None,
        on_progress: ProgressCallback | None = None,
        on_delta: StreamCallback | None = None,
        prompt_tokens: int | None = None,
        usage: Usage | None = None,
    ) -> TurnResult:
        """Run the loop on `messages` (system + history + the new user message); `prompt_tokens` is
        their estimate with the tool schemas, when the caller has it. `usage` (the result's, when
        given) counts each model call as it returns: a run stopped or failed half-way still told."""
        convo = list(messages)
        result = TurnResult(content="", usage=usage if usage is not None else Usage())
        echo_source = _last_user_text(convo)  # what a weak model may repeat before its answer
        # a tool the trust policy refuses here is not offered; called anyway, the policy says why
        offered = self.tools.offered(tool_names, ctx)
        schemas = self.tools.schemas(offered)
        budget = self.prompt_budget_tokens
        used = 0
        if budget is not None:  # priced as sent: without the tools this chat's trust withholds
            used = prompt_tokens if prompt_tokens is not None else self._tokens(convo, offered)
        cut_in_a_row = 0  # replies whose tool calls the output limit cut off, one after another
        note = ""  # said to the user after the answer, not saved with it
        for iteration in range(1, self.max_iterations + 1):
            result.iterations = iteration
            if budget is not None and iteration > 1 and used > budget:
                logger.warning(
                    "turn stopped after {} tool steps: ~{} prompt tokens, over the budget of {}",
                    iteration - 1,
                    used,
                    budget,
                )
                result.content = await self._final_answer(
                    _fitted(convo, used - budget), result, echo_source
                ) or (
                    f"I stopped after {iteration - 1} tool steps (they were carried out): the turn no "
                    "longer fits in the model's context window. Tell me to continue, or narrow the task."
                )
                break
            if prompts_logged():
                logger.debug("prompt: {}", json.dumps(convo, ensure_ascii=False, default=str))
            response = await self.provider.chat(
                convo,
                schemas or None,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                on_delta=previewed(on_delta) if on_delta is not None else None,
            )
            result.usage.add(response.usage)
            if prompts_logged():
                logger.debug(
                    "completion: {} {}", response.content, [c.to_message_dict() for c in response.tool_calls]
                )
            if not response.has_tool_calls:
                # after the `message` tool answered in this chat, an empty final reply is expected;
                # one that only wrote to another chat leaves this chat's user waiting for an answer
                result.content = _answer(response.content, echo_source, allow_empty=result.answered_in_chat)
                if response.finish_reason == "length" and result.content:
                    note = CUT_OFF_NOTE.format(key=self.max_tokens_key)  # the user always hears what happened
                break
            if on_progress is not None:
                if clean_reply(response.content, echo_source):
                    await on_progress("progress", clean_reply(response.content, echo_source))
                await on_progress(
                    "tool_hint", ", ".join(tool_hint(c.name, c.arguments) for c in response.tool_calls)
                )
            _unique_call_ids(response.tool_calls, convo)
            assistant = {
                "role": "assistant",
                "content": clean_reply(response.content, echo_source),
                "tool_calls": [c.to_message_dict() for c in response.tool_calls],
            }
            outputs = await self._execute_all(response.tool_calls, ctx, tool_names)
            cut = response.finish_reason == "length" and any(o.startswith("Error: invalid arguments") for o in outputs)
            if cut:  # a JSON error alone made models send it again, cut again
                outputs = [
                    f"{out}\n{CUT_OFF_ARGUMENTS.format(max_tokens=self.max_tokens)}"
                    if out.startswith("Error: invalid arguments") else out
                    for out in outputs
                ]
            cut_in_a_row = cut_in_a_row + 1 if cut else 0
            group = [assistant]
            # what is left of the budget, shared by this step's results: on a small window a 16,000-
            # character result was left out whole (the model saw nothing of the file); now its head
            # and tail fit, with room kept for the answer
            room = None
            if budget is not None:
                room = budget - used - count_message(assistant) - int(budget * ANSWER_ROOM_SHARE)
            for k, (call, output) in enumerate(zip(response.tool_calls, outputs, strict=True)):
                result.tools_used.append(call.name)
                if call.name == "message" and not output.startswith("Error") and _to_this_chat(call.arguments, ctx):
                    result.answered_in_chat = True
                if room is None:
                    content = truncate_middle(output, self.max_tool_result_chars)
                else:
                    share = max(MIN_RESULT_TOKENS, room // (len(outputs) - k))
                    content = cut_to_tokens(output, share, truncate_middle, max_chars=self.max_tool_result_chars)
                    room -= count_text(content)
                group.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
            convo.extend(group)
            if budget is not None:
                used += sum(count_message(m) for m in group)
            result.messages.extend(group)
            await _emit(on_messages, group)
            if cut_in_a_row >= MAX_CUT_REPLIES:  # the model does not split it: 40 requests got nowhere
                logger.warning("turn stopped: {} replies in a row cut off at the output limit", cut_in_a_row)
                result.content = CUT_OFF_STOPPED.format(
                    count=cut_in_a_row, max_tokens=self.max_tokens, key=self.max_tokens_key
                )
                break
        else:
            logger.warning("turn stopped at the tool-iteration limit ({})", self.max_iterations)
            # the last step's results may take the prompt over the budget (each keeps a minimum)
            last = _fitted(convo, used - budget) if budget is not None and used > budget else convo
            result.content = await self._final_answer(last, result, echo_source) or (
                f"I stopped after {self.max_iterations} tool steps without finishing. "
                "Tell me to continue, or narrow the task."
            )
        final = {"role": "assistant", "content": result.content}
        result.messages.append(final)
        await _emit(on_messages, [final])
        # for the user only: saved, the model read it as its own words and repeated it, and memory kept it
        result.content += note
        return result


ANSWER_ROOM_SHARE = 0.1  # of the prompt budget, kept for the answer when tool results are cut to fit
MIN_RESULT_TOKENS = 300  # a tool result keeps at least this much of its head and tail
CUT_OFF_NOTE = "\n\n[The answer was cut off here: it reached the model's output limit ({key}).]"
MAX_CUT_REPLIES = 3
CUT_OFF_STOPPED = (
    "I stopped: my last {count} replies were each cut off at the output limit ({max_tokens} tokens, "
    "{key}) before their tool call was complete. Ask for the work in smaller "
    "parts, or raise the limit."
)
CUT_OFF_ARGUMENTS = (
    "Your reply reached the output limit of {max_tokens} tokens, which cut these arguments off. "
    "Send the content in smaller pieces (several write_file / edit_file calls), not the same call again."
)

FINAL_ANSWER_NUDGE = (
    "You have used all your tool steps for this turn. Answer the user now with what you have, "
    "without calling tools; say what is left to do if the task is unfinished."
)


def _fitted(convo: list[dict[str, Any]], excess_tokens: int) -> list[dict[str, Any]]:
    """`convo` with its oldest tool results left out until `excess_tokens` are saved, then, if that
    is not enough, the arguments of its oldest tool calls (a 400 KB `write_file` content: the call
    was done, but the final request carrying it was refused). The last call sends no tool schemas
    either, which leaves room for the nudge."""
    fitted = list(convo)
    saved = 0
    for shorten in (_without_result, _without_arguments):
        for i, message in enumerate(fitted):
            if saved >= excess_tokens:
                return fitted
            shorter = shorten(message)
            if shorter is not None:
                saved += count_message(message) - count_message(shorter)
                fitted[i] = shorter
    return fitted


def _without_result(message: dict[str, Any]) -> dict[str, Any] | None:
    if message.get("role") == "tool" and message.get("content") != LEFT_OUT_RESULT:
        return {**message, "content": LEFT_OUT_RESULT}
    return None


def _without_arguments(message: dict[str, Any]) -> dict[str, Any] | None:
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not calls:
        return None
    shorter = []
    for call in calls:
        fn = call.get("function") or {}
        arguments = str(fn.get("arguments") or "")
        if len(arguments) > LONG_ARGUMENTS_CHARS:
            note = json.dumps({"left_out": f"{len(arguments)} characters of arguments (the call was made)"})
            call = {**call, "function": {**fn, "arguments": note}}
        shorter.append(call)
    return {**message, "tool_calls": shorter} if shorter != calls else None


def _unique_call_ids(calls: list[ToolCall], convo: list[dict[str, Any]]) -> None:
    """Give a call whose id is missing or already used in the conversation a fresh one. Servers send
    duplicates ("call_0" in every reply, or one id twice): a result could not be told from another,
    and a provider that refuses repeated ids refused every later request of the session."""
    used = {
        str(call.get("id"))
        for message in convo
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    }
    for call in calls:
        if not call.id or call.id in used:
            call.id = f"call_{uuid.uuid4().hex[:24]}"
        used.add(call.id)


def _last_user_text(convo: list[dict[str, Any]]) -> str:
    """The text of the last user message (its text parts, when it carries images)."""
    for message in reversed(convo):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def _answer(content: str | None, echo_source: str, allow_empty: bool = False) -> str:
    """The final answer cleaned of echoed metadata and template tokens; empty only when allowed."""
    cleaned = clean_reply(content, echo_source)
    if not cleaned and not allow_empty:
        logger.warning(
            "the model's answer was empty after cleaning ({} characters before)", len(content or "")
        )
        return NO_ANSWER_REPLY
    return cleaned


async def _emit(callback: MessagesCallback | None, messages: list[dict[str, Any]]) -> None:
    if callback is None:
        return
    outcome = callback(messages)
    if asyncio.iscoroutine(outcome):
        await outcome
