"""What the exec sandbox costs per command: bubblewrap and Landlock against no sandbox.

Each round runs, through the real `exec` tool, `true` and a command printing 1 MB, once per mode in
a shuffled order (so load spikes on a shared machine hit every mode alike). Reported per mode:
min / median / p90 wall time, and the median added over `off`.

    .venv/bin/python benchmarks/exec_sandbox.py [--rounds 40] [--seed 1]

Goal: at most 30 ms added per call (median) by either sandbox, for both commands.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nanobot.agent.tools.base import ToolContext  # noqa: E402
from nanobot.agent.tools.shell import ExecTool  # noqa: E402
from nanobot.config.schema import ExecToolConfig  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.sandbox import detect  # noqa: E402

GOAL_ADDED_MS = 30.0
MODES = ("off", "bwrap", "landlock")
COMMANDS = {"true": "true", "1 MB output": "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM | head -c 1000000"}


async def measure(rounds: int, seed: int) -> dict[tuple[str, str], list[float]]:
    rng = random.Random(seed)
    ws = Path(tempfile.mkdtemp(prefix="nanobot-bench-")) / "workspace"
    for sub in ("memory", "sessions", "media"):
        (ws / sub).mkdir(parents=True)
    tools = {
        mode: ExecTool(ws, ExecToolConfig(sandbox=mode, max_output_bytes=4_000_000), restrict=True)
        for mode in MODES
        if detect(mode).active == mode
    }
    ctx = ToolContext()
    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in tools for c in COMMANDS}
    for command in COMMANDS.values():  # warm-up: first runs pay page-cache and probe costs
        for tool in tools.values():
            await tool.execute(ctx, command=command)
    for _ in range(rounds):
        order = [(m, c) for m in tools for c in COMMANDS]
        rng.shuffle(order)
        for mode, name in order:
            started = time.perf_counter()
            await tools[mode].execute(ctx, command=COMMANDS[name])
            times[(mode, name)].append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    setup_logging("ERROR")
    times = asyncio.run(measure(args.rounds, args.seed))
    ok = True
    print(f"exec sandbox overhead, {args.rounds} rounds (seed {args.seed}); goal: ≤ {GOAL_ADDED_MS:.0f} ms added")
    for name in COMMANDS:
        base = statistics.median(times[("off", name)])
        for mode in MODES:
            samples = times.get((mode, name))
            if not samples:
                print(f"  {name:12s} {mode:9s} not available here ({detect(mode).detail})")
                ok = ok and mode == "off"
                continue
            ordered = sorted(samples)
            median = statistics.median(samples)
            p90 = ordered[int(0.9 * (len(ordered) - 1))]
            line = f"  {name:12s} {mode:9s} min {ordered[0]:6.1f}  median {median:6.1f}  p90 {p90:6.1f} ms"
            if mode != "off":
                added = median - base
                verdict = "PASS" if added <= GOAL_ADDED_MS else "FAIL"
                ok = ok and verdict == "PASS"
                line += f"  added {added:+6.1f} ms  {verdict}"
            print(line)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
