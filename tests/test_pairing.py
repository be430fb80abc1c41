"""Pairing: the store's limits (expiry, one code per sender, three pending per channel, deny), its
file (0600, shared with another process), and the channel base's decision (private chats only)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nanobot.bus.events import InboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.channels.pairing import (
    CODE_ALPHABET,
    CODE_LENGTH,
    CODE_TTL_S,
    PairingError,
    PairingStore,
    pairing_path,
)
from nanobot.config.schema import Config
from tests.test_channels_base import FakeChannel


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # real time: another process reads the same file

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> PairingStore:
    return PairingStore(tmp_path / "pairing.json", clock=clock)


def test_path_is_beside_the_config(tmp_path: Path) -> None:
    assert pairing_path(tmp_path / "conf" / "config.json") == tmp_path / "conf" / "pairing.json"


def test_a_code_per_sender_per_hour_then_a_new_one(store: PairingStore, clock: Clock) -> None:
    outcome, code = store.request("telegram", "666", "mallory", "666")
    assert outcome == "issued" and code is not None
    assert len(code) == CODE_LENGTH and set(code) <= set(CODE_ALPHABET)
    clock.now += CODE_TTL_S - 1
    assert store.request("telegram", "666", "mallory", "666") == ("pending", None)  # no second code
    assert [p.code for p in store.pending()] == [code]
    clock.now += 2  # expired: gone from the list, and the sender may get a new code
    assert store.pending() == []
    with pytest.raises(PairingError, match="no pending pairing request"):
        store.approve(code)
    outcome, fresh = store.request("telegram", "666", "mallory", "666")
    assert outcome == "issued" and fresh != code


def test_at_most_three_pending_per_channel(store: PairingStore, clock: Clock) -> None:
    for sender in ("1", "2", "3"):
        assert store.request("discord", sender, "", sender)[0] == "issued"
    assert store.request("discord", "4", "", "4") == ("full", None)
    assert store.request("telegram", "4", "", "4")[0] == "issued"  # another channel has its own room
    clock.now += CODE_TTL_S + 1
    assert store.request("discord", "4", "", "4")[0] == "issued"  # the old ones expired


def test_approve_admits_deny_silences(store: PairingStore) -> None:
    _, code_a = store.request("telegram", "10", "amy", "10")
    _, code_b = store.request("telegram", "20", "bob", "20")
    assert code_a and code_b
    assert not store.is_approved("telegram", "10")
    req = store.approve(code_a.lower())  # typed by hand: case does not matter
    assert (req.sender_id, req.username) == ("10", "amy")
    assert store.is_approved("telegram", "10") and not store.is_approved("discord", "10")
    with pytest.raises(PairingError):
        store.approve(code_a)  # used up
    store.deny(code_b)
    assert not store.is_approved("telegram", "20")
    assert store.request("telegram", "20", "bob", "20") == ("denied", None)
    assert store.pending() == []


def test_file_is_private_and_another_process_sees_changes(store: PairingStore, tmp_path: Path) -> None:
    _, code = store.request("telegram", "666", "", "666")
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    # Another process (as `nanobot pairing approve` is) approves; this store sees it on the next check.
    script = (
        "import sys; from nanobot.channels.pairing import PairingStore; "
        "PairingStore(__import__('pathlib').Path(sys.argv[1])).approve(sys.argv[2])"
    )
    subprocess.run([sys.executable, "-c", script, str(store.path), str(code)], check=True, timeout=60)
    assert store.is_approved("telegram", "666")
    data = json.loads(store.path.read_text())
    assert data["pending"] == [] and data["approved"][0]["sender_id"] == "666"


def test_unreadable_file_admits_nobody_new(store: PairingStore, logs: list[str]) -> None:
    store.path.write_text("{not json")
    assert not store.is_approved("telegram", "666")
    assert any("unreadable" in line for line in logs)


def test_hand_edits_of_other_shapes_are_read_or_refused_never_a_crash(
    store: PairingStore, clock: Clock, logs: list[str]
) -> None:
    """The file is edited by hand (to take an approval back, to add a note): an entry without its
    `at`, or with an extra key, crashed `pairing list` and every pairing check with a TypeError."""
    approved = [{"channel": "telegram", "sender_id": 42, "username": "bob", "note": "my brother"}]
    store.path.write_text(json.dumps({"format": 1, "pending": [], "approved": approved, "denied": []}))
    assert store.is_approved("telegram", "42")
    assert [(e.sender_id, e.at) for e in store.approved()] == [("42", 0.0)]
    for bad in (
        {"approved": ["42"]},
        {"pending": [{"code": "ABCD2345", "channel": "telegram", "sender_id": "7", "expires_at": "later"}]},
    ):
        store.path.write_text(json.dumps({"format": 1, "pending": [], "approved": [], "denied": [], **bad}))
        time.sleep(0.01)  # a new mtime: the store reads the file again
        assert not store.is_approved("telegram", "42") and store.pending() == []
        with pytest.raises(PairingError, match="fix or remove it"):
            store.approve("ABCD2345")
    assert any("approved senders are not admitted" in line for line in logs)


# ------------------------------------------------------------------------------ channel base


def channel(store: PairingStore | None, policy: str, allow: list[str] | None = None) -> FakeChannel:
    config = SimpleNamespace(allow_from=allow or [], streaming=False, dm_policy=policy)
    return FakeChannel(config, MessageBus(), Path("/tmp"), pairing=store)


def dm(sender: str, text: str = "hi", *, group: bool = False) -> InboundMessage:
    return InboundMessage("fake", sender, f"chat-{sender}", text, is_group=group)


async def test_unknown_private_sender_gets_one_code_and_nothing_reaches_the_bus(store: PairingStore) -> None:
    ch = channel(store, "pairing")
    for text in ("secret one", "secret two"):
        assert not await ch._publish(dm("666", text))
    assert ch.bus.inbound.empty()
    assert len(ch.sent) == 1 and ch.sent[0].chat_id == "chat-666"
    code = store.pending()[0].code
    assert f"nanobot pairing approve {code}" in ch.sent[0].content
    assert "secret" not in json.dumps([vars(m) for m in ch.sent]) + store.path.read_text()
    store.approve(code)
    assert await ch._publish(dm("666", "now allowed"))
    assert (await ch.bus.consume_inbound()).content == "now allowed"
    await ch.stop()


async def test_an_approval_can_be_taken_back(store: PairingStore, tmp_path: Path) -> None:
    """A partner let in by pairing could not be removed by any command (`deny` takes only a pending
    code; taking them off allowFrom changes nothing for a paired sender)."""
    ch = channel(store, "pairing")
    assert not await ch._publish(dm("666", "hello"))
    store.approve(store.pending()[0].code)
    assert await ch._publish(dm("666", "allowed"))
    await ch.bus.consume_inbound()
    env = {**os.environ, "NANOBOT_HOME": str(tmp_path)}
    (tmp_path / "config.json").write_text("{}\n")
    run = [sys.executable, "-m", "nanobot", "pairing", "revoke"]
    wrong = subprocess.run([*run, "telegram", "999"], capture_output=True, text=True, env=env, timeout=120)
    assert wrong.returncode == 1 and "no approved telegram sender '999'" in wrong.stderr
    # a mistyped channel is a usage error, not "nobody approved"
    typo = subprocess.run([*run, "telegarm", "999"], capture_output=True, text=True, env=env, timeout=120)
    assert typo.returncode == 2 and "unknown channel 'telegarm'" in typo.stderr
    done = subprocess.run([*run, "fake", "666"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "Revoked fake sender 666" in done.stderr
    # said when the config still lets them in
    (tmp_path / "config.json").write_text(json.dumps({"channels": {"telegram": {"allowFrom": ["777"]}}}))
    store.approve(store.request("telegram", "777", "bob", "777")[1] or "")
    listed = subprocess.run([*run, "telegram", "@bob"], capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0 and "channels.telegram.allowFrom still lets them in" in listed.stderr
    # an entry pasted with spaces lets them in (the channel strips it): "refused for good" was wrong
    (tmp_path / "config.json").write_text(json.dumps({"channels": {"telegram": {"allowFrom": [" 888 "]}}}))
    store.approve(store.request("telegram", "888", "", "888")[1] or "")
    spaced = subprocess.run([*run, "telegram", "888"], capture_output=True, text=True, env=env, timeout=120)
    assert spaced.returncode == 0 and "channels.telegram.allowFrom still lets them in" in spaced.stderr
    # the running channel refuses them from their next message on, with no new code
    sent = len(ch.sent)
    assert not await ch._publish(dm("666", "still there?"))
    assert ch.bus.inbound.empty() and len(ch.sent) == sent and store.pending() == []
    await ch.stop()


async def test_groups_never_get_pairing_replies(store: PairingStore) -> None:
    ch = channel(store, "pairing")
    assert not await ch._publish(dm("666", "in a group", group=True))
    assert ch.sent == [] and store.pending() == [] and ch.bus.inbound.empty()


@pytest.mark.parametrize(
    ("policy", "with_store", "admitted", "replied"),
    [
        ("allowlist", True, False, False),  # today's silence
        ("open", True, True, False),
        ("pairing", False, False, False),  # no store (a channel outside a gateway): silence
    ],
)
async def test_other_policies(
    store: PairingStore, policy: str, with_store: bool, admitted: bool, replied: bool
) -> None:
    ch = channel(store if with_store else None, policy)
    assert await ch._publish(dm("666")) is admitted
    assert bool(ch.sent) is replied
    assert not await ch._publish(dm("777", group=True))  # open is for private chats only


def test_open_dm_policy_readmits_only_private_chats_after_a_restart(store: PairingStore) -> None:
    """A turn saved before a restart is answered again only for a sender let in now (admits_now):
    `open` lets strangers in private chats only, so a group message of a sender the owner removed
    from allowFrom meanwhile must not be answered under it."""
    ch = channel(store, "open", allow=["555"])
    assert ch.admits_now("666")  # a guest in a private chat, as `_publish` lets in
    assert ch.admits_now("555", is_group=True)  # still listed
    assert not ch.admits_now("666", is_group=True)


async def test_a_failing_send_keeps_the_request(store: PairingStore, logs: list[str]) -> None:
    ch = channel(store, "pairing")
    ch.failures.append(RuntimeError("platform down"))
    assert not await ch._publish(dm("666"))
    assert len(store.pending()) == 1
    assert any("could not send the pairing code" in line for line in logs)


async def test_a_damaged_store_is_logged_once_not_per_message(store: PairingStore, logs: list[str]) -> None:
    """While pairing.json was damaged every stranger's every message wrote an ERROR line: anyone
    could flood the log."""
    ch = channel(store, "pairing")
    store.path.write_text("{not json")
    for n in range(15):
        assert not await ch._publish(dm(str(800 + n % 3), f"spam {n}"))
    errors = [line for line in logs if "could not record a pairing request" in line]
    assert len(errors) == 1, errors
    assert ch.sent == [] and ch.bus.inbound.empty()
    await ch.stop()


def test_config_default_and_values() -> None:
    cfg = Config()
    assert cfg.channels.telegram.dm_policy == "pairing" and cfg.channels.discord.dm_policy == "pairing"
    assert (
        Config.model_validate({"channels": {"discord": {"dmPolicy": "open"}}}).channels.discord.dm_policy
        == "open"
    )
    with pytest.raises(ValueError):
        Config.model_validate({"channels": {"telegram": {"dmPolicy": "everyone"}}})


def test_cli_uses_the_pairing_file_beside_the_chosen_config(tmp_path: Path) -> None:
    """`-c` before or after the subcommand picks the store; list/approve/deny as a user runs them."""
    alt = tmp_path / "alt"
    alt.mkdir()
    (alt / "config.json").write_text("{}\n")
    _, code = PairingStore(alt / "pairing.json").request("telegram", "42", "bob", "42")
    env = {**os.environ, "NANOBOT_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nanobot", *args], capture_output=True, text=True, env=env, timeout=120
        )

    listed = cli("-c", str(alt / "config.json"), "pairing", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [p["code"] for p in json.loads(listed.stdout)["pending"]] == [code]
    assert "No pending pairing requests." in cli("pairing", "list").stdout  # the default home: empty
    wrong = cli("pairing", "approve", "NOPE1234", "-c", str(alt / "config.json"))
    assert wrong.returncode == 1 and "no pending pairing request with code 'NOPE1234'" in wrong.stderr
    done = cli("pairing", "approve", str(code).lower(), "-c", str(alt / "config.json"))
    assert done.returncode == 0 and "Approved telegram sender 42 (@bob)" in done.stderr
    assert PairingStore(alt / "pairing.json").is_approved("telegram", "42")

    missing = cli("pairing", "list", "-c", str(tmp_path / "typo.json"))
    assert missing.returncode == 2 and "no such config file" in missing.stderr


def test_a_broken_store_is_not_listed_as_empty_nor_rewritten_without_its_senders(tmp_path: Path) -> None:
    """`approved` turned into an object by a hand edit: `approve` rewrote it as the new sender alone
    (the others lost); `list` showed a broken store as empty with exit 0."""
    home = tmp_path / "home"
    home.mkdir()
    store = PairingStore(home / "pairing.json")
    _, code = store.request("telegram", "42", "bob", "42")
    data = json.loads(store.path.read_text())
    data["approved"] = {"alice": {"channel": "telegram", "sender_id": "7"}}
    store.path.write_text(json.dumps(data))
    before = store.path.read_text()
    env = {**os.environ, "NANOBOT_HOME": str(home)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nanobot", *args], capture_output=True, text=True, env=env, timeout=120
        )

    approve = cli("pairing", "approve", str(code))
    assert approve.returncode == 1 and "fix or remove it" in approve.stderr, approve.stderr
    assert store.path.read_text() == before
    for broken in (before, "{bad", "[1, 2]"):
        store.path.write_text(broken)
        listed = cli("pairing", "list", "--json")
        assert listed.returncode == 1 and listed.stdout == "" and "fix or remove it" in listed.stderr, listed


def test_revoke_by_an_empty_or_shared_name_revokes_nobody(tmp_path: Path) -> None:
    """`revoke telegram @` (an unset $NAME) took the first approved sender without a username and
    denied them for good; a username two approved senders had at their approvals named the first."""
    store = PairingStore(tmp_path / "pairing.json")
    for sender, name in (("111", ""), ("222", "bob"), ("333", "Bob")):
        _, code = store.request("telegram", sender, name, sender)
        assert code is not None
        store.approve(code)
    for wanted in ("@", "", "  ", "@bob"):
        with pytest.raises(PairingError):
            store.revoke("telegram", wanted)
    assert {s.sender_id for s in store.approved()} == {"111", "222", "333"}
    assert store.revoke("telegram", "222").sender_id == "222"
