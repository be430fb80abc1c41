"""Resident memory of a real `nanobot gateway`: idle, and after 1,000 turns over 100 sessions.

The gateway is a subprocess (`python -m nanobot gateway`) on the fake Telegram Bot API and the fake
LLM (0 ms, OpenAI-compatible route), both in threads of this process. RSS is read from
/proc/<pid>/status (VmRSS; VmHWM is the peak). Each run: start, wait for the channel, 5 s idle →
idle RSS; then `--turns` messages spread over `--sessions` private chats, pushed `--in-flight` at a
time, until every reply has reached the fake → RSS after the turns (and after 5 s more, settled).

    python benchmarks/gateway_rss.py [--runs 3] [--turns 1000] [--sessions 100]

Goals: idle ≤ 120 MiB, ≤ 140 MiB after 1,000 turns over 100 sessions (medians over the runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cold_start import machine  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer  # noqa: E402
from tests.gateway_harness import GatewayProcess, gateway_config  # noqa: E402

GOAL_IDLE_MIB = 120.0
GOAL_AFTER_MIB = 140.0
IDLE_S = 5.0
FIRST_CHAT_ID = 10_000
TURN_TIMEOUT_S = 600.0


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def one_run(turns: int, sessions: int, in_flight: int) -> dict[str, float]:
    tg = FakeTelegramServer()
    tg.start()
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as llm:
            return _measure(Path(tmp), llm, tg, turns, sessions, in_flight)
    finally:
        tg.stop()


def _measure(
    home: Path, llm: FakeLLMServer, tg: FakeTelegramServer, turns: int, sessions: int, in_flight: int
) -> dict[str, float]:
    config = gateway_config(llm.url, tg, None, dc_allowed="", extra={"channels.telegram.allowFrom": ["*"]})
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    gateway = GatewayProcess(home).start()
    try:
        gateway.wait_channels({"telegram": "running"})
        assert gateway.proc is not None
        pid = gateway.proc.pid
        time.sleep(IDLE_S)
        idle, _ = rss_mib(pid)
        start = time.perf_counter()
        baseline = len(tg.sent_at)
        pushed = 0
        deadline = time.monotonic() + TURN_TIMEOUT_S
        while True:
            answered = len(tg.sent_at) - baseline
            if answered >= turns:
                break
            while pushed < turns and pushed - answered < in_flight:
                chat = FIRST_CHAT_ID + pushed % sessions
                tg.push_message(f"message {pushed} in chat {chat}", chat_id=chat, user_id=chat)
                pushed += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"{answered}/{turns} answered:\n{gateway.log[-3000:]}")
            time.sleep(0.005)
        elapsed = time.perf_counter() - start
        after, peak = rss_mib(pid)
        time.sleep(IDLE_S)
        settled, peak = rss_mib(pid)
    finally:
        code = gateway.stop()
    if code != 0:
        raise SystemExit(f"gateway exited {code}:\n{gateway.log[-3000:]}")
    return {"idle": idle, "after": after, "settled": settled, "peak": peak, "seconds": elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=20, help="unanswered messages at a time")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    results = []
    for run in range(args.runs):
        r = one_run(args.turns, args.sessions, args.in_flight)
        results.append(r)
        print(
            f"run {run + 1}: idle {r['idle']:.1f} MiB; after {args.turns} turns over {args.sessions} "
            f"sessions {r['after']:.1f} MiB ({r['seconds']:.1f} s, {args.turns / r['seconds']:.0f} turns/s); "
            f"5 s later {r['settled']:.1f} MiB; peak {r['peak']:.1f} MiB"
        )
    med = statistics.median
    idle = med(r["idle"] for r in results)
    after = med(r["after"] for r in results)
    checks = [
        (f"idle gateway RSS median {idle:.1f} MiB ≤ {GOAL_IDLE_MIB:.0f} MiB", idle <= GOAL_IDLE_MIB),
        (
            f"RSS after {args.turns} turns over {args.sessions} sessions median {after:.1f} MiB "
            f"≤ {GOAL_AFTER_MIB:.0f} MiB",
            after <= GOAL_AFTER_MIB,
        ),
    ]
    for text, ok in checks:
        print(f"goal: {text}: {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
