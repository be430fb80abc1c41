"""Channel latency: an inbound update on the fake server → the reply observed by the fake server.

Runs the real python-telegram-bot and discord.py clients through ChannelManager against the local
fakes on 127.0.0.1. The responder is pluggable:
- `agent` (default): the full agent loop (AgentLoop + Agent from build_runtime: session store, context
  builder, memory lifecycle, runner, tools) with an in-process 0 ms LLMProvider (no HTTP);
- `echo`: answers straight from the inbound bus (the channels' own overhead).

    .venv/bin/python benchmarks/channel_latency.py [--rounds 100] [--responder agent|echo]

Prints median and p95 per channel (target: median < 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loguru import logger  # noqa: E402

from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.bus.events import OutboundMessage  # noqa: E402
from nanobot.bus.queue import MessageBus  # noqa: E402
from nanobot.channels.manager import ChannelManager  # noqa: E402
from nanobot.config.schema import Config  # noqa: E402
from nanobot.providers.base import LLMProvider, LLMResponse, Usage  # noqa: E402
from tests.fakes.discord_server import FakeDiscordServer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer  # noqa: E402

TARGET_MEDIAN_MS = 50.0
Responder = Callable[[MessageBus, Config, Path], Awaitable[None]]


async def respond(bus: MessageBus, config: Config, workspace: Path) -> None:
    """The in-process responder: answer every inbound message at once (replace with the agent loop)."""
    while True:
        msg = await bus.consume_inbound()
        msg.ack()  # handled: Telegram may confirm the update
        await bus.publish_outbound(OutboundMessage(msg.channel, msg.chat_id, f"echo: {msg.content}"))


class ZeroLatencyProvider(LLMProvider):
    """An in-process model that answers at once: `echo: <the user's text>` (no HTTP, no litellm)."""

    name = "zero-latency"

    @property
    def default_model(self) -> str:
        return "zero-latency"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> LLMResponse:
        content = messages[-1].get("content") or ""
        text = content if isinstance(content, str) else str(content[0].get("text", ""))
        return LLMResponse(content=f"echo: {text.strip().splitlines()[-1]}", usage=Usage(10, 5))


async def respond_with_agent(bus: MessageBus, config: Config, workspace: Path) -> None:
    """The full agent loop on this bus, in its own workspace under `workspace`."""
    cfg = config.model_copy(deep=True)
    cfg.agents.defaults.workspace = str(workspace / "agent")
    runtime = build_runtime(cfg, bus, provider=ZeroLatencyProvider())
    runtime.loop.start()
    try:
        await asyncio.Event().wait()  # until cancelled by the benchmark
    finally:
        await runtime.aclose(drain_timeout_s=1.0)


RESPONDERS: dict[str, Responder] = {"agent": respond_with_agent, "echo": respond}


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


async def _run(
    config: Config,
    workspace: Path,
    rounds: int,
    push: Callable[[int], float],
    sent_at: Callable[[int], float | None],
    responder: Responder,
) -> list[float]:
    bus = MessageBus()
    manager = ChannelManager(config, bus, workspace)
    for channel in manager.channels.values():
        if hasattr(channel, "guild_ready_timeout_s"):
            channel.guild_ready_timeout_s = 0.05  # type: ignore[attr-defined]
    await manager.start_all()
    task = asyncio.create_task(responder(bus, config, workspace))
    try:
        async with asyncio.timeout(10):
            while any(s["state"] != "running" for s in manager.status().values()):
                await asyncio.sleep(0.01)
        latencies: list[float] = []
        for i in range(rounds):
            pushed = push(i)
            async with asyncio.timeout(10):
                while (done := sent_at(i)) is None:
                    await asyncio.sleep(0.0005)
            latencies.append((done - pushed) * 1000)
        return latencies[min(3, rounds - 1) :]  # drop warm-up rounds (first connections, imports)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task  # the agent responder closes its stores
        await manager.stop_all()


async def bench_telegram(rounds: int, workspace: Path, responder: Responder) -> list[float]:
    srv = FakeTelegramServer().start()
    try:
        config = Config.model_validate(
            {
                "channels": {
                    "telegram": {
                        "enabled": True,
                        "token": "123456789:AAbenchmarkTokenabcdefghijklmnop",
                        "allowFrom": ["*"],
                        "baseUrl": srv.base_url,
                        "baseFileUrl": srv.base_file_url,
                        "pollTimeoutS": 10,
                    }
                }
            }
        )
        ids: dict[int, int] = {}

        def push(i: int) -> float:
            ids[i] = srv.push_message(f"ping {i}")
            return srv.pushed_at[ids[i]]

        def sent_at(i: int) -> float | None:
            calls = [c for c in srv.calls_to("sendMessage") if c.params.get("text") == f"echo: ping {i}"]
            return calls[0].at if calls else None

        return await _run(config, workspace, rounds, push, sent_at, responder)
    finally:
        srv.stop()


async def bench_discord(rounds: int, workspace: Path, responder: Responder) -> list[float]:
    srv = FakeDiscordServer().start()
    try:
        config = Config.model_validate(
            {
                "channels": {
                    "discord": {
                        "enabled": True,
                        "token": "MTA5.benchmark-discord-token.abcdef",
                        "allowFrom": ["*"],
                        "apiBase": srv.api_base,
                        "gatewayUrl": srv.gateway_url,
                    }
                }
            }
        )
        ids: dict[int, str] = {}

        def push(i: int) -> float:
            ids[i] = srv.push_message(f"ping {i}")
            return srv.pushed_at[ids[i]]

        def sent_at(i: int) -> float | None:
            calls = [c for c in srv.calls_to("send_message") if c.params.get("content") == f"echo: ping {i}"]
            return calls[0].at if calls else None

        return await _run(config, workspace, rounds, push, sent_at, responder)
    finally:
        srv.stop()


async def main(rounds: int, responder: Responder = respond_with_agent) -> int:
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    # Keep the fake server's own connection notices out of the figures.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, bench in (("telegram", bench_telegram), ("discord", bench_discord)):
            latencies = await bench(rounds, Path(tmp), responder)
            median, p95 = statistics.median(latencies), percentile(latencies, 95)
            passed = median < TARGET_MEDIAN_MS
            ok = ok and passed
            print(
                f"{name:9s} rounds={len(latencies):4d}  median={median:6.2f} ms  p95={p95:6.2f} ms  "
                f"max={max(latencies):6.2f} ms  (goal: median < {TARGET_MEDIAN_MS:.0f} ms) "
                f"{'PASS' if passed else 'FAIL'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--responder", choices=sorted(RESPONDERS), default="agent")
    args = parser.parse_args()
    print(f"responder: {args.responder}")
    sys.exit(asyncio.run(main(args.rounds, RESPONDERS[args.responder])))
