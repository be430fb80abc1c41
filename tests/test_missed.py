"""Unit tests: which saved user messages count as unanswered after a crash, and which are resumed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nanobot.bus.events import DELIVERY_KEY, RESUME_KEY, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.gateway.missed import (
    MAX_TOO_OLD_LOGGED,
    answer_missed,
    find_missed,
    mark_delivered,
    unanswered_index,
    undelivered_replies,
)
from nanobot.session.session import delivery_of
from nanobot.session.store import Session, SessionStore

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).isoformat()


def user(text: str, seconds_ago: float = 5.0, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": at(seconds_ago), **extra}


def assistant(text: str | None = "ok", **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "timestamp": at(1), **extra}


def store_with(
    tmp_path: Path, sessions: dict[str, list[dict[str, Any]]], is_group: bool = False
) -> SessionStore:
    """Sessions on disk; every reply in them counts as delivered."""
    store = SessionStore(tmp_path)
    for key, messages in sessions.items():
        session = store.get(key)
        store.set_metadata(session, is_group=is_group)
        store.append(session, *messages)
        store.set_metadata(session, delivered_through=len(messages))
    store.close()
    return SessionStore(tmp_path)  # a fresh store reads the files, as a restarted gateway does


def test_unanswered_means_no_final_reply_after_the_last_user_message() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "x", "timestamp": at(2)}
    cases = [
        ([], None),
        ([user("a")], 0),
        ([user("a"), assistant()], None),
        ([user("a"), assistant(), user("b")], 2),
        ([user("a"), assistant(None, tool_calls=[call]), tool], 0),  # killed inside the tool loop
        ([user("a"), assistant(None, tool_calls=[call]), tool, assistant("done")], None),
        ([user("result", name="system")], 0),  # a sub-agent's report: the user was promised it
    ]
    for messages, expected in cases:
        assert unanswered_index(Session("k", Path("/x"), messages=messages)) == expected, messages
    stopped = Session("k", Path("/x"), messages=[user("a")], metadata={"stopped_through": 1})
    assert unanswered_index(stopped) is None  # the user cancelled it with /stop


def test_find_missed_only_on_enabled_channels(tmp_path: Path) -> None:
    store = store_with(
        tmp_path,
        {
            "telegram:555": [user("hi"), assistant(), user("unanswered", 30)],
            "telegram:556": [user("hi"), assistant()],
            "discord:900": [user("old one", 3600)],
            "cli:direct": [user("terminal")],
        },
    )
    found = find_missed(store, ["telegram", "discord"], now=NOW.timestamp())
    assert [(m.session_key, m.message["content"], round(m.age_s or 0)) for m in found] == [
        ("discord:900", "old one", 3600),
        ("telegram:555", "unanswered", 30),
    ]
    assert find_missed(store, ["discord"], now=NOW.timestamp())[0].index == 0


async def test_young_messages_are_resumed_old_ones_logged(tmp_path: Path, logs: list[str]) -> None:
    store = store_with(
        tmp_path,
        {"telegram:555": [user("recent", 30, media=["media/a.jpg"])], "telegram:-100": [user("stale", 900)]},
        is_group=False,
    )
    bus = MessageBus()
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp()) == 1
    msg = bus.inbound.get_nowait()
    assert (msg.session_key, msg.content, msg.media, msg.is_group) == (
        "telegram:555",
        "recent",
        ["media/a.jpg"],
        False,
    )
    assert msg.metadata[RESUME_KEY] is True and bus.inbound.empty()
    assert any("telegram:-100" in line and "too old to act on now" in line for line in logs)
    assert await answer_missed(store, MessageBus(), ["telegram"], within_s=0, now=NOW.timestamp()) == 0


async def test_thousands_of_old_missed_messages_are_counted_not_each_logged(tmp_path: Path, logs: list[str]) -> None:
    """A workspace copied without its file times (`cp -r`) made a start read every archive and log
    11,151 "too old to act on" warnings, one per reply."""
    store = store_with(tmp_path, {f"telegram:{n}": [user("stale", 900)] for n in range(40)})
    assert await answer_missed(store, MessageBus(), ["telegram"], within_s=600, now=NOW.timestamp()) == 0
    named = [line for line in logs if "too old to act on now" in line]
    assert len(named) == MAX_TOO_OLD_LOGGED
    assert any(f"{40 - MAX_TOO_OLD_LOGGED} more messages and replies" in line for line in logs)


async def test_a_full_bus_is_never_waited_on(tmp_path: Path) -> None:
    store = store_with(tmp_path, {"telegram:1": [user("a")], "telegram:2": [user("b")]})
    bus = MessageBus(max_queue=1)
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp()) == 1


def test_a_saved_reply_without_a_delivery_record_is_sent_again(tmp_path: Path) -> None:
    store = store_with(tmp_path, {"telegram:7": [user("q", 20), assistant("the answer")]})
    session = store.get("telegram:7")
    assert undelivered_replies(session) == []  # delivered_through covers it
    # A reply the gateway recorded for an older turn only: the last one may never have gone out.
    store.set_metadata(session, delivered_through=1)
    assert undelivered_replies(session) == [1]
    found = find_missed(store, ["telegram"], now=NOW.timestamp())
    assert [(m.kind, m.index, m.message["content"]) for m in found] == [("reply", 1, "the answer")]


async def test_resent_reply_goes_out_and_is_recorded(tmp_path: Path) -> None:
    store = store_with(tmp_path, {"telegram:7": [user("q", 20), assistant("the answer")]})
    store.set_metadata(store.get("telegram:7"), delivered_through=0)
    bus = MessageBus()
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp()) == 1
    assert bus.inbound.empty()
    out = bus.outbound.get_nowait()
    assert (out.chat_id, out.content, out.metadata[DELIVERY_KEY]) == (
        "7",
        "the answer",
        {"session": "telegram:7", "through": 2, "first": at(20)},
    )
    mark_delivered(store, out)  # what the gateway does once the channel has sent it
    assert store.get("telegram:7").metadata["delivered_through"] == 2
    assert find_missed(store, ["telegram"], now=NOW.timestamp()) == []
    mark_delivered(store, OutboundMessage("telegram", "7", "a cron note"))  # not a turn's reply: ignored
    older = {**out.metadata[DELIVERY_KEY], "through": 1}
    mark_delivered(store, OutboundMessage("telegram", "7", "x", metadata={DELIVERY_KEY: older}))
    assert store.get("telegram:7").metadata["delivered_through"] == 2  # never moves back
    # A reply delivered after /new restarted the session counts for the old one, not the new one.
    store.archive(store.get("telegram:7"), NOW)
    fresh = store.get("telegram:7")
    store.append(fresh, user("new q", 2))
    mark_delivered(
        store, OutboundMessage("telegram", "7", "late", metadata={DELIVERY_KEY: out.metadata[DELIVERY_KEY]})
    )
    assert "delivered_through" not in store.get("telegram:7").metadata


def test_every_reply_past_the_mark_is_resent_then_the_open_turn_resumed(tmp_path: Path) -> None:
    messages = [user("q1", 30), assistant("a1"), user("q2", 20), assistant("a2"), user("q3", 10)]
    store = store_with(tmp_path, {"telegram:9": messages})
    store.set_metadata(store.get("telegram:9"), delivered_through=2)  # a1 went out; the kill came after
    found = find_missed(store, ["telegram"], now=NOW.timestamp())
    assert [(m.kind, m.message["content"]) for m in found] == [("reply", "a2"), ("turn", "q3")]


async def test_undelivered_replies_of_a_just_archived_transcript_are_sent_again(tmp_path: Path) -> None:
    # q1 answered and delivered, q2 answered but not delivered, then /new archived the transcript.
    store = store_with(
        tmp_path, {"telegram:5": [user("q1", 30), assistant("a1"), user("q2", 20), assistant("a2")]}
    )
    session = store.get("telegram:5")
    store.set_metadata(session, delivered_through=2)
    store.archive(session, NOW)
    store.append(store.get("telegram:5"), user("fresh", 5), assistant("hello"))
    store.set_metadata(store.get("telegram:5"), delivered_through=2)
    assert find_missed(store, ["telegram"], now=NOW.timestamp()) == []  # archives only with recent_s
    bus = MessageBus()
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp()) == 1
    out = bus.outbound.get_nowait()
    assert (out.chat_id, out.content) == ("5", "a2")
    mark_delivered(store, out)  # recorded in the archive; the live session is not touched
    assert store.get("telegram:5").metadata["delivered_through"] == 2
    archive = next((tmp_path / "sessions" / "archive").glob("telegram_5-*.jsonl"))
    assert store.load_archived(archive).metadata["delivered_through"] == 4
    # So the next start does not send it once more.
    assert await answer_missed(store, MessageBus(), ["telegram"], within_s=600, now=NOW.timestamp()) == 0


async def test_a_reply_delivered_after_new_is_recorded_in_its_archive(tmp_path: Path) -> None:
    store = store_with(tmp_path, {"telegram:6": [user("q1", 30), assistant("a1"), user("q2", 20)]})
    session = store.get("telegram:6")
    store.set_metadata(session, delivered_through=2)
    store.append(session, assistant("a2"))
    reply = OutboundMessage("telegram", "6", "a2", metadata={DELIVERY_KEY: delivery_of(session)})
    store.archive(session, NOW)  # /new ran before the channel sent a2
    store.append(store.get("telegram:6"), user("fresh", 5), assistant("hello"))
    store.set_metadata(store.get("telegram:6"), delivered_through=2)
    mark_delivered(store, reply)
    assert store.get("telegram:6").metadata["delivered_through"] == 2  # the live session is not touched
    archive = next((tmp_path / "sessions" / "archive").glob("telegram_6-*.jsonl"))
    assert store.load_archived(archive).metadata["delivered_through"] == 4
    assert await answer_missed(store, MessageBus(), ["telegram"], within_s=600, now=NOW.timestamp()) == 0


async def test_a_forum_topic_is_answered_in_its_topic_not_a_chat_named_after_the_file(
    make_config,  # noqa: ANN001
) -> None:
    """`telegram:-100123:7` is kept as `telegram_-100123_7.jsonl`; read back from the file name it
    became chat `-100123_7`, so a missed turn was answered (and the heartbeat sent) to a chat that
    does not exist. The key is recorded in the session's metadata now."""
    from nanobot.bus.events import InboundMessage
    from tests.agent_helpers import make_runtime

    config, _ = make_config()
    runtime = make_runtime(config)
    for chat, group in (("-100123:7", True), ("555:3", False)):
        msg = InboundMessage(channel="telegram", sender_id="555", chat_id=chat, content="hello?", is_group=group)
        runtime.agent.records.keep_unanswered(msg, runtime.agent.context_of(msg))
    await runtime.aclose()
    store = SessionStore(config.workspace_path)
    missed = {m.chat_id: m for m in find_missed(store, ["telegram"])}
    assert set(missed) == {"-100123:7", "555:3"}
    assert missed["-100123:7"].is_group and missed["-100123:7"].session_key == "telegram:-100123:7"
    assert store.last_private_chat(("cli",)) == ("telegram", "555:3")


async def test_a_turn_answered_again_keeps_who_asked(make_config) -> None:  # noqa: ANN001
    """In a group (or a Discord DM, whose channel id is not the user's) the resumed turn named the
    chat as its sender: the model could not tell who had asked."""
    from nanobot.bus.events import InboundMessage
    from nanobot.gateway.missed import resume_message
    from tests.agent_helpers import make_runtime

    config, _ = make_config()
    runtime = make_runtime(config)
    msg = InboundMessage(channel="discord", sender_id="950001", chat_id="920001", content="hi", is_group=True)
    runtime.agent.records.keep_unanswered(msg, runtime.agent.context_of(msg))  # a shutdown kept it
    await runtime.aclose()
    [missed] = find_missed(SessionStore(config.workspace_path), ["discord"])
    assert resume_message(missed).sender_id == "950001"


def test_an_undecodable_session_key_does_not_fail_the_turn() -> None:
    """`nanobot agent -s $'cli:\\xff'`: the key reached the runtime block as a lone surrogate, which no
    UTF-8 encoder accepts; every turn failed."""
    from nanobot.bus.events import InboundMessage

    raw = b"cli:\xff".decode("utf-8", "surrogateescape")
    msg = InboundMessage(channel="cli", sender_id="user", chat_id=raw[4:], content="hi", session_key_override=raw)
    msg.session_key.encode("utf-8") and msg.chat_id.encode("utf-8")  # noqa: B018 - raises on a surrogate
    assert msg.session_key == "cli:\ufffd"


async def test_a_group_message_an_earlier_version_saved_without_its_sender_is_answered(tmp_path: Path) -> None:
    """Earlier versions kept no sender with a user message: the check took the group's id for the
    sender, refused it ("-100123 is no longer allowed") and the stop's unanswered message was lost."""
    store = store_with(tmp_path, {"telegram:-100123": [user("summarise the meeting", 30)]}, is_group=True)

    def admits(channel: str, sender: str, username: str | None, is_group: bool) -> bool:
        return sender == "555"  # the allow list names people, never the group

    bus = MessageBus()
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp(), admits=admits) == 1
    assert bus.inbound.get_nowait().content == "summarise the meeting"


async def test_a_guests_message_answered_at_start_is_a_guests(tmp_path: Path) -> None:
    """An open dmPolicy's stranger left unanswered by a stop got the owner's trust at the restart."""
    store = store_with(tmp_path, {"telegram:666": [user("show me the owner's notes", 30, sender_id="666")]})
    bus = MessageBus()
    count = await answer_missed(
        store, bus, ["telegram"], within_s=600, now=NOW.timestamp(),
        admits=lambda *_: True, listed=lambda channel, sender, username: sender == "555",
    )
    assert count == 1 and bus.inbound.get_nowait().guest


@pytest.mark.parametrize("bad", ["fifo", "folder"])
async def test_one_transcript_that_cannot_be_read_leaves_the_other_chats_answered(tmp_path: Path, bad: str) -> None:
    """A FIFO named like a transcript hung the gateway's start (the open blocked before any channel
    ran) and any turn of that chat froze every chat; a folder (or another user's file) there made
    the whole check fail, so no chat's unanswered message was answered after a crash."""
    import os

    store = store_with(tmp_path, {"telegram:555": [user("please answer", 30)], "telegram:1": [user("x", 30)]})
    blocked = tmp_path / "sessions" / "telegram_1.jsonl"
    blocked.unlink()
    os.mkfifo(blocked) if bad == "fifo" else blocked.mkdir()
    bus = MessageBus()
    assert await answer_missed(store, bus, ["telegram"], within_s=600, now=NOW.timestamp()) == 1
    assert bus.inbound.get_nowait().content == "please answer"
    with pytest.raises(OSError, match="not a regular file.*remove it"):  # a turn of that chat fails at once, alone
        SessionStore(tmp_path).get("telegram:1")


def test_a_linked_transcript_is_named_as_one(tmp_path: Path, logs: list[str]) -> None:
    """The review: a transcript that is a symbolic link failed every turn with a bare "[Errno 40]"
    (the write had said what it was and to remove it), and the crash check skipped it unsaid."""
    import os

    store_with(tmp_path, {"telegram:5": [user("hello", 30)]})
    linked = tmp_path / "sessions" / "telegram_5.jsonl"
    os.replace(linked, tmp_path / "elsewhere.jsonl")
    linked.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(OSError, match="symbolic link or not a regular file.*remove it"):
        SessionStore(tmp_path).get("telegram:5")
    assert SessionStore(tmp_path).list_keys() == []
    assert any("telegram_5.jsonl is not a regular file" in line for line in logs), logs
