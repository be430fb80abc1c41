"""Slash commands understood in every channel: the one list, and the one parser.

`/new`, `/stop`, `/help` and `/status` work in every channel and in `nanobot agent -m`. A message
is a command only when it is exactly one known command word (`/new`, `/stop@mybot`, ` /help `);
unknown slash text (e.g. `/etc/hosts?`) goes to the LLM as normal text. Channels use
`starts_with_command` for their group policy (a message that opens with a command addresses the
bot) and `COMMANDS` for the menu they register with their platform; the AgentLoop is the one
dispatcher that answers them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    description: str
    #: answered ahead of the session's queue (it acts on the turn that is running), not in order
    immediate: bool


_ALL = (
    Command("new", "Archive this conversation and start a fresh one (memory is kept)", immediate=False),
    Command("stop", "Cancel the reply that is being worked on", immediate=True),
    Command("status", "Model, session size, token use, background tasks", immediate=True),
    Command("help", "List these commands", immediate=True),
)
COMMANDS: dict[str, Command] = {c.name: c for c in _ALL}

HELP_TEXT = "nanobot commands:\n" + "\n".join(f"/{c.name} — {c.description}" for c in _ALL)


def _command_word(text: str) -> tuple[str | None, bool]:
    """(the known command the text opens with, whether that word is the whole message)."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None, False
    words = stripped[1:].split(maxsplit=1)
    if not words:
        return None, False
    name = words[0].split("@", 1)[0].lower()
    if name not in COMMANDS:
        return None, False
    return name, len(words) == 1


def for_another_bot(text: str, bot_username: str | None) -> bool:
    """`/new@other_bot`: a command meant for another bot in the same group (Telegram's form, which
    people type on Discord too); a command without `@` is everyone's."""
    first = text.strip().split(maxsplit=1)[0] if text.strip() else ""
    target = first.partition("@")[2] if first.startswith("/") else ""
    return bool(target) and target.lower() != (bot_username or "").lower()


def parse_command(text: str) -> str | None:
    """The command name for `/new`, `/stop@mybot`, ` /help `; None for anything else."""
    name, alone = _command_word(text)
    return name if alone else None


def answered_ahead(text: str) -> bool:
    """The text is a command answered ahead of every queue (`/stop`, `/status`, `/help`)."""
    name = parse_command(text)
    return name is not None and COMMANDS[name].immediate


def starts_with_command(text: str) -> bool:
    """The message opens with a known command word (`/new please` too): it addresses the bot."""
    return _command_word(text)[0] is not None
