"""CronService, jobs.json, the cron tool and `nanobot cron`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.combining import OrTrigger
from typer.testing import CliRunner

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.cron import MAX_NAME_CHARS, CronTool
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.cli import cron as cron_cli
from nanobot.scheduler.cron import (
    CronJob,
    CronService,
    CronStoreError,
    DeliverTo,
    JobFailed,
    cron_session_key,
    job_prompt,
    jobs_path,
)
from nanobot.scheduler.cron_store import CronStore
from nanobot.scheduler.schedules import crontab_trigger, make_schedule, next_fire, to_iso

UTCZ = ZoneInfo("UTC")
WAIT_S = 5.0


class Recorder:
    """An on_job + deliver pair that remembers calls and can be awaited."""

    def __init__(self, reply: str | None = "done", fail: Exception | None = None) -> None:
        self.jobs: list[CronJob] = []
        self.delivered: list[tuple[str, str, str]] = []
        self.reply = reply
        self.fail = fail
        self.event = asyncio.Event()

    async def on_job(self, job: CronJob) -> str | None:
        self.jobs.append(job)
        self.event.set()
        if self.fail is not None:
            raise self.fail
        return self.reply

    async def deliver(self, channel: str, chat_id: str, text: str) -> None:
        self.delivered.append((channel, chat_id, text))
        self.event.set()

    async def wait_calls(self, n: int, timeout_s: float = WAIT_S) -> None:
        await self._wait(lambda: len(self.jobs) >= n, timeout_s)

    async def wait_delivered(self, n: int, timeout_s: float = WAIT_S) -> None:
        """A job's reply is delivered after its on_job returned: wait for that, not for the call."""
        await self._wait(lambda: len(self.delivered) >= n, timeout_s)

    async def _wait(self, done: Callable[[], bool], timeout_s: float) -> None:
        async def until() -> None:
            while not done():
                await self.event.wait()
                self.event.clear()

        await asyncio.wait_for(until(), timeout_s)


def service(path: Path, rec: Recorder, **kw) -> CronService:
    return CronService(path, rec.on_job, "UTC", deliver=rec.deliver, **kw)


def write_job(path: Path, job: CronJob) -> None:
    CronStore(path).mutate(lambda jobs: jobs.append(job))


# ------------------------------------------------------------------------ schedules


def test_schedule_parsing_and_time_zones() -> None:
    now = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
    at = make_schedule(at="2025-07-01T09:00:00", tz="Europe/Berlin", default_tz=UTCZ, now=now)
    assert at.kind == "at" and at.at == "2025-07-01T09:00:00+02:00"  # naive wall time, summer offset
    at2 = make_schedule(at="2025-01-16T09:00:00-05:00", default_tz=UTCZ, now=now)
    assert at2.at == "2025-01-16T09:00:00-05:00"
    every = make_schedule(every_s=90, default_tz=UTCZ, now=now)
    assert (every.kind, every.every_s) == ("every", 90)
    cron = make_schedule(expr="0  9 * * 1-5", tz="America/New_York", default_tz=UTCZ, now=now)
    assert (cron.kind, cron.expr, cron.tz) == ("cron", "0 9 * * 1-5", "America/New_York")

    job = CronJob(id="j", name="n", message="m", schedule=cron, created_at=to_iso(now))
    # 12:00 UTC is 07:00 in New York, so the next 09:00 there is 14:00 UTC the same day.
    assert next_fire(job, UTCZ, now) == datetime(2025, 1, 15, 14, 0, tzinfo=UTC)
    # On a Friday evening the next weekday 09:00 is Monday.
    friday = datetime(2025, 1, 17, 23, 0, tzinfo=UTC)
    assert next_fire(job, UTCZ, friday) == datetime(2025, 1, 20, 14, 0, tzinfo=UTC)
    job_at = CronJob(id="a", name="n", message="m", schedule=at2)
    assert next_fire(job_at, UTCZ, now) == datetime(2025, 1, 16, 14, 0, tzinfo=UTC)
    job_every = CronJob(id="e", name="n", message="m", schedule=every, created_at=to_iso(now))
    assert next_fire(job_every, UTCZ, now) == now + timedelta(seconds=90)
    assert next_fire(job_every, UTCZ, now + timedelta(seconds=100)) == now + timedelta(seconds=180)
    assert next_fire(job_at, UTCZ, datetime(2025, 1, 17, tzinfo=UTC)) is None


def test_day_of_month_and_weekday_together_mean_either_as_in_crontab() -> None:
    """`0 9 1 * 1` is the 1st and every Monday in crontab; both at once (a Monday the 1st) ran the
    job months later than asked."""
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)  # a Thursday

    def first_runs(expr: str, count: int = 3) -> list[datetime]:
        job = CronJob(
            id="j", name="n", message="m", schedule=make_schedule(expr=expr, default_tz=UTCZ, now=now)
        )
        runs, at = [], now
        for _ in range(count):
            at = next_fire(job, UTCZ, at + timedelta(seconds=1))
            runs.append(at)
        return runs

    assert [d.date().isoformat() for d in first_runs("0 9 1 * 1")] == [
        "2026-11-30",
        "2026-12-01",
        "2026-12-07",
    ]
    assert [d.date().isoformat() for d in first_runs("0 9 13 * 5", 2)] == ["2026-11-27", "2026-12-04"]
    # one of the two unrestricted: the other one alone decides, as before
    assert [d.date().isoformat() for d in first_runs("0 9 * * 1", 2)] == ["2026-11-30", "2026-12-07"]
    assert [d.date().isoformat() for d in first_runs("0 9 1 * *", 2)] == ["2026-12-01", "2027-01-01"]
    with pytest.raises(ValueError, match="never runs"):
        make_schedule(expr="0 9 30 2 *", default_tz=UTCZ, now=now)
    # a date on a weekday decades apart still runs (a 9-year search refused 1 March on a Sunday)
    assert [d.date().isoformat() for d in first_runs("0 9 1 3 */7", 1)] == ["2037-03-01"]
    assert [d.date().isoformat() for d in first_runs("0 9 29 2 */7", 1)] == ["2032-02-29"]
    every_minute = ",".join(str(m) for m in range(60))  # 169 characters: valid, and refused at 200
    runs = first_runs(f"{every_minute} * * * *", 2)
    assert runs[1] - runs[0] == timedelta(minutes=1)

    # 9999 at every computation (1.5 s each; with a list of 1,000 days a minute of frozen gateway)
    assert [d.date().isoformat() for d in first_runs("0 9 31 2 1", 2)] == ["2027-02-01", "2027-02-08"]  # Mondays
    assert not isinstance(crontab_trigger("* * 31 2,4,6,9,11 0-6", UTCZ), OrTrigger)
    with pytest.raises(ValueError, match="longer than 512 characters") as refused:
        make_schedule(expr="0 0 " + ",".join(["31"] * 2000) + " 2 *", default_tz=UTCZ, now=now)
    assert len(str(refused.value)) < 200  # the 6 KB expression is not echoed back whole


@pytest.mark.parametrize(
    ("weekday", "expected"),
    [
        ("*", "*"),
        ("1-5", "mon,tue,wed,thu,fri"),
        ("0", "sun"),
        ("7", "sun"),
        ("5-7", "sun,fri,sat"),
        ("sat,sun", "sun,sat"),
        ("mon-wed", "mon,tue,wed"),
        ("*/2", "sun,tue,thu,sat"),
        ("1-5/2", "mon,wed,fri"),
        ("0-7", "sun,mon,tue,wed,thu,fri,sat"),  # every day, not Sunday only
        ("0-7/2", "sun,tue,thu,sat"),
        ("7-1", "sun,mon"),
    ],
)
def test_crontab_weekdays_keep_the_standard_meaning(weekday: str, expected: str) -> None:
    from nanobot.scheduler.schedules import _weekday_field

    assert _weekday_field(weekday) == expected


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "exactly one"),
        ({"every_s": 60, "expr": "* * * * *"}, "exactly one"),
        ({"every_s": 0}, ">= 1"),
        ({"expr": "61 * * * *"}, "invalid cron"),
        ({"expr": "* * *"}, "invalid cron"),
        ({"expr": "0 9 * * 8"}, "invalid cron"),
        ({"expr": "0 9 * * 5-1"}, "invalid cron"),
        ({"expr": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"at": "tomorrow"}, "ISO-8601"),
        ({"at": "2020-01-01T00:00:00+00:00"}, "in the past"),
    ],
)
def test_schedule_rejects_bad_input(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        make_schedule(default_tz=UTCZ, now=datetime(2025, 1, 15, tzinfo=UTC), **kwargs)


# ------------------------------------------------------------------------ persistence and firing


async def test_job_persists_across_restart_and_fires(tmp_path: Path) -> None:
    path = jobs_path(tmp_path)
    first = Recorder()
    svc1 = service(path, first)
    await svc1.start()
    job = svc1.add("water", "remind me to drink water", every_s=1, deliver_to=DeliverTo("telegram", "42"))
    await svc1.stop()  # "restart" (on a loaded machine the first run may already have fired it)

    on_disk = json.loads(path.read_text())
    assert on_disk["jobs"][0]["id"] == job.id and on_disk["jobs"][0]["schedule"]["every_s"] == 1

    rec = Recorder(reply="Drink some water!")
    svc2 = service(path, rec)
    await svc2.start()
    try:
        await rec.wait_delivered(2)
    finally:
        await svc2.stop()
    assert rec.jobs[0].id == job.id and rec.jobs[0].message == "remind me to drink water"
    assert rec.delivered[:2] == [("telegram", "42", "Drink some water!")] * 2
    saved = svc2.get(job.id)
    assert saved is not None and saved.last_status == "ok" and saved.last_run_at is not None
    assert saved.next_run_at is not None and saved.enabled


async def test_one_shot_at_job_fires_once_then_is_disabled(tmp_path: Path) -> None:
    rec = Recorder()
    svc = service(tmp_path / "jobs.json", rec)
    await svc.start()
    try:
        when = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        job = svc.add("once", "say hi", at=when, deliver_to=DeliverTo("discord", "7"))
        await rec.wait_calls(1)
        await asyncio.sleep(0.3)
    finally:
        await svc.stop()
    assert len(rec.jobs) == 1 and rec.delivered == [("discord", "7", "done")]
    saved = svc.get(job.id)
    assert saved is not None and not saved.enabled and saved.next_run_at is None and saved.last_status == "ok"


async def _start_with_missed(tmp_path: Path, kind: str, late_s: int) -> tuple[Recorder, CronService, str]:
    path = tmp_path / "jobs.json"
    now = datetime.now(UTC)
    due = now - timedelta(seconds=late_s)
    if kind == "every":
        sched = make_schedule(every_s=3600, default_tz=UTCZ, now=now)
    else:
        sched = make_schedule(at=to_iso(now + timedelta(hours=1)), default_tz=UTCZ, now=now)
        sched.at = to_iso(due)
    job = CronJob(
        id="missed1",
        name="m",
        message="check",
        schedule=sched,
        deliver_to=DeliverTo("telegram", "1"),
        created_at=to_iso(due - timedelta(hours=2)),
        next_run_at=to_iso(due),
    )
    write_job(path, job)
    rec = Recorder()
    svc = service(path, rec)
    await svc.start()
    return rec, svc, job.id


@pytest.mark.parametrize("kind", ["every", "at"])
async def test_missed_run_within_grace_fires_once_on_start(tmp_path: Path, kind: str) -> None:
    rec, svc, job_id = await _start_with_missed(tmp_path, kind, late_s=30)
    try:
        await rec.wait_calls(1)
        await asyncio.sleep(0.3)
    finally:
        await svc.stop()
    assert len(rec.jobs) == 1
    saved = svc.get(job_id)
    assert saved is not None and saved.last_status == "ok"
    if kind == "at":
        assert not saved.enabled
    else:
        assert saved.enabled and datetime.fromisoformat(saved.next_run_at) > datetime.now(UTC)


@pytest.mark.parametrize("kind", ["every", "at"])
async def test_missed_run_beyond_grace_is_skipped_and_recorded(tmp_path: Path, kind: str) -> None:
    rec, svc, job_id = await _start_with_missed(tmp_path, kind, late_s=1000)
    try:
        await asyncio.sleep(0.5)
    finally:
        await svc.stop()
    assert rec.jobs == []
    saved = svc.get(job_id)
    assert (
        saved is not None
        and saved.last_status.startswith("missed: due ")
        and "(grace 300s)" in saved.last_status
    )
    if kind == "at":
        assert not saved.enabled and saved.next_run_at is None
        # the one-shot reminder never comes: its chat hears that it was missed (it heard nothing)
        assert [(c, chat) for c, chat, _ in rec.delivered] == [("telegram", "1")]
        assert rec.delivered[0][2].startswith('Missed while I was offline: "m" was due ')
    else:
        assert datetime.fromisoformat(saved.next_run_at) > datetime.now(UTC)
        assert rec.delivered == []  # it simply runs at its next time


async def test_a_schedule_changed_by_hand_starts_anew_instead_of_catching_up(tmp_path: Path) -> None:
    """jobs.json edited while the gateway runs: the job's next_run_at still belongs to the old
    schedule, and may lie in the past (runs that fell due while the file could not be read or
    written). The new schedule starts from now: the old due time must not fire the job at once."""
    path = tmp_path / "jobs.json"
    rec = Recorder()
    svc = service(path, rec, reload_interval_s=0.05)
    await svc.start()
    try:
        job = svc.add("report", "send the weekly report", every_s=3600)

        def edit(jobs: list[CronJob]) -> None:  # hourly -> every two hours; next_run_at left stale
            now = datetime.now(UTC)
            jobs[0].schedule = make_schedule(every_s=7200, default_tz=UTCZ, now=now)
            jobs[0].next_run_at = to_iso(now - timedelta(seconds=30))

        CronStore(path).mutate(edit)
        await asyncio.sleep(0.4)  # the gateway reloads the file
    finally:
        await svc.stop()
    assert rec.jobs == []
    saved = svc.get(job.id)
    assert saved is not None and datetime.fromisoformat(saved.next_run_at) > datetime.now(UTC) + timedelta(hours=1)


async def test_runs_missed_while_the_gateway_stalled_are_made_up_once(tmp_path: Path) -> None:
    """The machine slept (or the event loop stalled) through two runs of a job: on waking they are
    coalesced into one run, not fired back to back (the same reminder twice at once)."""
    import time

    import apscheduler.schedulers.asyncio  # noqa: F401 - imported now, so start() below is quick

    path = tmp_path / "jobs.json"
    now = datetime.now(UTC)
    created = now - timedelta(seconds=100) + timedelta(seconds=0.25)  # runs at now+0.25 s, now+2.25 s ...
    sched = make_schedule(every_s=2, default_tz=UTCZ, now=now)
    write_job(path, CronJob(id="tick", name="tick", message="tick", schedule=sched, created_at=created.isoformat()))
    rec = Recorder()
    svc = service(path, rec)
    await svc.start()
    try:
        stall_s = (now + timedelta(seconds=2.4) - datetime.now(UTC)).total_seconds()
        time.sleep(max(stall_s, 0.0))  # the loop is stuck past two run times
        await rec.wait_calls(1)
        await asyncio.sleep(0.15)  # a backlog would run now, back to back (the next run is at +4.25 s)
    finally:
        await svc.stop()
    assert len(rec.jobs) == 1


async def test_running_service_picks_up_jobs_added_and_removed_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "cron" / "jobs.json"
    rec = Recorder()
    gateway = service(path, rec, reload_interval_s=0.1)
    await gateway.start()
    try:
        cli = CronService(path, rec.on_job, "UTC")  # never started, like `nanobot cron add`
        job = cli.add("ping", "ping", every_s=1, deliver_to=DeliverTo("telegram", "5"))
        await rec.wait_calls(1)
        assert cli.remove(job.id)
        await asyncio.sleep(0.3)  # the gateway notices the removal
        calls = len(rec.jobs)
        await asyncio.sleep(1.3)
        assert len(rec.jobs) == calls
    finally:
        await gateway.stop()
    assert rec.jobs[0].id == job.id and rec.delivered[0] == ("telegram", "5", "done")


async def test_disabled_job_does_not_fire_and_enable_brings_it_back(tmp_path: Path) -> None:
    rec = Recorder()
    svc = service(tmp_path / "jobs.json", rec)
    await svc.start()
    try:
        job = svc.add("tick", "tick", every_s=1)
        assert svc.enable(job.id, False) is not None
        await asyncio.sleep(1.4)
        assert rec.jobs == []
        svc.enable(job.id, True)
        await rec.wait_calls(1)
    finally:
        await svc.stop()
    assert svc.enable("nope") is None


async def test_failures_are_recorded_not_raised(tmp_path: Path) -> None:
    rec = Recorder(fail=RuntimeError("llm down"))
    svc = service(tmp_path / "jobs.json", rec)
    job = svc.add("x", "x", every_s=3600, deliver_to=DeliverTo("telegram", "1"))
    assert await svc.run_now(job.id) is None
    assert svc.get(job.id).last_status == "error: RuntimeError: llm down"

    async def broken_deliver(channel: str, chat_id: str, text: str) -> None:
        raise ConnectionError("telegram unreachable")

    svc2 = CronService(tmp_path / "jobs.json", Recorder().on_job, "UTC", deliver=broken_deliver)
    assert await svc2.run_now(job.id) == "done"
    saved = svc2.get(job.id)
    assert saved.last_status.startswith("error: delivery failed: ConnectionError")
    assert saved.next_run_at == job.next_run_at  # a manual run keeps the schedule
    with pytest.raises(KeyError):
        await svc2.run_now("missing")


# ------------------------------------------------------------------------ the file


def test_concurrent_adds_from_two_services_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    a, b = (CronService(path, Recorder().on_job, "UTC") for _ in range(2))

    def add_many(svc: CronService, tag: str) -> None:
        for i in range(25):
            svc.add(f"{tag}{i}", "m", every_s=60)

    threads = [threading.Thread(target=add_many, args=(s, t)) for s, t in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted(j.name for j in a.list())
    assert len(names) == 50 and names == sorted([f"a{i}" for i in range(25)] + [f"b{i}" for i in range(25)])
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_concurrent_adds_from_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from nanobot.scheduler.cron import CronService
        async def noop(job): return None
        svc = CronService(Path({str(path)!r}), noop, "UTC")
        for i in range(20):
            svc.add(sys.argv[1] + str(i), "m", every_s=60)
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, tag]) for tag in ("p", "q")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(CronStore(path).load()) == 40


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe{}",  # saved by an editor in UTF-16 or Latin-1
        b'{"jobs": [1]}',
        b'{"jobs": ["x"]}',
        b'{"jobs": {"a": 1}}',
        b'{"jobs": [{"id": "a", "schedule": 5}]}',
        b'{"jobs": [{"id": "a", "deliver_to": "me"}]}',
        b"",  # emptied (a full disk, `> jobs.json`): read as "no jobs", every reminder silently gone
        b"\n",
    ],
)
async def test_corrupt_file_is_reported_and_never_overwritten(tmp_path: Path, content: bytes) -> None:
    """A hand-edited jobs file that is not UTF-8 or holds something else than job objects crashed
    `cron list` and stopped the gateway from starting (a restart loop under systemd)."""
    path = tmp_path / "jobs.json"
    path.write_bytes(content)
    svc = CronService(path, Recorder().on_job, "UTC")
    with pytest.raises(CronStoreError, match="not a valid jobs file|the jobs file is empty"):
        svc.list()
    with pytest.raises(CronStoreError):
        svc.add("x", "x", every_s=60)
    await svc.start()  # the gateway starts, with no jobs until the file is fixed
    await svc.stop()
    assert path.read_bytes() == content


def test_unknown_keys_survive_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    svc = CronService(path, Recorder().on_job, "UTC")
    job = svc.add("x", "x", every_s=60)
    data = json.loads(path.read_text())
    data["jobs"][0]["future_field"] = {"a": 1}
    path.write_text(json.dumps(data))
    svc.add("y", "y", every_s=60)
    kept = next(j for j in json.loads(path.read_text())["jobs"] if j["id"] == job.id)
    assert kept["future_field"] == {"a": 1}


# ------------------------------------------------------------------------ the tool


@pytest.fixture
def tool(tmp_path: Path) -> CronTool:
    return CronTool(CronService(tmp_path / "jobs.json", Recorder().on_job, "UTC"))


TG = ToolContext(channel="telegram", chat_id="42", session_key="telegram:42")
DC = ToolContext(channel="discord", chat_id="9", session_key="discord:9")


async def test_a_chats_jobs_together_run_at_most_once_a_minute(tool: CronTool) -> None:
    """The once-a-minute floor held per job: one steered turn added a hundred jobs of every 60 s, a
    hundred turns and messages a minute into one chat."""
    for n in range(2):  # 30 runs an hour each
        assert "Scheduled job" in await tool.execute(TG, action="add", message=f"ping {n}", every_seconds=120)
    with pytest.raises(ToolError, match="could run 90 times in one hour, more than 60"):
        await tool.execute(TG, action="add", message="ping 2", every_seconds=120)
    with pytest.raises(ToolError, match="more than 60"):
        await tool.execute(TG, action="add", message="every five minutes", cron_expr="*/5 * * * *")
    assert "Scheduled job" in await tool.execute(DC, action="add", message="other chat", every_seconds=60)
    first = tool.service.list()[0]
    await tool.execute(TG, action="remove", job_id=first.id)
    assert "Scheduled job" in await tool.execute(TG, action="add", message="five", cron_expr="*/5 * * * *")



async def test_jobs_added_together_count_at_the_hour_they_all_run(tool: CronTool) -> None:
    """The review: the limit summed average rates, so a hundred jobs of every two hours (0.5 an
    hour each) or a hundred one-shot reminders for the same moment all passed, and fired together."""
    for n in range(60):
        await tool.execute(TG, action="add", message=f"ping {n}", every_seconds=7200)
    with pytest.raises(ToolError, match="more than 60"):
        await tool.execute(TG, action="add", message="ping 60", every_seconds=7200)
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    with pytest.raises(ToolError, match="more than 60"):
        await tool.execute(TG, action="add", message="at once", at=tomorrow.isoformat())
    for job in tool.service.list():
        await tool.execute(TG, action="remove", job_id=job.id)
    for day in range(30):  # reminders on different days are fine
        moment = (tomorrow + timedelta(days=day)).isoformat()
        assert "Scheduled job" in await tool.execute(TG, action="add", message=f"day {day}", at=moment)
    for minute in range(1, 60):  # the same hour holds at most 60 (with day 0's)
        moment = (tomorrow + timedelta(minutes=minute)).isoformat()
        assert "Scheduled job" in await tool.execute(TG, action="add", message=f"m {minute}", at=moment)
    with pytest.raises(ToolError, match="could run 61 times in one hour"):
        await tool.execute(TG, action="add", message="one more", at=(tomorrow + timedelta(minutes=30)).isoformat())



async def test_a_naive_reminder_with_the_tools_tz_is_counted_in_its_own_hour(tool: CronTool) -> None:
    """The review: a naive `at` with the tool's `tz` was placed in the service's zone, so a reminder
    was refused beside nothing due and the 61st for one moment passed."""
    soon = datetime.now(UTC) + timedelta(days=2)
    for n in range(30):  # due together at 14:00 UTC
        await tool.execute(DC, action="add", message=f"r {n}", at=soon.replace(hour=14, minute=0).isoformat())
    for n in range(30):
        await tool.execute(DC, action="add", message=f"s {n}", at=soon.replace(hour=14, minute=30).isoformat())
    naive_tokyo = soon.replace(hour=23, minute=0).strftime("%Y-%m-%dT%H:%M:%S")  # 14:00 UTC in Tokyo
    with pytest.raises(ToolError, match="could run 61 times"):
        await tool.execute(DC, action="add", message="tokyo", at=naive_tokyo, tz="Asia/Tokyo")
    naive_utc = soon.replace(hour=23, minute=0).strftime("%Y-%m-%dT%H:%M:%S")
    assert "Scheduled job" in await tool.execute(DC, action="add", message="late", at=naive_utc)


async def test_adds_of_one_reply_run_in_parallel_still_see_each_other(tool: CronTool) -> None:
    """The review: a reply's tool calls run four at a time, and each passed the hourly check in a
    thread before any of them was added: 63 reminders for one hour."""
    moment = (datetime.now(UTC) + timedelta(days=3)).replace(minute=0, second=0, microsecond=0).isoformat()
    for n in range(57):
        await tool.execute(TG, action="add", message=f"r {n}", at=moment)
    outcomes = await asyncio.gather(*(tool.execute(TG, action="add", message=f"p {n}", at=moment) for n in range(16)),
                                    return_exceptions=True)
    assert sum(isinstance(o, str) for o in outcomes) == 3, outcomes


async def test_every_minute_of_one_hour_far_ahead_counts_sixty(tool: CronTool) -> None:
    """The review: `* 9 15 3 *` (every minute of one hour next March) counted as its first runs
    only, so two of them (120 runs in that hour) passed."""
    assert "Scheduled job" in await tool.execute(TG, action="add", message="a", cron_expr="* 9 15 3 *")
    with pytest.raises(ToolError, match="could run 120 times"):
        await tool.execute(TG, action="add", message="b", cron_expr="* 9 15 3 *")


@pytest.mark.parametrize("kind", ["at", "every", "cron"])
async def test_jobs_that_all_run_weeks_ahead_count_together(tool: CronTool, kind: str) -> None:
    """The review: runs beyond the eight days looked at were not counted at all, so a hundred
    reminders (or every-ten-days jobs, or yearly crontabs) for one moment in nine days all passed."""
    moment = (datetime.now(UTC) + timedelta(days=9)).replace(minute=0, second=0, microsecond=0)
    args = {"at": {"at": moment.isoformat()}, "every": {"every_seconds": 864_000},
            "cron": {"cron_expr": f"0 {moment.hour} {moment.day} {moment.month} *", "tz": "UTC"}}[kind]
    for n in range(60):
        assert "Scheduled job" in await tool.execute(TG, action="add", message=f"ping {n}", **args)
    with pytest.raises(ToolError, match="could run 61 times"):
        await tool.execute(TG, action="add", message="ping 60", **args)


async def test_tool_add_list_remove_scoped_to_the_chat(tool: CronTool) -> None:
    out = await tool.execute(
        TG,
        action="add",
        name="standup",
        message="Post the standup reminder",
        cron_expr="0 9 * * 1-5",
        tz="Europe/Berlin",
    )
    assert out.startswith("Scheduled job ")
    job = tool.service.list()[0]
    assert job.deliver_to == DeliverTo("telegram", "42") and job.schedule.tz == "Europe/Berlin"
    await tool.execute(DC, action="add", message="other chat", every_seconds=3600)

    listing = await tool.execute(TG, action="list")
    assert job.id in listing and "standup" in listing and "other chat" not in listing
    with pytest.raises(ToolError, match="no job"):
        await tool.execute(DC, action="remove", job_id=job.id)
    assert "Removed job" in await tool.execute(TG, action="remove", job_id=job.id)
    assert await tool.execute(TG, action="list") == "No scheduled jobs for this chat."
    assert len(tool.service.list()) == 1


async def test_a_job_named_after_its_message_keeps_whole_emoji(tool: CronTool) -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one shown character, five code points
    for pad in range(5):
        await tool.execute(TG, action="add", message="x" * pad + family * 40, every_seconds=3600)
    for job in tool.service.list():
        assert job.name.strip("x").replace(family, "") == "" and len(job.name) <= MAX_NAME_CHARS, job.name


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"action": "add"}, "'message' is required"),
        ({"action": "add", "message": "m"}, "exactly one"),
        ({"action": "add", "message": "m", "every_seconds": 3600, "cron_expr": "* * * * *"}, "exactly one"),
        ({"action": "add", "message": "m", "cron_expr": "every day"}, "invalid cron"),
        ({"action": "add", "message": "m", "at": "2001-01-01T00:00:00Z"}, "in the past"),
        ({"action": "remove"}, "'job_id' is required"),
    ],
)
async def test_tool_rejects_bad_arguments(tool: CronTool, args: dict, needle: str) -> None:
    with pytest.raises(ToolError, match=needle):
        await tool.execute(TG, **args)
    assert tool.service.list() == []


async def test_tool_through_registry_validates_schema_and_blocks_jobs_from_jobs(tool: CronTool) -> None:
    reg = ToolRegistry(None)
    reg.register(tool)
    out = await reg.execute("cron", {"action": "add", "message": "m", "every_seconds": 5}, TG)
    assert out.startswith("Error: invalid arguments") and ">= 60" in out
    out = await reg.execute("cron", '{"action": "explode"}', TG)
    assert out.startswith("Error: invalid arguments") and "must be one of" in out
    in_job = ToolContext(channel="telegram", chat_id="42", session_key="cron:abc")
    out = await reg.execute("cron", {"action": "add", "message": "m", "every_seconds": 60}, in_job)
    assert out == "Error: a scheduled job cannot schedule further jobs"
    assert tool.service.list() == []


# ------------------------------------------------------------------------ the CLI


@pytest.fixture
def cli_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "timezone": "UTC"}}})
    )
    return cfg


def test_cli_add_list_remove(cli_config: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        cron_cli.app,
        [
            "add",
            "-c",
            str(cli_config),
            "--name",
            "news",
            "-m",
            "Summarise the news",
            "--cron",
            "30 7 * * *",
            "--tz",
            "Asia/Tokyo",
            "--channel",
            "telegram",
            "--to",
            "42",
        ],
    )
    assert res.exit_code == 0, res.stderr
    job_id = res.stdout.strip()
    stored = json.loads((tmp_path / "ws" / "cron" / "jobs.json").read_text())["jobs"]
    assert stored[0]["id"] == job_id and stored[0]["deliver_to"] == {"channel": "telegram", "chat_id": "42"}
    assert stored[0]["next_run_at"].endswith("+09:00")

    res = runner.invoke(cron_cli.app, ["list", "-c", str(cli_config)])
    assert res.exit_code == 0 and job_id in res.stdout and "cron '30 7 * * *' (Asia/Tokyo)" in res.stdout
    res = runner.invoke(cron_cli.app, ["list", "-c", str(cli_config), "--json"])
    assert json.loads(res.stdout)[0]["schedule"]["expr"] == "30 7 * * *"

    res = runner.invoke(cron_cli.app, ["remove", job_id, "-c", str(cli_config)])
    assert res.exit_code == 0 and res.stdout == ""
    res = runner.invoke(cron_cli.app, ["remove", job_id, "-c", str(cli_config)])
    assert res.exit_code == 1 and "no job" in res.stderr
    res = runner.invoke(cron_cli.app, ["list", "-c", str(cli_config)])
    assert res.exit_code == 0 and res.stdout == "" and "No scheduled jobs" in res.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "x"],
        ["-m", "x", "--every", "60", "--cron", "* * * * *"],
        ["-m", "x", "--every", "60", "--channel", "telegram"],
        ["-m", "x", "--cron", "0 9 * * *", "--tz", "Nowhere/City"],
        ["-m", "x", "--at", "yesterday"],
    ],
)
def test_cli_add_usage_errors_exit_2(cli_config: Path, args: list[str]) -> None:
    res = CliRunner().invoke(cron_cli.app, ["add", "-c", str(cli_config), *args])
    assert res.exit_code == 2 and res.stdout == "" and "Error" in res.stderr


def test_cli_run_executes_once_and_records(cli_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    job_id = runner.invoke(
        cron_cli.app, ["add", "-c", str(cli_config), "-m", "weather", "--every", "3600"]
    ).stdout
    seen: list[str] = []

    async def fake_run(config, job: CronJob, _path: Path) -> str:
        seen.append(job_prompt(job))
        return "Sunny, 21°C"

    monkeypatch.setattr(cron_cli, "_run_job_once", fake_run)
    res = runner.invoke(cron_cli.app, ["run", job_id.strip(), "-c", str(cli_config)])
    assert res.exit_code == 0 and res.stdout == "Sunny, 21°C\n"
    assert "weather" in seen[0]
    listed = json.loads(runner.invoke(cron_cli.app, ["list", "--json", "-c", str(cli_config)]).stdout)
    assert listed[0]["last_status"] == "ok" and listed[0]["last_run_at"]

    async def broken(config, job: CronJob, _path: Path) -> str:
        raise RuntimeError("no provider")

    monkeypatch.setattr(cron_cli, "_run_job_once", broken)
    res = runner.invoke(cron_cli.app, ["run", job_id.strip(), "-c", str(cli_config)])
    assert res.exit_code == 1 and "no provider" in res.stderr and res.stdout == ""
    listed = json.loads(runner.invoke(cron_cli.app, ["list", "--json", "-c", str(cli_config)]).stdout)
    assert listed[0]["last_status"] == "error: RuntimeError: no provider"
    res = runner.invoke(cron_cli.app, ["run", "nope", "-c", str(cli_config)])
    assert res.exit_code == 1 and "no job" in res.stderr


async def test_job_runs_through_litellm_against_the_fake_llm_server(tmp_path: Path) -> None:
    """A persisted job fires after a restart; its prompt reaches a real socket through litellm."""
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    from tests.fakes.llm_server import FakeLLMServer

    path = tmp_path / "jobs.json"
    job = CronService(path, Recorder().on_job, "UTC").add(
        "plants", "Remind me to water the plants", every_s=1, deliver_to=DeliverTo("discord", "77")
    )
    delivered: list[tuple[str, str, str]] = []
    got_one = asyncio.Event()

    async def deliver(channel: str, chat_id: str, text: str) -> None:
        delivered.append((channel, chat_id, text))
        got_one.set()

    with FakeLLMServer() as server:
        server.responder = lambda body: "Water the plants now!"

        async def on_job(j: CronJob) -> str | None:
            resp = await litellm.acompletion(
                model="openai/fake",
                api_base=server.url,
                api_key="x",
                messages=[{"role": "user", "content": job_prompt(j)}],
            )
            return resp.choices[0].message.content

        svc = CronService(path, on_job, "UTC", deliver=deliver)
        await svc.start()
        try:
            await asyncio.wait_for(got_one.wait(), WAIT_S)
        finally:
            await svc.stop()
        assert "Remind me to water the plants" in server.requests[0]["messages"][0]["content"]
    assert delivered[0] == ("discord", "77", "Water the plants now!")
    assert svc.get(job.id).last_status == "ok"


def _agent_config(tmp_path: Path, providers: dict, provider: str, model: str) -> Path:
    cfg = tmp_path / "agent-config.json"
    defaults = {"workspace": str(tmp_path / "ws"), "timezone": "UTC", "provider": provider, "model": model}
    cfg.write_text(json.dumps({"agents": {"defaults": defaults}, "providers": providers}))
    return cfg


def test_cli_run_through_the_real_agent_and_fake_llm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nanobot cron run` builds the real agent, which reaches the fake LLM over a socket via litellm."""
    from tests.fakes.llm_server import FakeLLMServer

    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runner = CliRunner()
    with FakeLLMServer() as server:
        server.responder = lambda body: "Time to stretch!"
        cfg = _agent_config(
            tmp_path, {"custom": {"apiBase": server.url, "apiKey": "x"}}, "custom", "custom/fake"
        )
        add = [
            "add",
            "-c",
            str(cfg),
            "-m",
            "remind me to stretch",
            "--every",
            "3600",
            "--channel",
            "telegram",
        ]
        job_id = runner.invoke(cron_cli.app, [*add, "--to", "42"]).stdout.strip()
        res = runner.invoke(cron_cli.app, ["run", job_id, "-c", str(cfg)])
        assert res.exit_code == 0, res.stderr
        assert res.stdout == "Time to stretch!\n"
        sent = server.requests[0]["messages"][-1]["content"]
        assert "remind me to stretch" in str(sent)
    assert (tmp_path / "ws" / "sessions" / f"cron_{job_id}.jsonl").exists()


def test_a_run_the_model_could_not_answer_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider failing (HTTP 500): `cron run` printed the apology with exit 0 and recorded the
    run as ok; the failure must be recorded, and said by the exit code."""
    from tests.fakes.llm_server import FakeLLMServer, Reply

    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NANOBOT_AGENTS__DEFAULTS__LLM_MAX_RETRIES", "0")
    runner = CliRunner()
    with FakeLLMServer() as server:
        server.responder = lambda body: Reply(status=500, content="overloaded")
        cfg = _agent_config(
            tmp_path, {"custom": {"apiBase": server.url, "apiKey": "x"}}, "custom", "custom/fake"
        )
        job_id = runner.invoke(
            cron_cli.app, ["add", "-c", str(cfg), "-m", "stretch", "--every", "3600"]
        ).stdout.strip()
        res = runner.invoke(cron_cli.app, ["run", job_id, "-c", str(cfg)])
    assert res.exit_code == 1, res.stdout
    assert f"job {job_id} failed" in res.stderr
    job = next(
        j
        for j in json.loads((tmp_path / "ws" / "cron" / "jobs.json").read_text())["jobs"]
        if j["id"] == job_id
    )
    assert job["last_status"].startswith("error:"), job


async def test_a_failure_notice_reaches_the_jobs_chat_once_per_run_of_failures(tmp_path: Path) -> None:
    """While the provider was down an every-minute job posted the same "Sorry, …" every minute,
    naming neither the job nor that it would go on: the chat is told once, with the job's name."""
    delivered: list[tuple[str, str, str]] = []
    answers = iter([None, None, "the plants are watered", None])

    async def on_job(job: CronJob) -> str:
        answer = next(answers)
        if answer is None:
            raise JobFailed("Sorry, the model could not answer (HTTP 500).")
        return answer

    async def deliver(channel: str, chat_id: str, text: str) -> None:
        delivered.append((channel, chat_id, text))

    svc = CronService(tmp_path / "jobs.json", on_job, "UTC", deliver=deliver)
    job = svc.add("water the plants", "m", every_s=3600, deliver_to=DeliverTo("telegram", "42"))
    for _ in range(4):  # fails, fails again, answers, fails
        await svc.run_now(job.id)
    notice = ("Sorry, the model could not answer (HTTP 500).\n\n"
              f'(Scheduled job "water the plants", {job.id}: while it keeps failing, this is not said again.)')
    assert [text for _, _, text in delivered] == [notice, "the plants are watered", notice], delivered
    assert svc.get(job.id).last_status.startswith("error: Sorry, the model could not answer")


async def test_a_failure_the_chat_never_heard_of_is_told_at_the_next_one(tmp_path: Path) -> None:
    """The review: a failure notice whose send failed (the network down with the provider), a turn
    that failed without a notice, or a run by hand into the terminal counted as told, and every
    later failure stayed silent until the job succeeded."""
    delivered: list[str] = []
    sends_fail = [True]
    failures = iter([JobFailed("Sorry, the model could not answer."), RuntimeError("boom"),
                     JobFailed("Sorry, the model could not answer."), JobFailed("Sorry, the model could not answer.")])

    async def on_job(job: CronJob) -> str:
        raise next(failures)

    async def deliver(channel: str, chat_id: str, text: str) -> None:
        if sends_fail[0]:
            raise ConnectionError("network unreachable")
        delivered.append(text)

    svc = CronService(tmp_path / "jobs.json", on_job, "UTC", deliver=deliver)
    job = svc.add("water the plants", "m", every_s=3600, deliver_to=DeliverTo("telegram", "42"))
    await svc.run_now(job.id)  # the notice's send fails
    sends_fail[0] = False
    await svc.run_now(job.id)  # a failure without a notice
    await svc.run_now(job.id)  # told now
    await svc.run_now(job.id)  # not again
    assert len(delivered) == 1 and delivered[0].startswith("Sorry, the model could not answer."), delivered


def test_cli_run_without_provider_credentials_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NANOBOT_PROVIDERS__OPENAI__API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = _agent_config(tmp_path, {}, "openai", "openai/gpt-4o-mini")
    runner = CliRunner()
    job_id = runner.invoke(cron_cli.app, ["add", "-c", str(cfg), "-m", "x", "--every", "60"]).stdout.strip()
    res = runner.invoke(cron_cli.app, ["run", job_id, "-c", str(cfg)])
    assert res.exit_code == 2 and res.stdout == "" and "apiKey" in res.stderr


async def test_a_jobs_text_stays_out_of_the_log(tmp_path: Path, logs: list[str]) -> None:  # noqa: ANN001
    """A job's name is its message by default (the user's or the model's words): it was logged at
    INFO whenever the job was added or ran, although logging.prompts keeps chat text out of the log."""
    rec = Recorder()
    svc = service(tmp_path / "jobs.json", rec)
    job = svc.add("Remind me about the biopsy results", "Remind me about the biopsy results", every_s=3600)
    await svc.run_now(job.id)
    assert any(job.id in line for line in logs)
    assert not [line for line in logs if "biopsy" in line]


def test_the_hour_an_autumn_clock_change_repeats_runs_a_fixed_time_job_once() -> None:
    """Europe/Berlin, 25 October 2026: 02:30 comes twice (CEST, then CET). A daily `30 2 * * *` ran
    at both; crontab runs it once. An hourly job runs in both hours, as in crontab."""
    from nanobot.scheduler.schedules import repeats_last_run

    berlin = ZoneInfo("Europe/Berlin")
    first = datetime(2026, 10, 25, 2, 30, tzinfo=berlin)  # fold 0: CEST, 00:30 UTC
    again = datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=berlin)  # CET, 01:30 UTC
    assert again.astimezone(UTC) - first.astimezone(UTC) == timedelta(hours=1)

    def job(expr: str) -> CronJob:
        sched = make_schedule(expr=expr, tz="Europe/Berlin", default_tz=UTCZ, now=first - timedelta(days=1))
        return CronJob(id="d", name="n", message="m", schedule=sched, last_run_at=to_iso(first))

    assert repeats_last_run(job("30 2 * * *"), again, UTCZ)
    assert not repeats_last_run(job("30 2 * * *"), first + timedelta(days=1), UTCZ)  # the next day
    assert not repeats_last_run(job("30 * * * *"), again, UTCZ)  # hourly: both hours
    assert not repeats_last_run(job("30 */1 * * *"), again, UTCZ)
    # two fixed minutes in the repeated hour: ran at 02:00 and 02:30 CEST, both skipped in CET
    two = job("0,30 2 * * *")
    assert repeats_last_run(two, datetime(2026, 10, 25, 2, 0, fold=1, tzinfo=berlin), UTCZ)
    assert repeats_last_run(two, again, UTCZ)
    assert not repeats_last_run(two, datetime(2026, 10, 26, 2, 0, tzinfo=berlin), UTCZ)  # the next day
    # and the real trigger does offer both (what the service has to skip)
    daily = job("30 2 * * *")
    assert next_fire(daily, UTCZ, first + timedelta(minutes=1)) == again


async def test_the_service_skips_the_repeated_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nanobot.scheduler import cron as cron_module

    berlin = ZoneInfo("Europe/Berlin")
    rec = Recorder()
    svc = service(tmp_path / "jobs.json", rec)
    job = svc.add("n", "daily", expr="30 2 * * *", tz="Europe/Berlin")
    clock = [datetime(2026, 10, 25, 2, 30, tzinfo=berlin)]
    monkeypatch.setattr(cron_module, "tz_now", lambda tz=None: clock[0])
    await svc._fire(job.id)
    clock[0] = datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=berlin)
    await svc._fire(job.id)
    assert len(rec.jobs) == 1


def test_cli_run_keeps_a_config_outside_nanobot_home_from_exec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cron run -c <file elsewhere>`: the job's exec commands must not see that file, as in the
    gateway and `agent`. The runtime was built without the path, so exec hid a `config.json` in the
    current folder instead, and a job's command could read the real one (past the redaction)."""
    from nanobot.agent import factory
    from nanobot.agent.runtime import AgentRuntime
    from tests.fakes.llm_server import FakeLLMServer

    monkeypatch.setenv("NANOBOT_HOME", str(tmp_path / "home"))
    built: list[AgentRuntime] = []
    real_build = factory.build_runtime

    def recording_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        built.append(real_build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(factory, "build_runtime", recording_build)
    with FakeLLMServer() as server:
        server.responder = lambda body: "ok"
        cfg = _agent_config(
            tmp_path, {"custom": {"apiBase": server.url, "apiKey": "x"}}, "custom", "custom/fake"
        )
        job_id = CliRunner().invoke(cron_cli.app, ["add", "-c", str(cfg), "-m", "hi", "--every", "3600"]).stdout
        res = CliRunner().invoke(cron_cli.app, ["run", job_id.strip(), "-c", str(cfg)])
    assert res.exit_code == 0, res.stderr
    exec_tool = built[0].agent.tools.get("exec")
    assert exec_tool is not None
    assert cfg.resolve() in exec_tool.sandbox.private_files
    assert cfg.resolve().parent in exec_tool.sandbox.private_dirs


# ------------------------------------------------------------------------ schedules the scheduler cannot hold

FAR_AT = "9999-12-31T23:00:00-12:00"  # year 10000 in UTC


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"at": FAR_AT}, "out of range"),
        ({"at": "2200-01-01T00:00:00+00:00"}, "too far ahead"),
        ({"every_s": 1_000_000_000_000_000}, "at most"),
    ],
)
def test_schedule_rejects_times_beyond_what_the_scheduler_can_hold(kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        make_schedule(default_tz=UTCZ, now=datetime(2025, 1, 15, tzinfo=UTC), **kwargs)


async def test_tool_refuses_a_far_future_job_in_a_running_service_and_saves_nothing(tmp_path: Path) -> None:
    rec = Recorder()
    svc = service(tmp_path / "jobs.json", rec)
    await svc.start()
    try:
        reg = ToolRegistry(None)
        reg.register(CronTool(svc))
        out = await reg.execute("cron", {"action": "add", "name": "far", "message": "x", "at": FAR_AT}, TG)
        assert out.startswith("Error:") and "out of range" in out
        assert svc.list() == []
        # later jobs are still scheduled
        job = svc.add("soon", "say hi", at=(datetime.now(UTC) + timedelta(seconds=1)).isoformat())
        assert job.id in svc._scheduled
    finally:
        await svc.stop()


@pytest.mark.parametrize("args", [["--every", "1000000000000000"], ["--at", FAR_AT]])
def test_cli_add_out_of_range_schedule_is_a_usage_error(cli_config: Path, args: list[str]) -> None:
    res = CliRunner().invoke(cron_cli.app, ["add", "-c", str(cli_config), "-m", "x", *args])
    assert res.exit_code == 2 and res.stdout == "" and "Error" in res.stderr, res.output
    assert CronStore(jobs_path(cli_config.parent / "ws")).load() == []


async def test_a_hand_written_unschedulable_job_is_disabled_and_the_others_still_run(tmp_path: Path) -> None:
    """jobs.json edited by hand (or written by an older version) with a job APScheduler cannot
    compute: the service starts, disables that job with the reason, and runs the normal one."""
    path = tmp_path / "jobs.json"
    now = datetime.now(UTC)
    created = to_iso(now - timedelta(hours=1))
    far = {
        "id": "far1",
        "name": "far",
        "message": "x",
        "schedule": {"kind": "at", "at": FAR_AT},
        "created_at": created,
        "next_run_at": FAR_AT,
    }
    huge_every = {
        "id": "huge1",
        "name": "huge",
        "message": "x",
        "schedule": {"kind": "every", "every_s": 1_000_000_000_000_000},
        "created_at": created,
    }
    # a sign typo: the scheduler listed run times backwards without end (frozen gateway, then OOM)
    negative_every = {**huge_every, "id": "neg1", "name": "negative", "schedule": {"kind": "every", "every_s": -60}}
    # a 6 KB crontab a steered model could not add any more: searched to year 9999 at every start
    long_cron = {**huge_every, "id": "long1", "name": "long", "schedule": {
        "kind": "cron", "expr": "0 0 " + ",".join(["31"] * 2000) + " 2 *"}}
    normal = {
        "id": "norm1",
        "name": "normal",
        "message": "normal reminder",
        "schedule": {"kind": "every", "every_s": 1},
        "deliver_to": {"channel": "telegram", "chat_id": "5"},
        "created_at": created,
    }
    path.write_text(json.dumps({"version": 1, "jobs": [far, huge_every, negative_every, long_cron, normal]}),
                    encoding="utf-8")
    rec = Recorder(reply="on time")
    svc = service(path, rec)
    await svc.start()
    try:
        assert set(svc._scheduled) == {"norm1"}
        await rec.wait_delivered(1)
    finally:
        await svc.stop()
    assert rec.delivered[0] == ("telegram", "5", "on time")
    jobs = {j.id: j for j in svc.list()}
    assert "longer than 512 characters" in str(jobs["long1"].last_status)
    for bad in ("far1", "huge1", "neg1", "long1"):
        assert not jobs[bad].enabled and jobs[bad].next_run_at is None
        assert jobs[bad].last_status is not None and jobs[bad].last_status.startswith("error: "), jobs[bad]
    assert "OverflowError" in str(jobs["far1"].last_status) and "'every' must be" in str(jobs["neg1"].last_status)
    assert jobs["norm1"].enabled and jobs["norm1"].last_status == "ok"


async def test_a_hand_written_interval_job_keeps_its_pace_across_restarts(tmp_path: Path) -> None:
    """An `every` job written into jobs.json without created_at was counted afresh from every start:
    a daily job on a box restarted daily never ran."""
    path = tmp_path / "jobs.json"
    job = {"id": "hand1", "name": "backup check", "message": "check", "schedule": {"kind": "every", "every_s": 3600}}
    path.write_text(json.dumps({"version": 1, "jobs": [job]}), encoding="utf-8")
    rec = Recorder()
    due: list[str | None] = []
    for _ in range(2):
        svc = service(path, rec)
        await svc.start()
        await svc.stop()
        (stored,) = svc.list()
        due.append(stored.next_run_at)
        await asyncio.sleep(1.1)  # the next start comes later: the job's time must not move with it
    assert due[0] == due[1] and stored.created_at


def test_a_system_zone_without_a_name_is_warned_about() -> None:
    """TZ written as a POSIX rule: nanobot took its current offset as fixed (cron an hour off all
    summer) without a word."""
    import os
    import subprocess
    import sys

    code = "from nanobot.timeutil import resolve_tz; resolve_tz(''); resolve_tz('')"
    env = {**os.environ, "TZ": "CET-1CEST,M3.5.0,M10.5.0/3"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("agents.defaults.timezone") == 1, result.stderr  # once, naming the fix


def test_fired_reminders_make_room_and_one_chat_cannot_fill_the_file(tmp_path: Path) -> None:
    """500 reminders that had fired stayed in jobs.json, switched off, and counted: after them every
    chat was refused a new one ("too many jobs"), a year and a half of "remind me in 10 minutes"."""
    from datetime import UTC, datetime, timedelta

    from nanobot.scheduler.cron_store import MAX_JOBS, MAX_JOBS_PER_CHAT, CronSchedule

    path = tmp_path / "jobs.json"
    now = datetime.now(UTC)
    chat, other = DeliverTo("telegram", "555"), DeliverTo("telegram", "777")

    def fired(i: int, days_ago: float) -> CronJob:
        at = to_iso(now - timedelta(days=days_ago))
        return CronJob(id=f"old{i}", name="r", message="stretch", schedule=CronSchedule(kind="at", at=at),
                       deliver_to=chat, enabled=False, last_run_at=at, last_status="ok")

    def missed(i: int) -> CronJob:  # due while nothing ran: switched off, never run
        at = to_iso(now - timedelta(days=1))
        return CronJob(id=f"missed{i}", name="r", message="stretch", schedule=CronSchedule(kind="at", at=at),
                       deliver_to=chat, enabled=False, last_status=f"missed: due {at}")

    CronStore(path).mutate(lambda jobs: jobs.extend(fired(i, 30 if i < 10 else 1 + i / 1000) for i in range(MAX_JOBS)))
    svc = CronService(path, Recorder().on_job, "UTC")
    svc.add("new", "water the plants", every_s=3600, deliver_to=chat)
    ids = {j.id for j in svc.list()}
    assert "old0" not in ids and "old499" in ids  # a week past: gone; recent ones stay listed
    assert len(ids) <= MAX_JOBS
    for i in range(MAX_JOBS_PER_CHAT - 1):
        svc.add(f"n{i}", "ping", every_s=3600, deliver_to=chat)
    with pytest.raises(ValueError, match="this chat has"):
        svc.add("one more", "ping", every_s=3600, deliver_to=chat)
    svc.add("elsewhere", "ping", every_s=3600, deliver_to=other)  # another chat still may
    # reminders missed while nothing ran can never run either: they make room like fired ones
    path.unlink()
    CronStore(path).mutate(lambda jobs: jobs.extend(missed(i) for i in range(MAX_JOBS_PER_CHAT)))
    svc.add("after the missed ones", "ping", every_s=3600, deliver_to=chat)


@pytest.mark.parametrize(("value", "enabled"), [("false", False), ("False", False), ("true", True), ("maybe", False)])
def test_a_job_switched_off_by_hand_stays_off(tmp_path: Path, value: str, enabled: bool) -> None:
    """"enabled": "false" in a hand-edited jobs.json was true (a non-empty string): the paused job ran."""
    path = tmp_path / "jobs.json"
    svc = CronService(path, Recorder().on_job, "UTC")
    job = svc.add("tick", "ping", every_s=60)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["jobs"][0]["enabled"] = value
    path.write_text(json.dumps(data), encoding="utf-8")
    assert [j.enabled for j in svc.list() if j.id == job.id] == [enabled]


async def test_a_job_run_by_hand_does_not_claim_it_reached_its_chat(tmp_path: Path) -> None:
    """`nanobot cron run` printed the result in the terminal and recorded "ok" over the job's
    "error: delivery failed": the one sign that its chat receives nothing was gone."""
    cli = CronService(tmp_path / "jobs.json", Recorder(reply="re: ping").on_job, "UTC")  # no delivery
    job = cli.add("ping", "ping", every_s=60, deliver_to=DeliverTo("telegram", "555"))
    assert await cli.run_now(job.id) == "re: ping"
    status = cli.get(job.id).last_status
    assert status is not None and status.startswith("ok (run by hand") and "telegram:555" in status


@pytest.mark.parametrize("change", ["remove", "switch off", "remove itself"])
async def test_a_job_stopped_while_its_turn_runs_sends_no_result(tmp_path: Path, change: str) -> None:
    """"Stop that reminder" said while the reminder's own turn ran: the job was gone, and its
    result still reached the chat a moment later."""
    release = asyncio.Event()
    rec = Recorder(reply="time for your meds")
    svc = service(tmp_path / "jobs.json", rec)
    keep = svc.add("keep", "a job that stays", every_s=3600, deliver_to=DeliverTo("telegram", "42"))
    job = svc.add("meds", "remind me of my meds", every_s=3600, deliver_to=DeliverTo("telegram", "42"))

    async def slow_turn(running: CronJob) -> str | None:
        await rec.on_job(running)
        if running.id == job.id:
            await release.wait()
        return rec.reply

    svc._on_job = slow_turn  # type: ignore[method-assign]
    run = asyncio.create_task(svc._fire(job.id))
    await rec.wait_calls(1)
    if change == "remove":
        assert svc.remove(job.id)
    elif change == "remove itself":  # "tell me when it arrives, then stop": the job's own turn removes it
        own_turn = ToolContext(channel="telegram", chat_id="42", session_key=cron_session_key(job.id))
        assert "Removed job" in await CronTool(svc).execute(own_turn, action="remove", job_id=job.id)
    else:
        svc.enable(job.id, False)
    release.set()
    await run
    await svc._fire(keep.id)
    expected = 2 if change == "remove itself" else 1  # its own last answer still goes out
    assert rec.delivered == [("telegram", "42", "time for your meds")] * expected
    after = svc.get(job.id)
    assert after is None if change != "switch off" else after.last_status.startswith("skipped: removed or switched off")


async def test_a_bad_bookkeeping_time_in_a_hand_edited_job_does_not_switch_it_off(tmp_path: Path) -> None:
    """`next_run_at: "soon"` or `created_at: "yesterday"` (times nanobot keeps for itself) were
    taken as the schedule's: the gateway disabled a good hourly job for good."""
    path = tmp_path / "jobs.json"
    every = {"kind": "every", "every_s": 3600}
    jobs = [
        {"id": "a1", "name": "tea", "message": "drink tea", "schedule": every, "next_run_at": "soon"},
        {"id": "a2", "name": "walk", "message": "go for a walk", "schedule": every, "created_at": "yesterday"},
        {"id": "a3", "name": "water", "message": "drink water", "schedule": every, "next_run_at": 12345},
    ]
    path.write_text(json.dumps({"version": 1, "jobs": jobs}))
    svc = service(path, Recorder())
    await svc.start()
    try:
        saved = {job.id: job for job in svc.list()}
    finally:
        await svc.stop()
    soon = datetime.now(UTC) + timedelta(minutes=59)
    for job in saved.values():
        assert job.enabled and job.last_status is None, job
        assert job.next_run_at is not None and datetime.fromisoformat(job.next_run_at) > soon, job
    assert datetime.fromisoformat(saved["a2"].created_at) > datetime.now(UTC) - timedelta(minutes=1)


def test_two_jobs_with_one_id_stay_two_jobs(tmp_path: Path) -> None:
    """A job block copied in jobs.json and left with its id: the gateway scheduled one, gave both
    its run times, and `cron remove` deleted both."""
    path = tmp_path / "jobs.json"
    jobs = [
        {"id": "a1", "name": "tea", "message": "drink tea", "schedule": {"kind": "every", "every_s": 3600}},
        {"id": "a1", "name": "water", "message": "drink water", "schedule": {"kind": "every", "every_s": 60}},
        {"id": "a1-2", "name": "stretch", "message": "stretch", "schedule": {"kind": "every", "every_s": 600}},
    ]
    path.write_text(json.dumps({"version": 1, "jobs": jobs}))
    loaded = CronStore(path).load()
    assert [(j.id, j.name) for j in loaded] == [("a1", "tea"), ("a1-3", "water"), ("a1-2", "stretch")]
    assert CronStore(path).load() == loaded  # the same ids at every load, until the file is written
    svc = CronService(path, Recorder().on_job, "UTC")
    assert svc.remove("a1")
    assert [(j.id, j.name) for j in CronStore(path).load()] == [("a1-3", "water"), ("a1-2", "stretch")]
