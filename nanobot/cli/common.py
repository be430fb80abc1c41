"""Helpers shared by the CLI command modules: config loading, exit codes, stderr output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from nanobot.config.loader import ConfigError, load_config
from nanobot.config.schema import Config

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (default: $NANOBOT_HOME/config.json)."),
]


def err(text: str) -> None:
    """A notice or error for the user: always stderr, so stdout carries only results."""
    print(text, file=sys.stderr, flush=True)


def fail(text: str, code: int = EXIT_FAILURE) -> NoReturn:
    err(text)
    raise typer.Exit(code)


def load_cli_config(path: Path | None) -> Config:
    """Load config or exit 2 with the key path and the problem (no traceback)."""
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(f"Error: {exc}", EXIT_USAGE)
