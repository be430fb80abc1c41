"""Opening an MCP transport (stdio, SSE, streamable HTTP) and keeping a stdio server's stderr tail."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections import deque
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlsplit

from loguru import logger

from nanobot.config.paths import TOOL_CACHE_FOLDERS
from nanobot.config.schema import MCPServerConfig
from nanobot.util.text import truncate_head

STDERR_TAIL_LINES = 20
STDERR_TAIL_MAX_CHARS = 2000
STDERR_DRAIN_WAIT_S = 0.5  # after a failed start: time for the reader thread to catch the last lines
HTTP_TIMEOUT_S = 30.0  # connect/write; tool calls have their own timeout (toolTimeout)
HTTP_READ_TIMEOUT_S = 300.0  # the server-to-client SSE stream may stay quiet for long
_EXPIRED_MESSAGES = frozenset({"session not found", "session terminated", "session expired"})
SESSION_ERROR_CODES = frozenset({-32600, -32001})  # invalid request (Python SDK), TypeScript SDK's
ERROR_TEXT_CHARS = 2000
CLIENT_CLOSED_MESSAGE = "Connection closed"  # the MCP client library's error when the transport ended


def detect_type(cfg: MCPServerConfig) -> str:
    """The transport: explicit ``type``, else stdio for a command, SSE for a URL ending in /sse."""
    if cfg.type:
        return cfg.type
    if cfg.command:
        return "stdio"
    if cfg.url:
        return "sse" if urlsplit(cfg.url).path.rstrip("/").endswith("/sse") else "streamableHttp"
    return ""


def is_connection_lost(exc: BaseException) -> bool:
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        # A restarted or idle-expired streamable-HTTP server answers 404: "Session not found" from the
        # server's body (-32600 from Python servers, -32001 from TypeScript ones), or "Session
        # terminated" synthesised by the client when there is no body. Only those words, whole: a
        # tool's own error ("checkout session expired") restarted the server and made the call twice.
        message = exc.message.lower().strip().rstrip(".").removeprefix("bad request: ")
        expired = exc.code in SESSION_ERROR_CODES and message in _EXPIRED_MESSAGES
        # -32000 is also JSON-RPC's generic "server error": a server's own (a tool that failed) was
        # taken for a lost connection, the server restarted and the call made twice. The client
        # library's own says "Connection closed".
        return (exc.code == CONNECTION_CLOSED and exc.message == CLIENT_CLOSED_MESSAGE) or expired
    return isinstance(exc, (OSError, EOFError)) or type(exc).__module__.split(".")[0] in ("anyio", "httpx2")


def describe_error(exc: BaseException) -> str:
    """One line's worth of what went wrong (a server's 3 MB error message became a 3 MB log line)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = truncate_head(str(exc) or type(exc).__name__, ERROR_TEXT_CHARS)
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"


class StderrTail:
    """A pipe for a stdio server's stderr: lines go to debug logs, the last few are kept for error reports.

    A pipe and a reader thread, not a file: a chatty server in a long-running gateway must not grow
    anything without bound, and a server that fails to start should say why in our report.
    """

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w")
        self._reader = os.fdopen(read_fd, "rb")
        self._server = server
        self._lines: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._thread = threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        """Each line cut to STDERR_TAIL_MAX_CHARS as it is read: ten lines of 100 MB, read whole,
        took the gateway from 70 MB to 1.2 GB and kept it there."""
        continued = False  # within a line longer than what one read takes: the rest is dropped
        with self._reader:
            while raw := self._reader.readline(STDERR_TAIL_MAX_CHARS):
                ends = raw.endswith(b"\n")
                if not continued:
                    line = raw.decode("utf-8", errors="replace").rstrip() + ("" if ends else " [...]")
                    if line.strip():
                        self._lines.append(line)
                        logger.debug("MCP server {} stderr: {}", self._server, line)
                continued = not ends

    def close_writer(self) -> None:
        """Drop our copy of the write end once the child holds its own (EOF then follows its exit)."""
        if not self.writer.closed:
            self.writer.close()

    async def tail(self, *, stopped_by_us: bool = False) -> str:
        """The last lines; `stopped_by_us` leaves out the launch shell's exit line, which after
        nanobot stopped a server that did not answer in time would blame the server's command."""
        self.close_writer()
        await asyncio.to_thread(self._thread.join, STDERR_DRAIN_WAIT_S)
        lines = [line for line in self._lines if not (stopped_by_us and line.startswith(EXIT_LINE_START))]
        return " | ".join(lines)[-STDERR_TAIL_MAX_CHARS:]


class HttpErrorStatus:
    """The last error status an HTTP server answered: the SDK reports a 401 and a 500 alike ("Server
    returned an error response"), and a user with a wrong token needs to hear which it was."""

    def __init__(self) -> None:
        self.last = ""

    async def on_response(self, response: Any) -> None:
        status = int(response.status_code)
        if status >= 400 and status != 405:  # 405: the server offers no GET event stream, as it may
            self.last = f"HTTP {status} {response.reason_phrase}".strip()
            if status in (401, 403):
                self.last += ": check the server's credentials (its headers in tools.mcpServers)"


EXIT_LINE_START = "nanobot: the MCP server command exited"


def stdio_launch(command: str, args: list[str]) -> tuple[str, list[str]]:
    """The command line that starts a stdio server, under a shell that kills the server's process
    group (its own: the SDK starts it in a new session) once the server exits. A helper the server
    started keeps its stdout open otherwise: the dead server then looks alive (every call waits
    out toolTimeout, no reconnect), and the SDK, which kills the group only while the server itself
    still runs, leaves the helper running after nanobot stops. A command that starts the server in
    the background and exits at once therefore cannot serve: the line the shell writes to stderr
    (shown in the start failure) says what happened."""
    script = (
        f'"$@"; echo "{EXIT_LINE_START} with status $?; what it started in the '
        'background is stopped with it (a stdio server must stay in the foreground)" >&2; kill -9 0'
    )
    return "/bin/sh", ["-c", script, "mcp-server", command, *args]


async def open_transport(
    stack: AsyncExitStack,
    kind: str,
    cfg: MCPServerConfig,
    stderr: StderrTail | None,
    http_status: HttpErrorStatus | None = None,
) -> tuple[Any, Any]:
    """Enter the transport for `kind` on `stack` and return its (read, write) streams."""
    if kind == "stdio":
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.stdio import get_default_environment

        if not cfg.command:
            raise ValueError("stdio server without a command")
        # The SDK passes only a safe default environment (PATH, HOME, ...) plus `env`: provider keys
        # and channel tokens of this process never reach the server. The download caches the
        # systemd unit sets do (npx and uvx cannot write the read-only home folder there).
        caches = {name: os.environ[name] for name in TOOL_CACHE_FOLDERS if os.environ.get(name)}
        env = {**caches, **cfg.env} or None
        path = (env or {}).get("PATH") or get_default_environment().get("PATH")
        if shutil.which(cfg.command, path=path) is None:
            raise FileNotFoundError(f"command not found: {cfg.command}")
        command, args = stdio_launch(cfg.command, list(cfg.args))
        # "replace": one byte of another encoding on stdout (a legacy file in a result) killed the
        # SDK's reader, and every later call of the server waited out toolTimeout, never reconnecting
        params = StdioServerParameters(command=command, args=args, env=env, encoding_error_handler="replace")
        try:
            if stderr is None:
                return await stack.enter_async_context(stdio_client(params))
            return await stack.enter_async_context(stdio_client(params, errlog=stderr.writer))
        finally:
            if stderr is not None:
                stderr.close_writer()
    if kind == "sse":
        from mcp.client.sse import sse_client

        if not cfg.url:
            raise ValueError("sse server without a url")
        return await stack.enter_async_context(sse_client(cfg.url, headers=dict(cfg.headers) or None))
    if kind == "streamableHttp":
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        if not cfg.url:
            raise ValueError("streamableHttp server without a url")
        timeout = httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S)
        hooks = {"response": [http_status.on_response]} if http_status is not None else {}
        http = httpx2.AsyncClient(headers=dict(cfg.headers), timeout=timeout, event_hooks=hooks)
        client = await stack.enter_async_context(http)
        return await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))
    raise ValueError("no transport: set command (stdio) or url (streamableHttp/sse)")
