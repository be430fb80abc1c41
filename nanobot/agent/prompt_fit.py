"""Fitting a turn's prompt into the model's window, when the estimate or the provider says it is over.

- `tools_within` and `fit_user_text`: on a small window, the tool definitions that fit beside the
  system prompt (all, else the core file tools, else none) and the new message cut in its middle to
  what is left (a 20,000-character paste on a 4,096-token window failed every time, and the
  advice to send /new could not help; on 2,048 tokens even "hello" failed, the tool definitions
  alone over the budget). The whole message stays in the transcript.
- `fit_history`: before the call, the history from the user message on that brings the estimated
  prompt within the budget (consolidation could not make room: a small model's failed attempts, a
  turn of many tool steps).
- `run_within_window`: after a provider refused the prompt as longer than the model's window (its
  window smaller than contextWindowTokens says), the call again with the older half of the history
  left out (`halved_history`), until it fits or no history is left.

What is left out of a request stays in the transcript, for consolidation and memory_search.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.providers.base import LLMError
from nanobot.providers.local import CORE_TOOLS
from nanobot.providers.tokens import count_message, cut_to_tokens
from nanobot.util.text import truncate_middle

if TYPE_CHECKING:
    from nanobot.agent.runner import TurnResult
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.session.session import Session

MESSAGE_ROOM_TOKENS = 512  # what the new message keeps at least beside the tool definitions
_warned_small: set[tuple[int, int]] = set()


def tools_within(
    tools: ToolRegistry, names: set[str] | None, room_tokens: int
) -> tuple[set[str] | None, int]:
    """(tool names, their definitions' tokens): `names` when they fit in `room_tokens` (the budget
    less the system prompt and MESSAGE_ROOM_TOKENS), else the core file tools among them, else none."""
    tokens = tools.schema_tokens(names)
    if tokens <= room_tokens:
        return names, tokens
    core = set(CORE_TOOLS) if names is None else set(CORE_TOOLS) & names
    core_tokens = tools.schema_tokens(core)
    chosen, chosen_tokens = (core, core_tokens) if core_tokens <= room_tokens else (set(), 0)
    if (tokens, room_tokens) not in _warned_small:
        _warned_small.add((tokens, room_tokens))
        logger.warning(
            "the tool definitions ({} tokens) do not fit the prompt budget beside the system prompt: turns "
            "are offered {}; raise agents.defaults.contextWindowTokens",
            tokens,
            "the core file tools only" if chosen else "no tools",
        )
    return chosen, chosen_tokens


def fit_user_text(text: str, message: Callable[[str], dict[str, Any]], room_tokens: int, max_chars: int) -> str:
    """`text` cut in its middle to `max_chars` and until `message(text)` (the user message it becomes,
    runtime block included) takes at most `room_tokens`; as it is when it fits."""
    shown = truncate_middle(text, max_chars)
    total = count_message(message(shown))
    if total <= room_tokens:
        return shown
    overhead = total - count_message({"role": "user", "content": shown})
    return cut_to_tokens(text, max(room_tokens - overhead, 1), truncate_middle, max_chars=max_chars)


def halved_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`messages` (system, history, the turn's user message and, for a resumed turn, the tool steps
    it saved) with the older half of the history before that message left out, cut at a user
    message so no tool group is split; None when there is no history to cut."""
    current = max(k for k, m in enumerate(messages) if k == 0 or m.get("role") == "user")
    if current == 0:  # no user message at all: nothing that could be kept whole
        return None
    history = messages[1:current]
    if not history:
        return None
    # k >= 1: a history of one message (a question given up with /stop) came back whole, and the
    # turn sent the same refused prompt again without end
    starts = [k for k, m in enumerate(history) if m.get("role") == "user" and k >= max(1, len(history) // 2)]
    keep = history[starts[0] :] if starts else []
    return [messages[0], *keep, *messages[current:]]


MIN_CUT_MESSAGE_CHARS = 2_000  # a message this short is not cut further: the window itself is too small


def halved_message(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`messages` with the turn's user message (the last one) cut to half its length in its
    middle; None when it is not last (a resumed turn's steps follow it), holds images, or is short.
    For a model whose tokenizer counts a text far above the estimate (digits one by one: a CSV
    paste) and refuses it although no history is left."""
    last = messages[-1]
    content = last.get("content")
    if last.get("role") != "user" or not isinstance(content, str) or len(content) < MIN_CUT_MESSAGE_CHARS:
        return None
    return [*messages[:-1], {**last, "content": truncate_middle(content, len(content) // 2)}]


def fit_history(
    session: Session,
    indices: list[int],
    history: list[dict[str, Any]],
    tokens: int,
    budget: int,
    resumed: bool,
) -> tuple[list[dict[str, Any]], int]:
    """The history from its first user message on that brings the prompt within the budget, when
    consolidation could not (a small model's failed attempts, a turn of many tool steps): the
    request would exceed the context window and fail, turn after turn. What is left out stays in
    the transcript, for consolidation and memory_search. None of it fits: no history at all, or,
    for a resumed turn (its message is in the history), the history from that message on."""
    starts = [k for k, message in enumerate(history) if message["role"] == "user"]
    left = tokens
    cut = 0
    for start in starts:
        left -= sum(session.tokens_of(indices[k]) for k in range(cut, start))
        cut = start
        if left <= budget:
            break
    else:
        keep_from = starts[-1] if resumed and starts else len(history)
        left -= sum(session.tokens_of(indices[k]) for k in range(cut, keep_from))
        cut = keep_from
    if cut:
        logger.warning(
            "session {}: the oldest {} history messages are left out of this request (over the prompt "
            "budget of {} tokens after consolidation); the transcript keeps them",
            session.key,
            cut,
            budget,
        )
    return history[cut:], left


async def run_within_window(
    run: Callable[[list[dict[str, Any]], int | None], Awaitable[TurnResult]],
    messages: list[dict[str, Any]],
    prompt_tokens: int,
    stepped: list[int],
    session_key: str,
) -> TurnResult:
    """`run(messages)`; when the provider refuses the prompt as longer than the model's window
    (smaller than contextWindowTokens says), again with the older half of the history left out,
    until it fits or no history is left (it stays in the transcript and memory), then with the
    message cut in its middle (the transcript keeps it whole). Not once the turn saved tool
    steps: a prompt without them would redo them."""
    prompt, tokens = messages, prompt_tokens
    while True:
        try:
            return await run(prompt, tokens)
        except LLMError as exc:
            shorter = None
            if exc.kind == "context_overflow" and not stepped:
                shorter = halved_history(prompt) or halved_message(prompt)
            if shorter is None:
                raise
            change = (
                f"with {len(shorter)} of its {len(messages)} messages" if len(shorter) < len(prompt)
                else f"with its message cut to {len(shorter[-1]['content'])} characters"
            )
            logger.warning(
                "{}: the provider refused the prompt as longer than the model's window; trying {}. Set "
                "agents.defaults.contextWindowTokens to the model's window",
                session_key,
                change,
            )
            prompt, tokens = shorter, None
