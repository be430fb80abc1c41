"""`nanobot onboard`: create config.json (mode 0600) and the workspace from the bundled templates; on a
terminal (or with flags) also set up the provider and bot tokens (nanobot/cli/onboard_setup.py)."""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path
from typing import Annotated

import typer

from nanobot.cli.common import EXIT_USAGE, ConfigOption, config_path, err, fail, load_cli_config
from nanobot.config.loader import save_config
from nanobot.config.paths import ensure_workspace
from nanobot.config.schema import Config
from nanobot.util.fs import atomic_write, ensure_private_dir


def templates_dir() -> Path:
    return Path(str(files("nanobot") / "templates"))


def copy_templates(workspace: Path) -> list[Path]:
    """Copy template files that do not exist yet; never overwrite. Returns the files created."""
    created: list[Path] = []
    ensure_private_dir(workspace)  # 0700 before anything lands in it
    source = templates_dir()
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.suffix not in (".md",):
            continue
        target = workspace / path.relative_to(source)
        if target.exists():
            continue
        atomic_write(target, path.read_bytes())
        created.append(target)
    ensure_workspace(workspace)
    return created


def onboard(
    provider: Annotated[str, typer.Option(help="LLM provider: openai, anthropic, …, ollama, custom.")] = "",
    api_key: Annotated[str, typer.Option(help="The provider's API key.")] = "",
    api_base: Annotated[str, typer.Option(help="Base URL (custom: any OpenAI-compatible server).")] = "",
    model: Annotated[str, typer.Option(help="Model name (default: the provider's).")] = "",
    telegram_token: Annotated[str, typer.Option(help="Telegram bot token (enables Telegram).")] = "",
    discord_token: Annotated[str, typer.Option(help="Discord bot token (enables Discord).")] = "",
    no_check: Annotated[bool, typer.Option("--no-check", help="Do not check provider and tokens live.")] = False,
    config: ConfigOption = None,
) -> None:
    """Create config and workspace; on a terminal also ask for provider, key and bot tokens.

    Idempotent: existing files are never overwritten; given answers are merged into config.json.
    """
    from nanobot.cli import onboard_setup

    path = config_path(config)
    answers = onboard_setup.Answers(provider, api_key, api_base, model, telegram_token, discord_token)
    created_config = not path.exists()
    if created_config:
        # Defaults only: Config() would read NANOBOT_ variables (API keys, tokens) into the file.
        save_config(Config.model_construct(), path)
        err(f"Created config: {path}")
    else:
        merge = "; the given settings are merged in" if answers.any() else ""
        err(f"Config exists: {path} (left as it is{merge})")
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not answers.any()
    if interactive and created_config:
        answers = onboard_setup.ask(answers)
    checks_ok = True
    if answers.any():
        try:
            checks_ok = onboard_setup.apply(path, answers, check=not no_check)
        except ValueError as exc:
            fail(f"Error: {exc}", EXIT_USAGE)
    cfg = load_cli_config(path)
    workspace = cfg.workspace_path
    created = copy_templates(workspace)
    err(f"Workspace: {workspace} ({len(created)} file(s) created)")
    if not any(
        getattr(cfg.providers, n).api_key or getattr(cfg.providers, n).api_base
        for n in type(cfg.providers).model_fields
        if n != "local"
    ):
        err("Next: add an API key to the config, e.g. providers.openai.apiKey, then run: nanobot agent")
    if not checks_ok:
        fail("A check failed (see above); fix it in the config and run nanobot doctor.")
    if interactive and created_config and (answers.telegram_token or answers.discord_token):
        onboard_setup.offer_service(path)
