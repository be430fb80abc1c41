"""Crash safety: kill -9 a real `nanobot gateway` under message load, restart it, check the disk.

A producer feeds messages to several Telegram chats through the fake Bot API; the gateway (a real
subprocess: python-telegram-bot, the full agent, litellm to the fake LLM) answers each with
`ack <id>`. Consolidation, pre-compaction flushes and `/new` archives run all the time (a small
context window), so memory files are being written too. Each iteration SIGKILLs the gateway at a
random point (mostly under load, some during start-up), checks the workspace, and restarts.

Checked after every kill:
- corrupt session lines: a JSONL line that is not valid JSON, other than a truncated last line
  (which the loader skips; counted separately). Must be 0.
- corrupt memory files: MEMORY.md (and its backups), HISTORY.md, daily and session notes must each
  be a complete version of what was written; the search index, if any, passes integrity_check.
  Must be 0.
- acknowledged messages missing from the transcripts: every message whose reply the fake server
  received must be in a session file (live or archived), and so must the reply. Must be 0.

Checked at the end: a last run is stopped gracefully (SIGTERM) while it answers the backlog, like a
kill under load; the stop is timed and must exit 0 within 15 s (the service unit's TimeoutStopSec
is 20 s). A graceful stop may leave messages unanswered, never lost: what it had not saved stays
unconfirmed at Telegram, what it saved is answered at the next start. So one more start answers
what is left and is stopped gracefully once replies pause. Then:
- unanswered messages: every message the producer pushed must have received its reply (delivery is
  at-least-once up to the reply: Telegram serves again what was not saved, and the gateway answers
  at start what was saved but not answered). Must be 0. Replies sent twice (a message answered, then
  served again because the kill came before its confirmation) are counted, not failed.

    .venv/bin/python benchmarks/crash_safety.py [--iterations 50] [--chats 3] [--seed 1] [--launcher fork|exec]

Exit status 0 when all four figures are 0 and both graceful stops exit 0 in time. Most of the run
time is the gateway's start-up, chiefly importing litellm (seconds). By default the gateways are
therefore forked from a "zygote" process that has imported everything once (`--launcher fork`):
each child then runs the same CLI entry point as `nanobot gateway`, in its own process with its own
pid, files and lock, and is SIGKILLed like any other. `--launcher exec` starts
`python -m nanobot gateway` afresh every time instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.llm_server import FakeLLMServer, Reply  # noqa: E402
from tests.fakes.telegram_server import FakeTelegramServer  # noqa: E402
from tests.gateway_harness import TG_TOKEN, GatewayProcess, cli_env  # noqa: E402

FIRST_CHAT_ID = 1001
NEW_EVERY_MESSAGES = 12  # each chat sends /new this often
PRODUCER_INTERVAL_S = 0.01
MAX_IN_FLIGHT = 8  # the producer waits while this many messages since the last start are unanswered
STARTUP_KILL_SHARE = 0.2  # share of iterations killed during start-up rather than under load
STARTUP_KILL_MAX_S = 3.0
LOAD_KILL_MAX_S = 1.5  # after the first new reply, kill within this many seconds
FIRST_REPLY_TIMEOUT_S = 180.0
SETTLE_QUIET_S = 3.0
MEM_END = "<!-- MEM-END -->"
HIST_END = "HIST-END."
NOTE_END = "NOTE-END."
DAILY_END = "DAILY-END"
ZYGOTE_READY_TIMEOUT_S = 300.0
ZYGOTE_STOP_TIMEOUT_S = 15.0
# The zygote: imports the gateway's code once, then forks one `nanobot gateway` per "start" line.
ZYGOTE = r"""
import os, sys
from nanobot.providers.litellm import import_litellm
import_litellm()
import nanobot.cli.app, nanobot.gateway.runtime, nanobot.channels.telegram  # noqa: E401
print("ready", flush=True)
for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "start":
        pid = os.fork()
        if pid == 0:
            fd = os.open(arg, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.argv = ["nanobot", "gateway"]
            code = 1
            try:
                from nanobot.cli.app import main
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                os._exit(code)
        print(pid, flush=True)
    elif command == "wait":
        _, status = os.waitpid(int(arg), 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
"""
STABLE_FACTS = 5
_EXTRA_FACT = re.compile(r"- last consolidation \d+|## Kept from the previous version")
_MSG = re.compile(r"^msg (c\d+-\d+)$")
_ACK = re.compile(r"^ack (c\d+-\d+)$")


# ------------------------------------------------------------------------------------ fake LLM
class Router:
    """Answers chat turns with `ack <id>` and memory calls with complete, recognisable content."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.n += 1
            n = self.n
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if "save_memory" in tools:
            # Stable facts plus one that changes: nothing large is dropped, so no protective merge.
            facts = (
                "".join(f"- stable fact {i}\n" for i in range(STABLE_FACTS)) + f"- last consolidation {n}\n"
            )
            memory = f"# Memory\n\n{facts}{MEM_END}"
            entry = f"[2026-01-01 10:00] Consolidation {n} of the crash benchmark. {HIST_END}"
            return _call("save_memory", {"history_entry": entry, "memory_update": memory})
        if "write_daily_note" in tools:
            return _call("write_daily_note", {"content": f"- flushed fact {n} {DAILY_END}"})
        if "save_session_note" in tools:
            return _call(
                "save_session_note", {"slug": "crash", "title": "Crash", "summary": f"Note {n}. {NOTE_END}"}
            )
        text = str(body["messages"][-1].get("content") or "").strip().splitlines()[-1]
        match = _MSG.match(text)
        return Reply(content=f"ack {match.group(1)}" if match else "ok")


def _call(name: str, args: dict[str, Any]) -> Reply:
    return Reply(content=None, tool_calls=[{"name": name, "arguments": args}])


# ------------------------------------------------------------------------------------ producer
class Producer(threading.Thread):
    def __init__(self, tg: FakeTelegramServer, chats: int) -> None:
        super().__init__(daemon=True, name="producer")
        self.tg = tg
        self.chats = [FIRST_CHAT_ID + i for i in range(chats)]
        self.sent: dict[str, int] = {}  # message id -> chat
        self.commands = 0
        self.stop_event = threading.Event()
        self._seq = Counter[int]()
        self._epoch_pushed = 0
        self._epoch_replies = 0

    def new_epoch(self) -> None:
        """A gateway (re)starts: what the killed one left unanswered no longer holds the producer."""
        self._epoch_pushed = 0
        self._epoch_replies = len(self.tg.calls_to("sendMessage"))

    def _in_flight(self) -> int:
        return self._epoch_pushed - (len(self.tg.calls_to("sendMessage")) - self._epoch_replies)

    def run(self) -> None:
        turn = 0
        while not self.stop_event.is_set():
            if self._in_flight() >= MAX_IN_FLIGHT:  # the gateway is down, starting or busy
                time.sleep(PRODUCER_INTERVAL_S)
                continue
            self._epoch_pushed += 1
            chat = self.chats[turn % len(self.chats)]
            turn += 1
            self._seq[chat] += 1
            if self._seq[chat] % NEW_EVERY_MESSAGES == 0:
                self.tg.push_message("/new", chat_id=chat, user_id=chat)
                self.commands += 1
            else:
                mid = f"c{chat}-{self._seq[chat]}"
                self.sent[mid] = chat
                self.tg.push_message(f"msg {mid}", chat_id=chat, user_id=chat)
            time.sleep(PRODUCER_INTERVAL_S)


def acked(tg: FakeTelegramServer) -> Counter[str]:
    out = Counter[str]()
    for call in tg.calls_to("sendMessage"):
        match = _ACK.match(str(call.params.get("text", "")))
        if match:
            out[match.group(1)] += 1
    return out


# ------------------------------------------------------------------------------------ checks
@dataclass
class Figures:
    iterations: int = 0
    load_kills: int = 0
    startup_kills: int = 0
    session_files: int = 0
    session_lines: int = 0
    corrupt_session_lines: int = 0
    truncated_last_lines: int = 0
    corrupt_memory_files: int = 0
    missing_user_ids: set[str] = field(default_factory=set)
    missing_reply_ids: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    known_truncated: set[bytes] = field(default_factory=set)
    seen_corrupt: set[bytes] = field(default_factory=set)

    @property
    def missing_user(self) -> int:
        return len(self.missing_user_ids)

    @property
    def missing_reply(self) -> int:
        return len(self.missing_reply_ids)


def check_sessions(workspace: Path, figures: Figures) -> tuple[set[str], set[str]]:
    """Count corrupt/truncated lines (new ones only); return the ids of user messages and replies."""
    users: set[str] = set()
    replies: set[str] = set()
    files = sorted((workspace / "sessions").rglob("*.jsonl"))
    figures.session_files = len(files)
    figures.session_lines = 0
    for path in files:
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            figures.session_lines += 1
            try:
                obj = json.loads(line)
            except ValueError:
                is_last = i == len(lines) - 1 and not raw.endswith(b"\n")
                if is_last:
                    if line not in figures.known_truncated:
                        figures.known_truncated.add(line)
                        figures.truncated_last_lines += 1
                elif line not in figures.known_truncated and line not in figures.seen_corrupt:
                    figures.seen_corrupt.add(line)
                    figures.corrupt_session_lines += 1
                    figures.problems.append(f"corrupt line in {path.name}: {line[:80]!r}")
                continue
            if not isinstance(obj, dict) or not ({"role", "_type"} & obj.keys()):
                figures.corrupt_session_lines += 1
                figures.problems.append(f"unexpected line in {path.name}: {line[:80]!r}")
                continue
            content = str(obj.get("content") or "")
            if obj.get("role") == "user" and (m := _MSG.match(content)):
                users.add(m.group(1))
            elif obj.get("role") == "assistant" and (m := _ACK.match(content)):
                replies.add(m.group(1))
    return users, replies


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def complete_memory(text: str) -> bool:
    """A version the router wrote, possibly followed by facts a concurrent consolidation added
    (the three-way merge appends them) or that protection kept; a cut-off file fails."""
    lines = text.splitlines()
    if not text.endswith("\n") or not lines or lines[0] != "# Memory" or MEM_END not in lines:
        return False
    head = set(lines[: lines.index(MEM_END)])
    if not all(f"- stable fact {i}" in head for i in range(STABLE_FACTS)):
        return False
    tail = lines[lines.index(MEM_END) + 1 :]
    return all(_EXTRA_FACT.fullmatch(line) for line in tail if line.strip())


def memory_problems(workspace: Path) -> list[str]:
    """Each memory file must be a complete version of something written to it."""
    mem = workspace / "memory"
    bad: list[str] = []
    for path in [mem / "MEMORY.md", *sorted((mem / ".backups").glob("MEMORY-*.md"))]:
        if path.exists() and not complete_memory(path.read_text(encoding="utf-8")):
            bad.append(f"{path.name}: not a complete MEMORY.md version")
    history = mem / "HISTORY.md"
    if history.exists():
        text = history.read_text(encoding="utf-8")
        if not text.endswith("\n") or any(not p.endswith(HIST_END) for p in _paragraphs(text)):
            bad.append("HISTORY.md: an incomplete entry")
    for path in sorted(mem.glob("*.md")):
        name = path.name
        if name in ("MEMORY.md", "HISTORY.md"):
            continue
        text = path.read_text(encoding="utf-8")
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}\.md", name):  # daily note: header + bullets
            body = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("# ")]
            if not text.endswith("\n") or any(not ln.endswith(DAILY_END) for ln in body):
                bad.append(f"{name}: an incomplete daily note")
        elif not text.rstrip("\n").endswith(NOTE_END) and "## Excerpt" not in text:
            bad.append(f"{name}: an incomplete session note")
    index = mem / ".index.sqlite"
    if index.exists():
        try:
            with sqlite3.connect(f"file:{index}?mode=ro", uri=True) as db:
                verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
        except sqlite3.Error as exc:
            verdict = str(exc)
        if verdict != "ok":
            bad.append(f".index.sqlite: {verdict}")
    return bad


def check(workspace: Path, acks: Counter[str], figures: Figures) -> None:
    users, replies = check_sessions(workspace, figures)
    for problem in memory_problems(workspace):
        if problem not in figures.problems:
            figures.problems.append(problem)
            figures.corrupt_memory_files += 1
    for mid in acks:
        if mid not in users and mid not in figures.missing_user_ids:
            figures.missing_user_ids.add(mid)
            figures.problems.append(f"acknowledged message {mid} missing from the transcripts")
        if mid not in replies and mid not in figures.missing_reply_ids:
            figures.missing_reply_ids.add(mid)
            figures.problems.append(
                f"the reply to acknowledged message {mid} is missing from the transcripts"
            )


# ------------------------------------------------------------------------------------ launchers
class ForkedGateway:
    """Gateways forked from a pre-imported zygote; same interface as GatewayProcess."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.pid: int | None = None
        self._log: Path | None = None
        self._starts = 0
        self._code: int | None = None
        self.zygote = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=cli_env(home),
            cwd=str(home),
        )
        if self._read_line(ZYGOTE_READY_TIMEOUT_S) != "ready":
            raise RuntimeError("the gateway zygote did not start")

    @property
    def workspace(self) -> Path:
        return self.home / "workspace"

    @property
    def log(self) -> str:
        return self._log.read_text(encoding="utf-8", errors="replace") if self._log else ""

    def _read_line(self, timeout_s: float) -> str | None:
        assert self.zygote.stdout is not None
        ready, _, _ = select.select([self.zygote.stdout], [], [], timeout_s)
        return self.zygote.stdout.readline().strip() if ready else None

    def _command(self, line: str) -> None:
        assert self.zygote.stdin is not None
        self.zygote.stdin.write(line + "\n")
        self.zygote.stdin.flush()

    def start(self) -> ForkedGateway:
        self._log = self.home / f"gateway.log.{self._starts}"
        self._starts += 1
        self._command(f"start {self._log}")
        self.pid, self._code = int(self._read_line(30.0) or 0), None
        return self

    def returncode(self) -> int | None:
        if self.pid is None or self._code is not None:
            return self._code
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            state = "Z"
        return None if state != "Z" else -1  # exited on its own (the code comes with wait())

    def _wait(self, timeout_s: float) -> int | None:
        self._command(f"wait {self.pid}")
        line = self._read_line(timeout_s)
        if line is None:
            return None
        self._code = int(line)
        return self._code

    def kill(self) -> None:
        if self.pid is None or self._code is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self._wait(30.0)

    def stop(self) -> int | None:
        if self.pid is None or self._code is not None:
            return self._code
        os.kill(self.pid, signal.SIGTERM)
        code = self._wait(ZYGOTE_STOP_TIMEOUT_S)
        if code is None:  # the graceful stop overran: say so, then kill (the pending wait reports it)
            print(f"graceful stop took over {ZYGOTE_STOP_TIMEOUT_S:.0f} s; log tail:\n{self.log[-2000:]}")
            os.kill(self.pid, signal.SIGKILL)
            line = self._read_line(30.0)
            code = self._code = int(line) if line else -signal.SIGKILL
        return code

    def close(self) -> None:
        self.kill()
        if self.zygote.stdin is not None:
            self.zygote.stdin.close()
        try:  # its interpreter teardown (litellm's modules) takes seconds on a loaded host
            self.zygote.wait(timeout=ZYGOTE_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.zygote.kill()
            self.zygote.wait(timeout=10)


# ------------------------------------------------------------------------------------ run
def write_config(home: Path, llm: FakeLLMServer, tg: FakeTelegramServer) -> None:
    config = {
        "agents": {
            "defaults": {
                "provider": "custom",
                "model": "fake-model",
                "llmMaxRetries": 0,
                # ~2,200 tokens of system prompt and tools leave ~450 for the conversation:
                # flushes every compaction cycle, consolidation every ~20 turns, an archive every
                # NEW_EVERY_MESSAGES. (A smaller window leaves no room: the gateway warns at start.)
                "contextWindowTokens": 3840,
                "maxTokens": 512,
            }
        },
        "providers": {"custom": {"apiBase": llm.url, "apiKey": "bench-key"}},
        "channels": {
            "sendProgress": False,
            "telegram": {
                "enabled": True,
                "token": TG_TOKEN,
                "allowFrom": ["*"],
                "baseUrl": tg.base_url,
                "baseFileUrl": tg.base_file_url,
                "pollTimeoutS": 2,
            },
        },
        "gateway": {"heartbeat": {"enabled": False}, "watchdogIntervalS": 1.0},
        "logging": {"level": "WARNING"},
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


def wait_for_new_ack(
    tg: FakeTelegramServer, gw: GatewayProcess | ForkedGateway, before: int, timeout_s: float
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(acked(tg).values()) > before:
            return True
        if gw.returncode() is not None:
            raise RuntimeError(f"gateway exited on its own ({gw.returncode()}):\n{gw.log[-3000:]}")
        time.sleep(0.01)
    return False


def wait_all_saved(tg: FakeTelegramServer, timeout_s: float = 120.0) -> None:
    """Wait until Telegram holds no unconfirmed update (every message is saved)."""
    deadline = time.monotonic() + timeout_s
    while tg.held_ids() and time.monotonic() < deadline:
        time.sleep(0.05)


def timed_stop(gw: GatewayProcess | ForkedGateway) -> tuple[int | None, float]:
    """SIGTERM and wait (a gateway overrunning ZYGOTE_STOP_TIMEOUT_S is killed): (exit code, s)."""
    started = time.monotonic()
    code = gw.stop() if isinstance(gw, ForkedGateway) else gw.stop(timeout=ZYGOTE_STOP_TIMEOUT_S)
    return code, time.monotonic() - started


def settle(tg: FakeTelegramServer, quiet_s: float, timeout_s: float = 120.0) -> None:
    """Wait until no new reply arrives for `quiet_s` (the backlog is answered)."""
    deadline = time.monotonic() + timeout_s
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = len(tg.calls_to("sendMessage"))
        if count != last:
            last, last_change = count, time.monotonic()
        elif time.monotonic() - last_change >= quiet_s:
            return
        time.sleep(0.05)


def run(iterations: int, chats: int, seed: int, verbose: bool, launcher: str = "fork") -> int:
    # A plain `kill` of the benchmark still cleans up (the finally blocks stop the gateways).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # A killed client leaves the fake servers' handlers with reset connections: expected here.
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
    rng = random.Random(seed)
    figures = Figures()
    started = time.monotonic()
    with FakeLLMServer() as llm, tempfile.TemporaryDirectory(prefix="nanobot-crash-") as tmp:
        llm.responder = Router()
        # The stdlib server prints a traceback for every connection a killed gateway drops: expected.
        llm._server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        tg = FakeTelegramServer().start()
        home = Path(tmp)
        write_config(home, llm, tg)
        producer = Producer(tg, chats)
        producer.start()
        gw: GatewayProcess | ForkedGateway = (
            ForkedGateway(home) if launcher == "fork" else GatewayProcess(home)
        )
        final_code: int | None = None
        final_stop_s = restart_stop_s = 0.0
        restart_code: int | None = None
        held_at_stop = 0
        saved: set[str] = set()
        replied: set[str] = set()
        try:
            for i in range(iterations):
                before = sum(acked(tg).values())
                producer.new_epoch()
                gw.start()
                if rng.random() < STARTUP_KILL_SHARE:
                    time.sleep(rng.uniform(0.0, STARTUP_KILL_MAX_S))
                    phase = "start-up"
                    figures.startup_kills += 1
                else:
                    if not wait_for_new_ack(tg, gw, before, FIRST_REPLY_TIMEOUT_S):
                        raise RuntimeError(f"no reply within {FIRST_REPLY_TIMEOUT_S}s:\n{gw.log[-3000:]}")
                    time.sleep(rng.uniform(0.0, LOAD_KILL_MAX_S))
                    phase = "load"
                    figures.load_kills += 1
                gw.kill()
                figures.iterations += 1
                check(gw.workspace, acked(tg), figures)
                if verbose:
                    print(
                        f"[{i + 1:3d}/{iterations}] killed during {phase:8s} acked={len(acked(tg)):5d} "
                        f"corrupt={figures.corrupt_session_lines} truncated={figures.truncated_last_lines} "
                        f"memory={figures.corrupt_memory_files} missing={figures.missing_user}/"
                        f"{figures.missing_reply}  t={time.monotonic() - started:5.0f}s",
                        flush=True,
                    )
            # A last run: SIGTERM while it answers the backlog (turns and memory work in flight).
            producer.stop_event.set()
            producer.new_epoch()
            gw.start()
            wait_for_new_ack(tg, gw, sum(acked(tg).values()), FIRST_REPLY_TIMEOUT_S)
            time.sleep(rng.uniform(0.0, LOAD_KILL_MAX_S))
            held_at_stop = len(tg.held_ids())
            final_code, final_stop_s = timed_stop(gw)
            check(gw.workspace, acked(tg), figures)
            # What that stop left unanswered is answered by the next start; stopped gracefully too.
            gw.start()
            wait_all_saved(tg)
            settle(tg, SETTLE_QUIET_S)
            restart_code, restart_stop_s = timed_stop(gw)
            check(gw.workspace, acked(tg), figures)
            saved, replied = check_sessions(gw.workspace, Figures())
        finally:
            producer.stop_event.set()
            if isinstance(gw, ForkedGateway):
                gw.close()
            else:
                gw.kill()
            tg.stop()
        acks = acked(tg)
        pushed = len(producer.sent)
        unanswered = sum(1 for mid in producer.sent if mid not in acks)
        twice = sum(1 for n in acks.values() if n > 1)

    elapsed = time.monotonic() - started
    ok = figures.corrupt_session_lines == figures.corrupt_memory_files == 0
    ok = ok and figures.missing_user == figures.missing_reply == 0 and final_code == restart_code == 0
    ok = ok and unanswered == 0
    print(
        "goal: 0 corrupt session lines, 0 corrupt memory files, 0 acknowledged messages missing from the "
        "transcripts, 0 messages never answered (at-least-once up to the reply), graceful stops exit 0 "
        f"within {ZYGOTE_STOP_TIMEOUT_S:.0f} s"
    )
    load = os.getloadavg()
    print(f"launcher: {launcher}")
    print(f"host load average at the end (1/5/15 min): {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print(
        f"iterations: {figures.iterations} (killed under load: {figures.load_kills}, during start-up: "
        f"{figures.startup_kills}) in {elapsed:.0f} s"
    )
    print(
        f"graceful stop under load ({held_at_stop} updates not yet saved at SIGTERM): exit code {final_code} "
        f"in {final_stop_s:.1f} s; idle stop after one more start: exit code {restart_code} in {restart_stop_s:.1f} s"
    )
    print(
        f"messages pushed: {pushed} (+{producer.commands} /new), acknowledged: {len(acks)}, "
        f"answered twice (redelivered after a kill): {twice}"
    )
    never = [m for m in producer.sent if m not in acks]
    print(
        f"messages never answered: {unanswered} (must be 0): never saved {sum(m not in saved for m in never)}, "
        f"saved without a reply {sum(m in saved and m not in replied for m in never)}, reply saved but "
        f"never sent {sum(m in replied for m in never)}"
    )
    for mid in never[:10]:
        print(f"  unanswered: {mid}")
    print(f"session files: {figures.session_files}, lines: {figures.session_lines}")
    print(f"corrupt session lines: {figures.corrupt_session_lines} (must be 0)")
    print(f"truncated last lines (skipped by the loader): {figures.truncated_last_lines}")
    print(f"corrupt memory files: {figures.corrupt_memory_files} (must be 0)")
    print(
        f"acknowledged messages missing from the transcripts: {figures.missing_user} "
        f"(their replies missing: {figures.missing_reply}) (must be 0)"
    )
    for problem in figures.problems[:20]:
        print(f"  problem: {problem}")
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--chats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--launcher", choices=["fork", "exec"], default="fork")
    parser.add_argument("--quiet", action="store_true", help="only the summary")
    args = parser.parse_args()
    sys.exit(run(args.iterations, args.chats, args.seed, not args.quiet, args.launcher))
