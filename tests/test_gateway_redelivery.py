"""After a kill -9, Telegram serves again every update from the oldest one the gateway had not
confirmed; a message saved and answered before the kill must not be answered a second time.

The offset confirmed to Telegram stops at the oldest update whose message is not yet saved: a second
message queued behind a running turn of one chat holds it back while another chat's message is
answered. That answered message is then served again after a restart (a real `nanobot gateway`
subprocess on the local fakes, killed with SIGKILL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.agent_helpers import user_text
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import START_TIMEOUT_S, GatewayProcess, gateway_config

FIRST_CHAT, SECOND_CHAT = 555, 556
HANG_S = {"value": 60.0}  # the first chat's turn runs until the kill; nothing hangs after it
WAIT_S = 60.0  # a hang guard, not a timing


def _route(body: dict) -> Reply:
    text = user_text(body)
    return Reply(content=f"reply: {text}", delay_s=HANG_S["value"] if text.startswith("hang:") else 0.0)


def _replies(tg: FakeTelegramServer, chat_id: int) -> list[str]:
    return [
        str(c.params.get("text")) for c in tg.calls_to("sendMessage") if int(c.params["chat_id"]) == chat_id
    ]


def _wait(condition: Callable[[], bool], what: str, gw: GatewayProcess) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert gw.returncode() is None, gw.log[-3000:]
        assert time.monotonic() < deadline, f"{what} never happened:\n{gw.log[-3000:]}"
        time.sleep(0.05)


def _ready(gw: GatewayProcess) -> None:
    gw.wait_channels({"telegram": "running"}, timeout=START_TIMEOUT_S)
    _wait(lambda: "gateway running" in gw.log, "the agent loop's start", gw)


@contextmanager
def _gateway(tmp_path: Path) -> Iterator[tuple[FakeTelegramServer, FakeLLMServer, GatewayProcess]]:
    """A gateway on both chats, with "hang: one" running in the first: a message queued behind it
    is unsaved and holds the confirmation back for every later update."""
    HANG_S["value"] = 60.0
    tg = FakeTelegramServer().start()
    with FakeLLMServer() as llm:
        llm.responder = _route
        home = tmp_path / "home"
        home.mkdir()
        config = gateway_config(
            llm.url,
            tg,
            None,
            dc_allowed="",
            extra={"channels.telegram.allowFrom": [str(FIRST_CHAT), str(SECOND_CHAT)]},
        )
        (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
        gw = GatewayProcess(home).start()
        try:
            _ready(gw)
            tg.push_message("hang: one", chat_id=FIRST_CHAT, user_id=FIRST_CHAT)
            _wait(lambda: any("hang: one" in json.dumps(r["messages"]) for r in llm.requests), "turn one", gw)
            yield tg, llm, gw
        finally:
            gw.kill()
            tg.stop()


def _kill_and_restart(tg: FakeTelegramServer, gw: GatewayProcess) -> None:
    gw.kill()
    HANG_S["value"] = 0.0
    gw.start()
    _ready(gw)
    _wait(lambda: "reply: two" in _replies(tg, FIRST_CHAT), "the reply to two", gw)
    _wait(lambda: "reply: hang: one" in _replies(tg, FIRST_CHAT), "the resumed turn one", gw)
    _wait(lambda: not tg.held_ids(), "the confirmation of everything", gw)


def _users(gw: GatewayProcess, chat: int) -> list[str]:
    lines = (gw.workspace / "sessions" / f"telegram_{chat}.jsonl").read_text().splitlines()
    return [m["content"] for m in map(json.loads, lines) if m.get("role") == "user"]


def test_a_message_answered_before_a_kill_is_not_answered_again(tmp_path: Path) -> None:
    with _gateway(tmp_path) as (tg, _llm, gw):
        held = tg.push_message("two", chat_id=FIRST_CHAT, user_id=FIRST_CHAT)  # queued, unsaved
        answered = tg.push_message("three", chat_id=SECOND_CHAT, user_id=SECOND_CHAT)
        _wait(lambda: "reply: three" in _replies(tg, SECOND_CHAT), "the reply to three", gw)
        # the scenario: "three" is answered, yet its update is still unconfirmed behind "two"
        assert held in tg.held_ids() and answered in tg.held_ids()
        _kill_and_restart(tg, gw)
        assert _replies(tg, SECOND_CHAT) == ["reply: three"]
        assert _users(gw, SECOND_CHAT) == ["three"]


def test_a_new_done_before_a_kill_is_not_done_again(tmp_path: Path) -> None:
    """Served again, `/new` archived the conversation begun after it (and said so twice); the
    message of that conversation, no longer in the live session, was answered again."""
    with _gateway(tmp_path) as (tg, _llm, gw):
        held = tg.push_message("two", chat_id=FIRST_CHAT, user_id=FIRST_CHAT)
        new = tg.push_message("/new", chat_id=SECOND_CHAT, user_id=SECOND_CHAT)
        tg.push_message("four", chat_id=SECOND_CHAT, user_id=SECOND_CHAT)
        _wait(lambda: "reply: four" in _replies(tg, SECOND_CHAT), "the reply to four", gw)
        assert held in tg.held_ids() and new in tg.held_ids()
        _kill_and_restart(tg, gw)
        assert _replies(tg, SECOND_CHAT) == ["New session started.", "reply: four"]
        assert _users(gw, SECOND_CHAT) == ["four"]
