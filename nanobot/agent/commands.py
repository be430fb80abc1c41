"""Slash commands understood in every channel (DESIGN A3)."""

from __future__ import annotations

COMMANDS = ("new", "stop", "help", "status")

HELP_TEXT = """nanobot commands:
/new — archive this conversation and start a fresh one (memory is kept)
/stop — cancel the reply that is being worked on
/status — model, session size, token use, background tasks
/help — this list"""


def parse_command(text: str) -> str | None:
    """The command name for `/new`, `/stop@mybot`, ` /help `; None for anything else.

    Unknown slash text (e.g. `/etc/hosts?`) is not a command: it goes to the LLM as normal text.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or "\n" in stripped:
        return None
    word = stripped[1:].split(maxsplit=1)
    if not word or len(word) > 1:
        return None
    name = word[0].split("@", 1)[0].lower()
    return name if name in COMMANDS else None
