"""Where nanobot keeps things: NANOBOT_HOME, config.json and the workspace."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "NANOBOT_HOME"


def nanobot_home() -> Path:
    """The home folder: $NANOBOT_HOME, default ~/.nanobot."""
    raw = os.environ.get(HOME_ENV, "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".nanobot"


def default_config_path() -> Path:
    return nanobot_home() / "config.json"


def resolve_workspace(configured: str) -> Path:
    """The workspace folder: the configured path (``~`` expanded) or $NANOBOT_HOME/workspace."""
    if configured.strip():
        return Path(os.path.expandvars(configured)).expanduser().resolve()
    return (nanobot_home() / "workspace").resolve()


def session_file_name(key: str) -> str:
    """`telegram:123` -> `telegram_123.jsonl` (DESIGN A4); other unsafe characters become `_`."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key.replace(":", "_"))
    return f"{safe.strip('.') or 'session'}.jsonl"
