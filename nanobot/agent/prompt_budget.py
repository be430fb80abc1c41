"""How a small prompt budget is shared between the system prompt and the conversation.

The prompt budget (context window − reply tokens − safety buffer) holds the tool schemas, the system
prompt (identity, skills, bootstrap files, MEMORY.md) and the conversation. The configured caps of
the bootstrap files and of MEMORY.md are shares of the window that ignore the tool schemas; on a
small window they could fill the whole budget, and then no consolidation could make room: every
turn would consolidate and still be over. So on a small window the caps are cut to the room the
tool schemas leave: the system prompt may take `SYSTEM_SHARE` of it, the bootstrap files at most
half of that, and MEMORY.md what the rest of the system prompt leaves (at least `MIN_MEMORY_CHARS`).

MEMORY.md itself is never cut: beyond its prompt share the prompt carries its head and tail, and the
facts of the rest that are relevant to a message come with that message (see memory/seam.py).
"""

from __future__ import annotations

from dataclasses import replace

from loguru import logger

from nanobot.agent.context import Budget

#: share of the room after the tool schemas the system prompt may take; the rest is the conversation's
SYSTEM_SHARE = 0.6
#: characters per token for the caps: a conservative figure (fact lists tokenise worse than prose)
CHARS_PER_TOKEN = 3
#: MEMORY.md's prompt share never goes below this many characters
MIN_MEMORY_CHARS = 600
#: with less of the budget left for the conversation, consolidation would run on most turns
MIN_CONVERSATION_SHARE = 0.1


def system_room_tokens(prompt_tokens: int, tool_tokens: int) -> int:
    """Tokens the system prompt may take: its share of what the tool schemas leave of the budget."""
    return int(max(0, prompt_tokens - tool_tokens) * SYSTEM_SHARE)


def cut_bootstrap(budget: Budget, system_tokens: int) -> Budget:
    """The bootstrap files' caps cut to at most half of the system prompt's room."""
    cap = system_tokens * CHARS_PER_TOKEN // 2
    return replace(budget, per_file_chars=min(budget.per_file_chars, cap), total_chars=min(budget.total_chars, cap))


def cut_memory(budget: Budget, system_tokens: int, rest_tokens: int) -> Budget:
    """MEMORY.md's prompt cap cut to what the rest of the system prompt (`rest_tokens`) leaves."""
    left = max(MIN_MEMORY_CHARS, (system_tokens - rest_tokens) * CHARS_PER_TOKEN)
    return replace(budget, memory_chars=min(budget.memory_chars, left))


def warn_if_cramped(prompt_tokens: int, tool_tokens: int, system_tokens: int) -> None:
    """Say at start-up when the window leaves the conversation almost no room (no cut can help)."""
    left = prompt_tokens - tool_tokens - system_tokens
    if left < prompt_tokens * MIN_CONVERSATION_SHARE:
        logger.warning(
            "the prompt budget of {} tokens leaves ~{} for the conversation beside the tool schemas ({}) "
            "and the system prompt (~{}): memory consolidation will run on most turns; raise "
            "agents.defaults.contextWindowTokens",
            prompt_tokens,
            max(left, 0),
            tool_tokens,
            system_tokens,
        )


def reply_tokens(max_tokens: int, window_tokens: int) -> int:
    """The answer's token limit sent with every request: `max_tokens`, or a quarter of the window
    when it asks for half of it or more (said at start-up). maxTokens left at 8,192 under an 8k
    window made every request, the first of a fresh session too, ask for more than the model holds."""
    if max_tokens * 2 < window_tokens:
        return max_tokens
    capped = max(256, window_tokens // 4)
    logger.warning(
        "agents.defaults.maxTokens {} is half or more of contextWindowTokens {}: answers are limited to "
        "{} tokens so the prompt fits; lower maxTokens to say so yourself",
        max_tokens,
        window_tokens,
        capped,
    )
    return capped
