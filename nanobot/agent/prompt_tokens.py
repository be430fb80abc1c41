"""PromptEstimator: the size in tokens of the prompt a session's next turn would send.

System prompt + tool schemas + the session's unconsolidated history. The agent uses it to build
each turn; the memory lifecycle uses it to decide when to flush and consolidate. Built before both
so that each gets it complete at construction.
"""

from __future__ import annotations

from nanobot.agent.context import ContextBuilder
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.providers.tokens import count_message
from nanobot.session.history import history_tokens
from nanobot.session.store import Session


class PromptEstimator:
    def __init__(self, context: ContextBuilder, tools: ToolRegistry, tool_names: set[str] | None) -> None:
        self.context = context
        self.tools = tools
        self.tool_names = tool_names  # None: every registered tool

    def tool_tokens(self) -> int:
        return self.tools.schema_tokens(self.tool_names)

    @staticmethod
    def with_system(session: Session, system: str, tool_tokens: int) -> int:
        # count_message memoises the (long, stable) system prompt; the history sum is memoised too
        return count_message({"role": "system", "content": system}) + tool_tokens + history_tokens(session)

    def __call__(self, session: Session, memory_private: bool) -> int:
        system = self.context.system_prompt(memory_private)
        return self.with_system(session, system, self.tool_tokens())
