"""The provider and channel part of `nanobot onboard`: asked on a terminal, or given as flags.

Answers are merged into the raw config.json (keys the user wrote stay as they are), checked live the
way `nanobot doctor` checks them (one tiny completion, Telegram getMe, Discord /users/@me), and saved
with owner-only permissions. Without a terminal and without flags nothing is asked.
"""

from __future__ import annotations

import asyncio
import getpass
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanobot.cli.common import err
from nanobot.config.loader import load_config, read_config_dict, write_config_dict
from nanobot.config.sections.base import credential, endpoint_url
from nanobot.doctor import Check

PROVIDERS = ("openai", "anthropic", "openrouter", "gemini", "groq", "deepseek", "mistral", "ollama", "custom")
CHECK_TIMEOUT_S = 15.0


@dataclass
class Answers:
    provider: str = ""
    api_key: str = ""
    api_base: str = ""
    model: str = ""
    telegram_token: str = ""
    discord_token: str = ""

    def any(self) -> bool:
        return any(vars(self).values())


def ask(answers: Answers) -> Answers:
    """Fill what the flags left open, on the terminal (Enter skips a question)."""
    if not answers.provider:
        err(f"LLM provider ({', '.join(PROVIDERS)}; Enter to skip and use the demo model):")
        answers.provider = input("provider> ").strip().lower()
        while answers.provider and answers.provider not in PROVIDERS:
            err(f"unknown provider {answers.provider!r}; choose one of {', '.join(PROVIDERS)}")
            answers.provider = input("provider> ").strip().lower()
    if answers.provider == "custom" and not answers.api_base:
        answers.api_base = _ask_url("base URL of the OpenAI-compatible server (http://…/v1)> ")
    if answers.provider == "ollama" and not answers.api_base:
        answers.api_base = _ask_url("Ollama URL [http://127.0.0.1:11434]> ") or "http://127.0.0.1:11434"
    if answers.provider and answers.provider != "ollama" and not answers.api_key:
        answers.api_key = _ask_secret("API key (not shown; Enter for none)> ")
    if answers.provider and not answers.model:
        answers.model = input("model (Enter for the provider's default)> ").strip()
    if not answers.telegram_token:
        answers.telegram_token = _ask_secret("Telegram bot token from @BotFather (Enter to skip)> ")
    if not answers.discord_token:
        answers.discord_token = _ask_secret("Discord bot token (Enter to skip)> ")
    return answers


def _ask_url(prompt: str) -> str:
    """A URL typed on the terminal, asked again until it is one (Enter: none)."""
    while True:
        url = input(prompt).strip()
        try:
            return endpoint_url(url)
        except ValueError as exc:
            err(str(exc))


def _ask_secret(prompt: str) -> str:
    """A key or token typed on the terminal (not shown), asked again until it is one (Enter: none)."""
    while True:
        try:
            return credential(getpass.getpass(prompt))
        except ValueError as exc:
            err(str(exc))


def validate(answers: Answers) -> None:
    """ValueError with a user-facing reason when the answers cannot be used together."""
    if (answers.api_key or answers.api_base) and not answers.provider:
        raise ValueError("--api-key and --api-base need --provider (which provider they are for)")
    if answers.provider and answers.provider not in PROVIDERS:
        raise ValueError(f"unknown provider {answers.provider!r}; choose one of {', '.join(PROVIDERS)}")
    try:
        endpoint_url(answers.api_base)
    except ValueError as exc:
        raise ValueError(f"--api-base / apiBase: {exc}") from None
    for flag, value in (
        ("--api-key", answers.api_key),
        ("--telegram-token", answers.telegram_token),
        ("--discord-token", answers.discord_token),
    ):
        try:
            credential(value)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None


def merged(data: dict[str, Any], answers: Answers) -> dict[str, Any]:
    """`data` (the raw config.json) with the answers set, camelCase like the file."""
    def node(*keys: str) -> dict[str, Any]:
        cur = data
        for depth, key in enumerate(keys, 1):
            cur = cur.setdefault(key, {})
            if not isinstance(cur, dict):
                # its type only: a bare string there is often the old key or token itself
                raise ValueError(f"{'.'.join(keys[:depth])} in the config must be an object, not {type(cur).__name__}")
        return cur

    validate(answers)
    if answers.provider:
        node("agents", "defaults")["provider"] = answers.provider
        block = node("providers", answers.provider)
        if answers.api_key:
            block["apiKey"] = answers.api_key
        if answers.api_base:
            block["apiBase"] = answers.api_base
    if answers.model:
        node("agents", "defaults")["model"] = answers.model
    for name, token in (("telegram", answers.telegram_token), ("discord", answers.discord_token)):
        if token:
            block = node("channels", name)
            block.update(enabled=True, token=token)
    return data


async def _checks(path: Path, answers: Answers) -> list[Check]:
    from nanobot.doctor import remote

    cfg = load_config(path)
    jobs = []
    if answers.provider:
        jobs.append(remote.check_provider(cfg, path, CHECK_TIMEOUT_S))
    if answers.telegram_token:
        jobs.append(remote.check_telegram(cfg, CHECK_TIMEOUT_S))
    if answers.discord_token:
        jobs.append(remote.check_discord(cfg, CHECK_TIMEOUT_S))
    from nanobot.secrets import mask, register_config_secrets

    register_config_secrets(cfg)
    checks = list(await asyncio.gather(*jobs))
    for c in checks:
        c.detail = mask(c.detail)
    return checks


def apply(path: Path, answers: Answers, *, check: bool) -> bool:
    """Write the answers into config.json and check them live; False when a check failed."""
    data = merged(read_config_dict(path), answers)
    write_config_dict(path, data)
    err(f"Saved {path}")
    _say_if_a_gateway_runs(path)
    if not check:
        return True
    ok = True
    for c in asyncio.run(_checks(path, answers)):
        err(f"  {c.part}: {c.status} — {c.detail}")
        ok = ok and c.status != "fail"
    return ok


def _say_if_a_gateway_runs(path: Path) -> None:
    """A running gateway keeps the settings it started with: a rotated token was saved, checked
    "ok", and the bot stayed silent with no word of a restart."""
    from nanobot.config.loader import load_config
    from nanobot.errors import ConfigError
    from nanobot.service.config_watch import config_changed_note
    from nanobot.service.state import gateway_summary

    try:
        summary = gateway_summary(load_config(path).workspace_path)
    except (ConfigError, OSError):
        return
    if note := config_changed_note(summary, path):
        err(f"Note: {note}")


def offer_service(config_path: Path) -> int:
    """Offer `nanobot service install --user` (only on a terminal); its exit code (0 when declined)."""
    import shutil
    import subprocess
    import sys

    if shutil.which("systemctl") is None:  # a container, a system without systemd: nothing to install
        err("Next: run `nanobot gateway` (in Docker: `docker compose up -d`)")
        return 0
    reply = input("Install the gateway as a systemd user service now? [y/N]> ").strip().lower()
    if reply not in ("y", "yes"):
        err("Later: nanobot service install --user  (or run nanobot gateway yourself)")
        return 0
    command = [sys.executable, "-m", "nanobot", "service", "install", "--user", "-c", str(config_path)]
    return subprocess.run(command, check=False).returncode
