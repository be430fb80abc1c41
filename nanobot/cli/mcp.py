"""`nanobot mcp list`: connect to every configured MCP server and show its state and tools."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import typer

from nanobot.cli.common import ConfigOption, command_group, err, load_cli_config, out
from nanobot.config.schema import MCPServerConfig
from nanobot.util.text import truncate_head

app = command_group(help="MCP servers (tools.mcpServers).")

DESCRIPTION_PREVIEW_CHARS = 80


@app.callback()
def _group() -> None:
    """MCP servers (tools.mcpServers)."""


async def _probe(servers: dict[str, MCPServerConfig]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Connect once to every server; returns status rows and each tool's one-line description."""
    from nanobot.agent.tools.mcp import MCPManager

    manager = MCPManager(servers)
    try:
        tools = await manager.tools()
        return manager.status(), {t.name: t.description for t in tools}
    finally:
        await manager.aclose()


def _one_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return truncate_head(line, DESCRIPTION_PREVIEW_CHARS)


@app.command("list")
def list_servers(
    config: ConfigOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {servers: [{name, type, state, ...}]}."),
) -> None:
    """Show each MCP server with its transport, state and tools (connects to each once)."""
    cfg = load_cli_config(config)
    servers = cfg.tools.mcp_servers
    if not servers:
        err("No MCP servers configured (tools.mcpServers in config.json).")
        return
    limit_s = max(s.connect_timeout_s for s in servers.values())
    err(f"Connecting to {len(servers)} MCP server(s): {', '.join(servers)} (up to {limit_s:g}s; "
        "tools.mcpServers.<name>.connectTimeoutS)…")
    started = time.monotonic()
    rows, descriptions = asyncio.run(_probe(servers))
    ready = sum(1 for r in rows if r["state"] == "ready")
    err(f"{ready} of {len(rows)} ready after {time.monotonic() - started:.1f}s")
    if as_json:
        print(json.dumps({"servers": rows}, indent=2, ensure_ascii=False))
        return
    for row in rows:
        detail = f"{len(row['tools'])} tools" if row["state"] == "ready" else row["error"]
        out(f"{row['name']}  [{row['type']}]  {row['state']}  {detail}".rstrip())
        for name in row["tools"]:
            out(f"    {name}  {_one_line(descriptions.get(name, ''))}".rstrip())
