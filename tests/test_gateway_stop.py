"""A graceful stop of a real `nanobot gateway` while a turn and a consolidation are still running.

The gateway (a subprocess on the fake Telegram and the fake LLM, both on 127.0.0.1) gets SIGTERM
while one turn waits on the model, a message of the same chat is queued behind it (not yet saved)
and the consolidation of an archived session waits on the model too. The stop must end with exit 0
within the service's stop timeout (TimeoutStopSec of the unit `nanobot service install` writes);
the turn and the consolidation are cancelled, and nothing is lost: the saved message is answered
after the restart (missed-message recovery), the unsaved one was never confirmed to Telegram so it
is served again and answered, and the consolidation runs again from where it was.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanobot.service.systemd import STOP_TIMEOUT_S
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import START_TIMEOUT_S, TG_USER, GatewayProcess, gateway_config, jsonl_health

HANG_S = 40.0  # longer than the whole stop: the model never answers these in time
REPLY_TIMEOUT_S = 60.0
HISTORY_MARK = "STOP-TEST-CONSOLIDATED"


class Model:
    """The fake LLM's answers: `reply: <text>` for turns, real-looking memory answers; while `hang`
    is set, consolidation and turns starting with "slow:" wait HANG_S (the stop comes first)."""

    def __init__(self) -> None:
        self.hang = False

    def __call__(self, body: dict[str, Any]) -> Reply:
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        delay = HANG_S if self.hang else 0.0
        if "save_memory" in tools:
            args = {
                "history_entry": f"[2026-01-01 10:00] The user said hello a few times. {HISTORY_MARK}.",
                "memory_update": "- The user tests how the gateway stops.\n",
            }
            return Reply(content=None, tool_calls=[{"name": "save_memory", "arguments": args}], delay_s=delay)
        if "save_session_note" in tools:
            args = {"slug": "stop-test", "title": "Stop test", "summary": "The user greeted the bot a few times."}
            return Reply(content=None, tool_calls=[{"name": "save_session_note", "arguments": args}])
        if "write_daily_note" in tools:
            args = {"content": "- The user tested the gateway's stop."}
            return Reply(content=None, tool_calls=[{"name": "write_daily_note", "arguments": args}])
        text = _user_text(body)
        return Reply(content=f"reply: {text}", delay_s=delay if text.startswith("slow:") else 0.0)


def _user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1].get("content") or ""
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content)
    return str(content).strip().splitlines()[-1]


def _requests(llm: FakeLLMServer, *, memory: bool) -> list[dict[str, Any]]:
    def is_memory(body: dict[str, Any]) -> bool:
        return any(t.get("function", {}).get("name") == "save_memory" for t in body.get("tools") or [])

    return [r for r in llm.requests if is_memory(r) == memory]


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        server.responder = Model()
        # A cancelled request leaves a handler writing to a closed socket: expected here.
        server._server.handle_error = lambda request, address: None  # type: ignore[method-assign]
        yield server


@pytest.fixture
def tg() -> Iterator[FakeTelegramServer]:
    server = FakeTelegramServer().start()
    yield server
    server.stop()


def wait_until(predicate: Any, what: str, gw: GatewayProcess, timeout: float = REPLY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if gw.returncode() is not None:
            raise AssertionError(f"the gateway exited ({gw.returncode()}) waiting for {what}:\n{gw.log[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{gw.log[-3000:]}")
        time.sleep(0.02)


def texts(tg: FakeTelegramServer) -> list[str]:
    return [str(c.params.get("text")) for c in tg.calls_to("sendMessage") if int(c.params["chat_id"]) == TG_USER]


def start(home: Path) -> GatewayProcess:
    gw = GatewayProcess(home).start()
    gw.wait_channels({"telegram": "running"})
    wait_until(lambda: "gateway running" in gw.log, "the agent loop", gw, START_TIMEOUT_S)
    return gw


def session_contents(workspace: Path) -> list[str]:
    corrupt, truncated, objs = jsonl_health(workspace / "sessions" / f"telegram_{TG_USER}.jsonl")
    assert (corrupt, truncated) == (0, 0)
    return [str(o.get("content")) for o in objs if "role" in o]


@pytest.mark.timeout(300)
def test_sigterm_during_a_turn_and_a_consolidation_exits_0_in_time_and_loses_nothing(
    tmp_path: Path, llm: FakeLLMServer, tg: FakeTelegramServer
) -> None:
    model = llm.responder
    assert isinstance(model, Model)
    config = gateway_config(llm.url, tg, None, dc_allowed="", extra={"memory.search.enabled": False})
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    gw = start(tmp_path)
    try:
        for i in range(3):
            tg.push_message(f"hello {i}", chat_id=TG_USER, user_id=TG_USER)
            wait_until(lambda i=i: f"reply: hello {i}" in texts(tg), "a reply", gw)
        model.hang = True
        tg.push_message("/new", chat_id=TG_USER, user_id=TG_USER)  # its consolidation runs in the background
        wait_until(lambda: _requests(llm, memory=True), "the archive's consolidation", gw)
        tg.push_message("slow: saved but never answered", chat_id=TG_USER, user_id=TG_USER)
        queued_id = tg.push_message("queued behind it", chat_id=TG_USER, user_id=TG_USER)
        wait_until(
            lambda: any(_user_text(r) == "slow: saved but never answered" for r in _requests(llm, memory=False)),
            "the slow turn",
            gw,
        )
        time.sleep(0.5)  # the queued message reaches the agent loop (not yet saved: its turn waits)

        started = time.monotonic()
        gw.signal(signal.SIGTERM)
        code = gw.wait(timeout=STOP_TIMEOUT_S + 10)
        elapsed = time.monotonic() - started
        assert code == 0, gw.log[-3000:]
        assert elapsed < STOP_TIMEOUT_S, f"the stop took {elapsed:.1f} s (TimeoutStopSec={STOP_TIMEOUT_S})"
        assert "gateway stopped" in gw.log
    finally:
        gw.kill()

    # Saved stays saved; the unsaved message was never confirmed to Telegram.
    workspace = gw.workspace
    assert session_contents(workspace) == ["slow: saved but never answered"]
    assert tg.confirmed_offset <= queued_id and queued_id in tg.held_ids()
    # The consolidation was abandoned: its archive is still marked pending, nothing was written.
    markers = list((workspace / "sessions" / "archive").glob("*.pending"))
    assert len(markers) == 1
    history = workspace / "memory" / "HISTORY.md"
    assert not history.exists() or HISTORY_MARK not in history.read_text(encoding="utf-8")
    assert "reply: slow: saved but never answered" not in texts(tg)

    # After the restart everything is answered and the consolidation is done.
    model.hang = False
    gw = start(tmp_path)
    try:
        wait_until(lambda: "reply: slow: saved but never answered" in texts(tg), "the missed reply", gw)
        wait_until(lambda: "reply: queued behind it" in texts(tg), "the re-served message's reply", gw)
        wait_until(lambda: not markers[0].exists(), "the archive's consolidation", gw)
        assert HISTORY_MARK in history.read_text(encoding="utf-8")
        assert session_contents(workspace) == [
            "slow: saved but never answered",
            "reply: slow: saved but never answered",
            "queued behind it",
            "reply: queued behind it",
        ]
        wait_until(lambda: queued_id not in tg.held_ids(), "the saved message's confirmation", gw)
        assert gw.stop(timeout=STOP_TIMEOUT_S) == 0, gw.log[-3000:]
    finally:
        gw.kill()


# ------------------------------------------------------------------------ cron runs at a stop (in process)


async def _gateway_running_a_cron_job(tmp_path: Path, grace_s: float, turn_delay_s: float) -> tuple[Any, str]:
    """An in-process gateway (tests/test_gateway_lifecycle.py) whose one-shot job for the test
    chat is due in a second; returns once the job's turn waits on the model."""
    import asyncio
    from datetime import UTC, datetime, timedelta

    from nanobot.scheduler.cron_store import DeliverTo
    from tests.test_gateway_lifecycle import CHAT, Harness

    h = await Harness(tmp_path, grace_s=grace_s).start()
    h.provider.turn_delay_s = turn_delay_s
    due = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    job = h.gateway.cron.add("pills", "pills reminder", at=due, deliver_to=DeliverTo("test", CHAT))
    await asyncio.wait_for(h.provider.entered.wait(), 10)
    return h, job.id


async def test_a_cron_run_in_flight_at_a_stop_is_delivered_and_recorded(tmp_path: Path) -> None:
    """SIGTERM while a job's turn waits on the model (well within the grace): the run finishes,
    its reply reaches the chat before the channels stop, and the job is recorded as done, so the
    restart does not run it again."""
    from tests.test_gateway_lifecycle import kill_self

    h, job_id = await _gateway_running_a_cron_job(tmp_path, grace_s=10.0, turn_delay_s=1.0)
    kill_self(signal.SIGTERM)
    code, _ = await h.stopped()
    assert code == 0 and h.exits == []
    assert "reply: pills reminder" in h.channel.sent
    job = h.gateway.cron.get(job_id)
    assert job is not None and job.last_status == "ok" and job.last_run_at is not None
    assert not job.enabled and job.next_run_at is None  # not due again


async def test_a_cron_run_outlasting_the_grace_is_cancelled_and_stays_due(tmp_path: Path) -> None:
    """A run still going when the grace ends is cancelled before the loop cancels its turn: it
    records nothing (no empty reply recorded as done), so the job runs again after the restart."""
    from tests.test_gateway_lifecycle import kill_self

    h, job_id = await _gateway_running_a_cron_job(tmp_path, grace_s=0.3, turn_delay_s=60.0)
    kill_self(signal.SIGTERM)
    code, _ = await h.stopped()
    assert code == 0 and h.exits == []
    assert not any(s.startswith("reply:") for s in h.channel.sent)
    job = h.gateway.cron.get(job_id)
    assert job is not None and job.enabled and job.last_status is None and job.last_run_at is None
    assert job.next_run_at is not None
