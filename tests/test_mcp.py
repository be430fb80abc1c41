"""MCP client: naming and rendering units, then real SDK servers (stdio subprocess, streamable HTTP
and SSE on 127.0.0.1) for discovery, calls, errors, timeouts, crashes, reconnection and filtering."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger
from typer.testing import CliRunner

from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.mcp import TOOL_NAME_RE, MCPManager, render_result, tool_enabled, tool_name
from nanobot.agent.tools.mcp_transport import detect_type, is_connection_lost
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.cli.mcp import app as mcp_app
from nanobot.config.schema import MCPServerConfig
from tests.fakes import mcp_servers as fakes

CTX = ToolContext()


@pytest.fixture
def http_server() -> Iterator[fakes.HTTPServerThread]:
    server = fakes.HTTPServerThread("http").start()
    yield server
    server.stop()


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    yield lines
    logger.remove(sink)


def stdio_config(**kwargs: object) -> MCPServerConfig:
    command, args = fakes.stdio_command()
    return MCPServerConfig(command=command, args=args, **kwargs)


# ------------------------------------------------------------------------------------------ units


def test_tool_names_are_sanitised_bounded_and_unique() -> None:
    assert tool_name("my server", "read.file") == "mcp_my_server_read_file"
    long = tool_name("srv", "x" * 100)
    assert len(long) == 64 and TOOL_NAME_RE.match(long)
    assert long == tool_name("srv", "x" * 100)  # deterministic
    assert long != tool_name("srv", "x" * 99 + "y")  # the hash tells truncated names apart
    clash = tool_name("s", "a_b", taken={"mcp_s_a_b"})
    assert clash != "mcp_s_a_b" and TOOL_NAME_RE.match(clash)
    assert TOOL_NAME_RE.match(tool_name("ü/ñ", "héllo wörld!"))


def test_names_of_servers_whose_prefixes_overlap_never_clash() -> None:
    """Server `a` with tool `b_c` and server `a_b` with tool `c` both gave `mcp_a_b_c`: which one got
    the plain name depended on which was up, so a name switched servers between turns."""
    servers = ["a", "a_b", "other"]
    first, second = tool_name("a", "b_c", servers=servers), tool_name("a_b", "c", servers=servers)
    assert first != second and TOOL_NAME_RE.match(first) and TOOL_NAME_RE.match(second)
    assert first == tool_name("a", "b_c", taken={second}, servers=servers)  # whoever came first
    assert tool_name("other", "c", servers=servers) == "mcp_other_c"  # others keep plain names
    # enabledTools may name a tool as `mcp list` shows it (hashed): it was silently disabled
    shown = tool_name("a", "b_c", servers=servers)
    assert tool_enabled("a", "b_c", [shown], servers) and not tool_enabled("a_b", "c", [shown], servers)
    # and as earlier versions named it (unhashed): an upgrade switched such tools off silently
    assert tool_enabled("a", "b_c", ["mcp_a_b_c"], servers) and tool_enabled("a_b", "c", ["mcp_a_b_c"], servers)


async def test_tool_names_do_not_depend_on_which_servers_are_up(http_server: fakes.HTTPServerThread) -> None:
    manager = MCPManager(
        {"web": MCPServerConfig(url=http_server.url), "web_echo": MCPServerConfig(command="/nonexistent/x")},
        retry_base_s=60,
    )
    try:
        names = sorted(t.name for t in await manager.tools())
        assert "mcp_web_echo" not in names and any(n.startswith("mcp_web_echo_") for n in names)
        assert {row["name"]: row["tools"] for row in manager.status()}["web"] == names  # mcp list agrees
    finally:
        await manager.aclose()


async def test_tool_definitions_past_their_share_of_the_window_are_left_out(
    http_server: fakes.HTTPServerThread, warnings: list[str]
) -> None:
    """Every tool definition goes with every request: servers with hundreds of large schemas filled
    the window before the first word, and every message failed with "send /new"."""
    manager = MCPManager({"web": MCPServerConfig(url=http_server.url)}, schema_budget_tokens=150)
    try:
        names = [t.name for t in await manager.tools()]
        everything = MCPManager({"web": MCPServerConfig(url=http_server.url)})
        all_names = [t.name for t in await everything.tools()]
        await everything.aclose()
        assert 0 < len(names) < len(all_names)
        left_out = [w for w in warnings if "left out" in w]
        assert len(left_out) == 1 and "enabledTools" in left_out[0], warnings
        await manager.tools()
        assert len([w for w in warnings if "left out" in w]) == 1  # said once, not every turn
    finally:
        await manager.aclose()


def test_transport_type_is_detected_from_command_or_url() -> None:
    assert detect_type(MCPServerConfig(command="npx")) == "stdio"
    assert detect_type(MCPServerConfig(url="http://127.0.0.1:9/mcp")) == "streamableHttp"
    assert detect_type(MCPServerConfig(url="http://127.0.0.1:9/sse")) == "sse"
    assert detect_type(MCPServerConfig(type="sse", url="http://127.0.0.1:9/events")) == "sse"
    assert detect_type(MCPServerConfig()) == ""


def test_enabled_tools_are_globs_over_either_name() -> None:
    assert tool_enabled("fs", "read", ["*"])
    assert tool_enabled("fs", "read", ["read"]) and not tool_enabled("fs", "write", ["read"])
    assert tool_enabled("fs", "read_file", ["read_*"])
    assert tool_enabled("fs", "write", ["mcp_fs_write"])
    assert not tool_enabled("fs", "read", [])


def test_results_render_as_text() -> None:
    import mcp_types as t

    ok = t.CallToolResult(
        content=[
            t.TextContent(type="text", text="line one"),
            t.ImageContent(type="image", data="QUJD", mime_type="image/png"),
            t.EmbeddedResource(
                type="resource", resource=t.TextResourceContents(uri="file:///a.txt", text="embedded")
            ),
        ]
    )
    assert render_result(ok) == "line one\n[image image/png, 4 base64 chars]\nembedded"
    structured = t.CallToolResult(content=[], structured_content={"n": 1})
    assert render_result(structured) == '{"n": 1}'
    failed = t.CallToolResult(content=[t.TextContent(type="text", text="nope")], is_error=True)
    assert render_result(failed) == "Error: nope"
    assert render_result(t.CallToolResult(content=[])) == "(no output)"


def test_connection_errors_are_told_from_tool_errors() -> None:
    from mcp import MCPError

    assert is_connection_lost(MCPError(-32000, "Connection closed"))
    assert is_connection_lost(MCPError(-32600, "Session not found"))
    assert is_connection_lost(MCPError(-32600, "Session terminated"))
    assert is_connection_lost(BrokenPipeError())
    assert not is_connection_lost(MCPError(-32602, "Invalid params"))
    assert not is_connection_lost(ValueError("bad"))
    assert not is_connection_lost(MCPError(-32000, "receipt printer offline"))  # a server's own error
    assert is_connection_lost(MCPError(-32001, "Session not found"))  # a TypeScript server's
    # a tool's own errors that speak of sessions: the server was restarted and the call made twice
    assert not is_connection_lost(MCPError(-32603, "checkout session expired"))
    assert not is_connection_lost(MCPError(-32602, "Session not found for customer 42"))


@pytest.mark.parametrize("code", [-32000, -32001])
async def test_a_servers_own_error_is_reported_once_not_taken_for_a_lost_connection(
    tmp_path: Path, code: int
) -> None:
    """-32000 is JSON-RPC's generic server error: taken for a lost connection, the server was
    restarted and the call (a payment) made twice. -32001 at once was reported as "timed out after
    30s"."""
    log = tmp_path / "calls.log"
    script = Path(fakes.__file__).with_name("mcp_raw_server.py")
    server = MCPServerConfig(command=sys.executable, args=[str(script), str(log), str(code)], tool_timeout=30.0)
    manager = MCPManager({"pay": server})
    registry = ToolRegistry(None)
    try:
        assert "mcp_pay_charge" in await manager.register_into(registry)
        out = await registry.execute("mcp_pay_charge", {"amount": 40}, CTX)
    finally:
        await manager.aclose()
    assert out.startswith("Error: MCP tool 'charge' on server 'pay' failed") and "receipt printer offline" in out, out
    assert len(log.read_text().splitlines()) == 1  # made once


async def test_a_call_stuck_behind_a_wedged_stdio_pipe_times_out_and_is_never_sent_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stdio server stops reading (busy or hung) while a large request fills its pipe: the next
    call cannot even be written, so the SDK's read timeout never starts. The caller still gets its
    timeout (the turn hung until the server read again), and the call it gave up on never reaches
    the server later (a payment the model was told had timed out, made after all)."""
    from nanobot.agent.tools import mcp_connection

    monkeypatch.setattr(mcp_connection, "CALL_GRACE_S", 0.2)  # 5 s in use: the same path, sooner

    async def kept(*_: object) -> None:  # the session stays, as for a server answering its ping late
        return None

    monkeypatch.setattr(mcp_connection.MCPServerConnection, "_restart_unless_answering", kept)
    log, listing = tmp_path / "calls.log", tmp_path / "tools.txt"
    listing.write_text("pause,upload,pay")
    script = Path(fakes.__file__).with_name("mcp_raw_server.py")
    server = MCPServerConfig(
        command=sys.executable, args=[str(script), str(log), "-32000", str(listing)], tool_timeout=0.2
    )
    manager = MCPManager({"shop": server})
    registry = ToolRegistry(None)
    timed_out = "Error: MCP tool '{}' on server 'shop' timed out after 0.2s"
    try:
        await manager.register_into(registry)
        assert await registry.execute("mcp_shop_pause", {"seconds": 3.0}, CTX) == timed_out.format("pause")
        # the server reads nothing now: this request fills the pipe and the transport's writer waits
        assert await registry.execute("mcp_shop_upload", {"data": "x" * 300_000}, CTX) == timed_out.format("upload")
        started = time.monotonic()
        paid = await asyncio.wait_for(registry.execute("mcp_shop_pay", {"amount": 40}, CTX), 5.0)
        assert (paid, time.monotonic() - started < 2.0) == (timed_out.format("pay"), True)
        while "upload" not in (log.read_text() if log.exists() else ""):  # the server reads again
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
    finally:
        await manager.aclose()
    assert [json.loads(line)["name"] for line in log.read_text().splitlines()] == ["pause", "upload"]


async def test_what_a_raw_server_sends_that_broke_it_or_its_tools(tmp_path: Path) -> None:
    """One byte of another encoding on stdout wedged the server: every later call waited out
    toolTimeout and it never reconnected. A remote argument named `ctx` could never be passed.
    A token of the server's config in a tool description went to the model and `mcp list` as it
    was. `"properties": null` was passed on (no schema validator takes it)."""
    from nanobot.secrets import register_secret

    token = "ghp_RawServerSecret0000111122223333"
    register_secret(token)
    listing = tmp_path / "tools.txt"
    listing.write_text("legacy,echo_args,nullprops")
    script = Path(fakes.__file__).with_name("mcp_raw_server.py")
    server = MCPServerConfig(
        command=sys.executable, args=[str(script), str(tmp_path / "calls.log"), "-32000", str(listing)],
        env={"RAW_DESCRIPTION_NOTE": f" (token {token})", "PATH": os.environ["PATH"]}, tool_timeout=2.0,
    )
    manager = MCPManager({"s": server})
    registry = ToolRegistry(None)
    try:
        await manager.register_into(registry)
        assert await registry.execute("mcp_s_legacy", {}, CTX) == "caf\ufffd"
        started = time.monotonic()
        echoed = await registry.execute("mcp_s_echo_args", {"query": "TODO", "ctx": 2}, CTX)
        assert json.loads(echoed) == {"query": "TODO", "ctx": 2} and time.monotonic() - started < 1.5
        schemas = json.dumps(registry.schemas())
    finally:
        await manager.aclose()
    assert token not in schemas and "(token ***)" in schemas
    nullprops = next(s for s in registry.schemas() if s["function"]["name"] == "mcp_s_nullprops")
    assert nullprops["function"]["parameters"]["properties"] == {}


async def test_a_server_that_lists_other_tools_after_a_restart_gets_them_offered(
    tmp_path: Path, make_config, fake_llm  # noqa: ANN001
) -> None:
    """Upgraded while the gateway ran, a server listed other tools after its reconnect: `mcp list`
    showed them, but the agent kept offering the removed one and called the new one "unknown"."""
    from tests.agent_helpers import make_runtime
    from tests.fakes.llm_server import Reply

    listing = tmp_path / "tools.txt"
    listing.write_text("echo,old_report")
    script = Path(fakes.__file__).with_name("mcp_raw_server.py")
    server = {"command": sys.executable, "args": [str(script), str(tmp_path / "calls.log"), "-32000", str(listing)]}
    config, _ = make_config(**{"tools.mcpServers": {"srv": server}})
    runtime = make_runtime(config)

    async def offered_after(tool: str) -> tuple[list[str], str]:
        fake_llm.push(Reply(content=None, tool_calls=[{"name": tool, "arguments": {}}]), Reply(content="done"))
        await runtime.ask("go", session_key="cli:direct")
        request = fake_llm.requests[-1]
        names = sorted(n for t in request.get("tools", []) if (n := t["function"]["name"]).startswith("mcp_"))
        return names, [m for m in request["messages"] if m["role"] == "tool"][-1]["content"]

    try:
        assert await offered_after("mcp_srv_old_report") == (["mcp_srv_echo", "mcp_srv_old_report"], "old_report ok")
        listing.write_text("echo,new_report")  # the next start of the server lists these
        runtime.agent.mcp.connections["srv"]._gen.stop.set()  # its session ends (an upgrade restarts it)
        await asyncio.sleep(0.3)
        await offered_after("mcp_srv_echo")  # the call reconnects: the server lists its new tools
        names, result = await offered_after("mcp_srv_new_report")
    finally:
        await runtime.aclose()
    assert names == ["mcp_srv_echo", "mcp_srv_new_report"] and result == "new_report ok", (names, result)


# ------------------------------------------------------------------------------------ failures


async def test_server_that_cannot_start_is_reported_once_and_others_work(
    http_server: fakes.HTTPServerThread, warnings: list[str]
) -> None:
    manager = MCPManager(
        {
            "broken": MCPServerConfig(command="/nonexistent/mcp-server"),
            "dies": MCPServerConfig(command=sys.executable, args=["-c", "import sys; sys.exit('bad token')"]),
            "empty": MCPServerConfig(),
            "web": MCPServerConfig(url=http_server.url),
        },
        retry_base_s=0.05,
    )
    try:
        names = [t.name for t in await manager.tools()]
        assert "mcp_web_echo" in names and not any("broken" in n or "dies" in n for n in names)
        status = {row["name"]: row for row in manager.status()}
        assert (
            status["broken"]["state"] == "failed" and "/nonexistent/mcp-server" in status["broken"]["error"]
        )
        assert "bad token" in status["dies"]["error"]  # the server's stderr explains the failure
        assert status["empty"]["state"] == "failed" and "no transport" in status["empty"]["error"]
        assert status["web"]["state"] == "ready" and "mcp_web_echo" in status["web"]["tools"]
        assert len([w for w in warnings if "broken" in w]) == 1
        await asyncio.sleep(0.1)  # past the backoff: the failed servers are retried, quietly
        await manager.tools()
        assert len([w for w in warnings if "broken" in w]) == 1
        assert manager.connections["broken"]._failures == 2
    finally:
        await manager.aclose()


async def test_missing_sdk_is_a_clear_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the mcp extra were not installed
    manager = MCPManager({"x": MCPServerConfig(url="http://127.0.0.1:9/mcp")})
    started = time.monotonic()
    assert await manager.tools() == []
    assert time.monotonic() - started < 2.0
    row = manager.status()[0]
    assert row["state"] == "failed" and "requirements/runtime.lock" in row["error"]
    await manager.aclose()


# ------------------------------------------------------------------------------------- stdio


async def test_stdio_calls_errors_timeout_crash_and_reconnect(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One test, three server processes: each start of the SDK server costs seconds of imports."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    manager = MCPManager({"local": stdio_config(env={"GREETING": "hello"}, tool_timeout=1.0)})
    registry = ToolRegistry(None)
    try:
        names = await manager.register_into(registry)
        assert "mcp_local_add" in names and "mcp_local_odd_name" in names
        assert all(TOOL_NAME_RE.match(n) for n in names)
        add_schema = registry.get("mcp_local_add").to_schema()["function"]["parameters"]  # type: ignore[union-attr]
        assert add_schema["properties"]["a"]["type"] == "integer" and add_schema["required"] == ["a", "b"]

        assert await registry.execute("mcp_local_add", '{"a": 2, "b": 40}', CTX) == "42"
        assert await registry.execute("mcp_local_odd_name", {}, CTX) == "odd ok"
        error = await registry.execute("mcp_local_fail", {"message": "disk full"}, CTX)
        assert error.startswith("Error:") and "disk full" in error
        assert await registry.execute("mcp_local_getenv", {"name": "GREETING"}, CTX) == "hello"
        assert await registry.execute("mcp_local_getenv", {"name": "OPENAI_API_KEY"}, CTX) == "<unset>"

        # A hung call times out on its own while other calls go on.
        started = time.monotonic()
        slow, fast = await asyncio.gather(
            registry.execute("mcp_local_sleep", {"seconds": 10}, CTX),
            registry.execute("mcp_local_echo", {"text": "not blocked"}, CTX),
        )
        assert slow == "Error: MCP tool 'sleep' on server 'local' timed out after 1s"
        assert fast == "not blocked"
        assert 0.9 < time.monotonic() - started < 4.0
        # The hung call was abandoned, not the session: the same server still answers.
        first_pid = int(await registry.execute("mcp_local_pid", {}, CTX))
        assert manager.status()[0]["state"] == "ready"

        # The first attempt kills the server mid-call; one reconnect and retry answers.
        marker = tmp_path / "crashed"
        assert await registry.execute("mcp_local_crash", {"marker": str(marker)}, CTX) == "survived"
        assert marker.exists()
        second_pid = int(await registry.execute("mcp_local_pid", {}, CTX))
        assert second_pid != first_pid

        # A crash while idle is noticed by the next call, which reconnects transparently.
        os.kill(second_pid, 9)
        await asyncio.sleep(0.2)
        assert await registry.execute("mcp_local_echo", {"text": "back"}, CTX) == "back"
        assert int(await registry.execute("mcp_local_pid", {}, CTX)) not in (first_pid, second_pid)
    finally:
        started = time.monotonic()
        await manager.aclose()
        assert time.monotonic() - started < 5.0
    assert manager.status()[0]["state"] == "idle"
    closed = await registry.execute("mcp_local_echo", {"text": "x"}, CTX)
    assert closed.startswith("Error: MCP server 'local' is not available")


# ------------------------------------------------------------------------------------- HTTP


async def test_http_headers_filtering_and_timeout(http_server: fakes.HTTPServerThread) -> None:
    manager = MCPManager(
        {
            "web": MCPServerConfig(
                url=http_server.url,
                headers={"X-Test-Token": "t0k"},
                enabled_tools=["echo", "head*", "mcp_web_sleep"],
                tool_timeout=0.5,
            ),
            "all": MCPServerConfig(type="streamableHttp", url=http_server.url),
        }
    )
    try:
        names = [t.name for t in await manager.tools()]
        assert [n for n in names if n.startswith("mcp_web_")] == [
            "mcp_web_echo",
            "mcp_web_header",
            "mcp_web_sleep",
        ]
        assert "mcp_all_add" in names and "mcp_all_crash" in names
        tools = {t.name: t for t in await manager.tools()}
        assert await tools["mcp_web_header"].execute(CTX, name="X-Test-Token") == "t0k"
        assert await tools["mcp_all_header"].execute(CTX, name="X-Test-Token") == "<unset>"
        result = await tools["mcp_web_sleep"].execute(CTX, seconds=5)
        assert result == "Error: MCP tool 'sleep' on server 'web' timed out after 0.5s"
        unknown = await manager.connections["web"].call("no_such_tool", {})
        assert unknown.startswith("Error:") and "no_such_tool" in unknown
        assert await tools["mcp_web_echo"].execute(CTX, text="ok") == "ok"
    finally:
        await manager.aclose()


async def test_http_restart_expires_session_then_reconnects(http_server: fakes.HTTPServerThread) -> None:
    manager = MCPManager({"web": MCPServerConfig(url=http_server.url)}, retry_base_s=0.1)
    try:
        echo = {t.name: t for t in await manager.tools()}["mcp_web_echo"]
        assert await echo.execute(CTX, text="one") == "one"
        http_server.stop()  # every session is gone with the process state
        http_server.start()
        assert await echo.execute(CTX, text="two") == "two"  # 404 for the old session: reconnect + retry

        http_server.stop()
        down = await echo.execute(CTX, text="three")
        assert down.startswith("Error: MCP server 'web'")
        assert manager.status()[0]["state"] == "failed"
        http_server.start()
        await asyncio.sleep(0.15)  # past the backoff
        assert await echo.execute(CTX, text="four") == "four"
        assert manager.status()[0]["state"] == "ready"
    finally:
        await manager.aclose()


async def test_cancelled_connect_is_resumed_not_restarted(http_server: fakes.HTTPServerThread) -> None:
    manager = MCPManager({"web": MCPServerConfig(url=http_server.url)})
    conn = manager.connections["web"]
    try:
        first = asyncio.create_task(manager.tools())
        for _ in range(3):
            await asyncio.sleep(0)  # the attempt is under way, the handshake not yet answered
        attempt = conn._gen
        first.cancel()  # e.g. /stop during the first turn
        with pytest.raises(asyncio.CancelledError):
            await first
        assert conn.state == "connecting"
        assert "mcp_web_echo" in [t.name for t in await manager.tools()]
        assert conn._gen is attempt and conn.state == "ready"
    finally:
        await manager.aclose()


async def test_sse_transport() -> None:
    server = fakes.HTTPServerThread("sse").start()
    manager = MCPManager({"legacy": MCPServerConfig(url=server.url)})
    try:
        tools = {t.name: t for t in await manager.tools()}
        assert manager.status()[0]["type"] == "sse"
        assert await tools["mcp_legacy_add"].execute(CTX, a=1, b=2) == "3"
    finally:
        await manager.aclose()
        server.stop()


# -------------------------------------------------------------------------------------- CLI


def test_cli_mcp_list(http_server: fakes.HTTPServerThread, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    servers = {
        "web": {"url": http_server.url, "enabledTools": ["echo", "add"]},
        "gone": {"command": "/nonexistent/x"},
    }
    config.write_text(json.dumps({"tools": {"mcpServers": servers}}))
    runner = CliRunner()
    result = runner.invoke(mcp_app, ["list", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "web" in result.stdout and "ready" in result.stdout and "mcp_web_echo" in result.stdout
    assert "gone" in result.stdout and "failed" in result.stdout and "/nonexistent/x" in result.stdout

    result = runner.invoke(mcp_app, ["list", "-c", str(config), "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)["servers"]}
    assert rows["web"]["tools"] == ["mcp_web_add", "mcp_web_echo"] and rows["gone"]["state"] == "failed"

    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    result = runner.invoke(mcp_app, ["list", "-c", str(empty)])
    assert result.exit_code == 0 and result.stdout == ""


def test_connect_timeout_is_per_server_and_reported(tmp_path: Path) -> None:
    """A server that never answers fails after its own connectTimeoutS; `mcp list` says what it does."""
    from tests.conftest import run_cli

    home = tmp_path / "home"
    home.mkdir()
    hang = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # silent until its stdin closes
    (home / "config.json").write_text(json.dumps({"tools": {"mcpServers": {
        "slow": {"command": hang[0], "args": hang[1:], "connectTimeoutS": 1.5}}}}))
    result = run_cli("mcp", "list", "--json", home=home)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["servers"]
    assert row["state"] == "failed" and "1.5s" in row["error"], row
    # nanobot stopped it: the shell's "the MCP server command exited with status 0" would mislead
    assert "exited with status" not in row["error"], row
    assert "Connecting to 1 MCP server(s): slow (up to 1.5s" in result.stderr
    # the wait as the command measured it (interpreter start and the hung child's teardown excluded,
    # they vary with the host's load): well under the old fixed 20 s limit
    waited = re.search(r"0 of 1 ready after ([0-9.]+)s", result.stderr)
    assert waited is not None, result.stderr
    assert float(waited.group(1)) < 12, waited.group(0)


def test_mcp_list_masks_a_token_a_failing_server_echoes(tmp_path: Path) -> None:
    """A server's stderr often repeats its credential ("401 Bad credentials for token ghp_…"): the
    log masked it, `mcp list` and `mcp list --json` printed it, ready to be pasted into an issue."""
    from tests.conftest import run_cli

    home = tmp_path / "home"
    home.mkdir()
    token = "ghp_MCPSECRET0000111122223333"
    echo = (
        "import os, sys; sys.stderr.write('401 Bad credentials for token ' + os.environ['GITHUB_TOKEN']); "
        "sys.exit(1)"
    )
    server = {"command": sys.executable, "args": ["-c", echo], "env": {"GITHUB_TOKEN": token}, "connectTimeoutS": 5}
    (home / "config.json").write_text(json.dumps({"tools": {"mcpServers": {"gh": server}}}))
    for args in (("mcp", "list"), ("mcp", "list", "--json")):
        result = run_cli(*args, home=home)
        assert result.returncode == 0, result.stderr
        assert "Bad credentials for token ***" in result.stdout, result.stdout
        assert token not in result.stdout + result.stderr


async def test_a_server_down_at_the_first_turn_gets_its_tools_at_a_later_one(
    make_config, fake_llm  # noqa: ANN001
) -> None:
    """The first turn connects MCP servers; one that failed then (still starting, briefly down) never
    got its tools registered in a running gateway: every later turn said "unknown tool"."""
    from tests.agent_helpers import make_runtime
    from tests.fakes.llm_server import Reply

    server = fakes.HTTPServerThread("http")  # its port is chosen, nothing listens yet
    config, _ = make_config(**{"tools.mcpServers": {"web": {"url": server.url, "connectTimeoutS": 2}}})
    runtime = make_runtime(config)
    assert runtime.agent.mcp is not None
    runtime.agent.mcp.connections["web"].retry_base_s = 0.2  # a short backoff after the failed start
    call = {"name": "mcp_web_echo", "arguments": {"text": "hello"}}
    try:
        fake_llm.push(Reply(content=None, tool_calls=[call]), Reply(content="first"))
        await runtime.ask("echo hello", session_key="telegram:1")
        first = next(m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool")["content"]
        assert first.startswith("Error: unknown tool")
        server.start()
        await asyncio.sleep(0.3)  # past the retry backoff
        fake_llm.push(Reply(content=None, tool_calls=[call]), Reply(content="second"))
        await runtime.ask("echo hello again", session_key="telegram:1")
        second = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
        assert second == "hello"
    finally:
        await runtime.aclose()
        server.stop()


def test_a_boolean_sub_schema_is_accepted_not_a_crash() -> None:
    """`"properties": {"x": true}` is valid JSON Schema (an MCP server sent it): validating it raised
    AttributeError and every call of the tool failed the whole turn."""
    from nanobot.agent.tools.base import validate_against_schema

    schema = {"type": "object", "properties": {"x": True, "n": {"type": "integer"}}, "required": ["n"]}
    assert validate_against_schema({"x": [1], "n": 2}, schema, "") == []
    assert validate_against_schema({"x": 1}, schema, "") == ["n: required"]


@pytest.mark.parametrize(("status", "said"), [(401, "HTTP 401 Unauthorized: check the server's credentials"),
                                             (500, "HTTP 500 Internal Server Error")])
async def test_an_http_server_refusing_says_its_status(status: int, said: str) -> None:
    """A wrong token and a crashing server both read "Server returned an error response"."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    manager = MCPManager({"api": MCPServerConfig(url=f"http://127.0.0.1:{server.server_port}/mcp",
                                                 connect_timeout_s=10)})
    try:
        assert await manager.tools() == []
        error = manager.status()[0]["error"]
        assert said in error, error
    finally:
        await manager.aclose()
        server.shutdown()


async def test_an_enabled_tools_entry_that_matches_nothing_is_warned_about(
    http_server: fakes.HTTPServerThread, warnings: list[str]
) -> None:
    """A typo (or a name an upgrade changed) in enabledTools turned a tool off without a word."""
    manager = MCPManager({"web": MCPServerConfig(url=http_server.url, enabled_tools=["echo", "mcp_web_ecko"])})
    try:
        assert [t.name for t in await manager.tools()] == ["mcp_web_echo"]
        assert any("mcp_web_ecko" in w and "match none" in w for w in warnings), warnings
        assert manager.status()[0]["unmatched"] == ["mcp_web_ecko"]  # doctor warns by it
    finally:
        await manager.aclose()


async def test_doctor_warns_about_an_enabled_tools_entry_that_matches_nothing(
    http_server: fakes.HTTPServerThread,
) -> None:
    from nanobot.config.schema import Config
    from nanobot.doctor.remote import check_mcp

    cfg = Config.model_validate(
        {"tools": {"mcpServers": {"web": {"url": http_server.url, "enabledTools": ["echo", "mcp_web_ecko"]}}}}
    )
    [check] = await check_mcp(cfg, timeout_s=10)
    assert check.status == "warn" and "mcp_web_ecko" in check.detail, check


# A bare stdio server (no SDK: starts at once) that starts a helper in its process group, answers a
# call and then exits, leaving the helper with its stdout.
_DYING_SERVER = """
import json, os, subprocess, sys
helper = subprocess.Popen(["sleep", "600"])
open(sys.argv[1], "a").write(f"{helper.pid}\\n")
for line in sys.stdin:
    message = json.loads(line)
    if message.get("id") is None:
        continue
    method, result = message.get("method"), {}
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "dying", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "once", "description": "answers, then exits", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "done"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
    if method == "tools/call":
        os._exit(0)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_server_that_dies_leaving_a_helper_is_reconnected_and_the_helper_stopped(tmp_path: Path) -> None:
    """A helper holding the dead server's stdout made it look alive: every later call waited out
    toolTimeout and none reconnected, and the helper outlived nanobot."""
    script, helpers = tmp_path / "dying_server.py", tmp_path / "helpers.txt"
    script.write_text(_DYING_SERVER)
    manager = MCPManager({"d": MCPServerConfig(command=sys.executable, args=[str(script), str(helpers)],
                                                tool_timeout=5)})
    try:
        connection = manager.connections["d"]
        assert await connection.ensure_ready()
        for _ in range(3):
            assert await connection.call("once", {}) == "done"  # the next call reconnects, not times out
    finally:
        await manager.aclose()
    pids = [int(line) for line in helpers.read_text().split()]
    assert len(pids) >= 3
    for _ in range(100):
        if not any(_running(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert not any(_running(pid) for pid in pids)


async def test_the_stdio_launcher_passes_arguments_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server runs under /bin/sh now: an argument (a config written by someone else, a path)
    must reach the server as one word, never as shell code."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "dying_server.py"
    script.write_text(_DYING_SERVER)
    odd = tmp_path / "helpers $(touch pwned1) `touch pwned2`;touch pwned3 '\" *.txt"
    manager = MCPManager({"d": MCPServerConfig(command=sys.executable, args=[str(script), str(odd)], tool_timeout=5)})
    try:
        assert await manager.connections["d"].ensure_ready()
        assert await manager.connections["d"].call("once", {}) == "done"
    finally:
        await manager.aclose()
    assert odd.exists()  # the server got the path as written
    assert not list(tmp_path.glob("pwned*"))
