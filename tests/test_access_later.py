"""Work saved earlier obeys the allow list of now: someone removed from allowFrom is cut off.

The usual way to remove someone is to stop the gateway, edit allowFrom and start it again. Three
kinds of delayed work skipped the check and ran an owner's turn for them: the message the stop left
unanswered (answered at the next start), the heartbeat (whose default chat is the last private one),
and the cron jobs they had asked for.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nanobot.bus.events import InboundMessage
from nanobot.scheduler.cron import DeliverTo
from tests.test_gateway_lifecycle import Harness, kill_self

REMOVED, OWNER = "777", "555"


def _leave_unanswered(h: Harness, sender: str, text: str) -> None:
    """A private message saved and left unanswered, as a stop leaves it (SessionRecords.keep_unanswered)."""
    msg = InboundMessage(channel="test", sender_id=sender, chat_id=sender, content=text)
    h.gateway.agent.records.keep_unanswered(msg, h.gateway.agent.context_of(msg))


async def test_a_removed_senders_unanswered_message_is_not_answered_at_start(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _leave_unanswered(h, REMOVED, "run cat ~/secrets for me")
    _leave_unanswered(h, OWNER, "what is on today?")
    h.channel.allow_from = [OWNER]  # the owner took 777 off the list while the gateway was down
    await h.start()
    await h.wait_sent("reply: what is on today?")
    kill_self()
    await h.stopped()
    assert h.channel.sent == ["reply: what is on today?"]
    assert not [c for c in h.provider.calls if "secrets" in c]  # no turn ran for the removed sender


async def test_the_heartbeat_reports_only_to_a_user_still_allowed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    _leave_unanswered(h, OWNER, "hello")
    _leave_unanswered(h, REMOVED, "hello")  # the most recent private chat
    sessions = h.gateway.agent.sessions
    assert sessions.last_private_chat(("cli",)) == ("test", REMOVED)
    h.channel.allow_from = [OWNER]
    assert sessions.last_private_chat(("cli",), h.gateway.channels.lists) == ("test", OWNER)
    h.gateway.heartbeat = None  # not started: only its target is checked here


async def test_a_job_a_removed_sender_asked_for_does_not_run(tmp_path: Path) -> None:
    h = await Harness(tmp_path).start()
    h.channel.allow_from = [OWNER]
    cron = h.gateway.cron
    theirs = cron.add(
        "summary", "summarise MEMORY.md for me", every_s=3600, deliver_to=DeliverTo("test", REMOVED), created_by=REMOVED
    )
    mine = cron.add("plants", "water the plants", every_s=3600, deliver_to=DeliverTo("test", OWNER), created_by=OWNER)
    await cron.run_now(theirs.id)
    await cron.run_now(mine.id)
    status = {job.id: cron.get(job.id).last_status for job in (theirs, mine)}
    kill_self()
    await h.stopped()
    assert status[theirs.id] == f"skipped: {REMOVED}, who asked for it, is no longer allowed on test"
    assert status[mine.id] == "ok"
    assert len(h.channel.sent) == 1  # the owner's job only
    assert not [c for c in h.provider.calls if "MEMORY.md" in c]  # no turn ran for the removed sender's job


async def test_a_user_allowed_by_username_gets_their_jobs_and_the_heartbeat(tmp_path: Path) -> None:
    """With `allowFrom: ["@alice"]` Alice's reminders were skipped as "no longer allowed" and the
    heartbeat never found her chat: the checks knew her id only, never her username."""
    h = Harness(tmp_path)
    msg = InboundMessage(channel="test", sender_id=OWNER, chat_id=OWNER, content="hi", metadata={"username": "Alice"})
    h.gateway.agent.records.keep_unanswered(msg, h.gateway.agent.context_of(msg))
    h.channel.allow_from = ["@alice"]
    sessions = h.gateway.agent.sessions
    assert sessions.last_private_chat(("cli",), h.gateway.channels.lists) == ("test", OWNER)
    await h.start()
    await h.wait_sent("reply: hi")
    cron = h.gateway.cron
    job = cron.add("water", "remind me to drink water", every_s=3600, deliver_to=DeliverTo("test", OWNER),
                   created_by=OWNER)
    await cron.run_now(job.id)
    status = cron.get(job.id).last_status
    kill_self()
    await h.stopped()
    assert status == "ok"


async def test_under_an_open_dm_policy_a_removed_users_job_stops_and_their_chat_is_a_guests(tmp_path: Path) -> None:
    """With dmPolicy "open" the removed user could still talk, so the check "would they be let in"
    passed and their job ran as the owner's turn: MEMORY.md in its prompt, every tool offered."""
    h = Harness(tmp_path)
    (h.workspace / "memory").mkdir(parents=True, exist_ok=True)
    (h.workspace / "memory" / "MEMORY.md").write_text("# Memory\n- The PIN is 4242.\n")
    _leave_unanswered(h, REMOVED, "hello")  # their private chat, begun while they were listed
    await h.start()
    await h.wait_sent("reply: hello")
    h.channel.dm_policy = "open"
    h.channel.allow_from = [OWNER]  # 777 was taken off the list: a guest from now on
    cron = h.gateway.cron
    theirs = cron.add("pin", "tell me my PIN", every_s=3600, deliver_to=DeliverTo("test", REMOVED), created_by=REMOVED)
    for_them = cron.add("hi", "say hi", every_s=3600, deliver_to=DeliverTo("test", REMOVED))  # by the owner
    await cron.run_now(theirs.id)
    prompts_before = len(h.provider.prompts)
    await cron.run_now(for_them.id)
    status = {job.id: cron.get(job.id).last_status for job in (theirs, for_them)}
    kill_self()
    await h.stopped()
    assert status[theirs.id] == f"skipped: {REMOVED}, who asked for it, is no longer allowed on test"
    assert status[for_them.id] == "ok"
    job_prompts = h.provider.prompts[prompts_before:]
    assert job_prompts and not any("4242" in p for p in job_prompts)  # a guest's turn: no MEMORY.md
    assert any("4242" in p for p in h.provider.prompts[:prompts_before])  # the owner-trust turn before had it


async def _publish(h: Harness, sender: str, text: str) -> None:
    await h.gateway.bus.publish_inbound(InboundMessage("test", sender, sender, text))


async def test_messages_waiting_behind_a_turn_are_not_answered_once_their_sender_is_removed(tmp_path: Path) -> None:
    """Admitted when they came, the messages queued behind a long turn ran with the owner's trust
    after `pairing revoke` (or an allowFrom edit) in a running gateway: each turn could use every tool."""
    h = await Harness(tmp_path).start()
    h.provider.turn_delay_s = 0.5
    await _publish(h, REMOVED, "first")
    await _publish(h, REMOVED, "run cat ~/secrets for me")
    await asyncio.sleep(0.2)  # the first turn runs, the second waits behind it
    h.channel.allow_from = [OWNER]  # revoked meanwhile
    await h.wait_sent("reply: first")
    await _publish(h, OWNER, "hello")
    await h.wait_sent("reply: hello")
    kill_self()
    await h.stopped()
    assert h.channel.sent == ["reply: first", "reply: hello"]
    assert not [c for c in h.provider.calls if "secrets" in c]


async def test_a_waiting_message_of_a_sender_now_only_a_guest_runs_as_a_guest(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    (h.workspace / "memory").mkdir(parents=True, exist_ok=True)
    (h.workspace / "memory" / "MEMORY.md").write_text("# Memory\n- The PIN is 4242.\n")
    await h.start()
    h.provider.turn_delay_s = 0.5
    await _publish(h, REMOVED, "first")
    await _publish(h, REMOVED, "what is my PIN?")
    await asyncio.sleep(0.2)
    h.channel.dm_policy = "open"
    h.channel.allow_from = [OWNER]  # 777 may still write, as a guest
    await h.wait_sent("reply: what is my PIN?")
    kill_self()
    await h.stopped()
    turns = [p for p in h.provider.prompts if "consolidation step" not in p]
    assert "4242" in turns[0]  # admitted as the owner's chat
    asked = [p for p in turns if "what is my PIN?" in p]
    assert asked and not any("4242" in p for p in asked)  # a guest's turn: no MEMORY.md
