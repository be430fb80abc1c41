"""PromptEstimator: the size in tokens of the prompt a session's next turn would send.

System prompt + tool schemas + the session's unconsolidated history. The agent uses it to build
each turn; the memory lifecycle uses it to decide when to flush and consolidate. Built before both
so that each gets it complete at construction. Both price the same tools: on a small window those
that fit beside the system prompt (`offered`; the lifecycle priced every schema, counted every turn
over the budget and consolidated the whole history away while the real prompt fitted).

`prompt` decides a turn's system prompt and tools together: a tool's section of the prompt (the
memory-recall instructions) only beside the tool, which the window or the chat's trust may withhold.
"""

from __future__ import annotations

from nanobot.agent.context import ContextBuilder
from nanobot.agent.prompt_fit import MESSAGE_ROOM_TOKENS, tools_within
from nanobot.agent.tools.base import ToolContext
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

    def prompt(self, memory_private: bool, ctx: ToolContext | None) -> tuple[str, set[str] | None, int]:
        """(system prompt, the tool names within the budget (None: all), the tokens of the schemas a
        turn in `ctx` is sent: those tools less the ones its trust withholds; `ctx` None withholds
        none). A tool section is left out where its tool is not offered (out of the budget, or
        withheld); a skill requiring a tool, where the chat's trust withholds it."""
        system = self.context.system_prompt(memory_private)
        names, tokens = self.offered(system)
        within = set(self.tools.names) if names is None else names
        usable = (self.tools.offered(within, ctx) or set()) if ctx is not None else within
        missing = frozenset(self.context.tool_sections.keys() - usable)
        # by trust alone: a small window leaves memory_search out of an owner's turn, whose memory
        # skill (MEMORY.md, forgetting) still applies; a group's turn withholds it on any window,
        # also where memory search is off (the tool is not there, the owner's memory still private)
        withheld = frozenset(self.tools.withheld(self.context.skill_tools(), ctx)) if ctx is not None else frozenset()
        if missing or withheld:
            system = self.context.system_prompt(memory_private, without=missing, withheld=withheld)
        # the runner leaves the withheld out of the schemas it sends (and, called anyway, the policy
        # says why they are refused): priced as sent
        return system, names, tokens if usable == within else self.tools.schema_tokens(usable)

    @staticmethod
    def with_system(session: Session, system: str, tool_tokens: int) -> int:
        # count_message memoises the (long, stable) system prompt; the history sum is memoised too
        return count_message({"role": "system", "content": system}) + tool_tokens + history_tokens(session)

    def __call__(self, session: Session, memory_private: bool) -> int:
        # the chat's trust as the session recorded it: a group's turns are offered neither the
        # memory tools nor MCP servers, and priced with them its talk was consolidated early
        ctx = ToolContext(is_group=session.metadata.get("is_group") is True, guest=bool(session.metadata.get("guest")))
        system, _, tool_tokens = self.prompt(memory_private, ctx)
        return self.with_system(session, system, tool_tokens)
