"""The `spawn` tool: hand a task to a background sub-agent; its result comes back to this chat."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from nanobot.agent.subagents import SubagentManager


#: a user's turn may start sub-agents, and so may the turn of their report; that one's may not
MAX_SPAWN_DEPTH = 2
#: the tool's answer; gateway/stranded.py reads a session's spawns back by it
STARTED_REPLY = "Sub-agent {task_id} started; its result will be delivered to this chat when it finishes."


def label_of(task: str, label: str | None) -> str:
    """A sub-agent's label as its report names it: the one given, else the task's start."""
    return label or task[:40]


class SpawnTool(Tool):
    name = "spawn"
    description = (
        "Start a sub-agent in the background for a self-contained task (research, file work). "
        "It has file, shell and web tools; its result is delivered back to this chat when done."
    )
    parameters = {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "What the sub-agent should do, with all needed context",
            },
            "label": {"type": "string", "description": "A short name for the task"},
        },
        "required": ["task"],
    }

    def __init__(self, manager: SubagentManager) -> None:
        self.manager = manager

    async def execute(self, ctx: ToolContext, task: str, label: str | None = None, **_: Any) -> str:
        if ctx.spawn_depth >= MAX_SPAWN_DEPTH:
            # each report is a turn with every tool: a model told to spawn again would run (and
            # bill) sub-agents without end from one message
            raise ToolError(
                f"sub-agents may start sub-agents only {MAX_SPAWN_DEPTH - 1} level(s) deep; "
                "finish this task yourself or tell the user what is left"
            )
        task_id = self.manager.spawn(task, label_of(task, label), ctx)
        return STARTED_REPLY.format(task_id=task_id)
