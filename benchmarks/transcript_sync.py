"""The memory index's text sync after a turn on a long live transcript (a chat never reset by /new).

A workspace with one live transcript of `--mb` MB (user, assistant and tool messages over many days)
is indexed once; then, `--turns` times, one user message is appended and the text phase runs
(`MemoryIndex.sync_text`, what a search waits for). Keyword mode: no model is involved. Prints the
first sync (time, RSS and peak RSS) and the per-turn syncs (median and max), and checks that the
last message is found.

    python benchmarks/transcript_sync.py [--mb 160] [--turns 5] [--history]

With `--history` the file is memory/HISTORY.md instead (one timestamped paragraph per
consolidation) and each turn appends a paragraph through MemoryStore, as consolidation does.

Goal: a turn's sync on a 160 MB transcript (or HISTORY.md) ≤ 0.5 s (median). Before the resume
points (memory/transcript_tail.py, memory/markdown_tail.py) every turn re-read, parsed and chunked
the whole file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cold_start import machine  # noqa: E402
from nanobot.config.schema import MemorySearchConfig  # noqa: E402
from nanobot.memory.index import MemoryIndex  # noqa: E402
from nanobot.memory.store import MemoryStore  # noqa: E402

GOAL_TURN_S = 0.5
WORDS = [
    "the", "a", "plan", "trip", "dentist", "monday", "coffee", "garden", "python", "bug", "release", "budget",
    "meeting", "sister", "paris", "train", "ticket", "invoice", "ferry", "violin", "parcel", "kayak", "recipe",
]


def write_transcript(path: Path, megabytes: float, rng: random.Random) -> None:
    """User (20 words), assistant (60) and tool (150) messages, 40 exchanges a day."""
    with path.open("w", encoding="utf-8") as fh:
        size, exchange = 0, 0
        while size < megabytes * 1e6:
            exchange += 1
            day = exchange // 40
            stamp = f"{2024 + day // 336}-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T10:{exchange % 60:02d}:00+00:00"
            for role, words in (("user", 20), ("assistant", 60), ("tool", 150)):
                text = " ".join(rng.choice(WORDS) for _ in range(words))
                line = json.dumps({"role": role, "content": text, "timestamp": stamp}) + "\n"
                fh.write(line)
                size += len(line)


def write_history(path: Path, megabytes: float, rng: random.Random) -> None:
    """Paragraphs of 80 words, each stamped, three a day."""
    with path.open("w", encoding="utf-8") as fh:
        size, entry = 0, 0
        while size < megabytes * 1e6:
            entry += 1
            day = entry // 3
            stamp = f"[{2024 + day // 336}-{1 + day // 28 % 12:02d}-{1 + day % 28:02d} 10:{entry % 60:02d}]"
            paragraph = f"{stamp} " + " ".join(rng.choice(WORDS) for _ in range(80)) + "\n\n"
            fh.write(paragraph)
            size += len(paragraph)


def memory_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak() -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


async def run(workspace: Path, turns: int, rel: str) -> tuple[float, list[float], bool]:
    transcript = workspace / rel
    index = MemoryIndex(workspace, MemorySearchConfig(embedding_provider="none"), embedder=None)
    try:
        reset_peak()
        before, _ = memory_mib()
        started = time.perf_counter()
        await index.sync_text()
        first = time.perf_counter() - started
        after, peak = memory_mib()
        print(f"first sync: RSS {before:.0f} → {after:.0f} MiB, peak {peak:.0f} MiB")
        per_turn = []
        for turn in range(turns):
            if rel.endswith(".md"):
                MemoryStore(workspace).append_history(f"[2030-01-01 00:0{turn % 10}] Noted the zebra{turn} crossing.")
            else:
                stamp = "2030-01-01T00:00:00+00:00"
                message = {"role": "user", "content": f"remember the zebra{turn} crossing", "timestamp": stamp}
                with transcript.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(message) + "\n")
            started = time.perf_counter()
            await index.sync_text()
            per_turn.append(time.perf_counter() - started)
        found = (await index.search(f"zebra{turns - 1}", max_results=1)).results
        return first, per_turn, bool(found) and found[0].path == rel
    finally:
        index.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=160.0)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--history", action="store_true", help="grow memory/HISTORY.md, not a transcript")
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        (workspace / "sessions").mkdir()
        (workspace / "memory").mkdir()
        rel = "memory/HISTORY.md" if args.history else "sessions/telegram_1.jsonl"
        (write_history if args.history else write_transcript)(workspace / rel, args.mb, random.Random(1))
        print(f"{rel}: {(workspace / rel).stat().st_size / 1e6:.1f} MB")
        first, per_turn, found = asyncio.run(run(workspace, args.turns, rel))
    median = statistics.median(per_turn)
    print(f"first sync (the whole file): {first:.2f} s")
    print(f"sync after a turn: median {median:.3f} s, max {max(per_turn):.3f} s over {len(per_turn)} turns")
    print(f"the last message (or paragraph) found by search: {found}")
    ok = median <= GOAL_TURN_S and found
    print(f"goal: a turn's sync ≤ {GOAL_TURN_S} s (median) and the new message found: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
