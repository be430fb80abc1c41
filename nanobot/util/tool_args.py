"""Decoding tool-call arguments, which models send as a dict, a JSON string or a list of one dict.

- `from_provider(raw)`: what an LLM response carried, as a dict when it decodes to one, else the raw
  text (kept so the tool registry can say precisely what was wrong).
- `parse_arguments(raw)`: a dict for a tool to run with, or a sentence saying why the arguments are
  unusable (the registry returns it to the model as the tool's error).
- `as_dict(raw)` / `first_string_arg(raw, key)`: lenient reading for internal tool calls (memory
  consolidation, session notes), where a list of one dict is also accepted.
"""

from __future__ import annotations

import json
from typing import Any

#: no tool takes arguments nested deeper; every later step (unicode repair, the schema check, the
#: session file) walks them recursively, and a few hundred levels ended the turn in RecursionError
MAX_ARGUMENT_DEPTH = 64
TOO_DEEP = "not usable: nested too deeply"


def nesting_depth(value: Any, stop_at: int = MAX_ARGUMENT_DEPTH) -> int:
    """How deep dicts and lists nest in `value` (a plain value: 0), counted without recursion up
    to just past `stop_at`."""
    deepest, level = 0, [value]
    while level and deepest <= stop_at:
        inner = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
        ]
        if not any(isinstance(item, (dict, list)) for item in level):
            break
        deepest += 1
        level = inner
    return deepest


def from_provider(raw: Any) -> dict[str, Any] | str:
    if isinstance(raw, dict):
        return raw if nesting_depth(raw) <= MAX_ARGUMENT_DEPTH else TOO_DEEP
    if not raw:
        return {}
    if isinstance(raw, list):  # decoded already by a server: JSON text again (its str() is Python's form)
        return json.dumps(raw) if nesting_depth(raw) <= MAX_ARGUMENT_DEPTH else TOO_DEEP
    try:
        parsed = json.loads(raw)
    except (TypeError, json.JSONDecodeError, RecursionError):  # nested too deep for the parser
        return str(raw)
    if isinstance(parsed, dict) and nesting_depth(parsed) > MAX_ARGUMENT_DEPTH:
        return str(raw)  # the registry says why, from the text
    return parsed if isinstance(parsed, dict) else str(raw)


def parse_arguments(arguments: Any) -> dict[str, Any] | str:
    """Tool-call arguments as a dict, or a message saying why they are not usable."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, dict):
        return arguments if nesting_depth(arguments) <= MAX_ARGUMENT_DEPTH else TOO_DEEP
    if isinstance(arguments, str):
        if arguments == TOO_DEEP:
            return TOO_DEEP
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return f"not valid JSON ({exc.msg} at position {exc.pos})"
        except RecursionError:
            return TOO_DEEP
        if isinstance(parsed, dict):
            return parsed if nesting_depth(parsed) <= MAX_ARGUMENT_DEPTH else TOO_DEEP
        return "expected a JSON object"
    return f"expected a JSON object, got {type(arguments).__name__}"


def decode_lenient(raw: Any) -> Any:
    """A JSON string decoded (None when it is not JSON); anything else as it is."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            return None
    return raw


def as_dict(raw: Any) -> dict[str, Any] | None:
    raw = decode_lenient(raw)
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        raw = raw[0]
    return raw if isinstance(raw, dict) else None


def first_string_arg(raw: Any, key: str) -> str | None:
    data = as_dict(raw)
    if data is None:
        return raw if isinstance(raw, str) and key == "content" and raw.strip() else None
    value = data.get(key)
    return value if isinstance(value, str) else None
