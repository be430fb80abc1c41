"""The long-term memory seam (docs/architecture.md): the agent asks memory for two things only.

"record this turn" and "give me the memory context for this prompt", plus hooks for /new and
shutdown. Markdown file memory is the default implementation; external engines plug in here.
Context management (token budget, consolidation, flush, compaction) is separate and always runs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from nanobot.memory.relevant import relevant_section

if TYPE_CHECKING:
    from nanobot.memory.store import MemoryStore

SHOWN_HEAD_SHARE = 0.6
SHOWN_TAIL_SHARE = 0.15


def memory_private(is_group: bool, share_in_groups: bool, guest: bool = False) -> bool:
    """The one privacy rule: the owner's long-term memory (MEMORY.md in the prompt, consolidation
    into it, the memory tools) belongs to private chats and the terminal; group chats get it only
    when the owner shares it (`memory.shareInGroups`); guests (strangers let in by dmPolicy
    "open") never."""
    return not guest and (not is_group or share_in_groups)


def memory_origin(session_key: str, is_group: bool, guest: bool) -> str | None:
    """Where a conversation came from, as the memory entries written from it say: "" for the
    owner's own chats; "group chat <key>" for a group, whose HISTORY.md entries and session notes
    name it, so a search later does not take what a member said for the owner's word; None for a
    guest, whose conversations write nothing into the owner's memory/ (the transcript stays in
    sessions/)."""
    if guest:
        return None
    return f"group chat {session_key}" if is_group else ""


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
    # True when this memory is the Markdown file memory: MEMORY.md goes into the system prompt and
    # consolidation writes it; False when a backend supplies context per prompt instead.
    owns_memory_file: bool

    async def context_for(self, query: str, session_key: str, sender_id: str, is_group: bool) -> str:
        """Query-dependent memory context for the runtime block ("" for none)."""
        ...

    async def record_turn(self, turn: TurnRecord) -> None:
        """Store a finished turn; must not raise (log and degrade instead)."""
        ...

    async def on_new_session(self, session_key: str) -> None: ...

    async def aclose(self) -> None: ...


class FileMemory:
    """The Markdown file memory: MEMORY.md lives in the system prompt and consolidation writes it.

    When MEMORY.md is longer than its prompt budget, the prompt carries only its head and tail;
    context_for() then brings the facts of the omitted middle that are relevant to the message into
    the runtime block, so the system prompt stays byte-stable and nothing relevant is cut away.
    """

    name = "file"
    owns_memory_file = True

    def __init__(self, store: MemoryStore | None = None, prompt_chars: int = 0, share_in_groups: bool = False):
        self.store = store
        self.prompt_chars = prompt_chars  # MEMORY.md's budget in the system prompt (0: unknown)
        # memory.shareInGroups: a group's prompt carries MEMORY.md, so its omitted middle's relevant
        # facts come too (they did not: the model said it did not know)
        self.share_in_groups = share_in_groups

    async def context_for(self, query: str, session_key: str, sender_id: str, is_group: bool) -> str:
        if self.store is None or (is_group and not self.share_in_groups) or not self.prompt_chars:
            return ""
        text = self.store.read_memory().strip()
        if len(text) <= self.prompt_chars:
            return ""  # the prompt carries all of it
        # What the prompt shows of a long file: at least this much of its head and tail (the prompt
        # keeps somewhat more of each, so a fact here may be repeated, never missed).
        shown = text[: int(self.prompt_chars * SHOWN_HEAD_SHARE)] + text[-int(self.prompt_chars * SHOWN_TAIL_SHARE):]
        facts = await asyncio.to_thread(relevant_section, text, query, shown)
        return f"Relevant facts from memory/MEMORY.md (not shown above):\n{facts}" if facts else ""

    async def record_turn(self, turn: TurnRecord) -> None:
        return None

    async def on_new_session(self, session_key: str) -> None:
        return None

    async def aclose(self) -> None:
        return None
