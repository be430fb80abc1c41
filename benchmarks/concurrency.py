"""Concurrency and client cost through the real HTTP client: many sessions at once, CPU per call.

The fake LLM runs in its own process (`python -m tests.fakes.llm_server`), so the CPU this process
spends is the client's and the agent's only.

1. Client CPU per LLM call: `provider.chat()` in a loop against the fake at 0 ms, CPU time of this
   process divided by the calls (median of `--runs` batches); the direct route (nanobot's own HTTP client), and the
   litellm route (`via: "litellm"`) for comparison.
2. 50 sessions × 1 message, the model answering after 200 ms, through the AgentLoop and the direct
   route with `maxConcurrentTurns` 50 (median of `--runs`); the same with the default gate, and with
   an in-process provider that sleeps 200 ms (the framework alone).
3. 20 messages on one session: answered one after another, in order.

    python benchmarks/concurrency.py [--sessions 50] [--delay-ms 200] [--runs 5] [--calls 200]

Goals: client CPU ≤ 2 ms per call; 50 × 200 ms with the gate at 50 ≤ 0.35 s; order kept.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks.cold_start import machine  # noqa: E402
from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.bus.events import InboundMessage  # noqa: E402
from nanobot.bus.queue import MessageBus  # noqa: E402
from nanobot.config.schema import AgentDefaults, Config  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.providers.base import LLMProvider, LLMResponse, Usage  # noqa: E402
from nanobot.providers.registry import resolve_provider  # noqa: E402

GOAL_CPU_MS = 2.0
GOAL_SPREAD_S = 0.35
GATE = 50
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


class FakeProcess:
    """The fake LLM in a subprocess, so its CPU is not counted as ours."""

    def __init__(self, delay_ms: float) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.llm_server", "--echo", "--delay-ms", str(delay_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def config(workspace: Path, url: str, gate: int, via: str = "auto") -> Config:
    return Config(
        agents={
            "defaults": {
                "workspace": str(workspace),
                "provider": "custom",
                "model": "fake-model",
                "maxConcurrentTurns": gate,
            }
        },
        providers={"custom": {"apiBase": url, "apiKey": "k", "via": via}},
    )


async def cpu_per_call_ms(provider: LLMProvider, calls: int, runs: int) -> list[float]:
    messages = [{"role": "system", "content": "You are helpful. " * 50}, {"role": "user", "content": "hi"}]
    for _ in range(20):  # connections, first-use imports
        await provider.chat(messages)
    batches = []
    for _ in range(runs):
        start = time.process_time()
        for _ in range(calls):
            await provider.chat(messages)
        batches.append((time.process_time() - start) * 1000 / calls)
    return batches


async def spread(config: Config, provider: LLMProvider | None, sessions: int) -> tuple[float, bool]:
    """Seconds until all `sessions` single messages are answered, and whether every reply matches."""
    bus = MessageBus()
    runtime = build_runtime(config, bus, provider=provider)  # its loop's gate: maxConcurrentTurns
    runtime.loop.start()
    try:
        await bus.publish_inbound(InboundMessage("bench", "u", "warm", "hello"))
        await bus.consume_outbound()
        start = time.perf_counter()
        for i in range(sessions):
            await bus.publish_inbound(InboundMessage("bench", "u", f"s{i}", f"question {i}"))
        got: dict[str, str] = {}
        while len(got) < sessions:
            out = await bus.consume_outbound()
            if out.kind == "message":
                got[out.chat_id] = out.content
        elapsed = time.perf_counter() - start
        ok = all(got[f"s{i}"] == f"re: question {i}" for i in range(sessions))
    finally:
        await runtime.aclose(1.0)
    return elapsed, ok


async def in_order(config: Config) -> tuple[float, bool]:
    bus = MessageBus()
    runtime = build_runtime(config, bus)
    runtime.loop.start()
    try:
        start = time.perf_counter()
        for i in range(ORDERED_MESSAGES):
            await bus.publish_inbound(InboundMessage("bench", "u", "one", f"message {i}"))
        order: list[str] = []
        while len(order) < ORDERED_MESSAGES:
            out = await bus.consume_outbound()
            if out.kind == "message":
                order.append(out.content)
        return time.perf_counter() - start, order == [f"re: message {i}" for i in range(ORDERED_MESSAGES)]
    finally:
        await runtime.aclose(1.0)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--delay-ms", type=float, default=200.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--skip-litellm", action="store_true", help="skip the litellm comparison")
    args = parser.parse_args()
    setup_logging("WARNING")
    med = statistics.median
    default_gate = AgentDefaults().max_concurrent_turns
    print(f"machine: {machine()}")
    fast, slow = FakeProcess(0), FakeProcess(args.delay_ms)
    checks: list[tuple[str, bool]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp)
            routes = ["auto"] if args.skip_litellm else ["auto", "litellm"]
            for via in routes:
                provider = resolve_provider(config(ws / "cpu", fast.url, GATE, via))
                cpu = await cpu_per_call_ms(provider, args.calls, args.runs)
                label = "direct (own HTTP client)" if via == "auto" else "litellm"
                print(
                    f"client CPU per call, {label}: median {med(cpu):.2f} ms (min {min(cpu):.2f}) "
                    f"over {args.runs} × {args.calls} calls"
                )
                if via == "auto":
                    checks.append(
                        (f"client CPU per call {med(cpu):.2f} ms ≤ {GOAL_CPU_MS} ms", med(cpu) <= GOAL_CPU_MS)
                    )
            delay_s = args.delay_ms / 1000
            for label, gate, provider_factory in (
                (f"direct route, gate {GATE}", GATE, lambda: None),
                (f"direct route, default gate {default_gate}", default_gate, lambda: None),
                (f"in-process provider, gate {GATE}", GATE, lambda: SleepingProvider(delay_s)),
            ):
                times, correct = [], True
                for run in range(args.runs):
                    cfg = config(ws / f"spread-{gate}-{run}-{label[:6]}", slow.url, gate)
                    elapsed, ok = await spread(cfg, provider_factory(), args.sessions)
                    times.append(elapsed)
                    correct &= ok
                print(
                    f"{args.sessions} sessions × {args.delay_ms:.0f} ms, {label}: median {med(times):.3f} s "
                    f"(min {min(times):.3f}, max {max(times):.3f}) over {args.runs} runs"
                    f"{'' if correct else ', WRONG REPLIES'}"
                )
                if label.startswith("direct route, gate"):
                    text = f"{args.sessions} × {args.delay_ms:.0f} ms at gate {GATE}: {med(times):.3f} s"
                    checks.append((f"{text} ≤ {GOAL_SPREAD_S} s", med(times) <= GOAL_SPREAD_S and correct))
            serial_s, ordered = await in_order(config(ws / "ordered", slow.url, GATE))
            state = "in order" if ordered else "OUT OF ORDER"
            print(f"{ORDERED_MESSAGES} messages on one session: {serial_s:.2f} s, {state}")
            checks.append(("one session's messages answered in order", ordered))
    finally:
        fast.close()
        slow.close()
    for text, ok in checks:
        print(f"goal: {text}: {verdict(ok)}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
