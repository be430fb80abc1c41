"""Real MCP servers for the tests, written with the official mcp SDK (MCPServer, formerly FastMCP).

Run as a script so the client under test talks to a separate process:
    python tests/fakes/mcp_servers.py stdio
    python tests/fakes/mcp_servers.py http PORT        (streamable HTTP on 127.0.0.1:PORT/mcp)
    python tests/fakes/mcp_servers.py sse PORT         (legacy SSE on 127.0.0.1:PORT/sse)
HTTPServerThread runs the streamable-HTTP server inside the test process instead (uvicorn in a thread):
no second start-up of the SDK (seconds of imports), and stop() + start() on the same port is a crash
and restart that loses every session.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

SCRIPT = Path(__file__).resolve()
HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0


def build_server(name: str = "fake") -> MCPServer:
    """A server with one tool per behaviour the client must handle."""
    server = MCPServer(name, log_level="WARNING")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Always fails with the given message.")
    def fail(message: str) -> str:
        raise ToolError(message)

    @server.tool(description="Sleep, then answer.")
    async def sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Kill the server process mid-call, unless the marker file already exists.")
    def crash(marker: str) -> str:
        if Path(marker).exists():
            return "survived"
        Path(marker).write_text("crashed once")
        os._exit(3)

    @server.tool(description="The value of an environment variable of the server process.")
    def getenv(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The value of an HTTP request header (HTTP transports only).")
    def header(name: str, ctx: Context) -> str:
        headers = ctx.headers or {}
        return str(headers.get(name.lower(), "<unset>"))

    @server.tool(description="Report the server's process id.")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(name="odd.name", description="A tool whose name needs sanitising.")
    def odd() -> str:
        return "odd ok"

    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"MCP test server did not listen on {HOST}:{port} within {timeout_s}s")


def start_http_server(port: int, flavour: str = "http") -> subprocess.Popen[bytes]:
    """Start the streamable-HTTP (or SSE) server in a subprocess and wait until it listens."""
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), flavour, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
    except TimeoutError:
        proc.kill()
        raise
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


class HTTPServerThread:
    """The test server on 127.0.0.1:<port>, served by uvicorn in a daemon thread: streamable HTTP at
    /mcp (flavour "http") or legacy SSE at /sse (flavour "sse")."""

    def __init__(self, flavour: str = "http", port: int | None = None) -> None:
        self.flavour = flavour
        self.port = port or free_port()
        self._server: object | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/{'sse' if self.flavour == 'sse' else 'mcp'}"

    def start(self) -> HTTPServerThread:
        import uvicorn

        mcp = build_server(f"fake-{self.flavour}")
        app = mcp.sse_app(host=HOST) if self.flavour == "sse" else mcp.streamable_http_app(host=HOST)
        config = uvicorn.Config(app, host=HOST, port=self.port, log_level="critical", lifespan="on")
        server = uvicorn.Server(config)
        self._server = server
        self._thread = threading.Thread(target=server.run, name="mcp-http-test-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the streamable-HTTP test server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop at once, dropping open streams and every session (a crash, as far as clients can tell)."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True  # type: ignore[attr-defined]
        server.force_exit = True  # type: ignore[attr-defined]
        thread.join(timeout=10)
        self._server = self._thread = None


def stdio_command() -> tuple[str, list[str]]:
    """The command and args that start the stdio server."""
    return sys.executable, [str(SCRIPT), "stdio"]


def main(argv: list[str]) -> None:
    server = build_server()
    mode = argv[0] if argv else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        server.run("streamable-http", host=HOST, port=int(argv[1]))
    elif mode == "sse":
        server.run("sse", host=HOST, port=int(argv[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
