"""Attacks on web_fetch, sub-agents, MCP and secret redaction found by the tools audit. Each test plays
the steered model (or the hostile web page / MCP server) and fails on the code before the fixes.
Every server runs on 127.0.0.1; addresses outside loopback are only judged, never contacted."""

from __future__ import annotations

import asyncio
import gzip
import io
import ipaddress
import itertools
import json
import sys
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot.agent.factory import build_runtime
from nanobot.agent.tools import web
from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.netguard import is_public
from nanobot.agent.tools.web import WebFetchTool
from nanobot.bus.events import InboundMessage
from nanobot.config.schema import Config, WebToolConfig
from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall
from tests.fakes.static_pages import serve_pages

CTX = ToolContext()
GROUP = InboundMessage(channel="telegram", sender_id="777", chat_id="-100123", content="@bot research X",
                       is_group=True)


# ------------------------------------------------------------------------------- web_fetch
def _gzip_stream(total: int, chunk: int = 1 << 20) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out, zero = io.BytesIO(), bytes(chunk)
    for _ in range(total // chunk):
        out.write(c.compress(zero))
    out.write(c.flush())
    return out.getvalue()


ROUTES: dict[str, tuple[dict[str, str], bytes]] = {}


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    ROUTES["/bomb"] = ({"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"},
                       gzip.compress(_gzip_stream(128 << 20), 9))  # ~400 bytes on the wire, 128 MB decoded
    ROUTES["/brackets"] = ({"Content-Type": "text/html"}, b"<" * 300_000)
    ROUTES["/gz"] = ({"Content-Type": "text/html", "Content-Encoding": "gzip"},
                     gzip.compress(b"<html><p>hello gz</p>" + b"a" * 3_000_000))
    with serve_pages(ROUTES) as port:
        yield port


HANG_GUARD_S = 120.0  # a hang detector, not a timing: the fixed code takes well under a second


async def _fetch(port: int, path: str) -> str:
    cfg = WebToolConfig(allow_hosts=[f"127.0.0.1:{port}"])
    try:
        return await asyncio.wait_for(
            WebFetchTool(cfg).execute(CTX, url=f"http://127.0.0.1:{port}{path}"), HANG_GUARD_S
        )
    except ToolError as exc:
        return f"ToolError: {exc}"


async def test_nested_gzip_bomb_is_not_inflated_past_max_bytes(server: int) -> None:
    """A 400-byte page with `Content-Encoding: gzip, gzip` was inflated whole (128 MB here, GBs for a
    slightly bigger page: the daemon is OOM-killed); max_bytes was checked only afterwards."""
    tracemalloc.start()
    try:
        out = await _fetch(server, "/bomb")
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_bytes < 32 << 20, f"{peak_bytes >> 20} MiB allocated for one fetch"
    assert out.startswith("ToolError") and "encoding" in out  # nested encodings are refused


async def test_a_page_of_angle_brackets_does_not_freeze_the_daemon(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """html_to_text's `<[^>]+>` (and `<script\\b.*?</script>`) is quadratic on a run of '<' (or of
    unclosed openers) and ran on the event loop: 120 KB froze every chat for ~15 s, the default
    max_bytes (2 MB) for over an hour, and timeoutS cannot interrupt it. Now linear, and off the loop."""
    on_the_loop_thread: list[bool] = []
    real = web.html_to_text

    def watched(markup: str) -> str:
        on_the_loop_thread.append(threading.current_thread() is threading.main_thread())
        return real(markup)

    monkeypatch.setattr(web, "html_to_text", watched)
    out = await _fetch(server, "/brackets")
    assert on_the_loop_thread == [False]
    assert not out.startswith("ToolError")
    assert real("<p>a</p><script>x</script>< <b>b</b>" + "<" * 2_000_000).startswith("a\n< b")


async def test_single_gzip_pages_still_work_and_are_capped(server: int) -> None:
    out = await _fetch(server, "/gz")
    assert "hello gz" in out and "(truncated)" in out


@pytest.mark.parametrize(
    "address",
    [
        "fec0::1",  # site-local (deprecated, still routed on some networks)
        "64:ff9b:1:a9fe:a9:fe00:808:808",  # local-use NAT64 /48 (RFC 6052 layout) of 169.254.169.254
        "64:ff9b:1:7f00:0:100:808:808",  # ... of 127.0.0.1; the low 32 bits say 8.8.8.8
    ],
)
def test_non_global_ipv6_forms_are_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))


# ------------------------------------------------------------------------------- sub-agents
class _SpawnHappy(LLMProvider):
    """The main turn spawns `fan_out` sub-agents at once; every sub-agent, offered only file, exec and
    web tools, calls `spawn` anyway (as a page it fetched told it to)."""

    name = "scripted"

    def __init__(self, fan_out: int, cap: int = 20) -> None:
        self.fan_out, self.cap = fan_out, cap
        self.ids = itertools.count()
        self.started = 0
        self.refusals: list[str] = []

    @property
    def default_model(self) -> str:
        return "scripted"

    def _spawn(self, n: int) -> LLMResponse:
        self.started += n
        return LLMResponse(tool_calls=[ToolCall(f"c{next(self.ids)}", "spawn", {"task": "dig"}) for _ in range(n)])

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> LLMResponse:
        last = messages[-1]
        if last["role"] == "tool":
            self.refusals += [m["content"] for m in messages if m["role"] == "tool" and "Error" in m["content"]]
        if str(messages[0].get("content")).startswith("You are a sub-agent"):
            if last["role"] == "user" and self.started < self.cap:
                return self._spawn(1)
            await asyncio.sleep(0.5)  # a sub-agent at work
            return LLMResponse(content="done")
        if last["role"] == "user" and "Sub-agent" not in str(last["content"]) and self.started < self.cap:
            return self._spawn(self.fan_out)
        return LLMResponse(content="ok")


async def _run_group_turn(tmp_path: Path, provider: _SpawnHappy) -> int:
    cfg = Config.model_validate({"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "scripted"}},
                                 "memory": {"search": {"enabled": False}}})
    rt = build_runtime(cfg, provider=provider)
    rt.loop.start()
    await rt.bus.request(GROUP)
    most = 0
    for _ in range(100):
        most = max(most, rt.agent.subagents.running())
        await asyncio.sleep(0.02)
    await rt.aclose()
    return most


async def test_a_sub_agent_cannot_call_tools_it_was_not_offered(tmp_path: Path) -> None:
    """The runner executed any registered tool the model named: sub-agents (SUBAGENT_TOOLS, no
    spawn) spawned sub-agents without end, from one group-chat message."""
    provider = _SpawnHappy(fan_out=1)
    await _run_group_turn(tmp_path, provider)
    assert provider.started <= 2, f"{provider.started} nested sub-agents"
    assert any("'spawn' is not available" in r for r in provider.refusals)


async def test_one_message_cannot_fan_out_unbounded_sub_agents(tmp_path: Path) -> None:
    provider = _SpawnHappy(fan_out=20, cap=20)
    most = await _run_group_turn(tmp_path, provider)
    assert most <= 4, f"{most} sub-agents ran at once for one group message"


# ------------------------------------------------------------------------------- MCP
async def test_an_mcp_server_cannot_flood_every_prompt_with_its_schemas() -> None:
    """Only the top-level description was capped (2000 chars): a 2 MB parameter description and
    3000 tools made ~8 MB (~1.8 M tokens) of tool schemas in every request, group chats included
    (where MCP tools are refused anyway), and carried instructions into every prompt. (The fake
    server here is smaller: 400 KB and 500 tools.)"""
    from nanobot.agent.tools.mcp import MCPManager
    from nanobot.agent.tools.registry import ToolRegistry
    from nanobot.config.schema import MCPServerConfig

    script = Path(__file__).resolve().parents[1] / "fakes" / "evil_mcp.py"
    manager = MCPManager({"evil": MCPServerConfig(command=sys.executable, args=[str(script)], connect_timeout_s=60)})
    registry = ToolRegistry(None)
    try:
        names = await manager.register_into(registry)
    finally:
        await manager.aclose()
    assert names, "the server's tools were not registered at all"
    assert "mcp_evil_weather" not in names
    assert len(names) <= 128 and len(json.dumps(registry.schemas())) < 128 * 2_400


# ------------------------------------------------------------------------------- secrets
async def test_credentials_held_in_the_config_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With restrictToWorkspace false, read_file(config.json) masked provider keys and bot tokens but
    not memory-backend keys, a graphiti password, proxy or apiBase passwords, or a token in an MCP URL."""

    class _Quiet(LLMProvider):
        name = "quiet"

        @property
        def default_model(self) -> str:
            return "quiet"

        async def chat(self, *args: Any, **kwargs: Any) -> LLMResponse:
            return LLMResponse(content="x")

    secrets = ["honcho-key-9f8e7d6c5b4a", "mem0-llm-key-1a2b3c4d5e", "neo4j-pass-77aa88bb",
               "proxypass-55cc66dd", "mcp-url-token-3344abcd", "apibase-pw-9090qwer"]
    raw = {
        "agents": {"defaults": {"workspace": str(tmp_path / "home" / "workspace"), "model": "quiet"}},
        "tools": {"restrictToWorkspace": False,
                  "mcpServers": {"x": {"url": f"http://127.0.0.1:1/mcp?token={secrets[4]}"}}},
        "memory": {"search": {"enabled": False}, "backends": {
            "honcho": {"baseUrl": "http://127.0.0.1:1", "apiKey": secrets[0]},
            "mem0": {"llm": {"apiKey": secrets[1]}},
            "graphiti": {"driver": "neo4j", "password": secrets[2]}}},
        "channels": {"telegram": {"proxy": f"http://bob:{secrets[3]}@127.0.0.1:3128"}},
        "providers": {"custom": {"apiBase": f"http://admin:{secrets[5]}@127.0.0.1:1/v1",
                                 "apiKey": "sk-registered-0123456789abcdef"}},
    }
    path = tmp_path / "home" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(raw))
    monkeypatch.setenv("NANOBOT_HOME", str(path.parent))
    rt = build_runtime(Config.model_validate(raw), provider=_Quiet(), config_path=str(path))
    out = await rt.agent.tools.execute("read_file", {"path": str(path)}, CTX)
    await rt.aclose()
    assert "sk-registered" not in out and "cannot" not in out.lower()
    leaked = [s for s in secrets if s in out]
    assert not leaked, f"unredacted: {leaked}"
