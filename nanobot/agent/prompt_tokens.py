"""PromptEstimator: the size in tokens of the prompt a session's next turn would send.

System prompt + tool schemas + the session's unconsolidated history. The agent uses it to build
each turn; the memory lifecycle uses it to decide when to flush and consolidate. Built before both
so that each gets it complete at construction. Both price the same tools: on a small window those
that fit beside the system prompt (`offered`; the lifecycle priced every schema, counted every turn
over the budget and consolidated the whole history away while the real prompt fitted).
"""

from __future__ import annotations

from nanobot.agent.context import ContextBuilder
from nanobot.agent.prompt_fit import MESSAGE_ROOM_TOKENS, tools_within
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.providers.tokens import count_message
from nanobot.session.history import history_tokens
from nanobot.session.store import Session


class PromptEstimator:
    def __init__(
        self, context: ContextBuilder, tools: ToolRegistry, tool_names: set[str] | None, budget_tokens: int
    ) -> None:
        self.context = context
        self.tools = tools
        self.tool_names = tool_names  # None: every registered tool
        self.budget_tokens = budget_tokens

    def offered(self, system: str) -> tuple[set[str] | None, int]:
        """(tool names, their schemas' tokens) a turn with this system prompt is offered."""
        system_tokens = count_message({"role": "system", "content": system})
        return tools_within(self.tools, self.tool_names, self.budget_tokens - system_tokens - MESSAGE_ROOM_TOKENS)

    @staticmethod
    def with_system(session: Session, system: str, tool_tokens: int) -> int:
        # count_message memoises the (long, stable) system prompt; the history sum is memoised too
        return count_message({"role": "system", "content": system}) + tool_tokens + history_tokens(session)

    def __call__(self, session: Session, memory_private: bool) -> int:
        system = self.context.system_prompt(memory_private)
        return self.with_system(session, system, self.offered(system)[1])
