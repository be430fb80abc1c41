"""MCP client tools: every configured server's tools appear as ``mcp_<server>_<tool>``.

MCPManager holds one MCPServerConnection per server (lazy connect, reconnect, timeouts; see
mcp_connection.py) and hands out MCPTool objects for the ToolRegistry. The ``mcp`` package is
imported lazily, on first connect: importing it costs seconds.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.agent.tools.base import Tool, ToolContext
from nanobot.agent.tools.mcp_connection import (
    RETRY_BASE_S,
    SHUTDOWN_TIMEOUT_S,
    ConnectionLost,
    MCPServerConnection,
)
from nanobot.agent.tools.mcp_naming import TOOL_NAME_RE, masked_schema, render_result, tool_enabled, tool_name
from nanobot.config.schema import MCPServerConfig
from nanobot.providers.tokens import count_tools
from nanobot.secrets import mask
from nanobot.util.tasks import finish_or_cancel

if TYPE_CHECKING:
    from nanobot.agent.tools.registry import ToolRegistry

__all__ = [
    "TOOL_NAME_RE",
    "ConnectionLost",
    "MCPManager",
    "MCPServerConnection",
    "MCPTool",
    "render_result",
    "tool_enabled",
    "tool_name",
]

MAX_DESCRIPTION_CHARS = 2000


class MCPTool(Tool):
    """One remote tool, called through its server's connection."""

    def __init__(self, conn: MCPServerConnection, remote: Any, name: str) -> None:
        self.name = name
        self.server = conn.name
        self.remote_name = remote.name
        fallback = f"Tool '{remote.name}' of MCP server '{conn.name}'."
        # A server's text goes to the model with every request and is shown by `mcp list`: a token
        # of its own config in a description (built from that config) was sent as it was
        self.description = mask(((remote.description or "").strip() or fallback)[:MAX_DESCRIPTION_CHARS])
        schema = masked_schema(dict(remote.input_schema or {}))
        schema["type"] = "object"
        if not isinstance(schema.get("properties"), dict):  # null or a list: no schema validator takes it
            schema["properties"] = {}
        self.parameters = schema
        self._conn = conn

    @property
    def connection(self) -> MCPServerConnection:
        return self._conn

    async def execute(self, ctx: ToolContext, /, **kwargs: Any) -> str:
        # positional-only: a remote tool's own argument named `ctx` (or `self`) is one of its arguments
        return await self._conn.call(self.remote_name, kwargs)


class MCPManager:
    """All configured MCP servers: lazy connection, tool discovery, status and shutdown.

    Tool definitions go with every request: past `schema_budget_tokens` (a share of the context
    window) the remaining tools are left out, server by server in name order, with a warning naming
    them. Two servers' 128 tools of 8,000-character schemas took 119k tokens, over the window
    before the first word, and every message failed with "send /new"."""

    def __init__(
        self,
        servers: dict[str, MCPServerConfig],
        retry_base_s: float = RETRY_BASE_S,
        schema_budget_tokens: int | None = None,
    ) -> None:
        self.connections = {
            name: MCPServerConnection(name, cfg, retry_base_s, servers) for name, cfg in sorted(servers.items())
        }
        self.schema_budget_tokens = schema_budget_tokens
        self._left_out_reported: tuple[str, ...] = ()
        self._registered: set[str] = set()  # names register_into put into a registry

    @staticmethod
    def _names(conn: MCPServerConnection) -> list[str]:
        """The wrapped names of a server's tools, in its listing's order (the last known list, also
        while idle or failed); they depend on nothing but the configured server names and its own
        listing (not on which servers are up, nor on enabledTools)."""
        return list(conn.tool_names)

    async def tools(self) -> list[Tool]:
        """Connect servers not yet connected (failed ones after their backoff) and return their tools."""
        await asyncio.gather(*(c.ensure_ready() for c in self.connections.values()))
        result: list[Tool] = []
        used, left_out = 0, []
        for conn in self.connections.values():
            if conn.state != "ready":
                continue
            for remote, name in zip(conn.remote_tools, self._names(conn), strict=True):
                try:
                    tool = MCPTool(conn, remote, name)
                except (RecursionError, ValueError, TypeError) as exc:  # a schema nested beyond reason
                    logger.warning("MCP server {}: tool {!r} skipped: {}", conn.name, remote.name, exc)
                    continue
                cost = count_tools([tool.to_schema()])
                if self.schema_budget_tokens is not None and used + cost > self.schema_budget_tokens:
                    left_out.append(name)
                    continue
                used += cost
                result.append(tool)
        self._report_left_out(tuple(left_out))
        return sorted(result, key=lambda t: t.name)

    def _report_left_out(self, left_out: tuple[str, ...]) -> None:
        if left_out and left_out != self._left_out_reported:
            logger.warning(
                "MCP: {} tool(s) left out, their definitions would pass {} tokens (a quarter of the "
                "context window; they go with every request): {}. Narrow the servers with enabledTools.",
                len(left_out),
                self.schema_budget_tokens,
                ", ".join(left_out[:10]) + (" ..." if len(left_out) > 10 else ""),
            )
        self._left_out_reported = left_out

    @property
    def listing_changes(self) -> int:
        """How often a server came back with another list of tools (register again when it moves)."""
        return sum(conn.listing_changes for conn in self.connections.values())

    async def register_into(self, registry: ToolRegistry) -> list[str]:
        """Register every available MCP tool; returns the names registered. A tool registered before
        that its server, up now, no longer lists is unregistered (a server upgraded while the gateway
        ran kept offering its old tools, and its new ones were "unknown"); a server that is down keeps
        its tools (it reconnects on their next call)."""
        tools = await self.tools()
        current = {t.name for t in tools}
        up = {conn for conn in self.connections.values() if conn.state == "ready"}
        for name in sorted(self._registered - current):
            tool = registry.get(name)
            if isinstance(tool, MCPTool) and tool.connection in up:
                registry.unregister(name)
                self._registered.discard(name)
        for tool in tools:
            registry.register(tool)
        self._registered |= current
        return [t.name for t in tools]

    def status(self) -> list[dict[str, Any]]:
        """One entry per server: name, type, state, error and its tools' wrapped names."""
        rows: list[dict[str, Any]] = []
        for conn in self.connections.values():
            names = sorted(self._names(conn))
            # a failing server's stderr often echoes its token: masked for every reader of the status
            error = mask(conn.error) if conn.error else conn.error
            row = {"name": conn.name, "type": conn.kind or "?", "state": conn.state, "error": error}
            rows.append(row | {"tools": names, "unmatched": list(conn.unmatched_patterns)})
        return rows

    async def aclose(self, timeout_s: float = SHUTDOWN_TIMEOUT_S * 2) -> None:
        """Close every session; bounded so a stubborn server cannot hang shutdown."""
        conns = list(self.connections.values())
        if not conns:
            return
        pending = await finish_or_cancel([asyncio.create_task(c.aclose()) for c in conns], timeout_s)
        if pending:
            logger.warning("MCP shutdown: {} server(s) did not close within {:.0f}s", len(pending), timeout_s)
