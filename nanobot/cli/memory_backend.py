"""`nanobot memory backend check`: the swap-flow check of the configured memory backend.

The manifest (backend, config hash, capabilities, scope mapping, step results) goes to stdout;
progress goes to stderr. Exit 0 when the check passes, 1 when it fails or stays pending, 2 on a
config error.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from nanobot.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ConfigOption,
    command_group,
    err,
    fail,
    load_cli_config,
)

app = command_group(help="Pluggable long-term memory backends.")


@app.command("check")
def check(
    ready_timeout_s: Annotated[
        float, typer.Option("--ready-timeout", min=0.1, help="Readiness wait (s).")
    ] = 60.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full report as JSON.")] = False,
    config_path: ConfigOption = None,
) -> None:
    """Run the swap flow: health, scope set-up, capabilities, isolation and write/read smoke tests."""
    from nanobot.memory.backends.contract import AdapterError
    from nanobot.memory.backends.evaluation.check import run_check

    config = load_cli_config(config_path)
    try:
        report = asyncio.run(run_check(config, ready_timeout_s=ready_timeout_s, progress=err))
    except AdapterError as exc:  # a setting the backend refuses before any step (a path out of the
        fail(f"Error: {exc}", EXIT_USAGE)  # workspace): a config error, exit 2 as the docs say
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False, indent=2, default=str))
    else:
        typer.echo(json.dumps(report.manifest, ensure_ascii=False, indent=2, default=str))
        for s in report.steps:
            mark = "ok" if s.ok else "FAILED"
            err(f"  {s.name}: {mark} ({s.latency_ms:.0f} ms){' — ' + s.detail if s.detail else ''}")
        err(f"memory backend {report.manifest['backend']}: {report.status}")
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)
