"""The `nanobot` command: a typer app that wires one module per command group.

Root options: `-c/--config` (also accepted after the subcommand), `-v/--verbose`, `-q/--quiet`,
`-V/--version`, and typer's shell completion (`--install-completion`, `--show-completion`).
User errors raised anywhere below are reported here once: message on stderr, the error's exit code.
"""

from __future__ import annotations

import codecs
import io
import locale
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from nanobot import __version__
from nanobot.cli import agent as agent_cmd
from nanobot.cli import config_cmd
from nanobot.cli import cron as cron_cmd
from nanobot.cli import doctor as doctor_cmd
from nanobot.cli import gateway as gateway_cmd
from nanobot.cli import health as health_cmd
from nanobot.cli import mcp as mcp_cmd
from nanobot.cli import memory as memory_cmd
from nanobot.cli import onboard as onboard_cmd
from nanobot.cli import pairing as pairing_cmd
from nanobot.cli import service as service_cmd
from nanobot.cli import skills as skills_cmd
from nanobot.cli import status as status_cmd
from nanobot.cli.common import (
    CONFIG_HELP,
    EXIT_INTERRUPTED,
    UserErrorGroup,
    log_level_override,
    set_root_log_level,
)
from nanobot.logs import setup_logging

app = typer.Typer(
    name="nanobot",
    cls=UserErrorGroup,
    help="nanobot: a small, fast, dependable personal AI assistant.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"nanobot {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    config: Annotated[Path | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging on stderr.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors on stderr.")] = False,
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    # `config` reaches the subcommands through their own -c option (see ConfigOption).
    set_root_log_level("DEBUG" if verbose else "ERROR" if quiet else None)
    setup_logging(log_level_override())  # None: the default (WARNING); the gateway applies logging.level


app.command("onboard")(onboard_cmd.onboard)
app.command("agent")(agent_cmd.agent)
app.command("gateway")(gateway_cmd.gateway)
app.command("status")(status_cmd.status)
app.command("health")(health_cmd.health)
app.command("doctor")(doctor_cmd.doctor)
app.add_typer(memory_cmd.app, name="memory", help="Search and maintain the memory index.")
app.add_typer(cron_cmd.app, name="cron", help="Manage scheduled jobs.")
app.add_typer(service_cmd.app, name="service", help="Install the gateway as a systemd service.")
app.add_typer(mcp_cmd.app, name="mcp", help="MCP servers and their tools.")
app.add_typer(skills_cmd.app, name="skills", help="Skills and their availability.")
app.add_typer(pairing_cmd.app, name="pairing", help="Admit unknown senders by their pairing code.")
app.add_typer(config_cmd.app, name="config", help="The configuration's JSON Schema.")


def _text_in_any_locale() -> None:
    """Under a locale whose encoding is not UTF-8 (Python turns only C/POSIX into UTF-8), piped
    Chinese was lost (U+FFFD in ASCII, mojibake in Latin-1) and printing a Chinese reply crashed:
    piped input is read as UTF-8 then, and what the terminal cannot show is replaced, not fatal. Arguments
    stay as Python read them (a path in the locale's bytes must open); the message texts among them
    are decoded where they are taken (`typed_text`)."""
    if codecs.lookup(locale.getpreferredencoding(False)).name == "utf-8":
        return
    if isinstance(sys.stdin, io.TextIOWrapper) and codecs.lookup(sys.stdin.encoding).name != "utf-8":
        # terminals and pipes carry UTF-8 more often than the locale says (an ssh session with
        # LANG=C): read as UTF-8, a line that is not read in the locale's encoding (typed_line)
        sys.stdin.reconfigure(encoding="utf-8", errors="surrogateescape")
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")


#: the standard streams the command was started without ("stdin", "stdout", "stderr")
CLOSED_AT_START: set[str] = set()


def _standard_streams() -> None:
    """A command started with stdin, stdout or stderr closed (`2>&-`, a supervisor that gives none)
    gets /dev/null in its place: `status 2>&-` printed nothing (the log had nowhere to go) and `agent
    -m hi <&-` ended in a traceback."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        CLOSED_AT_START.add(name)
        mode = "r" if fd == 0 else "w"
        try:
            os.fstat(fd)
        except OSError:  # closed: /dev/null takes its place (the lowest free descriptor is `fd`)
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null == fd:
                setattr(sys, name, open(fd, mode, encoding="utf-8", errors="replace"))  # noqa: SIM115
                continue
            os.close(null)
        # something else holds the descriptor now: a stream of its own on /dev/null
        setattr(sys, name, open(os.devnull, mode, encoding="utf-8", errors="replace"))  # noqa: SIM115


def main() -> None:
    _standard_streams()
    _text_in_any_locale()
    try:
        app(prog_name="nanobot")
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
