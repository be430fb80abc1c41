"""Pre-compaction memory flush: one silent turn that saves durable memories to today's daily note
before consolidation squeezes the conversation (append only; MEMORY.md stays read-only here)."""

from __future__ import annotations

from typing import Any

from loguru import logger

from nanobot.memory.store import MemoryStore
from nanobot.memory.transcript import render_transcript
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.util.tool_args import first_string_arg

NO_REPLY = "NO_REPLY"
MAX_DAILY_CONTEXT_CHARS = 4000

WRITE_DAILY_NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_daily_note",
        "description": "Append durable memories to today's daily note (memory/YYYY-MM-DD.md), "
        "one '- ' bullet per fact, decision, preference or TODO.",
        "parameters": {
            "type": "object",
            "properties": {"content": {"type": "string", "description": "Markdown bullets"}},
            "required": ["content"],
        },
    },
}

FLUSH_SYSTEM = f"""Pre-compaction memory flush. The conversation below will soon be compacted.
Save anything worth remembering long-term that is not already in MEMORY.md or today's note:
decisions, preferences, facts about people and projects, dates, TODOs. Call write_daily_note once
with '- ' bullets. MEMORY.md and the bootstrap files are read-only now. If there is nothing new to
store, reply exactly {NO_REPLY}. Nothing you write here is shown to the user."""


class MemoryFlusher:
    def __init__(
        self, provider: LLMProvider, memory: MemoryStore, *, model: str | None = None, max_tokens: int = 1024
    ) -> None:
        self.provider = provider
        self.memory = memory
        self.model = model
        self.max_tokens = max_tokens

    async def flush(self, messages: list[dict[str, Any]], *, private: bool) -> bool:
        """Run the flush turn. True when it completed (with or without notes), False on failure."""
        today = self.memory.read(self.memory.daily_path().name)[-MAX_DAILY_CONTEXT_CHARS:]
        memory_md = self.memory.read_memory() if private else ""
        user = (
            f"## MEMORY.md (read-only)\n\n{memory_md or '(empty)'}\n\n"
            f"## Today's note so far\n\n{today or '(empty)'}\n\n"
            f"## Conversation\n\n{render_transcript(messages)}"
        )
        try:
            response = await self.provider.chat(
                [{"role": "system", "content": FLUSH_SYSTEM}, {"role": "user", "content": user}],
                [WRITE_DAILY_NOTE_TOOL],
                model=self.model,
                max_tokens=self.max_tokens,
                temperature=0.0,
            )
        except LLMError as exc:
            logger.warning("memory flush failed: {}", exc)
            return False
        notes = [
            first_string_arg(c.arguments, "content")
            for c in response.tool_calls
            if c.name == "write_daily_note"
        ]
        notes = [n for n in notes if n and n.strip() and n.strip() != NO_REPLY]
        text = (response.content or "").strip()
        if (
            not notes
            and text
            and text != NO_REPLY
            and all(line.lstrip().startswith(("-", "*")) for line in text.splitlines() if line.strip())
        ):
            notes = [text]  # a model that answered with the bullets instead of calling the tool
        for note in notes:
            self.memory.append_daily(note)
        logger.info("memory flush: {}", f"{len(notes)} note(s) saved" if notes else "nothing to store")
        return True
