"""Consolidation: turn a chunk of conversation into a HISTORY.md entry and an updated MEMORY.md.

The LLM is asked to call `save_memory(history_entry, memory_update)` (DESIGN A5) with a forced
tool_choice (the provider falls back to `auto` when a model rejects forcing). Arguments may come as
a dict, a JSON string or a list. No tool call means failure: the caller leaves the pointer alone.
MEMORY.md is protected: an update that drops a large share of the existing facts is merged with
them (and logged) instead of silently losing them; lines the user asked to forget stay forgotten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from loguru import logger

from nanobot.memory.compaction import compact_transcript
from nanobot.memory.store import MemoryStore, normalise_fact
from nanobot.memory.transcript import render_transcript
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.util.tool_args import decode_lenient

#: share of existing MEMORY.md facts an update may drop before protection steps in
MAX_DROPPED_FACT_SHARE = 0.5
MIN_FACTS_FOR_PROTECTION = 4
KEPT_FACTS_HEADING = "## Kept from the previous version"

SAVE_MEMORY_TOOL = {
    "type": "function",
    "function": {
        "name": "save_memory",
        "description": "Save the consolidated memory: a history entry and the full new MEMORY.md.",
        "parameters": {
            "type": "object",
            "properties": {
                "history_entry": {
                    "type": "string",
                    "description": "2-5 sentences summarising the conversation chunk, starting with "
                    "[YYYY-MM-DD HH:MM]. Include names, decisions, dates and details useful for search.",
                },
                "memory_update": {
                    "type": "string",
                    "description": "The full new MEMORY.md (Markdown): the existing facts plus new durable "
                    "facts about the user, their preferences, people, projects and decisions.",
                },
            },
            "required": ["history_entry", "memory_update"],
        },
    },
}

CONSOLIDATION_SYSTEM = """You are the memory consolidation step of a personal assistant.
Read the conversation chunk and call save_memory exactly once:
- history_entry: 2-5 sentences starting with [YYYY-MM-DD HH:MM] (the chunk's time), useful for later search.
- memory_update: the complete new MEMORY.md. Keep every existing fact that is still true, add new
  durable facts (preferences, people, projects, decisions, dates). Remove a fact only when the
  conversation says it is wrong or the user asked to forget it. No chit-chat, no transient details."""

GROUP_NOTE = """This chunk comes from a group chat: write only history_entry content about it;
set memory_update to an empty string (group conversations never go into the owner's MEMORY.md)."""


@dataclass
class SaveMemoryArgs:
    history_entry: str
    memory_update: str | None


def normalise_save_memory_args(raw: Any) -> SaveMemoryArgs | None:
    """Accept a dict, a JSON string or a list (of one dict, or [history, memory]); None if unusable."""
    raw = decode_lenient(raw)
    if isinstance(raw, list):
        if raw and isinstance(raw[0], dict):
            raw = raw[0]
        elif len(raw) == 2 and all(isinstance(x, str) for x in raw):
            raw = {"history_entry": raw[0], "memory_update": raw[1]}
        else:
            return None
    if not isinstance(raw, dict):
        return None
    history = raw.get("history_entry")
    memory = raw.get("memory_update")
    if isinstance(memory, (dict, list)):
        memory = json.dumps(memory, ensure_ascii=False)
    if not isinstance(history, str) or not history.strip():
        return None
    return SaveMemoryArgs(history.strip(), memory if isinstance(memory, str) else None)


def _fact_lines(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#") and line.strip() != KEPT_FACTS_HEADING
    ]


def protect_memory(old: str, new: str, forgotten: set[str]) -> tuple[str, list[str]]:
    """The MEMORY.md to write and the facts that protection put back.

    Lines in `forgotten` (normalised) never survive, whatever the LLM wrote.
    """
    new_lines = [
        line for line in new.splitlines() if normalise_fact(line) not in forgotten or not line.strip()
    ]
    new = "\n".join(new_lines).strip()
    old_facts = [f for f in _fact_lines(old) if normalise_fact(f) not in forgotten]
    if len(old_facts) < MIN_FACTS_FOR_PROTECTION:
        return new, []
    new_norm = {normalise_fact(f) for f in _fact_lines(new)}
    dropped = [f for f in old_facts if normalise_fact(f) not in new_norm]
    if len(dropped) / len(old_facts) <= MAX_DROPPED_FACT_SHARE:
        return new, []
    merged = (
        new.rstrip()
        + ("\n\n" if new.strip() else "")
        + KEPT_FACTS_HEADING
        + "\n"
        + "\n".join(f if f.startswith(("-", "*")) else f"- {f}" for f in dropped)
    )
    return merged.strip(), dropped


def three_way_merge(base: str, ours: str, theirs: str) -> str:
    """Line-level merge for concurrent consolidations: `ours` plus the lines another writer added
    since `base`, minus the lines another writer removed since `base`."""
    base_set = {normalise_fact(x) for x in base.splitlines() if x.strip()}
    theirs_set = {normalise_fact(x) for x in theirs.splitlines() if x.strip()}
    ours_lines = [x for x in ours.splitlines()
                  if not x.strip() or normalise_fact(x) in theirs_set or normalise_fact(x) not in base_set]
    ours_set = {normalise_fact(x) for x in ours_lines if x.strip()}
    added = [x for x in theirs.splitlines() if x.strip() and normalise_fact(x) not in base_set
             and normalise_fact(x) not in ours_set]
    return "\n".join([*ours_lines, *added]).strip()


class Consolidator:
    def __init__(
        self,
        provider: LLMProvider,
        memory: MemoryStore,
        *,
        model: str | None = None,
        context_window_tokens: int = 65536,
        max_tokens: int = 8192,
    ) -> None:
        self.provider = provider
        self.memory = memory
        self.model = model
        self.context_window_tokens = context_window_tokens
        self.max_tokens = max_tokens

    async def consolidate(self, messages: list[dict[str, Any]], *, private: bool) -> bool:
        """Summarise `messages` into memory. True on success; False leaves everything as it was."""
        if not messages:
            return True
        memory_now = self.memory.read_memory() if private else ""
        overhead = len(memory_now) // 3 + 1500
        transcript = await compact_transcript(
            self.provider,
            messages,
            self.context_window_tokens,
            reserved_tokens=overhead + self.max_tokens // 4,
            model=self.model,
        )
        user = (f"## Current MEMORY.md\n\n{memory_now or '(empty)'}\n\n" if private else "") + (
            f"## Conversation chunk\n\n{transcript}"
        )
        system = CONSOLIDATION_SYSTEM + ("" if private else "\n\n" + GROUP_NOTE)
        try:
            response = await self.provider.chat(
                [{"role": "system", "content": system}, {"role": "user", "content": user}],
                [SAVE_MEMORY_TOOL],
                model=self.model,
                max_tokens=self.max_tokens,
                temperature=0.0,
                tool_choice={"type": "function", "function": {"name": "save_memory"}},
            )
        except LLMError as exc:
            logger.warning("consolidation call failed: {}", exc)
            return False
        call = next((c for c in response.tool_calls if c.name == "save_memory"), None)
        if call is None:
            logger.warning("consolidation: the model did not call save_memory; nothing changed")
            return False
        args = normalise_save_memory_args(call.arguments)
        if args is None:
            logger.warning("consolidation: save_memory arguments unusable: {}", str(call.arguments)[:200])
            return False
        self.memory.append_history(args.history_entry)
        if private and args.memory_update is not None and args.memory_update.strip() != memory_now.strip():
            self.apply_memory_update(memory_now, args.memory_update)
        return True

    def apply_memory_update(self, base: str, new: str) -> None:
        """Write the LLM's MEMORY.md, merged with whatever changed on disk since `base` was read."""
        if not new.strip() and base.strip():
            logger.warning("consolidation returned an empty MEMORY.md; keeping the existing one")
            return
        with self.memory.locked():
            current = self.memory.read_memory()
            if current.strip() != base.strip():
                new = three_way_merge(base, new, current)
            merged, kept = protect_memory(current, new, self.memory.forgotten())
            if kept:
                logger.warning("consolidation dropped {} existing fact(s) from MEMORY.md; kept them", len(kept))
            self.memory.write_memory(merged)

    def raw_archive(self, messages: list[dict[str, Any]], reason: str, max_chars: int = 6000) -> None:
        """Last resort after repeated failures: a raw, timestamped excerpt into HISTORY.md."""
        stamp = self.memory.now().strftime("%Y-%m-%d %H:%M")
        text = render_transcript(messages)
        if len(text) > max_chars:
            text = text[: max_chars // 2] + "\n[...]\n" + text[-max_chars // 2 :]
        self.memory.append_history(f"[{stamp}] [raw archive: {reason}; {len(messages)} messages]\n{text}")
