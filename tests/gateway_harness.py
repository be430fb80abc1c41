"""A real `nanobot gateway` subprocess wired to the local fakes (LLM, Telegram, Discord).

Shared by tests/test_gateway_e2e.py and benchmarks/crash_safety.py. The fakes run in threads of
the calling process; the gateway reaches them over 127.0.0.1 exactly as it would reach the real
services. The gateway's stderr goes to a log file (never a pipe a busy gateway could fill).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.discord_server import FakeDiscordServer
from tests.fakes.telegram_server import FakeTelegramServer

REPO = Path(__file__).resolve().parent.parent
TG_TOKEN = "123456789:AAGatewayE2eTokenForTests_abcdefghij"
DC_TOKEN = "MTA5ODc2NTQzMjE.gateway-e2e-discord-token.abcdefgh"
TG_USER = 555  # allowed Telegram user (and private chat id)
TG_STRANGER = 666  # not in allowFrom
DC_STRANGER = 950000000000000099  # not in allowFrom
START_TIMEOUT_S = 90.0  # generous: start-up imports are slow on a loaded host
POLL_S = 0.02
WATCHDOG_INTERVAL_S = 0.2  # fast state refreshes so tests see channel states quickly


def gateway_config(
    llm_url: str,
    tg: FakeTelegramServer | None,
    dc: FakeDiscordServer | None,
    *,
    dc_allowed: str,
    tg_token: str = TG_TOKEN,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """config.json for a gateway on the fakes: custom provider, both channels, fast watchdog."""
    data: dict[str, Any] = {
        "agents": {"defaults": {"provider": "custom", "model": "fake-model", "llmMaxRetries": 0}},
        "providers": {"custom": {"apiBase": llm_url, "apiKey": "test-key"}},
        "channels": {"sendProgress": False},
        "gateway": {"heartbeat": {"enabled": False}, "watchdogIntervalS": WATCHDOG_INTERVAL_S},
    }
    if tg is not None:
        data["channels"]["telegram"] = {
            "enabled": True,
            "token": tg_token,
            "allowFrom": [str(TG_USER)],
            "baseUrl": tg.base_url,
            "baseFileUrl": tg.base_file_url,
            "pollTimeoutS": 5,
        }
    if dc is not None:
        data["channels"]["discord"] = {
            "enabled": True,
            "token": DC_TOKEN,
            "allowFrom": [dc_allowed],
            "apiBase": dc.api_base,
            "gatewayUrl": dc.gateway_url,
        }
    for dotted, value in (extra or {}).items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return data


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(
        {
            "NANOBOT_HOME": str(home),
            "PYTHONPATH": str(REPO),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


@dataclass
class GatewayProcess:
    """One `python -m nanobot gateway` process on `home` (config written beforehand)."""

    home: Path
    log_name: str = "gateway.log"
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    _logs: list[Path] = field(default_factory=list)

    @property
    def workspace(self) -> Path:
        return self.home / "workspace"

    @property
    def state_file(self) -> Path:
        return self.workspace / ".gateway.json"

    def start(self, *args: str) -> GatewayProcess:
        log = self.home / f"{self.log_name}.{len(self._logs)}"
        self._logs.append(log)
        with open(log, "wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nanobot", "gateway", *args],
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=cli_env(self.home),
                cwd=str(self.home),
            )
        self.started_at = time.monotonic()
        return self

    @property
    def log(self) -> str:
        return self._logs[-1].read_text(encoding="utf-8", errors="replace") if self._logs else ""

    def state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if self.proc is None or data.get("pid") != self.proc.pid:
            return None  # a previous gateway's file
        return data

    def channel_states(self) -> dict[str, str]:
        state = self.state() or {}
        return {name: str(info.get("state")) for name, info in (state.get("channels") or {}).items()}

    def wait_channels(self, expected: dict[str, str], timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the gateway's state file shows these channel states."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log[-3000:]}")
            current = self.channel_states()
            if all(current.get(k) == v for k, v in expected.items()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"channels {current} never became {expected}:\n{self.log[-3000:]}")
            time.sleep(POLL_S)

    def returncode(self) -> int | None:
        """None while running, else the exit code (negative: killed by that signal)."""
        return None if self.proc is None else self.proc.poll()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL (no cleanup at all) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def run_cli(home: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`python -m nanobot ...` on `home` (stdin closed)."""
    return subprocess.run(
        [sys.executable, "-m", "nanobot", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(home),
        cwd=str(home),
        stdin=subprocess.DEVNULL,
    )


def jsonl_health(path: Path) -> tuple[int, int, list[dict[str, Any]]]:
    """(corrupt lines other than a truncated last line, truncated last lines (0/1), parsed objects)."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    last_unterminated = not raw.endswith(b"\n") and bool(raw)
    corrupt = truncated = 0
    objs: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if last_unterminated and i == len(lines) - 1:
                truncated += 1
            else:
                corrupt += 1
            continue
        if isinstance(obj, dict):
            objs.append(obj)
        else:
            corrupt += 1
    return corrupt, truncated, objs
