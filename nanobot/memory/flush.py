"""Pre-compaction memory flush: one silent turn that saves durable memories to today's daily note
before consolidation squeezes the conversation (append only; MEMORY.md stays read-only here).

The notes are untrusted input: `memory.validation` checks them before they are appended. A refused
answer is retried once with the reason stated to the model; a second refusal fails the flush (it is
tried again next cycle) and nothing reaches the daily note. The small-model profile asks for plain
bullets without offering a tool.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from loguru import logger

from nanobot.memory import small_profile
from nanobot.memory.asking import ask_until_accepted
from nanobot.memory.store import MemoryStore
from nanobot.memory.transcript import render_transcript
from nanobot.memory.validation import EchoSources, Refusal, check_note, schema_text
from nanobot.providers.base import LLMError, LLMProvider, LLMResponse
from nanobot.providers.tokens import count_text, count_tools, cut_to_tokens
from nanobot.util.text import truncate_middle, truncate_tail
from nanobot.util.tool_args import first_string_arg

NO_REPLY = "NO_REPLY"
FLUSH_MAX_TOKENS = 1024  # the notes of one flush; never more than agents.defaults.maxTokens
FLUSH_SLACK_TOKENS = 256  # messages' overhead and a refused first answer, beside the prompt
MAX_DAILY_CONTEXT_CHARS = 4000
MAX_MEMORY_CONTEXT_CHARS = 12_000  # of MEMORY.md, head and tail

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

RETRY_NOTE = """Your previous answer was refused: {reason}.
Call write_daily_note again with your own '- ' bullets, or reply exactly NO_REPLY."""


class MemoryFlusher:
    def __init__(
        self,
        provider: LLMProvider,
        memory: MemoryStore,
        *,
        max_tokens: int = FLUSH_MAX_TOKENS,
        budget_tokens: int | None = None,
        small_model: bool = False,
    ) -> None:
        self.provider = provider
        self.memory = memory
        self.max_tokens = max_tokens
        self.budget_tokens = budget_tokens  # the prompt budget: the request is cut to fit it
        self._small_model = small_model

    @property
    def small_model(self) -> bool:
        """The small-model profile (plain-text questions): configured, or a model that refuses tools."""
        return small_profile.in_plain_text(self._small_model, self.provider)

    async def flush(self, messages: list[dict[str, Any]], *, private: bool) -> bool:
        """Run the flush turn. True when it completed (with or without notes), False on failure."""
        transcript = render_transcript(messages)
        forgets = self.memory.forget_count  # a fact forgotten while the model writes stays out
        try:
            if self.small_model:
                notes = await self._small(messages, transcript)
            else:
                notes = await self._with_tool(messages, transcript, private)
        except LLMError as exc:
            logger.warning("memory flush failed: {}", exc)
            return False
        if isinstance(notes, Refusal):
            return False
        for note in notes:
            self.memory.append_daily(note, forgotten_since=forgets)
        logger.info("memory flush: {}", f"{len(notes)} note(s) saved" if notes else "nothing to store")
        return True

    async def _with_tool(self, messages: list[dict[str, Any]], transcript: str, private: bool) -> list[str] | Refusal:
        today = self.memory.read(self.memory.daily_path().name)[-MAX_DAILY_CONTEXT_CHARS:]
        # read-only context against repeating a fact: its head and tail are enough, and the whole of a
        # MEMORY.md grown over months sent this prompt over the context window
        memory_md = truncate_middle(self.memory.read_memory(), MAX_MEMORY_CONTEXT_CHARS) if private else ""
        context = (
            f"## MEMORY.md (read-only)\n\n{memory_md or '(empty)'}\n\n"
            f"## Today's note so far\n\n{today or '(empty)'}\n\n"
        )
        if self.budget_tokens is not None:
            # on a small window the whole tail of the conversation went out and was refused, flush
            # after flush: the newest part is kept (the older is the first consolidation's)
            fixed = count_text(FLUSH_SYSTEM) + count_tools([WRITE_DAILY_NOTE_TOOL]) + count_text(RETRY_NOTE)
            context = cut_to_tokens(context, (self.budget_tokens - fixed) // 3, truncate_middle)
            transcript = cut_to_tokens(
                transcript,
                self.budget_tokens - fixed - count_text(context) - FLUSH_SLACK_TOKENS - self.max_tokens // 2,
                truncate_tail,
            )
        user = f"{context}## Conversation\n\n{transcript}"
        prompt = [{"role": "system", "content": FLUSH_SYSTEM}, {"role": "user", "content": user}]
        sources = EchoSources(schema_text(WRITE_DAILY_NOTE_TOOL), FLUSH_SYSTEM + RETRY_NOTE, transcript)
        return await ask_until_accepted(
            lambda p: self.provider.chat(p, [WRITE_DAILY_NOTE_TOOL], max_tokens=self.max_tokens, temperature=0.0),
            prompt,
            lambda response: self._check(response, sources),
            lambda p, refusal: [*p, {"role": "user", "content": RETRY_NOTE.format(reason=refusal.reason)}],
            what="memory flush",
        )

    async def _small(self, messages: list[dict[str, Any]], transcript: str) -> list[str] | Refusal:
        """The small-model profile: one plain question for fact bullets about what the user said."""
        text = small_profile.quoted_user_text(messages)
        sources = EchoSources(schema_text(WRITE_DAILY_NOTE_TOOL), small_profile.INSTRUCTIONS, transcript + "\n" + text)

        def check(reply: str) -> list[str] | Refusal:
            facts = small_profile.parse_facts(reply)
            if not facts:
                return []
            note = check_note("\n".join(facts), "daily note", sources)
            return note if isinstance(note, Refusal) else [note]

        return await small_profile.ask_checked(
            self.provider, text, small_profile.FACTS_QUESTION, check, Counter()
        )

    @staticmethod
    def _check(response: LLMResponse, sources: EchoSources) -> list[str] | Refusal:
        """The notes to append (maybe none), or the refusal of the first bad one."""
        notes = [
            first_string_arg(c.arguments, "content")
            for c in response.tool_calls
            if c.name == "write_daily_note"
        ]
        notes = [n for n in notes if n and n.strip() and n.strip() != NO_REPLY]
        text = (response.content or "").strip()
        lines = [line for line in text.splitlines() if line.strip()]
        if not notes and lines and all(line.lstrip().startswith(("-", "*")) for line in lines):
            notes = [text]  # a model that answered with the bullets instead of calling the tool
        checked = [check_note(n, "daily note", sources) for n in notes]
        refused = next((c for c in checked if isinstance(c, Refusal)), None)
        return refused or [c for c in checked if isinstance(c, str)]
