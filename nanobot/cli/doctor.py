"""`nanobot doctor [--fix] [--json]`: check the installation; exit 0 only when nothing failed.

The report goes to stdout (one line per part, or JSON with `--json`); exit 1 when a part failed.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from nanobot.cli.common import EXIT_FAILURE, EXIT_OK, ConfigOption, config_path, out, require_named_config

MARKS = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "skip": "skip"}


def doctor(
    fix: Annotated[bool, typer.Option("--fix", help="Repair what is safe: permissions, folders, the index.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: {healthy, checks: [...]}.")] = False,
    timeout_s: Annotated[float, typer.Option("--timeout", min=0.5, help="Seconds per network check.")] = 15.0,
    config: ConfigOption = None,
) -> None:
    """Check config, provider, channel tokens, sandbox, permissions, disk, gateway, service, index, MCP."""
    from nanobot.doctor import healthy, run_doctor

    require_named_config(config)  # as every command: a mistyped -c must not check the defaults
    checks = run_doctor(config_path(config), fix=fix, timeout_s=timeout_s)
    ok = healthy(checks)
    if as_json:
        print(json.dumps({"healthy": ok, "checks": [c.to_json() for c in checks]}, indent=2, ensure_ascii=False))
    else:
        width = max(len(c.part) for c in checks)
        for c in checks:
            out(f"{MARKS[c.status]}  {c.part.ljust(width)}  {c.detail}")
            if c.fixed:
                out(f"      {''.ljust(width)}  fixed: {c.fixed}")
        failed = [c.part for c in checks if c.status == "fail"]
        out("healthy" if ok else f"unhealthy: {', '.join(failed)}")
    raise typer.Exit(EXIT_OK if ok else EXIT_FAILURE)
