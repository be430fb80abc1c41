"""A deterministic "LLM" for memory tests and benchmarks: it recognises nanobot's memory calls.

Facts are planted in conversation as `FACT-<n>: <text>`. The responder:
- consolidation (`save_memory` offered): history entry naming the facts of the chunk, and a
  MEMORY.md that keeps the current facts and adds the chunk's facts;
- flush (`write_daily_note` offered): bullets for facts not yet in MEMORY.md or today's note,
  or `NO_REPLY` when there are none;
- session notes (`save_session_note` offered): a slug and a summary listing the facts;
- compaction summaries (no tools, "Running summary" in the prompt): the facts seen so far;
- anything else: a chat reply (`reply_text`).
It works both as a FakeLLMServer responder (HTTP, through litellm) and as an in-process provider.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from typing import Any

from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall, Usage

FACT_RE = re.compile(r"FACT-\d+:[^.\n\]]*")


def facts_in(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0).strip() for m in FACT_RE.finditer(text)))


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All message texts of a request, one after another (content parts flattened)."""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def prompt_section(text: str, heading: str) -> str:
    """The body under a `## heading` of a memory prompt (empty when absent)."""
    match = re.search(rf"## {re.escape(heading)}[^\n]*\n(.*?)(?=\n## |\Z)", text, re.S)
    return match.group(1) if match else ""


class MemoryScript:
    """Decides the reply for a chat-completion request body (OpenAI shape)."""

    def __init__(self, reply_text: str = "ok", *, p_drop: float = 0.0, seed: int = 0) -> None:
        self.reply_text = reply_text
        # Like a real model, note a new fact without its detail (its last word) with probability
        # p_drop: decided once per fact, so later consolidations do not bring the detail back.
        self.p_drop = p_drop
        self._rng = random.Random(seed)
        self._noted: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        self.fail_consolidation = 0  # fail this many consolidation calls (no tool call)
        self.fail_flush = False
        self.fail_notes = False
        self.shrink_memory = False  # answer consolidation with a MEMORY.md that drops old facts

    def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        """{"content": ..., "tool_calls": [{"name", "arguments"}]}"""
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        text = prompt_text(body.get("messages", []))
        if "save_memory" in tools:
            self.calls["consolidate"] += 1
            if self.fail_consolidation > 0:
                self.fail_consolidation -= 1
                return {"content": "I cannot do that right now."}
            current = prompt_section(text, "Current MEMORY.md")
            chunk = prompt_section(text, "Conversation chunk") or text
            new = facts_in(chunk)
            stamp = re.search(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})", chunk)
            entry = f"[{stamp.group(1) if stamp else '2026-01-01 00:00'}] Conversation covered " + (
                "; ".join(new) if new else "small talk") + "."
            kept = [] if self.shrink_memory else [line for line in current.strip().splitlines()
                                                  if line.strip() and line.strip() != "(empty)"]
            existing = set(facts_in("\n".join(kept)))
            lines = kept or ["# Long-term memory"]
            lines += [f"- {self._note(f)}" for f in new if f not in existing and self._note(f) not in existing]
            return {"content": None, "tool_calls": [{"name": "save_memory", "arguments": {
                "history_entry": entry, "memory_update": "\n".join(lines)}}]}
        if "write_daily_note" in tools:
            self.calls["flush"] += 1
            if self.fail_flush:
                return {"content": "error: cannot flush"}
            known = set(facts_in(prompt_section(text, "MEMORY.md") + prompt_section(text, "Today's note so far")))
            fresh = [f for f in facts_in(prompt_section(text, "Conversation")) if f not in known]
            if not fresh:
                return {"content": "NO_REPLY"}
            return {"content": None, "tool_calls": [{"name": "write_daily_note", "arguments": {
                "content": "\n".join(f"- {f}" for f in fresh)}}]}
        if "save_session_note" in tools:
            self.calls["notes"] += 1
            if self.fail_notes:
                return {"content": "no"}
            found = facts_in(text)
            return {"content": None, "tool_calls": [{"name": "save_session_note", "arguments": {
                "slug": "planted-facts", "title": "Planted facts",
                "summary": "\n".join(f"- {f}" for f in found) or "- small talk"}}]}
        if "Running summary so far" in text:
            self.calls["summary"] += 1
            return {"content": "\n".join(f"- {f}" for f in facts_in(text)) or "- nothing durable"}
        self.calls["chat"] += 1
        return {"content": self.reply_text}

    def _note(self, fact: str) -> str:
        if fact not in self._noted:
            dropped = self.p_drop > 0 and self._rng.random() < self.p_drop
            self._noted[fact] = fact.rsplit(" ", 1)[0] if dropped and " " in fact else fact
        return self._noted[fact]

    def responder(self, body: dict[str, Any]) -> dict[str, Any]:
        """For FakeLLMServer.responder."""
        return self.decide(body)


class MemoryScriptProvider(LLMProvider):
    """The same script in-process (no HTTP): for fast benchmarks."""

    name = "memory-script"

    def __init__(self, script: MemoryScript) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []

    @property
    def default_model(self) -> str:
        return "memory-script"

    async def chat(self, messages, tools=None, *, model=None, max_tokens=None, temperature=None,  # noqa: ANN001
                   tool_choice=None, on_delta=None) -> LLMResponse:
        await asyncio.sleep(0)  # a real provider yields to the event loop while it waits for the network
        body = {"messages": messages, "tools": tools or []}
        self.requests.append(body)
        decided = self.script.decide(body)
        calls = [ToolCall(id=f"call_{i}", name=c["name"], arguments=c["arguments"])
                 for i, c in enumerate(decided.get("tool_calls") or [])]
        return LLMResponse(content=decided.get("content"), tool_calls=calls, usage=Usage(10, 5))
