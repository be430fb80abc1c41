"""Steps of the wall clock (NTP correcting a box without a real-time clock, a resume from suspend,
a VM restored from a snapshot) as the scheduler, the start-up check for missed messages and the
pairing store meet them. The wall clock is moved in-process; the monotonic clock is not, as with a
real step. Each test failed on the code before its fix; waits are bounded polls, not durations."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest


@pytest.fixture
def stepped_clock(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """The wall clock as the scheduler and nanobot read it, moved by `step["s"]` seconds (the
    monotonic clock is untouched, as when NTP steps the system clock)."""
    import datetime as dt

    import apscheduler.executors.base as executors_base
    import apscheduler.schedulers.base as schedulers_base

    import nanobot.timeutil as timeutil

    step = {"s": 0.0}

    class SteppedClock(dt.datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return dt.datetime.now(tz) + dt.timedelta(seconds=step["s"])

    for module in (schedulers_base, executors_base, timeutil):
        monkeypatch.setattr(module, "datetime", SteppedClock)
    return step


def test_cron_runs_a_job_that_falls_due_after_the_wall_clock_steps_forward(tmp_path: Path, stepped_clock) -> None:
    """NTP syncing an RTC-less box after boot (or a resume from suspend) steps the wall clock forward;
    APScheduler's monotonic timer, armed from the old time, must not sleep past the due run."""
    from nanobot.scheduler.cron import CronService

    step = stepped_clock
    every_s, jump_s = 60, 59  # unfixed, the timer sleeps the old 60 s and then calls the run missed

    async def run() -> str | None:
        ran = asyncio.Event()

        async def on_job(_job) -> None:
            ran.set()

        svc = CronService(tmp_path / "jobs.json", on_job, "UTC", misfire_grace_s=2, reload_interval_s=0.2)
        job = svc.add("tick", "tick", every_s=every_s)
        await svc.start()
        try:
            await asyncio.sleep(0.5)
            step["s"] = jump_s  # due in ~0.5 s by the new wall clock
            await asyncio.wait_for(ran.wait(), 30)  # a hang guard: it runs within a watcher tick
            for _ in range(500):
                if svc.get(job.id).last_status is not None:
                    break
                await asyncio.sleep(0.02)
            return svc.get(job.id).last_status
        finally:
            await svc.stop()

    assert asyncio.run(run()) == "ok"


def test_an_interval_job_keeps_its_pace_after_the_wall_clock_steps_back(tmp_path: Path, stepped_clock) -> None:
    """A clock stepped back an hour (a wrong RTC corrected by NTP) left an `every 60 s` job's timer on
    its old next run, an hour and a minute away: the job stayed silent for that hour."""
    from nanobot.scheduler.cron import CronService

    step = stepped_clock

    async def run() -> tuple[str | None, str | None, str | None]:
        ran = asyncio.Event()

        async def on_job(_job) -> None:
            ran.set()

        svc = CronService(tmp_path / "jobs.json", on_job, "UTC", misfire_grace_s=2, reload_interval_s=0.2)
        job = svc.add("tick", "tick", every_s=60)
        await svc.start()
        try:
            before = svc.get(job.id).next_run_at
            await asyncio.sleep(0.5)
            step["s"] = -3600.0
            for _ in range(500):  # a hang guard: the watcher notices within a tick
                if svc.get(job.id).next_run_at != before:
                    break
                await asyncio.sleep(0.02)
            moved = svc.get(job.id).next_run_at
            step["s"] = -3600.0 + 59  # a minute later by the new clock: the job is due
            await asyncio.wait_for(ran.wait(), 30)
            for _ in range(500):
                if svc.get(job.id).last_status is not None:
                    break
                await asyncio.sleep(0.02)
            return before, moved, svc.get(job.id).last_status
        finally:
            await svc.stop()

    before, moved, status = asyncio.run(run())
    assert before is not None and moved is not None
    gap_s = (datetime.fromisoformat(before) - datetime.fromisoformat(moved)).total_seconds()
    assert 3540 <= gap_s <= 3601  # the next run moved back with the clock, not by a day or not at all
    assert status == "ok"


def test_a_reminder_that_falls_due_during_a_suspend_is_reported_at_once(tmp_path: Path, stepped_clock) -> None:
    """The laptop slept through a reminder: the scheduler called the run missed, but the job stayed
    enabled with its old time and the chat heard nothing until some later restart."""
    from nanobot.scheduler.cron import CronService
    from nanobot.scheduler.cron_store import DeliverTo
    from nanobot.timeutil import now

    step = stepped_clock
    sent: list[tuple[str, str, str]] = []

    async def deliver(channel: str, chat_id: str, text: str) -> None:
        sent.append((channel, chat_id, text))

    async def on_job(_job) -> str:
        return "ran"

    async def run() -> tuple[bool, str | None, str | None]:
        svc = CronService(tmp_path / "jobs.json", on_job, "UTC", deliver=deliver, reload_interval_s=0.2)
        at = (now() + timedelta(minutes=10)).isoformat(timespec="seconds")
        job = svc.add("dentist", "remind me of the dentist", at=at, deliver_to=DeliverTo("telegram", "42"))
        await svc.start()
        try:
            await asyncio.sleep(0.3)
            step["s"] = 3600.0  # resumed an hour later
            for _ in range(500):
                if sent and svc.get(job.id).last_status:
                    break
                await asyncio.sleep(0.02)
            stored = svc.get(job.id)
            return stored.enabled, stored.next_run_at, stored.last_status
        finally:
            await svc.stop()

    enabled, next_run_at, status = asyncio.run(run())
    assert sent and sent[0][:2] == ("telegram", "42") and '"dentist" was due' in sent[0][2]
    assert (enabled, next_run_at) == (False, None)  # not told again at the next start
    assert status is not None and status.startswith("missed")


def test_a_daily_job_missed_during_a_suspend_shows_its_real_next_run(tmp_path: Path, stepped_clock) -> None:
    """`cron list` showed a repeating job's skipped run as its next one, a time already past."""
    from nanobot.scheduler.cron import CronService
    from nanobot.timeutil import now

    step = stepped_clock

    async def on_job(_job) -> str:
        return "ran"

    async def run() -> tuple[str | None, datetime]:
        svc = CronService(tmp_path / "jobs.json", on_job, "UTC", reload_interval_s=0.2)
        soon = now() + timedelta(minutes=30)
        job = svc.add("report", "daily report", expr=f"{soon.minute} {soon.hour} * * *")
        await svc.start()
        try:
            await asyncio.sleep(0.3)
            step["s"] = 7200.0
            for _ in range(500):
                if svc.get(job.id).last_status:
                    break
                await asyncio.sleep(0.02)
            return svc.get(job.id).next_run_at, now()
        finally:
            await svc.stop()

    next_run_at, moment = asyncio.run(run())
    assert next_run_at is not None and datetime.fromisoformat(next_run_at) > moment


def test_an_interval_job_added_under_a_clock_ahead_runs_on_time_after_a_restart(tmp_path: Path, stepped_clock) -> None:
    """A job added while the clock was a day ahead, the clock set right while the gateway was down:
    its hourly run was anchored a day ahead and stayed silent for 25 hours."""
    from nanobot.scheduler.cron import CronService
    from nanobot.timeutil import now

    step = stepped_clock

    async def on_job(_job) -> str:
        return "ran"

    async def run() -> float:
        step["s"] = 86400.0
        first = CronService(tmp_path / "jobs.json", on_job, "UTC", reload_interval_s=0.2)
        job = first.add("hourly", "check the mailbox", every_s=3600)
        await first.start()
        await first.stop()
        step["s"] = 0.0  # rebooted; NTP set the clock before the gateway started
        second = CronService(tmp_path / "jobs.json", on_job, "UTC", reload_interval_s=0.2)
        await second.start()
        try:
            next_run = datetime.fromisoformat(str(second.get(job.id).next_run_at))
            return (next_run - now()).total_seconds()
        finally:
            await second.stop()

    assert asyncio.run(run()) <= 3601


def test_a_message_from_weeks_ago_is_not_answered_when_the_clock_starts_behind(tmp_path: Path) -> None:
    """A box without a real-time clock starts the gateway before NTP: a message left unanswered
    three weeks ago (logged as too old at every start) passed for one sent just now."""
    from nanobot.bus.queue import MessageBus
    from nanobot.gateway.missed import answer_missed
    from nanobot.session.store import SessionStore

    real_now = datetime.now(UTC)
    store = SessionStore(tmp_path)
    session = store.get("telegram:555")
    store.set_metadata(session, is_group=False)
    store.append(session, {"role": "user", "content": "book the table for tonight",
                           "timestamp": (real_now - timedelta(days=21)).isoformat()})
    store.close()

    async def resumed(clock_s: float) -> int:
        return await answer_missed(SessionStore(tmp_path), MessageBus(), ["telegram"], within_s=600, now=clock_s)

    assert asyncio.run(resumed(time.time())) == 0
    assert asyncio.run(resumed(time.time() - 30 * 86400)) == 0  # the clock a month behind
    assert asyncio.run(resumed(60.0)) == 0  # the clock at 1970
    # still answered within the window when the clock is right and the message young
    store = SessionStore(tmp_path)
    session = store.get("telegram:556")
    store.set_metadata(session, is_group=False)
    store.append(session, {"role": "user", "content": "hello?", "timestamp": real_now.isoformat()})
    store.close()
    assert asyncio.run(resumed(time.time())) == 1


def test_pairing_codes_do_not_outlive_a_clock_stepped_back(tmp_path: Path) -> None:
    """Codes issued under a clock a day ahead lived a day after NTP set it right, and the three of
    them kept every new sender from pairing as long."""
    from nanobot.channels.pairing import PairingStore

    shift = {"s": 86400.0}
    store = PairingStore(tmp_path / "pairing.json", clock=lambda: time.time() + shift["s"])
    for sender in ("111", "222", "333"):
        assert store.request("telegram", sender, f"u{sender}", sender)[0] == "issued"
    shift["s"] = 0.0
    assert store.pending() == []
    assert store.request("telegram", "444", "friend", "444")[0] == "issued"
