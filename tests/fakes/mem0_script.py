"""Scripted answers to mem0 2.2's additive extraction prompt (a JSON object, `{"memory": [...]}`)."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.memory_backend_llm import fact_texts

EXTRACTOR_MARKER = "You are a Memory Extractor"


def answer(body: dict[str, Any], text: str) -> str | None:
    """The extraction reply for a mem0 request, or None when the request is not mem0's."""
    if EXTRACTOR_MARKER not in text:
        return None
    assert (body.get("response_format") or {}).get("type") == "json_object", body.get("response_format")
    prompt = str(
        (body.get("messages") or [{}])[-1].get("content") or ""
    )  # the user prompt, not the system one
    new = re.search(r"## New Messages\n(.*?)\n## Observation Date", prompt, re.S)
    section = new.group(1) if new else ""
    try:
        messages = json.loads(section)
        user_text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    except (json.JSONDecodeError, AttributeError, TypeError):
        user_text = "\n".join(line for line in section.splitlines() if line.lower().startswith("user"))
    return json.dumps({"memory": [{"text": f"User: {fact}"} for fact in fact_texts(user_text)]})
