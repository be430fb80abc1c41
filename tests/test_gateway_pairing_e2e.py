"""Real `nanobot gateway` subprocesses on the local fakes for what an owner meets in service:
pairing an unknown sender on Telegram and Discord with `nanobot pairing approve` (no restart), a
message saved but unanswered at a kill -9 answered after the restart, and `nanobot health` when
every channel failed.

The gateways start together at the beginning of the module (their start-up dominates the run time).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.discord_server import USER_ID, FakeDiscordServer
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegramServer
from tests.gateway_harness import (
    DC_STRANGER,
    START_TIMEOUT_S,
    TG_STRANGER,
    TG_TOKEN,
    TG_USER,
    GatewayProcess,
    gateway_config,
    run_cli,
)

REPLY_TIMEOUT_S = 30.0
HANG = {"on": True}  # `hang:` turns never finish while this is on (the gateway is killed meanwhile)
DC_STRANGER_DM = 940000000000000077
_CODE = re.compile(r"pairing approve ([A-Z2-9]{8})")


@dataclass
class Site:
    gw: GatewayProcess
    tg: FakeTelegramServer
    dc: FakeDiscordServer | None = None


def _user_text(body: dict) -> str:
    content = body["messages"][-1].get("content") or ""
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content).strip().splitlines()[-1]


def route(body: dict) -> Reply:
    text = _user_text(body)
    if text.startswith("hang:") and HANG["on"]:
        return Reply(content="too late", delay_s=60.0)
    return Reply(content=f"reply: {text}")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        server.responder = route

        yield server


@pytest.fixture(scope="module")
def sites(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    made: dict[str, Site] = {}
    servers: list[FakeTelegramServer | FakeDiscordServer] = []
    try:
        for name in ("pair", "crash", "dead"):
            home: Path = tmp_path_factory.mktemp(f"gateway-{name}")
            tg = FakeTelegramServer().start()
            servers.append(tg)
            dc = FakeDiscordServer().start() if name == "pair" else None
            if dc is not None:
                servers.append(dc)
            if name == "dead":
                tg.rejected_tokens.add(TG_TOKEN)
            config = gateway_config(llm.url, tg, dc, dc_allowed=str(USER_ID))
            (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
            made[name] = Site(GatewayProcess(home).start(), tg, dc)
        yield made
    finally:
        for site in made.values():
            site.gw.kill()
        for server in servers:
            server.stop()


def test_health_fails_when_every_channel_failed(sites: dict[str, Site]) -> None:
    dead = sites["dead"]
    dead.gw.wait_channels({"telegram": "failed"})
    health = run_cli(dead.gw.home, "health")
    assert health.returncode == 1, health.stderr
    assert "every enabled channel failed (telegram)" in health.stderr
    assert dead.gw.returncode() is None  # the gateway itself lives on (cron, a fixed token later)
    assert dead.gw.stop() == 0


def wait_until(predicate: Callable[[], object], what: str, timeout: float = REPLY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def tg_texts(tg: FakeTelegramServer, chat_id: int) -> list[str]:
    return [
        str(c.params.get("text")) for c in tg.calls_to("sendMessage") if int(c.params["chat_id"]) == chat_id
    ]


def dc_texts(dc: FakeDiscordServer, channel_id: int) -> list[str]:
    return [
        str(c.params.get("content"))
        for c in dc.calls_to("send_message")
        if c.params["channel_id"] == str(channel_id)
    ]


@pytest.fixture(scope="module")
def pair(sites: dict[str, Site]) -> Site:
    site = sites["pair"]
    site.gw.wait_channels({"telegram": "running", "discord": "running"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while "gateway running" not in site.gw.log:  # the agent loop takes messages
        assert site.gw.returncode() is None and time.monotonic() < deadline, site.gw.log[-3000:]
        time.sleep(0.05)
    return site


def test_pairing_on_telegram_end_to_end(pair: Site, llm: FakeLLMServer) -> None:
    # In a group the stranger gets nothing at all (it is said before the private message, so it
    # has been handled when the private reply arrives).
    pair.tg.push_message(
        "@nano_test_bot group hello", chat_id=-100500, user_id=TG_STRANGER, chat_type="supergroup"
    )
    pair.tg.push_message("tg secret one", chat_id=TG_STRANGER, user_id=TG_STRANGER, username="mallory")
    wait_until(lambda: tg_texts(pair.tg, TG_STRANGER), "the pairing code")
    pair.tg.push_message("tg secret two", chat_id=TG_STRANGER, user_id=TG_STRANGER, username="mallory")
    listing = run_cli(pair.gw.home, "pairing", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    pending = json.loads(listing.stdout)["pending"]
    [request] = [p for p in pending if p["channel"] == "telegram"]
    assert (request["sender_id"], request["username"]) == (str(TG_STRANGER), "mallory")
    [text] = tg_texts(pair.tg, TG_STRANGER)  # one code, not one per message
    assert _CODE.search(text) and _CODE.search(text).group(1) == request["code"]  # type: ignore[union-attr]
    assert tg_texts(pair.tg, -100500) == []
    # Approve from another process; the running gateway admits the sender's next message.
    approved = run_cli(pair.gw.home, "pairing", "approve", request["code"])
    assert approved.returncode == 0, approved.stderr
    assert "Approved telegram sender 666 (@mallory)" in approved.stderr
    assert oct((pair.gw.home / "pairing.json").stat().st_mode & 0o777) == "0o600"
    pair.tg.push_message("tg after approval", chat_id=TG_STRANGER, user_id=TG_STRANGER, username="mallory")
    wait_until(
        lambda: "reply: tg after approval" in tg_texts(pair.tg, TG_STRANGER), "the answer after approval"
    )
    # The messages sent before approval never reached the model or a session file.
    seen = json.dumps(llm.requests)
    assert "tg secret" not in seen and "group hello" not in seen
    sessions = "".join(p.read_text() for p in (pair.gw.workspace / "sessions").glob("*.jsonl"))
    assert "tg secret" not in sessions and "tg after approval" in sessions
    assert pair.gw.returncode() is None  # no restart


def test_pairing_on_discord_end_to_end_and_deny(pair: Site, llm: FakeLLMServer) -> None:
    assert pair.dc is not None
    pair.dc.push_message("dc secret", channel_id=DC_STRANGER_DM, author_id=DC_STRANGER, author_name="eve")
    wait_until(lambda: dc_texts(pair.dc, DC_STRANGER_DM), "the Discord pairing code")  # type: ignore[arg-type]
    match = _CODE.search(dc_texts(pair.dc, DC_STRANGER_DM)[0])
    assert match
    approved = run_cli(pair.gw.home, "pairing", "approve", match.group(1))
    assert approved.returncode == 0, approved.stderr
    pair.dc.push_message(
        "dc after approval", channel_id=DC_STRANGER_DM, author_id=DC_STRANGER, author_name="eve"
    )
    wait_until(lambda: "reply: dc after approval" in dc_texts(pair.dc, DC_STRANGER_DM), "the Discord answer")  # type: ignore[arg-type]
    assert "dc secret" not in json.dumps(llm.requests)
    # A second stranger is denied: no further codes, nothing answered, and the code is used up.
    other = DC_STRANGER + 1
    pair.dc.push_message("let me in", channel_id=DC_STRANGER_DM + 1, author_id=other, author_name="trudy")
    wait_until(lambda: dc_texts(pair.dc, DC_STRANGER_DM + 1), "the second code")  # type: ignore[arg-type]
    code = _CODE.search(dc_texts(pair.dc, DC_STRANGER_DM + 1)[0]).group(1)  # type: ignore[union-attr]
    assert run_cli(pair.gw.home, "pairing", "deny", code).returncode == 0
    again = run_cli(pair.gw.home, "pairing", "approve", code)
    assert again.returncode == 1 and "no pending pairing request" in again.stderr
    listing = run_cli(pair.gw.home, "pairing", "list")
    assert listing.returncode == 0 and "No pending pairing requests." in listing.stdout
    assert str(other) not in listing.stdout and f"discord  {DC_STRANGER} (@eve)" in listing.stdout


def test_message_unanswered_at_kill_9_is_answered_after_restart(
    sites: dict[str, Site], llm: FakeLLMServer
) -> None:
    crash = sites["crash"]
    crash.gw.wait_channels({"telegram": "running"})
    crash.tg.push_message("hang: are you there?", chat_id=TG_USER, user_id=TG_USER)
    wait_until(
        lambda: any(_user_text(r) == "hang: are you there?" for r in llm.requests), "the hung turn", 90
    )
    session = crash.gw.workspace / "sessions" / f"telegram_{TG_USER}.jsonl"
    # Saved, so confirmed to Telegram, which will not send it again: only the session knows.
    wait_until(lambda: crash.tg.held_ids() == [], "the saved message's confirmation")
    crash.gw.kill()  # kill -9 while the model is still thinking
    saved = [json.loads(line) for line in session.read_text().splitlines()]
    assert [m["content"] for m in saved if "role" in m] == ["hang: are you there?"]
    HANG["on"] = False
    crash.gw.start()
    wait_until(
        lambda: "reply: hang: are you there?" in tg_texts(crash.tg, TG_USER),
        "the answer after the restart",
        120,
    )
    roles = [
        (m["role"], m["content"]) for m in map(json.loads, session.read_text().splitlines()) if "role" in m
    ]
    assert roles == [("user", "hang: are you there?"), ("assistant", "reply: hang: are you there?")]
    # The model saw the message once, with its runtime block, as the last message.
    last = [r for r in llm.requests if "hang: are you there?" in json.dumps(r)][-1]
    assert sum("hang: are you there?" in json.dumps(m) for m in last["messages"]) == 1
    assert "answering a message saved" in crash.gw.log
    assert crash.gw.stop() == 0
