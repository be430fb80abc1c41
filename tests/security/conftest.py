"""Fixtures for the attack tests: a NANOBOT_HOME with secrets in it, and exec tools per sandbox.

Every test here plays the steered model: it calls the real tools with the arguments an attacker
would choose and asserts on what comes back (and on what is left on disk).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.shell import ExecTool
from nanobot.config.schema import ExecToolConfig
from nanobot.sandbox import detect

PROVIDER_KEY = "sk-live-provider-key-0123456789abcdef"
BOT_TOKEN = "7000001:AAHsecretTelegramTokenForTests_xyz12"
ENV_KEY = "env-only-secret-value-7f3a9c"
OWNER = ToolContext(channel="telegram", chat_id="555", session_key="telegram:555", sender_id="555")
GROUP = ToolContext(
    channel="telegram", chat_id="-100123", session_key="telegram:-100123", sender_id="777", is_group=True
)
SANDBOXES = ("bwrap", "landlock")


def require_sandbox(mode: str) -> None:
    """Both sandboxes work on the machines CI runs on: a missing one is a failure, not a skip."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the exec sandbox is Linux-only")
    status = detect(mode)
    assert status.active == mode, f"sandbox {mode} is not available here: {status.detail}"


@pytest.fixture
def nano_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NANOBOT_HOME with a config.json holding real-looking secrets, a workspace with private files,
    a user HOME with its own secret, and the provider key in the daemon's environment."""
    user_home = tmp_path / "userhome"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_text("PRIVATE-SSH-KEY\n")
    monkeypatch.setenv("HOME", str(user_home))
    home = tmp_path / "nanohome"
    ws = home / "workspace"
    for sub in ("memory", "sessions", "cron", "memory/.backups", "media", "skills"):
        (ws / sub).mkdir(parents=True, exist_ok=True)
    config = {
        "providers": {"openai": {"apiKey": PROVIDER_KEY}},
        "channels": {"telegram": {"token": BOT_TOKEN}},
    }
    (home / "config.json").write_text(json.dumps(config))
    (ws / "memory" / "MEMORY.md").write_text("The owner's bank PIN is 4242.\n")
    (ws / "memory" / ".index.sqlite").write_bytes(b"index")
    (ws / "memory" / ".backups" / "MEMORY-1.md").write_text("old\n")
    (ws / "sessions" / "telegram_555.jsonl").write_text('{"role": "user", "content": "my private DM"}\n')
    (ws / "cron" / "jobs.json").write_text('{"jobs": []}\n')
    (ws / ".gateway.json").write_text('{"pid": 1}\n')
    (ws / ".gateway.lock").write_text("")
    monkeypatch.setenv("NANOBOT_HOME", str(home))
    monkeypatch.setenv("NANOBOT_PROVIDERS__ANTHROPIC__API_KEY", ENV_KEY)
    return home


def make_exec(home: Path, mode: str, **cfg: object) -> ExecTool:
    settings = {"sandbox": mode, "timeout_s": 10, "max_output_chars": 4000, **cfg}
    return ExecTool(
        home / "workspace",
        ExecToolConfig(**settings),
        restrict=True,
        private_dirs=(home,),
        private_files=(home / "config.json",),
    )
