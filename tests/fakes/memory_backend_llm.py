"""Scripted answers to the memory backends' structured LLM prompts, for FakeLLMServer.responder.

Facts are planted as `FACT-<n>: <text>` (as in memory_llm.py). The responder recognises:
- MemOS extraction (the fake MemOS server's mem-reader call): `{"memory list": [...]}`;
- mem0 fact extraction (JSON object `{"facts": [...]}`) and its memory-update step;
- Graphiti's JSON-schema prompts (entities, edges, dedupe, summaries, ...);
- anything else: nanobot's own memory calls through MemoryScript (save_memory, chat replies).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.fakes.memory_llm import MemoryScript, facts_in
from tests.fakes.memos_server import EXTRACTION_MARKER

FACT_TEXT_RE = re.compile(r"FACT-\d+:\s*((?:(?!FACT-\d)[^\n\]\"])*)")


def _text(body: dict[str, Any]) -> str:
    parts = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def fact_texts(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(1).strip().rstrip(" ;.") for m in FACT_TEXT_RE.finditer(text)))


class BackendScript:
    """Decides replies for every memory backend's prompts; counts calls by kind."""

    def __init__(self) -> None:
        self.base = MemoryScript()
        self.calls: Counter[str] = Counter()
        # backend-specific answerers: (request body, prompt text) -> reply, or None when not theirs
        self.answerers: dict[str, Callable[[dict[str, Any], str], Any]] = {}

    def responder(self, body: dict[str, Any]) -> dict[str, Any] | str:
        text = _text(body)
        if EXTRACTION_MARKER in text:
            self.calls["memos_extract"] += 1
            conversation = text.split("\n", 1)[1] if "\n" in text else text
            user_part = "\n".join(line for line in conversation.splitlines() if line.startswith("user:"))
            memories = [
                {
                    "key": f.split(" ")[0],
                    "memory_type": "PreferenceMemory" if "prefer" in f else "UserMemory",
                    "value": f"The user said: {f}",
                    "tags": ["fact"],
                }
                for f in fact_texts(user_part)
            ]
            return json.dumps({"memory list": memories, "summary": "; ".join(facts_in(user_part))})
        for name, answer in self.answerers.items():
            reply = answer(body, text)
            if reply is not None:
                self.calls[name] += 1
                return reply
        self.calls["nanobot"] += 1
        return self.base.decide(body)
