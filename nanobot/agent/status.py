"""`/status`: what a chat is told about the model, its session, the prompt budget and the tools.

A shared chat (a group, a guest) is told the tools its own turns are offered, never the owner's,
and nothing of the other chats' token use. The text is built from the agent's parts as they are at
the moment of asking; nothing here changes them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanobot.agent.agent import Agent
    from nanobot.agent.message_context import MessageContext
    from nanobot.session.session import Session


def status_report(agent: Agent, ctx: MessageContext) -> str:
    session_key, session = ctx.session_key, agent.sessions.get(ctx.session_key)
    # what this chat's next turn is offered: the tools that fit the prompt budget, then its trust
    within_budget = agent.estimator.prompt(ctx.memory_private, ctx.tool_context())[1]
    offered = agent.tools.offered(within_budget, ctx.tool_context())
    uptime_s = int(time.time() - agent.stats.started_at)
    lines = [
        f"Model: {agent.provider.default_model} ({agent.provider.name})"
        + (" — the embedded demo model, tiny and often wrong: configure a provider for real use"
           if agent.provider.is_small_local else ""),
        f"Session: {session_key} — {len(session.messages)} messages, "
        f"{len(session.messages) - session.last_consolidated} not yet consolidated",
        # this session's next prompt (the last turn's count was any chat's, and 0 after a start)
        f"Context: ~{agent.estimator(session, _owner_session(session))} of "
        f"{agent.lifecycle.budget_tokens} prompt tokens",
        *([] if ctx.shared else [
            f"Tokens used since start: {agent.stats.prompt_tokens} in / {agent.stats.completion_tokens} out "
            f"over {agent.stats.turns} turns in all chats" + _subagents_status(agent)
        ]),
        f"Tools: {len(agent.tools) if offered is None else len(offered)}{_mcp_status(agent)}; "
        f"memory: {agent.long_term.name}; background memory tasks: {agent.lifecycle.pending()}",
        f"Uptime: {uptime_s // 3600}h {uptime_s % 3600 // 60}m",
    ]
    return "\n".join(lines)


def _owner_session(session: Session) -> bool:
    """Whether a session is an owner's chat by what it recorded (its prompt carries MEMORY.md)."""
    return session.metadata.get("is_group") is False and not session.metadata.get("guest")


def _subagents_status(agent: Agent) -> str:
    if agent.subagents is None:
        return ""
    used = agent.subagents.usage
    return (
        f"; sub-agents {used.prompt_tokens} in / {used.completion_tokens} out, "
        f"{agent.subagents.running()} running"
    )


def _mcp_status(agent: Agent) -> str:
    if agent.mcp is None:
        return ""
    servers = agent.mcp.status()
    ready = sum(1 for s in servers if s.get("state") == "ready")
    tools = sum(len(s.get("tools") or []) for s in servers)
    return f" (MCP: {ready}/{len(servers)} servers ready, {tools} tools)"
