"""A lossy, in-process stand-in for the model behind nanobot's memory calls (retention benchmark).

It behaves like a real model does, not like an oracle: it recognises a planted fact only when the
user's sentence is in what it is shown, then writes it in its own words (a paraphrase from the
fact's template), merges two new facts into one line, drops the fact's detail with probability
`p_drop` ("Has a dentist" without the name), leaves a fact out of the history entry at random,
and per call answers with no tool call (`p_no_tool`) or malformed arguments (`p_malformed`:
truncated JSON, a missing field, the schema's own text). Chat turns get a short reply.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall, Usage
from nanobot.providers.tokens import count_messages, count_tools
from tests.fakes.memory_llm import prompt_section, prompt_text

MEMORY_TOOLS = {"save_memory", "write_daily_note", "save_session_note"}
_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2})")


@dataclass(frozen=True)
class Fact:
    said: str  # what the user says
    question: str  # how the user later asks for it
    answer: str  # the detail that must come back
    paraphrase: str  # how a model would note it
    vague: str  # the same note with the detail dropped


class LossyModel(LLMProvider):
    name = "lossy-model"

    def __init__(self, facts: list[Fact], seed: int, *, p_drop: float = 0.2, p_merge: float = 0.2,
                 p_no_tool: float = 0.1, p_malformed: float = 0.1, p_history: float = 0.6) -> None:
        self.facts = facts
        self.rng = random.Random(seed)
        self.p_drop, self.p_merge, self.p_history = p_drop, p_merge, p_history
        self.p_no_tool, self.p_malformed = p_no_tool, p_malformed
        self.calls: Counter[str] = Counter()
        self.peak_prompt_tokens = 0

    @property
    def default_model(self) -> str:
        return "lossy-model"

    def _seen(self, text: str) -> list[Fact]:
        return [f for f in self.facts if f.said in text]

    def _note(self, fact: Fact) -> str:
        return fact.vague if self.rng.random() < self.p_drop else fact.paraphrase

    def _notes(self, facts: list[Fact]) -> list[str]:
        lines: list[str] = []
        i = 0
        while i < len(facts):
            if i + 1 < len(facts) and self.rng.random() < self.p_merge:
                a, b = self._note(facts[i]), self._note(facts[i + 1])
                lines.append(f"{a}; also {b[0].lower()}{b[1:]}")
                i += 2
            else:
                lines.append(self._note(facts[i]))
                i += 1
        return [f"- {line}" for line in lines]

    def _failure(self, kind: str, tool: str) -> dict[str, Any] | None:
        roll = self.rng.random()
        if roll < self.p_no_tool:
            self.calls[f"{kind}:no_tool"] += 1
            return {"content": "Sure, I have noted the important points of this conversation."}
        if roll < self.p_no_tool + self.p_malformed:
            self.calls[f"{kind}:malformed"] += 1
            broken = self.rng.choice([
                '{"history_entry": "[2026-01-01 10:00] The user',
                json.dumps({"history_entry": "ok"}),
                json.dumps({"history_entry": "The full new MEMORY.md (Markdown): the existing facts plus "
                            "new durable facts about the user", "memory_update": "<|im_end|>"}),
            ])
            return {"content": None, "tool_calls": [{"name": tool, "arguments": broken}]}
        return None

    def decide(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        names = {t["function"]["name"] for t in tools or []}
        text = prompt_text(messages)
        if "save_memory" in names:
            self.calls["consolidate"] += 1
            failed = self._failure("consolidate", "save_memory")
            if failed:
                return failed
            current = prompt_section(text, "Current MEMORY.md").strip()
            chunk = prompt_section(text, "Conversation chunk") or text
            new = [f for f in self._seen(chunk) if f.answer not in current and f.vague[2:] not in current]
            stamp = _STAMP.search(chunk)
            when = f"{stamp.group(1)} {stamp.group(2)}" if stamp else "2026-01-01 00:00"
            told = [f.paraphrase.lower() for f in new if self.rng.random() < self.p_history]
            entry = f"[{when}] The user and the assistant chatted about everyday plans. " + (
                f"The user mentioned that {'; '.join(told)}." if told else "Nothing else of note came up.")
            kept = [ln for ln in current.splitlines() if ln.strip() and ln.strip() != "(empty)"]
            lines = (kept or ["# Long-term memory"]) + self._notes(new)
            return {"content": None, "tool_calls": [{"name": "save_memory", "arguments": {
                "history_entry": entry, "memory_update": "\n".join(lines)}}]}
        if "write_daily_note" in names:
            self.calls["flush"] += 1
            failed = self._failure("flush", "write_daily_note")
            if failed:
                return failed
            known = prompt_section(text, "MEMORY.md") + prompt_section(text, "Today's note so far")
            fresh = [f for f in self._seen(prompt_section(text, "Conversation")) if f.answer not in known]
            if not fresh:
                return {"content": "NO_REPLY"}
            return {"content": None, "tool_calls": [{"name": "write_daily_note", "arguments": {
                "content": "\n".join(self._notes(fresh))}}]}
        if "save_session_note" in names:
            self.calls["notes"] += 1
            failed = self._failure("notes", "save_session_note")
            if failed:
                return failed
            seen = [f for f in self._seen(text) if self.rng.random() < self.p_history]
            summary = "\n".join(self._notes(seen)) or "- Everyday chat, nothing durable."
            return {"content": None, "tool_calls": [{"name": "save_session_note", "arguments": {
                "slug": "everyday-chat", "title": "Everyday chat", "summary": summary}}]}
        if "Running summary so far" in text:
            self.calls["summary"] += 1
            return {"content": "\n".join(self._notes(self._seen(text))) or "- small talk only"}
        self.calls["chat"] += 1
        return {"content": self.rng.choice(["Got it.", "Sounds good!", "Thanks for telling me.", "Okay."])}

    async def chat(self, messages, tools=None, *, model=None, max_tokens=None, temperature=None,  # noqa: ANN001
                   tool_choice=None, on_delta=None) -> LLMResponse:
        await asyncio.sleep(0)
        names = {t["function"]["name"] for t in tools or []}
        if tools and not names & MEMORY_TOOLS:  # a chat turn (memory calls have their own budget)
            used = count_messages(messages) + count_tools(tools)
            self.peak_prompt_tokens = max(self.peak_prompt_tokens, used)
        decided = self.decide(messages, tools)
        calls = [ToolCall(id=f"call_{i}", name=c["name"], arguments=c["arguments"])
                 for i, c in enumerate(decided.get("tool_calls") or [])]
        return LLMResponse(content=decided.get("content"), tool_calls=calls, usage=Usage(10, 5))
