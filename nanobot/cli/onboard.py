"""`nanobot onboard`: create config.json (mode 0600) and the workspace from the bundled templates; on a
terminal (or with flags) also set up the provider and bot tokens (nanobot/cli/onboard_setup.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from nanobot.cli.common import EXIT_USAGE, ConfigOption, config_path, err, fail, load_cli_config
from nanobot.config.loader import emptied_config, write_config_dict
from nanobot.config.paths import secure_installation, workspace_problem
from nanobot.config.schema import Config
from nanobot.config.templates import copy_templates
from nanobot.providers.registry import credentials_gap
from nanobot.util.fs import ensure_private_dir


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
    # pasted keys and tokens come with spaces around them (the questions strip their answers too)
    given = (provider, api_key, api_base, model, telegram_token, discord_token)
    answers = onboard_setup.Answers(*(value.strip() for value in given))
    try:
        onboard_setup.validate(answers)  # before anything is written
    except ValueError as exc:
        fail(f"Error: {exc}", EXIT_USAGE)
    if path.is_symlink() and not path.exists():  # a dotfiles link whose target is not there yet
        try:
            path = path.resolve()
            ensure_private_dir(path.parent)
        except (OSError, RuntimeError) as exc:
            fail(f"Error: {config_path(config)} is a link that leads nowhere usable ({exc})", EXIT_USAGE)
    if problem := workspace_problem(path.parent):  # NANOBOT_HOME a file: "[Errno 20]", exit 1
        fail(f"Error: the config's folder {path.parent}: {problem}", EXIT_USAGE)
    created_config = not path.exists() or emptied_config(path)  # an emptied file is made again
    interactive = sys.stdin.isatty() and sys.stdout.isatty() and not answers.any()
    # On a terminal the questions come whenever no provider is set up yet (the quick start's own
    # onboard, without a terminal, has made the file by then), and before anything is written: a
    # typo is asked again, Ctrl-C leaves nothing half done.
    asked = interactive and (created_config or not _provider_configured(load_cli_config(path)))
    if asked:
        answers = onboard_setup.ask(answers)
    if created_config:
        # Only what differs from the defaults goes into the file: a file holding every default would
        # keep this release's values for good, and a later release's better ones would never apply.
        write_config_dict(path, {})
        err(f"Created config: {path}")
    else:
        what = "the given settings are merged in" if answers.any() else "left as it is"
        err(f"Config exists: {path} ({what})")
    checks_ok = True
    if answers.any():
        try:
            checks_ok = onboard_setup.apply(path, answers, check=not no_check)
        except ValueError as exc:
            fail(f"Error: {exc}", EXIT_USAGE)
    cfg = load_cli_config(path)
    workspace = cfg.workspace_path
    created = copy_templates(workspace)
    secure_installation(workspace)  # a NANOBOT_HOME made by someone else (a Docker volume) too
    err(f"Workspace: {workspace} ({len(created)} file(s) created)")
    gap = credentials_gap(cfg.agents.defaults.provider, cfg.providers)
    if gap:
        err(f"Next: {gap}, then run: nanobot agent")
    elif not _provider_configured(cfg):
        err("Next: add an API key to the config, e.g. providers.openai.apiKey, then run: nanobot agent")
    if not checks_ok:
        fail("A check failed (see above); fix it in the config and run nanobot doctor.")
    if asked and (answers.telegram_token or answers.discord_token):
        code = onboard_setup.offer_service(path)
        if code:
            fail("The service was not installed (see above); the config and workspace are ready.", code)


def _provider_configured(cfg: Config) -> bool:
    """Some provider other than the embedded model has a key or a base URL."""
    return any(
        getattr(cfg.providers, n).api_key or getattr(cfg.providers, n).api_base
        for n in type(cfg.providers).model_fields
        if n != "local"
    )
