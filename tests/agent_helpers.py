"""Helpers shared by the core-runtime tests: building an agent on the fake LLM, reading transcripts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot.agent.factory import build_runtime
from nanobot.agent.runtime import AgentRuntime
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.schema import Config

FAST_RETRY_DELAY_S = 0.01


def make_runtime(config: Config, bus: MessageBus | None = None) -> AgentRuntime:
    """The real agent and loop for `config` (real litellm provider), with quick retries for tests."""
    runtime = build_runtime(config, bus)
    runtime.agent.provider.retry_base_delay_s = FAST_RETRY_DELAY_S  # type: ignore[attr-defined]
    return runtime


async def ask_for_reply(runtime: AgentRuntime, text: str, session_key: str = "cli:direct") -> OutboundMessage:
    """One message through the bus and the loop, like `runtime.ask`, but the whole reply message."""
    runtime.loop.start()
    channel, _, chat_id = session_key.partition(":")
    out = await runtime.bus.request(
        InboundMessage(channel=channel, sender_id="user", chat_id=chat_id, content=text)
    )
    assert out is not None
    return out


def status_of(runtime: AgentRuntime, key: str, *, group: bool = False) -> str:
    """What /status answers in the chat `key` ("telegram:1"), private unless `group`."""
    channel, chat = key.split(":", 1)
    sender = "7" if group else chat
    ctx = runtime.agent.context_of(InboundMessage(channel, sender, chat, "/status", is_group=group))
    return runtime.agent.status_text(ctx)


def session_path(config: Config, key: str = "cli:direct") -> Path:
    return config.workspace_path / "sessions" / (key.replace(":", "_") + ".jsonl")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a transcript parsed; fails the test on any line that is not a JSON object."""
    lines = path.read_text(encoding="utf-8").splitlines()
    objs = [json.loads(line) for line in lines if line.strip()]
    assert all(isinstance(o, dict) for o in objs)
    return objs


def messages_of(path: Path) -> list[dict[str, Any]]:
    return [o for o in read_jsonl(path) if "role" in o]


def user_text(body: dict[str, Any]) -> str:
    """The text a user typed, from a chat-completions request body (runtime block stripped)."""
    content = body["messages"][-1]["content"]
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content).rsplit("\n\n", 1)[-1]


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll until `predicate()` is true (fails the test after `timeout_s`)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def next_outbound(bus: MessageBus, kind: str = "message", timeout_s: float = 10.0) -> OutboundMessage:
    """The next outbound message of `kind` (others are skipped)."""
    while True:
        out = await asyncio.wait_for(bus.consume_outbound(), timeout=timeout_s)
        if out.kind == kind:
            return out


def drain_outbound(bus: MessageBus) -> list[OutboundMessage]:
    items: list[OutboundMessage] = []
    while not bus.outbound.empty():
        items.append(bus.outbound.get_nowait())
    return items
