"""A hostile or broken stdio MCP server (real processes, the real mcp SDK): an exact enabledTools
entry switches on that tool only; secrets in a tool's schema are masked whatever characters they
hold; stderr lines of 100 MB are cut as they are read; a server that never answers and ignores
SIGTERM is killed when its start times out, not left running at each retry; credentials in env
values of any name (`AUTH_HEADER`, headers as JSON) are masked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.mcp import MCPManager
from nanobot.agent.tools.mcp_transport import STDERR_TAIL_MAX_CHARS, StderrTail
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.config.schema import Config, MCPServerConfig
from nanobot.secrets import mask, register_config_secrets, register_secret
from tests import fakes

RAW_SERVER = Path(fakes.__file__).with_name("mcp_raw_server.py")


def raw_server(tmp_path: Path, tools: str, **settings: object) -> tuple[MCPServerConfig, Path]:
    log, listing = tmp_path / "calls.log", tmp_path / "tools.txt"
    listing.write_text(tools)
    args = [str(RAW_SERVER), str(log), "-32000", str(listing)]
    return MCPServerConfig(command=sys.executable, args=args, **settings), log  # type: ignore[arg-type]


async def test_an_exact_enabled_tools_entry_switches_on_that_tool_only(tmp_path: Path) -> None:
    """`read_file` and `read.file` both clean up to mcp_h_read_file: the entry naming the first
    switched on the second too (under its hashed name)."""
    server, log = raw_server(tmp_path, "read_file,read.file", enabled_tools=["mcp_h_read_file"])
    manager = MCPManager({"h": server})
    try:
        names = await manager.register_into(registry := ToolRegistry(None))
        assert names == ["mcp_h_read_file"]
        await registry.execute("mcp_h_read_file", {}, ToolContext())
    finally:
        await manager.aclose()
    assert json.loads(log.read_text().splitlines()[0])["name"] == "read_file"
    # with every tool on, the second keeps the hashed name `mcp list` showed for it
    both, _ = raw_server(tmp_path, "read_file,read.file")
    everything = MCPManager({"h": both})
    try:
        hashed = [n for n in await everything.register_into(ToolRegistry(None)) if n != "mcp_h_read_file"]
    finally:
        await everything.aclose()
    alone, _ = raw_server(tmp_path, "read_file,read.file", enabled_tools=hashed)
    manager = MCPManager({"h": alone})
    try:
        assert await manager.register_into(ToolRegistry(None)) == hashed
    finally:
        await manager.aclose()


async def test_secrets_in_a_tools_schema_are_masked_whatever_they_hold(tmp_path: Path) -> None:
    """The schema was masked as JSON text: a secret with a quote, a backslash or a non-ASCII
    letter is escaped there and went to the model; one ending in a backslash broke the loading."""
    secrets = ['Tr0ub"4dor&3xyz', "pässwörd-Geheim42", "C:\\keys\\Zq81xx", "Zq9endsWith\\"]
    for secret in secrets:
        register_secret(secret)
    server, _ = raw_server(tmp_path, "lookup", env={"RAW_DESCRIPTION_NOTE": " Use " + " or ".join(secrets)})
    manager = MCPManager({"h": server})
    try:
        (tool,) = await manager.tools()
    finally:
        await manager.aclose()
    schema = json.dumps(tool.parameters, ensure_ascii=False)
    assert "***" in schema and not [s for s in secrets if s in schema or json.dumps(s)[1:-1] in schema]


def test_long_stderr_lines_are_cut_as_they_are_read() -> None:
    """Ten 100 MB lines were kept whole: the gateway went from 70 MB to 1.2 GB."""
    tail = StderrTail("noisy")
    tail.writer.write("x" * 3_000_000 + "\nthe real error: bad token\n" + "y" * 50_000)
    tail.writer.flush()
    text = asyncio.run(tail.tail())
    assert len(text) <= STDERR_TAIL_MAX_CHARS and any("the real error: bad token" in line for line in tail._lines)
    assert all(len(line) <= STDERR_TAIL_MAX_CHARS + 6 for line in tail._lines)
    assert len(tail._lines) == 3 and tail._lines[0].endswith(" [...]")


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
while True:
    time.sleep(1)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_a_server_that_never_answers_and_ignores_sigterm_is_not_left_running(tmp_path: Path) -> None:
    """The wait for its start gave up before the transport's own stop reached SIGKILL and
    cancelled it: one more such process was left running at every retry."""
    (script := tmp_path / "stubborn.py").write_text(STUBBORN)
    pids = tmp_path / "pids"
    server = MCPServerConfig(command=sys.executable, args=[str(script), str(pids)], connect_timeout_s=1.0)
    manager = MCPManager({"stuck": server}, retry_base_s=0.01)
    started = time.monotonic()
    try:
        assert await manager.tools() == []
        await asyncio.sleep(0.1)  # past the backoff
        assert await manager.tools() == []  # a retry: a second process
    finally:
        await manager.aclose()
    assert time.monotonic() - started < 2 * (1.0 + 8.0)
    running = [int(p) for p in pids.read_text().split() if alive(int(p))]
    for pid in running:
        os.kill(pid, signal.SIGKILL)
    assert len(pids.read_text().split()) == 2 and running == []
    assert manager.status()[0]["state"] == "failed"


def test_credentials_in_settings_of_any_name_are_masked() -> None:
    """Only credential-named values were registered: a header passed as `AUTH_HEADER` (as one
    bridge documents it) or headers as JSON (`OPENAPI_MCP_HEADERS`) reached the model when the
    server echoed the token alone."""
    notion, bridge = "ntn_4Qx9ZpL2vK8mR3tY7wB1", "tok9Fq2LmZx8Rv4Kp1Ws7"
    env = {
        "OPENAPI_MCP_HEADERS": json.dumps({"Authorization": f"Bearer {notion}", "Notion-Version": "2022-06-28"}),
        "AUTH_HEADER": f"Bearer {bridge}",
        "MODE": "Basic setup",
    }
    register_config_secrets(Config.model_validate({"tools": {"mcpServers": {"n": {"command": "x", "env": env}}}}))
    said = mask(f"API token {notion} is invalid; {bridge} is invalid; Notion-Version 2022-06-28; setup done")
    assert notion not in said and bridge not in said
    assert "2022-06-28" in said and "setup done" in said  # ordinary values stay


async def test_a_session_that_answers_no_ping_after_a_timeout_is_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stdio server wedged (its 100 MB result line held the client's reader for minutes): every
    later call waited out toolTimeout and none reconnected. A server that is only slow, and still
    answers a ping, keeps its session (and its state)."""
    from nanobot.agent.tools import mcp_connection

    monkeypatch.setattr(mcp_connection, "CALL_GRACE_S", 0.2)
    monkeypatch.setattr(mcp_connection, "PING_TIMEOUT_S", 2.0)
    server, _ = raw_server(tmp_path, "pause,echo_args", tool_timeout=0.5)
    manager = MCPManager({"h": server})
    registry = ToolRegistry(None)
    try:
        await manager.register_into(registry)
        conn = manager.connections["h"]
        first = conn._gen
        slow = await registry.execute("mcp_h_pause", {"seconds": 1}, ToolContext())
        assert "timed out" in slow and conn._gen is first  # it answered the ping once it was done
        wedged = await registry.execute("mcp_h_pause", {"seconds": 60}, ToolContext())
        assert "timed out" in wedged
        started = time.monotonic()
        answer = await registry.execute("mcp_h_echo_args", {"n": 1}, ToolContext())
        assert answer == '{"n": 1}' and time.monotonic() - started < 5
        assert conn._gen is not first
    finally:
        await manager.aclose()


async def test_a_tool_listed_twice_keeps_two_names(tmp_path: Path) -> None:
    """Named by its remote name, a tool listed twice got the second's hashed name twice, and an
    entry naming the plain one switched on a tool registered under another."""
    server, _ = raw_server(tmp_path, "read,read")
    manager = MCPManager({"h": server})
    try:
        names = await manager.register_into(ToolRegistry(None))
    finally:
        await manager.aclose()
    assert len(names) == len(set(names)) == 2 and "mcp_h_read" in names


def test_only_a_value_that_is_a_credential_counts_as_one() -> None:
    """Scanning every text of the environment for `token <word>` made words of a commit message
    ("Fix token Refresh ...") secrets, masked in every tool result; JSON in any setting registered
    `{"sort_key": "CreatedAt"}`."""
    from nanobot.secrets import register_env_secrets

    register_env_secrets({
        "CI_COMMIT_MESSAGE": "Fix token Refresh in the Basic Settings page",
        "GREETING": "Basic English",
        "APP_SETTINGS": json.dumps({"sort_key": "CreatedAt"}),
        "UPSTREAM_AUTH_VALUE": "token Gh7Qx2Lm9Zp4",
    })
    assert mask("Click Refresh, in English, ordered by CreatedAt") == "Click Refresh, in English, ordered by CreatedAt"
    assert "Gh7Qx2Lm9Zp4" not in mask("the server says Gh7Qx2Lm9Zp4 is wrong")
