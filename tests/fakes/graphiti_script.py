"""Scripted answers to Graphiti 0.31's JSON-schema prompts (OpenAIGenericClient, `response_format`
json_schema with the response model's name).

Entities and facts come from `FACT-<n>: <text>` in the episode's CURRENT_MESSAGE: the user plus
the fact's last word are the entities, one edge per fact (`User: <text>`, valid from the
episode's reference time). Every other schema (dedupe, summaries, timestamps, ...) gets the
schema's minimal valid instance: nothing is a duplicate, nothing is invalidated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.memory_backend_llm import fact_texts

USER_ENTITY = "User"


def _section(text: str, tag: str) -> str:
    m = re.search(rf"<{tag}>\n?(.*?)\n?</{tag}>", text, re.S)
    return m.group(1) if m else ""


def _object_of(fact: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", fact)
    return words[-1] if words else "thing"


def minimal(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """The smallest instance a JSON schema accepts (required fields only)."""
    if "$ref" in schema:
        return minimal(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return (
            None
            if any(s.get("type") == "null" for s in schema["anyOf"])
            else minimal(schema["anyOf"][0], defs)
        )
    kind = schema.get("type")
    if kind == "object":
        required = schema.get("required", [])
        return {k: minimal(v, defs) for k, v in schema.get("properties", {}).items() if k in required}
    return {"array": [], "string": "", "integer": 0, "number": 0, "boolean": False}.get(kind)


def answer(body: dict[str, Any], text: str) -> str | None:
    spec = (body.get("response_format") or {}).get("json_schema") or {}
    name, schema = spec.get("name"), spec.get("schema") or {}
    if not name:
        return None
    prompt = str(body["messages"][-1].get("content") or "")
    current = _section(prompt, "CURRENT_MESSAGE")
    user_lines = "\n".join(line for line in current.splitlines() if not line.lower().startswith("assistant"))
    facts = fact_texts(user_lines)
    if name == "ExtractedEntities":
        names = [USER_ENTITY, *(_object_of(f) for f in facts)] if facts else []
        return json.dumps(
            {
                "extracted_entities": [
                    {"name": n, "entity_type_id": 0, "episode_indices": [0]} for n in dict.fromkeys(names)
                ]
            }
        )
    if name == "ExtractedEdges":
        stamp = _section(prompt, "REFERENCE_TIME").split("#")[0].strip().replace(" ", "T")
        return json.dumps(
            {
                "edges": [
                    {
                        "source_entity_name": USER_ENTITY,
                        "target_entity_name": _object_of(f),
                        "relation_type": "STATED",
                        "fact": f"User: {f}",
                        "valid_at": stamp or None,
                        "invalid_at": None,
                        "episode_indices": [0],
                    }
                    for f in facts
                ]
            }
        )
    return json.dumps(minimal(schema, schema.get("$defs", {})))
