"""Tool interface: a name, a JSON schema and an async execute that returns text for the LLM."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nanobot.memory.seam import memory_private

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


Trust = Literal["owner", "shared"]


def trust_of(is_group: bool, guest: bool = False) -> Trust:
    """The one rule: group chats and strangers a `dmPolicy: "open"` lets in (guests) are shared
    contexts; private chats of allowed or paired senders and the terminal are the owner's."""
    return "shared" if is_group or guest else "owner"


@dataclass(frozen=True)
class ToolContext:
    """Who a tool call is for: the chat the turn belongs to, and how far it is trusted."""

    channel: str = "cli"
    chat_id: str = "direct"
    session_key: str = "cli:direct"
    sender_id: str = "user"
    is_group: bool = False
    guest: bool = False
    #: 0 for a user's message; n for the report of a sub-agent started n levels down
    spawn_depth: int = 0

    @property
    def trust(self) -> Trust:
        return trust_of(self.is_group, self.guest)

    def owner_memory_allowed(self, share_in_groups: bool) -> bool:
        """Whether the owner's memory may be read from this chat (the rule: memory.seam.memory_private)."""
        return memory_private(self.is_group, share_in_groups, self.guest)

    @property
    def shared(self) -> bool:
        return self.trust == "shared"


class ToolError(Exception):
    """A failure to report to the LLM as the tool's result (the turn goes on)."""


def expand_home(raw: str) -> Path:
    """`raw` with a leading `~` or `~user` expanded; a user with no home folder here is a ToolError
    (Path.expanduser's RuntimeError failed the whole turn of a group that asked for `~bob/x`)."""
    try:
        return Path(raw).expanduser()
    except RuntimeError:
        raise ToolError(f"'{raw.split('/', 1)[0]}' names no home folder on this machine") from None


class Tool(ABC):
    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    @abstractmethod
    async def execute(self, ctx: ToolContext, **kwargs: Any) -> str:
        """Run the tool; raise ToolError for an expected failure."""

    def to_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, args: dict[str, Any]) -> list[str]:
        """Problems with `args` against the schema (empty when valid)."""
        return validate_against_schema(args, self.parameters, "")


def validate_against_schema(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """A small JSON-schema subset: type, required, properties, enum, items, minimum/maximum. A
    schema that is not an object (`true`, `false`: valid JSON Schema, seen in MCP servers) checks
    nothing here."""
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    where = path or "arguments"
    expected = schema.get("type")
    if isinstance(expected, str) and expected in _JSON_TYPES:
        ok = isinstance(value, _JSON_TYPES[expected])
        if expected in ("integer", "number") and isinstance(value, bool):
            ok = False
        if not ok:
            return [f"{where}: expected {expected}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: must be one of {schema['enum']}")
    if isinstance(value, float) and not math.isfinite(value):  # JSON from a model may say NaN
        return [f"{where}: must be a finite number, got {value}"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: must be <= {schema['maximum']}")
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") or []
        for key in required:
            if key not in value:
                errors.append(f"{path + '.' if path else ''}{key}: required")
        for key, sub in props.items():
            # null stands for "not given" in an optional argument; a required one is checked (a
            # schema that allows null says so in its type list, which is not checked here)
            if key in value and (value[key] is not None or key in required):
                errors.extend(validate_against_schema(value[key], sub, f"{path + '.' if path else ''}{key}"))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors.extend(validate_against_schema(item, schema["items"], f"{where}[{i}]"))
    return errors
