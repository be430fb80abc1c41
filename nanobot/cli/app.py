"""The `nanobot` command: a typer app that wires one module per command group."""

from __future__ import annotations

import sys

import typer

from nanobot.cli import agent as agent_cmd
from nanobot.cli import config_cmd
from nanobot.cli import cron as cron_cmd
from nanobot.cli import gateway as gateway_cmd
from nanobot.cli import health as health_cmd
from nanobot.cli import mcp as mcp_cmd
from nanobot.cli import memory as memory_cmd
from nanobot.cli import onboard as onboard_cmd
from nanobot.cli import pairing as pairing_cmd
from nanobot.cli import service as service_cmd
from nanobot.cli import skills as skills_cmd
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
app.command("health")(health_cmd.health)
app.add_typer(memory_cmd.app, name="memory", help="Search and maintain the memory index.")
app.add_typer(cron_cmd.app, name="cron", help="Manage scheduled jobs.")
app.add_typer(service_cmd.app, name="service", help="Install the gateway as a systemd service.")
app.add_typer(mcp_cmd.app, name="mcp", help="MCP servers and their tools.")
app.add_typer(skills_cmd.app, name="skills", help="Skills and their availability.")
app.add_typer(pairing_cmd.app, name="pairing", help="Admit unknown senders by their pairing code.")
app.add_typer(config_cmd.app, name="config", help="The configuration's JSON Schema.")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
