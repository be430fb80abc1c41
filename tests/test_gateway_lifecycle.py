"""Gateway lifecycle in process (fast): grace period, safe cancellation, background drain, signals.

The real Gateway runs in the test's event loop with an in-process provider and a recording channel;
real SIGTERM/SIGINT are sent to this process (the gateway installs its own handlers and restores
the previous ones when it returns).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import nanobot.gateway.process as process
import nanobot.gateway.runtime as runtime
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.channels.base import Channel
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import Config
from nanobot.gateway.runtime import EXIT_FORCED, Gateway
from nanobot.providers.base import LLMProvider, LLMResponse, ToolCall
from nanobot.service.state import GatewayLock, gateway_running
from nanobot.session.store import SessionStore

CHAT = "chat1"
SESSION_FILE = f"test_{CHAT}.jsonl"


class ScriptedProvider(LLMProvider):
    """In-process LLM: chat turns answer `reply: <text>` after `turn_delay_s`; a `tool:` message first
    calls list_dir; memory calls (save_memory / save_session_note) wait `memory_delay_s`."""

    name = "scripted"

    def __init__(self) -> None:
        self.turn_delay_s = 0.0
        self.memory_delay_s = 0.0
        self.calls: list[str] = []
        self.prompts: list[str] = []  # every request's messages, as JSON
        self.entered = asyncio.Event()

    @property
    def default_model(self) -> str:
        return "scripted-model"

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kw: Any
    ):
        self.prompts.append(json.dumps(messages, ensure_ascii=False))
        names = {t["function"]["name"] for t in tools or []}
        if "save_memory" in names:
            self.calls.append("save_memory")
            await asyncio.sleep(self.memory_delay_s)
            args = {
                "history_entry": "[2026-01-01 10:00] Lifecycle test. DRAINED-ENTRY.",
                "memory_update": "- The user is testing how the gateway shuts down.\n",
            }
            return LLMResponse(tool_calls=[ToolCall("c1", "save_memory", args)], finish_reason="tool_calls")
        if "save_session_note" in names:
            self.calls.append("save_session_note")
            await asyncio.sleep(self.memory_delay_s)
            args = {
                "slug": "lifecycle",
                "title": "Lifecycle",
                "summary": "The user tested the gateway's shutdown with a few messages. NOTE-DRAINED.",
            }
            return LLMResponse(
                tool_calls=[ToolCall("c2", "save_session_note", args)], finish_reason="tool_calls"
            )
        last = messages[-1]
        text = str(last.get("content") or "").strip().splitlines()[-1]
        self.calls.append(text)
        if last.get("role") == "user" and text.startswith("tool:"):
            return LLMResponse(
                tool_calls=[ToolCall("t1", "list_dir", {"path": "."})], finish_reason="tool_calls"
            )
        self.entered.set()
        await asyncio.sleep(self.turn_delay_s)
        return LLMResponse(content=f"reply: {text}")


class RecordingChannel(Channel):
    name = "test"

    def __init__(self, *args: Any, stop_delay_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[str] = []
        self.stop_delay_s = stop_delay_s

    async def start(self) -> None:
        self._set_state("running")

    async def stop(self) -> None:
        await asyncio.sleep(self.stop_delay_s)
        self._set_state("stopped")

    async def _send_text(self, msg: OutboundMessage) -> None:
        self.sent.append(msg.content)

    async def _send_typing(self, chat_id: str) -> None:
        return None

    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        return None


def with_recording_channel(gateway: Gateway) -> Gateway:
    """`gateway` with one running channel, `test` (recording what it sends), for the heartbeat to
    report to."""
    allow = type("Allow", (), {"allow_from": ["*"]})()
    channel = RecordingChannel(allow, gateway.bus, gateway.workspace)
    gateway.channels = ChannelManager(gateway.config, gateway.bus, gateway.workspace, channels={"test": channel})
    return gateway


class Harness:
    def __init__(
        self,
        tmp_path: Path,
        grace_s: float = 3.0,
        drain_s: float = 3.0,
        stop_delay_s: float = 0.0,
        provider: LLMProvider | None = None,
        heartbeat_target: str = "",
        config_path: str = "config.json",
    ):
        self.workspace = tmp_path / "ws"
        self.config = Config.model_validate(
            {
                "agents": {"defaults": {"workspace": str(self.workspace), "model": "scripted-model"}},
                "gateway": {
                    "shutdownGraceS": grace_s,
                    "drainTimeoutS": drain_s,
                    "watchdogIntervalS": 0.1,
                    "heartbeat": {"enabled": bool(heartbeat_target), "target": heartbeat_target},
                },
            }
        )
        self.provider = provider or ScriptedProvider()
        self.exits: list[tuple[int, float]] = []
        self.gateway = Gateway(
            self.config,
            config_path,
            provider=self.provider,
            force_exit=lambda code: self.exits.append((code, time.monotonic())),
        )
        allow = type("Allow", (), {"allow_from": ["*"]})()
        self.channel = RecordingChannel(allow, self.gateway.bus, self.workspace, stop_delay_s=stop_delay_s)
        self.gateway.channels = ChannelManager(
            self.config, self.gateway.bus, self.workspace, channels={"test": self.channel}
        )
        self.task: asyncio.Task[int] | None = None
        self.early: list[int] = []  # signals that came while the gateway was built

    async def _run(self) -> int:
        with GatewayLock(self.workspace):  # as run_gateway does
            return await self.gateway.run(early_signals=self.early)

    async def start(self) -> Harness:
        self.task = asyncio.create_task(self._run())
        await asyncio.wait_for(self.gateway.ready.wait(), 10)
        return self

    async def say(self, text: str) -> None:
        await self.gateway.bus.publish_inbound(InboundMessage("test", "u1", CHAT, text))

    async def wait_sent(self, text: str, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while text not in self.channel.sent:
                await asyncio.sleep(0.005)

    async def stopped(self, timeout: float = 15.0) -> tuple[int, float]:
        """(exit code, seconds from now until run() returned)."""
        assert self.task is not None
        started = time.monotonic()
        code = await asyncio.wait_for(self.task, timeout)
        return code, time.monotonic() - started

    @property
    def session_path(self) -> Path:
        return self.workspace / "sessions" / SESSION_FILE

    def lines(self, path: Path | None = None) -> list[dict[str, Any]]:
        raw = (path or self.session_path).read_text(encoding="utf-8")
        assert raw.endswith("\n")
        return [json.loads(line) for line in raw.splitlines() if line.strip()]  # every line is whole JSON

    def messages(self, path: Path | None = None) -> list[dict[str, Any]]:
        return [m for m in self.lines(path) if "role" in m]


def kill_self(sig: int = signal.SIGTERM) -> None:
    os.kill(os.getpid(), sig)


async def test_in_flight_turn_finishes_within_the_grace_period(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=10.0).start()
    assert gateway_running(h.workspace)
    h.provider.turn_delay_s = 0.5
    await h.say("take your time")
    await asyncio.wait_for(h.provider.entered.wait(), 5)
    kill_self(signal.SIGTERM)
    code, elapsed = await h.stopped()
    assert code == 0 and h.exits == []
    assert 0.3 < elapsed < 8.0  # waited for the turn, not for the whole grace period
    assert "reply: take your time" in h.channel.sent  # delivered before the channel stopped
    assert [(m["role"], m["content"]) for m in h.messages()] == [
        ("user", "take your time"),
        ("assistant", "reply: take your time"),
    ]
    assert h.channel.state == "stopped"
    assert signal.getsignal(signal.SIGTERM) is not h.gateway._handle_signal  # handlers restored


async def test_sighup_with_a_config_that_does_not_load_keeps_the_gateway_running(
    tmp_path: Path, logs: list[str]
) -> None:
    """`kill -HUP` after a typo: the gateway exited 129 and its restart exited 2 on the broken file,
    which systemd does not retry: the bot was offline for good. A deleted config.json came back as
    the defaults (no channels, the demo model) with health saying healthy."""
    config = tmp_path / "config.json"
    config.write_text('{"agents": {"defaults": {"model": "scripted-model"}}}')
    h = await Harness(tmp_path, config_path=str(config)).start()
    (tmp_path / "afile").write_text("not a folder")
    unusable_workspace = json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "afile" / "ws")}}})
    for broken in ('{"agents": {"defaults": {"model": "scripted', unusable_workspace, None):
        if broken is None:
            config.unlink()
        else:
            config.write_text(broken)
        kill_self(signal.SIGHUP)
        await asyncio.sleep(0.5)
        assert h.task is not None and not h.task.done()
        await h.say("still there?")
        await h.wait_sent("reply: still there?")
    assert sum("SIGHUP: reload refused, the running config stays" in line for line in logs) == 3
    config.write_text('{"agents": {"defaults": {"model": "scripted-model"}}}')
    kill_self(signal.SIGHUP)
    code, _ = await h.stopped()
    assert code == 128 + signal.SIGHUP and h.exits == []


async def test_a_sighup_while_the_gateway_was_built_checks_the_config_too(tmp_path: Path, logs: list[str]) -> None:
    """Remembered while the agent was built, it restarted the gateway unchecked: a config broken
    meanwhile made the restart exit 2, for good."""
    config = tmp_path / "config.json"
    config.write_text('{"agents": {"defaults": {"model": "scripted')
    h = Harness(tmp_path, config_path=str(config))
    h.early = [signal.SIGHUP]
    await h.start()
    await asyncio.sleep(0.5)
    assert h.task is not None and not h.task.done()
    assert any("SIGHUP: reload refused" in line for line in logs)
    kill_self(signal.SIGTERM)
    assert (await h.stopped())[0] == 0


async def test_sighup_lets_the_turn_finish_and_ends_so_that_systemd_restarts_it(tmp_path: Path) -> None:
    """SIGHUP (a closed terminal, `kill -HUP` out of habit) killed the gateway mid-turn: the reply
    was lost, the state file left behind, and systemd took the death for a clean exit."""
    h = await Harness(tmp_path, grace_s=10.0).start()
    h.provider.turn_delay_s = 0.5
    await h.say("take your time")
    await asyncio.wait_for(h.provider.entered.wait(), 5)
    kill_self(signal.SIGHUP)
    code, _ = await h.stopped()
    assert code == 128 + signal.SIGHUP and h.exits == []  # not 0: Restart=on-failure starts it again
    assert "reply: take your time" in h.channel.sent
    assert not (h.workspace / ".gateway.json").exists() and not gateway_running(h.workspace)


def test_a_gateway_started_with_nohup_outlives_its_terminal() -> None:
    """`nohup nanobot gateway &` ignores SIGHUP; the gateway replaced that with its own handler and
    stopped when the terminal closed."""
    from nanobot.gateway.runtime import handled_signals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in handled_signals()
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert signal.SIGHUP in handled_signals()
    finally:
        signal.signal(signal.SIGHUP, previous)


async def test_sigint_stops_an_idle_gateway_at_once(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=10.0, drain_s=10.0).start()
    await h.say("hello")
    await h.wait_sent("reply: hello")
    kill_self(signal.SIGINT)
    code, elapsed = await h.stopped()
    assert (code, h.exits) == (0, []) and elapsed < 5.0  # no grace or drain period waited out
    assert not (h.workspace / ".gateway.json").exists()  # state cleared, lock released
    assert not gateway_running(h.workspace)


async def test_turn_exceeding_the_grace_is_cancelled_safely(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=0.3).start()
    h.provider.turn_delay_s = 60.0
    await h.say("tool: look around")  # iteration 1: a tool call (persisted), iteration 2: hangs
    await asyncio.wait_for(h.provider.entered.wait(), 5)
    kill_self()
    code, elapsed = await h.stopped()
    assert code == 0 and h.exits == []
    assert elapsed < 0.3 + 8.0  # not the turn's 60 s
    assert not any(s.startswith("reply:") for s in h.channel.sent)
    messages = h.messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]  # the finished tool group only
    call_ids = {c["id"] for c in messages[1]["tool_calls"]}
    assert call_ids == {messages[2]["tool_call_id"]}  # no dangling tool call on disk
    # The session loads and goes on after a restart; the cancelled turn, never answered, is
    # answered first (its message is not saved twice).
    h2 = await Harness(tmp_path).start()
    await h2.say("are you back?")
    await h2.wait_sent("reply: are you back?")
    kill_self()
    await h2.stopped()
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [m["role"] for m in h2.messages()] == roles


async def _session_with_history(h: Harness, turns: int = 3) -> None:
    for i in range(turns):
        await h.say(f"message {i}")
        await h.wait_sent(f"reply: message {i}")


async def test_background_memory_work_is_drained_within_the_timeout(tmp_path: Path) -> None:
    h = await Harness(tmp_path, drain_s=10.0).start()
    await _session_with_history(h)
    h.provider.memory_delay_s = 0.4
    await h.say("/new")
    await h.wait_sent("New session started.")
    assert h.gateway.agent.lifecycle.pending() == 1  # consolidation + note still to come
    kill_self()
    code, elapsed = await h.stopped()
    assert code == 0 and elapsed < 10.0
    assert h.provider.calls[-2:] == ["save_memory", "save_session_note"]
    archive = h.workspace / "sessions" / "archive"
    assert list(archive.glob("*.pending")) == []
    assert "DRAINED-ENTRY" in (h.workspace / "memory" / "HISTORY.md").read_text(encoding="utf-8")
    assert any("NOTE-DRAINED" in p.read_text() for p in (h.workspace / "memory").glob("*-lifecycle*.md"))


async def test_unfinished_background_work_stays_recoverable(tmp_path: Path) -> None:
    h = await Harness(tmp_path, drain_s=0.2).start()
    await _session_with_history(h)
    h.provider.memory_delay_s = 30.0
    await h.say("/new")
    await h.wait_sent("New session started.")
    kill_self()
    code, elapsed = await h.stopped()
    assert code == 0 and elapsed < 0.2 + 10.0  # drain gave up on time, not after the work's 30 s
    archived = list((h.workspace / "sessions" / "archive").glob("test_chat1-*.jsonl"))
    assert len(archived) == 1
    assert archived[0].with_name(archived[0].name + ".pending").exists()
    assert [m["content"] for m in h.messages(archived[0])][:2] == ["message 0", "reply: message 0"]
    assert (
        not (h.workspace / "memory" / "HISTORY.md").exists()
        or "DRAINED-ENTRY" not in (h.workspace / "memory" / "HISTORY.md").read_text()
    )
    # The next gateway picks the archive up again and finishes it.
    h2 = await Harness(tmp_path).start()
    async with asyncio.timeout(5):
        while list((h2.workspace / "sessions" / "archive").glob("*.pending")):
            await asyncio.sleep(0.01)
    kill_self()
    await h2.stopped()
    assert "DRAINED-ENTRY" in (h2.workspace / "memory" / "HISTORY.md").read_text(encoding="utf-8")


async def test_second_signal_forces_exit(tmp_path: Path) -> None:
    h = await Harness(tmp_path, grace_s=6.0).start()
    h.provider.turn_delay_s = 60.0
    await h.say("never finishes")
    await asyncio.wait_for(h.provider.entered.wait(), 5)
    kill_self(signal.SIGTERM)
    await asyncio.sleep(0.05)
    sent_at = time.monotonic()
    kill_self(signal.SIGINT)
    async with asyncio.timeout(5):
        while not h.exits:
            await asyncio.sleep(0.005)
    code, forced_at = h.exits[0]
    assert code == EXIT_FORCED and forced_at - sent_at < 4.0  # before the 6 s grace ran out
    await h.stopped()  # (the injected exit returns, so the graceful path still completes here)
    assert [m["content"] for m in h.messages()] == ["never finishes"]


async def test_second_signal_works_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    h = await Harness(tmp_path).start()
    kill_self(signal.SIGTERM)
    time.sleep(0.05)  # the loop is blocked: the first stop request waits in the loop's queue
    kill_self(signal.SIGTERM)  # but the second signal's handler runs in the main thread at once
    assert [code for code, _ in h.exits] == [EXIT_FORCED]
    await h.stopped()


async def test_overrunning_shutdown_hits_the_hard_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "SHUTDOWN_MARGIN_S", 0.3)
    h = await Harness(tmp_path, grace_s=0.1, drain_s=0.1, stop_delay_s=6.0).start()
    assert h.gateway.shutdown_budget_s == pytest.approx(0.5)
    sent_at = time.monotonic()
    kill_self()
    await h.stopped()
    assert [code for code, _ in h.exits] == [EXIT_FORCED]
    assert 0.4 < h.exits[0][1] - sent_at < 4.0  # the 0.5 s budget, not the channel's 6 s stop


async def test_hard_deadline_runs_while_the_event_loop_is_blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first signal arms the deadline itself: a loop blocked in synchronous work (which would
    run the stop request only afterwards) cannot hold the process past its stop budget."""
    monkeypatch.setattr(runtime, "SHUTDOWN_MARGIN_S", 0.3)
    h = await Harness(tmp_path, grace_s=0.1, drain_s=0.1).start()
    sent_at = time.monotonic()
    kill_self()
    time.sleep(4.0)  # the event loop is blocked throughout
    assert [code for code, _ in h.exits] == [EXIT_FORCED]
    assert 0.4 < h.exits[0][1] - sent_at < 3.9  # the 0.5 s budget (bounds wide: a GC pause is ~1 s)
    await h.stopped()


def test_serve_does_not_wait_for_worker_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`asyncio.run` would join the default executor's threads at the end (an embedding batch, a
    model load): the stop would wait for them. `serve` returns once the gateway has stopped."""
    release = threading.Event()

    async def gateway_leaving_a_thread_busy(_config: Config, _path: str, _digest: str | None, _early: object) -> int:
        asyncio.get_running_loop().run_in_executor(None, release.wait, 30.0)
        await asyncio.sleep(0.05)
        return 0

    monkeypatch.setattr(process, "run_gateway", gateway_leaving_a_thread_busy)
    try:
        started = time.monotonic()
        assert process.serve(Config()) == 0
        assert time.monotonic() - started < 5.0
    finally:
        release.set()


async def test_signal_before_start_up_stops_without_taking_messages(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    code = await asyncio.wait_for(h.gateway.run(early_signals=[signal.SIGTERM]), 10)
    assert code == 0 and h.exits == []
    assert not h.gateway.ready.is_set()
    assert h.channel.state == "stopped"


async def test_messages_arriving_before_ready_are_answered(tmp_path: Path) -> None:
    """Channels start (and may receive) while the provider warms up: nothing is lost."""
    h = Harness(tmp_path)
    await h.say("early bird")
    await h.start()
    await h.wait_sent("reply: early bird")
    kill_self()
    assert (await h.stopped())[0] == 0
    assert SessionStore(h.workspace).get(f"test:{CHAT}").messages[-1]["content"] == "reply: early bird"


def test_a_config_link_pointed_at_another_file_is_named_a_change(tmp_path: Path) -> None:
    """The gateway recorded the link's target: once config.json pointed at another file, status
    compared that file with nothing and said no word, showing its model as the one in use."""
    from nanobot.service.config_watch import config_changed_note, config_digest
    from nanobot.service.state import GatewayState

    first, second, link = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "config.json"
    first.write_text('{"agents": {"defaults": {"model": "model-a"}}}')
    second.write_text('{"agents": {"defaults": {"model": "model-b"}}}')
    link.symlink_to(first)
    state = GatewayState(tmp_path / "ws")
    state.loaded_config(link)

    def note(path: Path = link) -> str | None:
        started = {"path": state.config_path, "target": state.config_target, "sha256": state.config_digest}
        return config_changed_note({"running": True, "pid": 1, "config": started}, path)

    assert note() is None
    first.write_text('{"agents": {"defaults": {"model": "model-a2"}}}')  # a key rotated in the file
    assert note(first) is not None  # named by its own path (the link's target): the same config
    first.write_text('{"agents": {"defaults": {"model": "model-a"}}}')
    link.unlink()
    link.symlink_to(second)
    assert note() is not None and "config.json changed since the gateway" in str(note())
    # the digest of what the gateway read at start, not of the file when it got round to it
    state.loaded_config(link, config_digest(first))
    assert note() is not None


def test_a_sighup_in_the_first_moments_of_a_start_is_a_clean_129(tmp_path: Path, make_config) -> None:  # noqa: ANN001
    """Before the gateway's handlers (config read, logging set up, the heavy imports) a SIGHUP
    killed the process: systemd takes that death for a clean exit, so Restart=on-failure left the
    bot down. It is remembered from the command's first line and honoured once it can stop."""
    import subprocess
    import sys

    from tests.conftest import REPO

    _, path = make_config(**{"agents.defaults.workspace": str(tmp_path / "ws")})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update({"NANOBOT_HOME": str(path.parent), "PYTHONPATH": str(REPO)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanobot", "gateway", "-c", str(path)],
        env=env, cwd=str(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    time.sleep(0.6)  # the interpreter is up; the gateway's own handlers are seconds away
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGHUP, out.decode(errors="replace")[-2000:]


def test_only_the_gateway_command_remembers_early_signals() -> None:
    """Any other command keeps Ctrl-C as it is (a `cron add --message gateway` is no gateway)."""
    from nanobot.cli.early_signals import command_of

    assert command_of(["-c", "x.json", "-v", "gateway"]) == "gateway"
    assert command_of(["--config=x.json", "gateway", "-c", "y"]) == "gateway"
    assert command_of(["cron", "add", "--message", "gateway"]) == "cron"
    assert command_of(["-q"]) is None
    assert command_of(["-vc", "x.json", "gateway"]) == "gateway"  # grouped: -v -c x.json
    assert command_of(["-vc", "gateway", "agent"]) == "agent"  # a config file named "gateway"
    assert command_of(["-vcx.json", "gateway"]) == "gateway" and command_of(["--", "gateway"]) == "gateway"
    assert command_of(["-c/home/u/.nanobotrc", "gateway"]) == "gateway" and command_of(["-cc", "agent"]) == "agent"
