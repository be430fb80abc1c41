"""Per-turn framework overhead against session length, and bytes written to disk per turn.

An in-process LLMProvider answers instantly (no HTTP), so what is timed is nanobot itself: loading
nothing (the session is warm), building the prompt, token estimates, the memory lifecycle checks,
persisting the user message and the reply. Sessions of 100; 1,000; 10,000 and 50,000 messages are
pre-built on disk with the consolidation pointer set so the unconsolidated tail is realistic
(`--tail` messages, default 40), as after months of use.

    .venv/bin/python benchmarks/turn_overhead.py [--turns 200] [--sizes 100,1000,10000,50000]

Targets: median overhead at 50,000 messages ≤ 1.5 × the median at 100; median < 5 ms at 10,000;
bytes written per turn ≈ the size of the turn's new transcript lines.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.config.schema import Config  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.providers.base import LLMProvider, LLMResponse, Usage  # noqa: E402

MAX_RATIO = 1.5
MAX_MEDIAN_MS_AT_10K = 5.0
REPLY_TEXT = "Sure, noted. Here is a short, ordinary answer of about the usual length for a chat."
USER_TEXT = "Can you remind me what we said about the trip to Lisbon next month and the hotel?"


class InstantProvider(LLMProvider):
    """Returns a fixed reply at once: 0 ms LLM latency, no network."""

    name = "instant"

    @property
    def default_model(self) -> str:
        return "instant"

    async def chat(self, messages: list[dict[str, Any]], tools: Any = None, **kwargs: Any) -> LLMResponse:
        return LLMResponse(content=REPLY_TEXT, usage=Usage(len(messages), 20))


def build_session_file(path: Path, size: int, tail: int) -> None:
    """`size` alternating user/assistant messages (some with tool groups), pointer at size - tail."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = "2026-01-01T10:00:00+00:00"
    lines: list[str] = [json.dumps({"_type": "metadata", "format": 1, "is_group": False})]
    i = 0
    while i < size:
        lines.append(json.dumps({"role": "user", "content": f"{USER_TEXT} ({i})", "timestamp": stamp}))
        i += 1
        if i % 10 == 1 and i + 2 < size:  # now and then a tool group
            call = {"id": f"c{i}", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
            lines.append(
                json.dumps({"role": "assistant", "content": "", "tool_calls": [call], "timestamp": stamp})
            )
            lines.append(
                json.dumps(
                    {
                        "role": "tool",
                        "tool_call_id": f"c{i}",
                        "name": "list_dir",
                        "content": "a.txt\nb/",
                        "timestamp": stamp,
                    }
                )
            )
            i += 2
        if i < size:
            lines.append(json.dumps({"role": "assistant", "content": REPLY_TEXT, "timestamp": stamp}))
            i += 1
    # consolidated up to a user message `tail` messages before the end
    objs = [json.loads(line) for line in lines[1:]]
    pointer = max(0, size - tail)
    while pointer < size and objs[pointer]["role"] != "user":
        pointer += 1
    lines.append(
        json.dumps({"_type": "metadata", "format": 1, "is_group": False, "last_consolidated": pointer})
    )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def written_bytes() -> int:
    """Bytes this process handed to write() so far (Linux /proc accounting)."""
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


async def measure(size: int, turns: int, tail: int, profile: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        session_file = workspace / "sessions" / "cli_bench.jsonl"
        build_session_file(session_file, size, tail)
        config = Config(
            agents={"defaults": {"workspace": str(workspace), "provider": "custom", "model": "x"}}
        )
        runtime = build_runtime(config, provider=InstantProvider())
        load_start = time.perf_counter()
        await runtime.ask("warm-up", session_key="cli:bench")  # loads the session once
        load_ms = (time.perf_counter() - load_start) * 1000
        for _ in range(5):
            await runtime.ask(USER_TEXT, session_key="cli:bench")
        durations: list[float] = []
        written: list[int] = []
        grew: list[int] = []
        payload: list[int] = []
        profiler = cProfile.Profile() if profile else None
        gc.collect()
        for turn in range(turns):
            text = f"{USER_TEXT} [turn {turn}]"
            size_before = session_file.stat().st_size
            session = runtime.agent.sessions.get("cli:bench")
            count_before = len(session.messages)
            w0 = written_bytes()
            if profiler:
                profiler.enable()
            t0 = time.perf_counter()
            await runtime.ask(text, session_key="cli:bench")
            durations.append((time.perf_counter() - t0) * 1000)
            if profiler:
                profiler.disable()
            written.append(written_bytes() - w0)
            grew.append(session_file.stat().st_size - size_before)
            new = session.messages[count_before:]
            payload.append(sum(len(json.dumps(m, ensure_ascii=False).encode()) + 1 for m in new))
        pending = runtime.agent.lifecycle.pending()
        await runtime.aclose()
        if profiler:
            print(f"\n--- profile at {size} messages (top 15 by cumulative time) ---")
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
    durations.sort()
    return {
        "size": size,
        "load_ms": load_ms,
        "median_ms": statistics.median(durations),
        "p95_ms": durations[int(0.95 * (len(durations) - 1))],
        "bytes_written": statistics.median(written),
        "file_growth": statistics.median(grew),
        "new_lines": statistics.median(payload),
        "background_tasks": pending,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tail", type=int, default=40)
    parser.add_argument("--sizes", default="100,1000,10000,50000")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed turns")
    args = parser.parse_args()
    setup_logging("WARNING")
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"turn overhead: {args.turns} timed turns per size, unconsolidated tail {args.tail} messages, 0 ms LLM"
    )
    print(
        f"{'messages':>9} {'load ms':>8} {'median ms':>10} {'p95 ms':>8} "
        f"{'written B':>10} {'file +B':>8} {'new lines B':>12}"
    )
    rows = []
    for size in sizes:
        row = await measure(size, args.turns, args.tail, args.profile)
        rows.append(row)
        print(
            f"{size:>9} {row['load_ms']:>8.1f} {row['median_ms']:>10.2f} {row['p95_ms']:>8.2f} "
            f"{row['bytes_written']:>10.0f} {row['file_growth']:>8.0f} {row['new_lines']:>12.0f}"
        )
    by_size = {r["size"]: r for r in rows}
    ok = True
    if 100 in by_size and 50000 in by_size:
        ratio = by_size[50000]["median_ms"] / by_size[100]["median_ms"]
        passed = ratio <= MAX_RATIO
        ok &= passed
        print(
            f"median ratio 50,000 / 100 messages: {ratio:.2f} (target ≤ {MAX_RATIO}) {'PASS' if passed else 'FAIL'}"
        )
    if 10000 in by_size:
        median = by_size[10000]["median_ms"]
        passed = median < MAX_MEDIAN_MS_AT_10K
        ok &= passed
        print(
            f"median at 10,000 messages: {median:.2f} ms "
            f"(target < {MAX_MEDIAN_MS_AT_10K} ms) {'PASS' if passed else 'FAIL'}"
        )
    worst = max(r["bytes_written"] / r["new_lines"] for r in rows)
    print(f"bytes written per turn / size of the new transcript lines: ≤ {worst:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
