"""The `nanobot` command's entry point (the console script and `python -m nanobot`).

Before anything else is imported: as a container's PID 1, a minimal init stays in front
(nanobot/service/pid1.py); then the CLI of nanobot/cli/app.py runs.
"""

from __future__ import annotations


def main() -> None:
    from nanobot.service.pid1 import become_init_if_pid1

    become_init_if_pid1()
    import sys

    from nanobot.cli.early_signals import command_of, remember

    if command_of(sys.argv[1:]) == "gateway":
        remember()  # before the seconds of imports below: see early_signals.py
    from nanobot.cli.app import main as run_cli

    run_cli()
