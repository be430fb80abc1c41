"""Does the running gateway use the config on disk? A gateway reads config.json once, at start: a
key or bot token rotated in the file is used only after a restart. The gateway records a digest of
the settings it started with in its state file (`GatewayState.loaded_config`); `status`, `doctor`
and `onboard` compare it with the file (`config_changed_note`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def config_digest(path: Path) -> str | None:
    """sha256 of the config's settings (None when the file cannot be read): of its JSON in one
    canonical form, so a file written again with the same settings (onboard re-run) is no change;
    of its bytes when it is no JSON."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    try:
        raw = json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":")).encode()
    except (ValueError, RecursionError):
        pass
    return hashlib.sha256(raw).hexdigest()


def config_changed_note(summary: dict[str, Any], config_path: Path) -> str | None:
    """A sentence when the running gateway started with another version of `config_path` than the
    file holds now: a key or token rotated in the file is used only after a restart, and until then
    the chat said "check the API key in the config" of a key that was already right."""
    started = summary.get("config") or {}
    # the path as the gateway was given it (a re-pointed link changes what it names) or its target
    # then, against this path as given or resolved now: the same file named through another link
    # (NANOBOT_HOME a link, `cd` into it) is the same config
    recorded = {started.get("path"), started.get("target")} - {None}
    named = {os.path.abspath(config_path), str(Path(config_path).resolve())}
    if not summary.get("running") or not recorded & named:
        return None
    if config_digest(config_path) == started.get("sha256"):
        return None
    return (
        f"{Path(config_path).name} changed since the gateway (pid {summary.get('pid')}) started: restart it to "
        "use the change (`systemctl --user restart nanobot` for the user service, or stop and start "
        "`nanobot gateway`)"
    )
