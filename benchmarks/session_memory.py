"""Memory and time of loading a long-lived session: a ~160 MB transcript, nearly all consolidated.

A chat never reset with /new grows for months. This writes such a transcript in a temp workspace
(user turns, assistant tool calls, tool results of 1-8 KB, final replies, all with timestamps;
a metadata line every ~500 messages moves `last_consolidated` on, ending 200 messages before the
end, as the memory lifecycle leaves it), then in a fresh subprocess per run imports the store,
reads VmRSS, loads the session through `SessionStore.get` and reads VmRSS and VmHWM (peak) again,
then times reading a consolidated message back (`messages[0]`) and the whole history view.

    python benchmarks/session_memory.py [--mb 160] [--runs 3] [--code PATH]

`--code` imports nanobot from another checkout (e.g. a worktree of an older commit) to compare.

Goal: RSS growth on load ≤ 10% of the file size (median over the runs); also reported: the peak.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cold_start import machine  # noqa: E402

GOAL_GROWTH_SHARE = 0.10
KEY = "telegram:1000"
TAIL = 200  # unconsolidated messages at the end
WORDS = [
    "the", "a", "meeting", "tomorrow", "file", "report", "python", "error", "fixed", "deploy", "server",
    "config", "memory", "budget", "note", "remind", "call", "mother", "groceries", "train", "ticket",
    "Berlin", "weather", "rain", "invoice", "paid", "project", "deadline", "draft", "email", "review",
    "merge", "branch", "test", "failing", "green", "log", "disk", "backup", "photo", "trip", "hotel",
]

CHILD = r"""
import json, os, sys, time
from pathlib import Path

def status():
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields

import nanobot
from nanobot.session.store import SessionStore
from nanobot.session.history import history_indices, history_tokens
store = SessionStore(Path(sys.argv[1]), fsync="never")
before = status()
t0 = time.perf_counter()
session = store.get(sys.argv[2])
load_s = time.perf_counter() - t0
after = status()
t0 = time.perf_counter()
first = session.messages[0]
cold_read_s = time.perf_counter() - t0
t0 = time.perf_counter()
history_tokens(session)
history_s = time.perf_counter() - t0
print(json.dumps({
    "before": before["VmRSS"], "after": after["VmRSS"], "peak": after["VmHWM"], "load_s": load_s,
    "cold_read_s": cold_read_s, "history_s": history_s, "messages": len(session.messages),
    "pointer": session.last_consolidated, "history": len(history_indices(session)),
    "first": first.get("timestamp"), "code": str(Path(nanobot.__file__).parent.parent),
}))
store.close()
"""


def text(rng: random.Random, low: int, high: int) -> str:
    out: list[str] = []
    size, goal = 0, rng.randint(low, high)
    while size < goal:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def build(path: Path, megabytes: int) -> int:
    """Write the transcript; returns its message count."""
    rng = random.Random(7)
    limit = megabytes * 1_000_000
    size, count, t = 0, 0, 1_700_000_000
    path.parent.mkdir(parents=True)
    with open(path, "w", encoding="utf-8") as fh:
        def put(obj: dict) -> None:
            nonlocal size
            line = json.dumps(obj, ensure_ascii=False) + "\n"
            fh.write(line)
            size += len(line.encode("utf-8"))

        put({"_type": "metadata", "format": 1, "is_group": False, "last_consolidated": 0})
        while size < limit:
            day = f"2025-{1 + (count // 40_000) % 12:02d}-{1 + (count // 1500) % 28:02d}"
            stamp = f"{day}T{(t // 3600) % 24:02d}:{(t // 60) % 60:02d}:00+00:00"
            put({"role": "user", "content": text(rng, 20, 400), "timestamp": stamp})
            for call in range(rng.randint(0, 3)):
                call_id = f"call_{count}_{call}"
                args = json.dumps({"path": f"notes/{rng.choice(WORDS)}.md"})
                put({"role": "assistant", "content": None, "timestamp": stamp,
                     "tool_calls": [{"id": call_id, "type": "function",
                                     "function": {"name": "read_file", "arguments": args}}]})
                put({"role": "tool", "tool_call_id": call_id, "name": "read_file",
                     "content": text(rng, 1000, 8000), "timestamp": stamp})
                count += 2
            put({"role": "assistant", "content": text(rng, 100, 1500), "timestamp": stamp})
            count += 2
            t += rng.randint(30, 3600)
            if count // 500 != (count - 2) // 500:
                put({"_type": "metadata", "format": 1, "is_group": False,
                     "last_consolidated": max(0, count - TAIL), "delivered_through": count})
        put({"_type": "metadata", "format": 1, "is_group": False,
             "last_consolidated": count - TAIL, "delivered_through": count})
    return count


def one_run(workspace: Path, code: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace), KEY],
        env=env, cwd=code, capture_output=True, text=True, check=True,  # cwd: `-c` imports from it first
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=160, help="transcript size in MB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", type=Path, default=REPO, help="checkout to import nanobot from")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        path = workspace / "sessions" / "telegram_1000.jsonl"
        count = build(path, args.mb)
        file_mib = path.stat().st_size / 2**20
        print(f"transcript: {file_mib:.1f} MiB, {count} messages, {TAIL} not consolidated")
        results = []
        for run in range(args.runs):
            r = one_run(workspace, args.code)
            results.append(r)
            if run == 0:
                print(f"code: {r['code']}")
            print(
                f"run {run + 1}: RSS {r['before']:.1f} → {r['after']:.1f} MiB (+{r['after'] - r['before']:.1f}), "
                f"peak {r['peak']:.1f} MiB; load {r['load_s']:.2f} s; messages[0] {r['cold_read_s'] * 1e3:.2f} ms; "
                f"history view ({r['history']} messages) {r['history_s'] * 1e3:.1f} ms"
            )
    growth = statistics.median(r["after"] - r["before"] for r in results)
    peak = statistics.median(r["peak"] - r["before"] for r in results)
    load = statistics.median(r["load_s"] for r in results)
    print(f"median: RSS growth {growth:.1f} MiB, peak growth {peak:.1f} MiB, load {load:.2f} s")
    goal = GOAL_GROWTH_SHARE * file_mib
    ok = growth <= goal
    print(
        f"goal: RSS growth on load {growth:.1f} MiB ≤ {GOAL_GROWTH_SHARE:.0%} of the file "
        f"({goal:.1f} MiB): {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
