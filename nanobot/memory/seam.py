"""The long-term memory seam (DESIGN Part B): the agent asks memory for two things only.

"record this turn" and "give me the memory context for this prompt", plus hooks for /new and
shutdown. Markdown file memory is the default implementation; external engines plug in here.
Context management (token budget, consolidation, flush, compaction) is separate and always runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


def memory_private(is_group: bool, share_in_groups: bool) -> bool:
    """The one privacy rule: the owner's long-term memory (MEMORY.md in the prompt, consolidation
    into it) belongs to private chats and the terminal; group chats get it only when the owner
    shares it (`memory.shareInGroups`)."""
    return not is_group or share_in_groups


@dataclass(frozen=True)
class TurnRecord:
    session_key: str
    sender_id: str
    user_text: str
    reply: str
    is_group: bool
    timestamp: str


class LongTermMemory(Protocol):
    name: str

    async def context_for(self, query: str, session_key: str, sender_id: str, is_group: bool) -> str:
        """Query-dependent memory context for the runtime block ("" for none)."""
        ...

    async def record_turn(self, turn: TurnRecord) -> None:
        """Store a finished turn; must not raise (log and degrade instead)."""
        ...

    async def on_new_session(self, session_key: str) -> None: ...

    async def aclose(self) -> None: ...


class FileMemory:
    """The Markdown file memory: MEMORY.md lives in the system prompt and consolidation writes it,
    so there is nothing query-dependent to add and nothing extra to record per turn."""

    name = "file"

    async def context_for(self, query: str, session_key: str, sender_id: str, is_group: bool) -> str:
        return ""

    async def record_turn(self, turn: TurnRecord) -> None:
        return None

    async def on_new_session(self, session_key: str) -> None:
        return None

    async def aclose(self) -> None:
        return None
