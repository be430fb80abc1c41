"""The timers of the cron jobs: APScheduler timers built from `workspace/cron/jobs.json`.

jobs.json is the single source of truth (see cron_store.py); APScheduler only holds in-memory
timers built from it. A running service notices jobs that another process (the CLI) adds or
removes by polling the file's signature every `reload_interval_s`, and looks for steps of the
wall clock at the same pace (clock.py).

Runs missed while nothing was running: each job records `next_run_at`. On start (and when a job is
first seen), a `next_run_at` in the past that is at most MISFIRE_GRACE_S old fires once right away;
an older one is skipped and recorded as `missed` (a one-shot `at` job is then disabled, and its chat
is told it was missed while nanobot was offline). While running, APScheduler applies the same grace
and coalesces a backlog into one run.

A job whose schedule cannot be turned into a timer (a hand-edited jobs.json) is disabled with the
reason in its `last_status`; the other jobs are scheduled all the same. What a timer does when it
goes off (`_fire`) is the subclass's: CronService (cron.py) runs the job.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.scheduler.clock import ClockWatch, interval_run_after_step_back
from nanobot.scheduler.cron_run import Deliver, send_notice
from nanobot.scheduler.cron_store import MAX_STATUS_CHARS, CronJob, CronSchedule, CronStore, CronStoreError
from nanobot.scheduler.schedules import build_trigger, next_fire, problem_text, to_iso
from nanobot.timeutil import now as tz_now
from nanobot.timeutil import parse_iso, resolve_tz
from nanobot.util.text import truncate_head

if TYPE_CHECKING:  # APScheduler is imported when the scheduler starts, not with the agent
    from apscheduler.events import JobExecutionEvent
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

MISFIRE_GRACE_S = 300  # a run missed by at most this long still happens once, late
RELOAD_CHECK_S = 2.0  # how often a running service looks for changes made by other processes


def clipped_status(text: str) -> str:
    """A job's `last_status` as jobs.json keeps it: at most MAX_STATUS_CHARS, the end kept."""
    return truncate_head(text, MAX_STATUS_CHARS)


class CronTimers(ABC):
    """One timer per enabled job of jobs.json, kept in step with the file while started."""

    def __init__(
        self,
        store_path: Path,
        timezone: str = "",
        *,
        deliver: Deliver | None = None,
        misfire_grace_s: int = MISFIRE_GRACE_S,
        reload_interval_s: float = RELOAD_CHECK_S,
    ) -> None:
        self.store = CronStore(store_path)
        self.tz = resolve_tz(timezone)
        self._deliver = deliver
        self.misfire_grace_s = misfire_grace_s
        self.reload_interval_s = reload_interval_s
        self._scheduler: AsyncIOScheduler | None = None
        self._scheduled: dict[str, CronSchedule] = {}  # job id -> the schedule its timer was built from
        self._seen_sig: tuple[int, int, int] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._notices: set[asyncio.Task[None]] = set()  # "missed while offline" messages being sent
        self._clock: ClockWatch | None = None  # looks for wall-clock steps while running

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    @abstractmethod
    async def _fire(self, job_id: str) -> None:
        """A job's timer went off."""

    # ------------------------------------------------------------------ start and stop
    async def start(self) -> None:
        if self._scheduler is not None:
            return
        from apscheduler.events import EVENT_JOB_MISSED
        from apscheduler.schedulers.asyncio import AsyncIOScheduler

        self._scheduler = AsyncIOScheduler(
            timezone=self.tz,
            job_defaults={"misfire_grace_time": self.misfire_grace_s, "coalesce": True, "max_instances": 1},
        )
        self._scheduler.add_listener(self._on_missed, EVENT_JOB_MISSED)
        self._scheduler.start()
        try:
            self._sync()
        except CronStoreError as exc:
            logger.error("cron: {}; no jobs scheduled until the file is fixed", exc)
        self._watcher = asyncio.create_task(self._watch(), name="cron-watch")
        logger.info("cron: started with {} scheduled job(s)", len(self._scheduled))

    async def stop_timers(self) -> None:
        """Start no more runs: stop watching jobs.json and pause the timers. Runs in flight go on
        (CronService.stop() lets them finish or cancels them)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        from apscheduler.schedulers.base import STATE_RUNNING

        if self._scheduler is not None and self._scheduler.state == STATE_RUNNING:
            self._scheduler.pause()

    async def _shut_down_timers(self) -> None:
        """Drop the scheduler and every timer (start() builds them anew); APScheduler cancels the
        runs it still has in flight."""
        assert self._scheduler is not None
        self._scheduler.shutdown(wait=False)
        self._scheduler = None
        await asyncio.sleep(0)  # shutdown is queued on the loop; let it run before we return
        self._scheduled.clear()

    # ------------------------------------------------------------------ timers
    def _resync(self) -> None:
        if self._scheduler is not None:
            self._sync()

    def _sync(self) -> None:
        """Make the timers match jobs.json: drop removed/disabled/changed jobs, schedule new ones."""
        assert self._scheduler is not None
        self._seen_sig = self.store.signature()
        jobs = self.store.load()
        moment = tz_now(self.tz)
        wanted = {j.id: j for j in jobs if j.enabled}
        changed: set[str] = set()
        for job_id, schedule in list(self._scheduled.items()):
            job = wanted.get(job_id)
            if job is None or job.schedule != schedule:
                self._unschedule(job_id)
                if job is not None:
                    changed.add(job_id)
        updates: dict[str, dict[str, Any]] = {}
        for job in wanted.values():
            if job.id not in self._scheduled:
                update = self._schedule(job, moment, catch_up_allowed=job.id not in changed)
                if update:
                    updates[job.id] = update
        if updates:
            self._apply(updates)

    def _schedule(self, job: CronJob, moment: datetime, catch_up_allowed: bool) -> dict[str, Any]:
        """Add a timer for `job`; returns the fields of the job to update on disk.

        A job that cannot be scheduled (a hand-edited jobs.json: a malformed time, one beyond what
        the scheduler can compute) is disabled with the reason in its status: it must not stop the
        other jobs from being scheduled, nor the gateway from starting.
        """
        try:
            return self._add_timer(job, moment, catch_up_allowed)
        except Exception as exc:  # noqa: BLE001 - any failure here is this one job's
            self._unschedule(job.id)
            reason = problem_text(exc)
            logger.error("cron: job {} has an unusable schedule and is disabled: {}", job.id, reason)
            return {"enabled": False, "next_run_at": None, "last_status": clipped_status(f"error: {reason}")}

    def _tell_missed(self, job: CronJob, due: datetime) -> None:
        """A one-shot job skipped as too late (nothing ran at its time): its chat is told, instead
        of a reminder that silently never comes. A repeating job just runs at its next time."""
        if job.deliver_to is None or self._deliver is None:
            return
        text = f'Missed while I was offline: "{job.name}" was due {due.strftime("%Y-%m-%d %H:%M %Z")}.'
        notice = asyncio.get_running_loop().create_task(send_notice(job, self._deliver, text))
        self._notices.add(notice)  # a reference, or the task may be collected before it runs
        notice.add_done_callback(self._notices.discard)

    def _add_timer(self, job: CronJob, moment: datetime, catch_up_allowed: bool) -> dict[str, Any]:
        assert self._scheduler is not None
        update: dict[str, Any] = {}
        due_text = job.next_run_at or (job.schedule.at if job.schedule.kind == "at" else None)
        due = parse_iso(due_text, self.tz) if due_text else None
        if job.schedule.kind == "every" and not job.created_at:
            # a job written into jobs.json by hand: its interval counts from when it was first seen,
            # kept, or every start would count it afresh (a daily job never ran on a box restarted daily)
            job.created_at = update["created_at"] = to_iso(moment)
        trigger = build_trigger(job, self.tz)
        run_time = next_fire(job, self.tz, moment)
        if run_time is not None:  # a clock stepped back while nothing ran: an interval keeps its pace
            run_time = interval_run_after_step_back(job, run_time, moment, self.tz) or run_time
        if due is not None and due < moment and catch_up_allowed:
            late_s = (moment - due).total_seconds()
            if late_s <= self.misfire_grace_s:
                logger.info(
                    "cron: job {} missed its run at {} by {:.0f}s; running it now", job.id, due_text, late_s
                )
                run_time = moment
            else:
                logger.warning(
                    "cron: job {} missed its run at {} by {:.0f}s; skipped", job.id, due_text, late_s
                )
                update["last_status"] = clipped_status(
                    f"missed: due {due_text}, {late_s:.0f}s late (grace {self.misfire_grace_s}s)"
                )
                if job.schedule.kind == "at":
                    self._tell_missed(job, due)
        if run_time is None:  # a one-shot job whose time has passed
            update.update(enabled=False, next_run_at=None)
            return update
        self._scheduler.add_job(
            self._fire,
            trigger=trigger,
            args=[job.id],
            id=job.id,
            name=job.id,  # APScheduler logs it; the name is the user's text
            next_run_time=run_time,
            replace_existing=True,
        )
        self._scheduled[job.id] = job.schedule
        if job.next_run_at != to_iso(run_time, round_up=True):
            update["next_run_at"] = to_iso(run_time, round_up=True)
        return update

    def _unschedule(self, job_id: str) -> None:
        self._scheduled.pop(job_id, None)
        if self._scheduler is not None:
            from apscheduler.jobstores.base import JobLookupError

            with contextlib.suppress(JobLookupError):  # a one-shot timer removes itself after firing
                self._scheduler.remove_job(job_id)

    def _apply(self, updates: dict[str, dict[str, Any]]) -> None:
        """Write field updates for jobs that still exist; others' changes in the file are kept."""

        def change(jobs: list[CronJob]) -> None:
            for job in jobs:
                for key, value in updates.get(job.id, {}).items():
                    setattr(job, key, value)

        try:
            self.store.mutate(change)
        except CronStoreError as exc:
            logger.error("cron: cannot record job state: {}", exc)

    def _check_clock(self) -> None:
        """A step of the wall clock (see clock.py): interval jobs follow one back, and the
        scheduler looks again now for runs that fell due."""
        moved_s = self._clock.step_s() if self._clock is not None else None
        if moved_s is None or self._scheduler is None:
            return
        logger.warning("cron: the system clock moved by {:+.0f}s; checking for due jobs", moved_s)
        if moved_s < 0:
            self._rearm_interval_jobs()
        self._scheduler.wakeup()

    def _rearm_interval_jobs(self) -> None:
        assert self._scheduler is not None
        moment = tz_now(self.tz)
        updates: dict[str, dict[str, Any]] = {}
        for job in self.store.load():
            timer = self._scheduler.get_job(job.id) if job.id in self._scheduled else None
            if timer is None or timer.next_run_time is None:
                continue
            run_time = interval_run_after_step_back(job, timer.next_run_time, moment, self.tz)
            if run_time is not None:
                self._scheduler.modify_job(job.id, next_run_time=run_time)
                logger.info("cron: job {} moved to {} after the clock went back", job.id, to_iso(run_time))
                updates[job.id] = {"next_run_at": to_iso(run_time, round_up=True)}
        if updates:
            self._apply(updates)

    async def _watch(self) -> None:
        self._clock = ClockWatch()
        while True:
            await asyncio.sleep(self.reload_interval_s)
            self._check_clock()
            try:
                if self.store.signature() != self._seen_sig:
                    logger.debug("cron: jobs.json changed on disk; reloading")
                    self._sync()
            except CronStoreError as exc:
                logger.error("cron: {}", exc)
            except Exception as exc:  # noqa: BLE001 - the watcher must outlive one bad reload
                logger.opt(exception=exc).error("cron: reload failed")

    def _on_missed(self, event: JobExecutionEvent) -> None:
        """APScheduler skipped a run (the machine slept, or the clock stepped forward, past the grace
        time): recorded as at a start — a one-shot job is disabled and its chat told at once, a
        repeating one's `next_run_at` follows its timer."""
        when = to_iso(event.scheduled_run_time)
        logger.warning("cron: job {} missed its run at {}", event.job_id, when)
        update: dict[str, Any] = {"last_status": clipped_status(f"missed: due {when}")}
        try:
            job = next((j for j in self.store.load() if j.id == event.job_id), None)
        except CronStoreError as exc:
            logger.error("cron: {}", exc)
            return
        if job is not None and job.schedule.kind == "at":
            self._unschedule(job.id)
            update.update(enabled=False, next_run_at=None)
            self._tell_missed(job, event.scheduled_run_time)
        else:
            update["next_run_at"] = self._next_run_at(event.job_id)
        self._apply({event.job_id: update})

    def _next_run_at(self, job_id: str) -> str | None:
        timer = self._scheduler.get_job(job_id) if self._scheduler is not None else None
        nxt = timer.next_run_time if timer is not None else None
        return to_iso(nxt, round_up=True) if nxt else None

