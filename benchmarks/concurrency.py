"""Concurrency through the AgentLoop: many sessions at once, and strict order within one session.

1. 50 messages on 50 sessions, the LLM taking 200 ms each, loop concurrency 64: all replies should
   arrive in well under 1 s (sequential would take 10 s).
2. 20 messages on one session: answered one after another, in order.

Both run twice: with an in-process provider that sleeps 200 ms (framework only), and through the
real litellm to the HTTP fake LLM on 127.0.0.1 answering after 200 ms (the full client stack).

    .venv/bin/python benchmarks/concurrency.py [--sessions 50] [--delay-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.bus.events import InboundMessage  # noqa: E402
from nanobot.bus.queue import MessageBus  # noqa: E402
from nanobot.config.schema import Config  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.providers.base import LLMProvider, LLMResponse, Usage  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Reply  # noqa: E402

TARGET_S = 1.0
CONCURRENCY = 64
ORDERED_MESSAGES = 20


def _echo(messages: list[dict[str, Any]]) -> str:
    return "re: " + str(messages[-1]["content"]).rsplit("\n\n", 1)[-1]


class SleepingProvider(LLMProvider):
    """Answers after `delay_s` without using the CPU (an LLM that is slow but not busy here)."""

    name = "sleeping"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    @property
    def default_model(self) -> str:
        return "sleeping"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> LLMResponse:
        await asyncio.sleep(self.delay_s)
        return LLMResponse(content=_echo(messages), usage=Usage(1, 1))


async def _run(config: Config, provider: LLMProvider | None, sessions: int) -> dict[str, Any]:
    bus = MessageBus()
    runtime = build_runtime(config, bus, provider=provider)  # its loop: maxConcurrentTurns = CONCURRENCY
    runtime.loop.start()
    try:
        # warm-up (first-use imports and connections), not timed
        await bus.publish_inbound(InboundMessage("bench", "u", "warm", "hello"))
        await bus.consume_outbound()
        start = time.perf_counter()
        for i in range(sessions):
            await bus.publish_inbound(InboundMessage("bench", "u", f"s{i}", f"question {i}"))
        got = {}
        while len(got) < sessions:
            out = await bus.consume_outbound()
            if out.kind == "message":
                got[out.chat_id] = out.content
        spread_s = time.perf_counter() - start
        correct = all(got[f"s{i}"] == f"re: question {i}" for i in range(sessions))
        start = time.perf_counter()
        for i in range(ORDERED_MESSAGES):
            await bus.publish_inbound(InboundMessage("bench", "u", "one", f"message {i}"))
        order = []
        while len(order) < ORDERED_MESSAGES:
            out = await bus.consume_outbound()
            if out.kind == "message":
                order.append(out.content)
        serial_s = time.perf_counter() - start
        in_order = order == [f"re: message {i}" for i in range(ORDERED_MESSAGES)]
    finally:
        await runtime.aclose(1.0)
    return {"spread_s": spread_s, "correct": correct, "serial_s": serial_s, "in_order": in_order}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--delay-ms", type=float, default=200.0)
    args = parser.parse_args()
    setup_logging("WARNING")
    delay_s = args.delay_ms / 1000
    ok = True
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        server.responder = lambda body: Reply(content=_echo(body["messages"]), delay_s=delay_s)
        for label, provider in (
            ("in-process provider", SleepingProvider(delay_s)),
            ("litellm → HTTP fake", None),
        ):
            workspace = Path(tmp) / label.split()[0]
            config = Config(
                agents={
                    "defaults": {
                        "workspace": str(workspace),
                        "provider": "custom",
                        "model": "fake-model",
                        "maxConcurrentTurns": CONCURRENCY,
                    }
                },
                providers={"custom": {"apiBase": server.url, "apiKey": "k"}},
            )
            r = await _run(config, provider, args.sessions)
            passed = r["spread_s"] < TARGET_S and r["correct"] and r["in_order"]
            ok &= passed
            print(
                f"{label}: {args.sessions} sessions × 1 message at {args.delay_ms:.0f} ms: "
                f"{r['spread_s']:.3f} s (target < {TARGET_S} s, concurrency {CONCURRENCY}); "
                f"{ORDERED_MESSAGES} messages on one session: {r['serial_s']:.2f} s, "
                f"{'in order' if r['in_order'] else 'OUT OF ORDER'}; {'PASS' if passed else 'FAIL'}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
