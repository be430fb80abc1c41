"""The `nanobot` command: a typer app that wires one module per command group."""

from __future__ import annotations

import sys

import typer

from nanobot.cli import agent as agent_cmd
from nanobot.cli import gateway as gateway_cmd
from nanobot.cli import onboard as onboard_cmd
from nanobot.cli import status as status_cmd
from nanobot.logs import setup_logging

app = typer.Typer(
    name="nanobot",
    help="nanobot: a small, fast, dependable personal AI assistant.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging on stderr."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and errors on stderr."),
) -> None:
    setup_logging("DEBUG" if verbose else "WARNING" if quiet else None)


app.command("onboard")(onboard_cmd.onboard)
app.command("agent")(agent_cmd.agent)
app.command("gateway")(gateway_cmd.gateway)
app.command("status")(status_cmd.status)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
