"""Helpers shared by the CLI command modules: the `-c` option, config loading, exit codes, stderr output.

`-c/--config` is accepted by the root command and by every subcommand (`nanobot -c X gateway` ==
`nanobot gateway -c X`); a subcommand's own `-c` wins. User errors (`nanobot.errors.UserError`) are
not caught here: they propagate to the one handler in nanobot/cli/app.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from loguru import logger
from typer.core import TyperGroup

from nanobot.config.loader import load_config
from nanobot.config.paths import default_config_path, workspace_problem
from nanobot.config.schema import LOG_LEVELS, Config
from nanobot.errors import EXIT_FAILURE, EXIT_USAGE, ConfigError, UserError, user_message
from nanobot.util.text import printable

EXIT_OK = 0
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE
__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "ConfigOption", "command_group",
           "config_path", "err", "fail", "load_cli_config", "log_level_override"]

LOG_LEVEL_ENV = "NANOBOT_LOG_LEVEL"
# Set by the root command's callback, which runs before any subcommand.
_root: dict[str, str | None] = {"log_level": None}


def _inherit_root_config(ctx: typer.Context, value: Path | None) -> Path | None:
    """A subcommand without its own -c uses the one given before the subcommand. A leading ~ is
    expanded here, once: the shell leaves `--config=~/x` alone, and the file was checked as
    ~/x but read as ./~/x (missing: the defaults ran, into another workspace)."""
    if value is None:
        root = ctx.find_root()
        value = root.params.get("config") if root is not ctx else None
    return Path(os.path.expanduser(value)) if value is not None else None


CONFIG_HELP = "Config file (default: $NANOBOT_HOME/config.json); also accepted before the subcommand."
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help=CONFIG_HELP, callback=_inherit_root_config),
]


def config_path(path: Path | None) -> Path:
    """The config file a command uses: its -c (the option inherits the root's), else the default."""
    return path or default_config_path()


def out(text: str) -> None:
    """A result line on stdout, without the control characters a terminal would act on: listings
    show text others wrote (a chat message in a snippet, a stranger's username, an MCP server's
    tool description), and an escape sequence there could clear the screen or write the clipboard."""
    print(printable(text))


def err(text: str) -> None:
    """A notice or error for the user: always stderr, so stdout carries only results."""
    print(printable(text), file=sys.stderr, flush=True)


def fail(text: str, code: int = EXIT_FAILURE) -> NoReturn:
    err(text)
    raise typer.Exit(code)


def require_named_config(path: Path | None) -> None:
    """A file named by -c must exist (ConfigError, exit 2): a mistyped path ran on the defaults."""
    if path is not None and not path.expanduser().exists():
        raise ConfigError(f"{path}: no such config file (`nanobot onboard -c {path}` creates one)")


def load_cli_config(path: Path | None, *, missing_ok: bool = False) -> Config:
    """Load the command's config; a bad one raises ConfigError, which the CLI reports (exit 2). Its
    secrets are registered for masking and its prompt-logging choice applied before anything logs.
    A file named by -c must exist (unless `missing_ok`): a mistyped path ran on the defaults, the
    demo model answering into the real workspace's session; the default path may be missing."""
    from nanobot.logs import set_prompt_logging
    from nanobot.secrets import register_config_secrets

    if not missing_ok:
        require_named_config(path)
    cfg = load_config(config_path(path))
    register_config_secrets(cfg)
    set_prompt_logging(cfg.logging.prompts)
    _check_workspace(cfg.workspace_path)
    return cfg


def _check_workspace(workspace: Path) -> None:
    """A workspace that is not a folder, or cannot be created, is a config error (exit 2), said in
    one line: every command failed later with a traceback and exit 1 (a restart loop under systemd)."""
    problem = workspace_problem(workspace)
    if problem:
        raise ConfigError(f"agents.defaults.workspace: cannot use {workspace}: {problem}")


def set_root_log_level(log_level: str | None) -> None:
    """Record the root command's -v/-q for the subcommand that follows."""
    _root["log_level"] = log_level


def log_level_override() -> str | None:
    """The level chosen on the command line (-v/-q) or by NANOBOT_LOG_LEVEL, in that order; None when
    neither is set (the gateway then uses logging.level, other commands WARNING)."""
    if _root["log_level"]:
        return str(_root["log_level"])
    env = os.environ.get(LOG_LEVEL_ENV, "").strip().upper()
    if env and env not in LOG_LEVELS:
        raise ConfigError(f"{LOG_LEVEL_ENV}: unknown log level {env.lower()!r}; choose one of "
                          f"{', '.join(LOG_LEVELS)}")
    return env or None


class UserErrorGroup(TyperGroup):
    """A command group whose subcommands run inside its invoke: user errors are reported here, once
    (the message on stderr, the error's exit code, no traceback)."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            err(user_message(exc))
            raise typer.Exit(exc.exit_code) from None
        except BrokenPipeError:
            # `nanobot agent -m hi | head -c 10`: the reader left, which is no error to report; the
            # exit status is a program's that SIGPIPE ended (a script with pipefail still sees it)
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())  # the interpreter's last flush must not fail too
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except OSError as exc:  # a folder it cannot write, a full disk: the system's words, no traceback
            logger.opt(exception=exc).debug("command failed")
            err(f"Error: {exc}")
            raise typer.Exit(EXIT_FAILURE) from None


def command_group(**kwargs: Any) -> typer.Typer:
    """A typer app for a command group (also when a test invokes the group on its own)."""
    return typer.Typer(cls=UserErrorGroup, no_args_is_help=True, **kwargs)
