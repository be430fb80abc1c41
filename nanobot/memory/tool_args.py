"""Reading one argument out of tool-call arguments that may be a dict, a JSON string or a list."""

from __future__ import annotations

import json
from typing import Any


def as_dict(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        raw = raw[0]
    return raw if isinstance(raw, dict) else None


def first_string_arg(raw: Any, key: str) -> str | None:
    data = as_dict(raw)
    if data is None:
        return raw if isinstance(raw, str) and key == "content" and raw.strip() else None
    value = data.get(key)
    return value if isinstance(value, str) else None
