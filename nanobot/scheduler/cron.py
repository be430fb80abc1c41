"""CronService: scheduled agent jobs kept in `workspace/cron/jobs.json`, timed by APScheduler.

jobs.json is the single source of truth (see cron_store.py); APScheduler only holds in-memory
timers built from it. A running gateway notices jobs that the CLI adds or removes by polling the
file's signature every `reload_interval_s`.

Runs missed while nothing was running: each job records `next_run_at`. On start (and when a job is
first seen), a `next_run_at` in the past that is at most MISFIRE_GRACE_S old fires once right away;
an older one is skipped and recorded as `missed` (a one-shot `at` job is then disabled, and its chat
is told it was missed while nanobot was offline). While
running, APScheduler applies the same grace and coalesces a backlog into one run.

A job whose schedule cannot be turned into a timer (a hand-edited jobs.json) is disabled with the
reason in its `last_status`; the other jobs are scheduled all the same. A stop starts no more runs
and lets those in flight finish within its grace (result delivered, status recorded); a run
cancelled after the grace is not recorded, so it is still due at the next start. Running one job
(its turn, its verdict, its delivery) is cron_run.py's.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Callable, Collection
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from nanobot.scheduler.clock import ClockWatch, interval_run_after_step_back
from nanobot.scheduler.cron_run import (
    Deliver,
    JobFailed,
    JobRefused,
    OnJob,
    run_and_deliver,
    send_notice,
    shown_name,
)
from nanobot.scheduler.cron_store import (
    CRON_SESSION_PREFIX,
    MAX_JOBS,
    MAX_STATUS_CHARS,
    CronJob,
    CronSchedule,
    CronStore,
    CronStoreError,
    DeliverTo,
    build_trigger,
    cron_session_key,
    job_prompt,
    jobs_path,
    make_schedule,
    new_job_id,
    next_fire,
    repeats_last_run,
    to_iso,
)
from nanobot.timeutil import now as tz_now
from nanobot.timeutil import parse_iso, resolve_tz
from nanobot.util.text import truncate_head

if TYPE_CHECKING:  # APScheduler is imported when the scheduler starts, not with the agent
    from apscheduler.events import JobExecutionEvent
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

__all__ = [
    "CRON_SESSION_PREFIX",
    "CronJob",
    "CronSchedule",
    "CronService",
    "CronStoreError",
    "DeliverTo",
    "JobFailed",
    "JobRefused",
    "MISFIRE_GRACE_S",
    "cron_session_key",
    "job_prompt",
    "jobs_path",
]

MISFIRE_GRACE_S = 300  # a run missed by at most this long still happens once, late
RELOAD_CHECK_S = 2.0  # how often a running service looks for changes made by other processes
STOP_TIMEOUT_S = 5.0  # how long stop() waits for cancelled in-flight runs to unwind
RUN_SETTLE_S = 0.5  # at a stop, how long a run whose turn has ended may take to deliver and record



def _status(text: str) -> str:
    return truncate_head(text, MAX_STATUS_CHARS)


class CronService:
    """Add/list/remove jobs (usable without start(), e.g. by the CLI) and run them on time."""

    def __init__(
        self,
        store_path: Path,
        on_job: OnJob,
        timezone: str = "",
        *,
        deliver: Deliver | None = None,
        misfire_grace_s: int = MISFIRE_GRACE_S,
        reload_interval_s: float = RELOAD_CHECK_S,
    ) -> None:
        self.store = CronStore(store_path)
        self.tz = resolve_tz(timezone)
        self._on_job = on_job
        self._deliver = deliver
        self.misfire_grace_s = misfire_grace_s
        self.reload_interval_s = reload_interval_s
        self._scheduler: AsyncIOScheduler | None = None
        self._scheduled: dict[str, CronSchedule] = {}  # job id -> the schedule its timer was built from
        self._seen_sig: tuple[int, int, int] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[Any]] = set()
        self._notices: set[asyncio.Task[None]] = set()  # "missed while offline" messages being sent
        self._clock: ClockWatch | None = None  # looks for wall-clock steps while running

    # ------------------------------------------------------------------ management
    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def list(self) -> builtins.list[CronJob]:
        return self.store.load()

    def get(self, job_id: str) -> CronJob | None:
        return next((j for j in self.store.load() if j.id == job_id), None)

    def add(
        self,
        name: str,
        message: str,
        *,
        at: str | None = None,
        every_s: int | None = None,
        expr: str | None = None,
        tz: str = "",
        deliver_to: DeliverTo | None = None,
        created_by: str = "",
    ) -> CronJob:
        """Validate and save a job; raises ValueError with a user-facing reason."""
        if not message.strip():
            raise ValueError("the job needs a message (what the agent should do)")
        moment = tz_now(self.tz)
        schedule = make_schedule(at=at, every_s=every_s, expr=expr, tz=tz, default_tz=self.tz, now=moment)
        job_id = new_job_id()
        job = CronJob(
            id=job_id,
            name=name.strip() or job_id,
            message=message.strip(),
            schedule=schedule,
            deliver_to=deliver_to,
            created_at=to_iso(moment),
            created_by=created_by,
        )
        first = next_fire(job, self.tz, moment)
        job.next_run_at = to_iso(first, round_up=True) if first else None

        def append(jobs: builtins.list[CronJob]) -> None:
            if len(jobs) >= MAX_JOBS:
                raise ValueError(f"too many jobs ({MAX_JOBS}); remove some first")
            jobs.append(job)

        self.store.mutate(append)
        logger.info("cron: added job {}{} {}", job.id, shown_name(job), schedule.describe())
        self._resync()
        return job

    def remove(self, job_id: str) -> bool:
        def drop(jobs: builtins.list[CronJob]) -> bool:
            before = len(jobs)
            jobs[:] = [j for j in jobs if j.id != job_id]
            return len(jobs) != before

        removed = self.store.mutate(drop)
        if removed:
            logger.info("cron: removed job {}", job_id)
            self._resync()
        return removed

    def enable(self, job_id: str, enabled: bool = True) -> CronJob | None:
        """Switch a job on or off; re-enabling recomputes its next run from now."""
        moment = tz_now(self.tz)

        def toggle(jobs: builtins.list[CronJob]) -> CronJob | None:
            for job in jobs:
                if job.id == job_id:
                    job.enabled = enabled
                    nxt = next_fire(job, self.tz, moment) if enabled else None
                    job.next_run_at = to_iso(nxt, round_up=True) if nxt else None
                    return job
            return None

        job = self.store.mutate(toggle)
        if job is not None:
            self._resync()
        return job

    # ------------------------------------------------------------------ lifecycle
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
        (stop() lets them finish or cancels them)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        from apscheduler.schedulers.base import STATE_RUNNING

        if self._scheduler is not None and self._scheduler.state == STATE_RUNNING:
            self._scheduler.pause()

    async def stop(
        self,
        grace_s: float = 0.0,
        *,
        turns: Callable[[], Collection[asyncio.Future[Any]]] | None = None,
        unwind_s: float = STOP_TIMEOUT_S,
    ) -> None:
        """Stop the timers, let runs in flight finish within `grace_s` (their results delivered and
        recorded), then cancel the rest: a cancelled run is not recorded, so it is still due and
        runs again at the next start.

        `turns` lists the agent loop's turns in flight when the loop no longer takes messages (a
        gateway's shutdown): once none is left, no run still waiting for its reply can get one, so
        the wait ends early instead of lasting the whole grace.
        """
        if self._scheduler is None:
            return
        await self.stop_timers()
        await self._finish_runs(grace_s, turns)
        left = list(self._inflight)
        for task in left:
            task.cancel()
        if left:
            logger.warning("cron: cancelled {} run(s) still going at the stop; they run again", len(left))
            await asyncio.wait(left, timeout=unwind_s)
        # APScheduler's shutdown cancels its runs still in flight: only after they had their chance
        self._scheduler.shutdown(wait=False)
        self._scheduler = None
        await asyncio.sleep(0)  # shutdown is queued on the loop; let it run before we return
        self._scheduled.clear()

    async def _finish_runs(
        self, grace_s: float, turns: Callable[[], Collection[asyncio.Future[Any]]] | None
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._inflight and (left_s := deadline - loop.time()) > 0:
            if turns is None:
                await asyncio.wait(list(self._inflight), timeout=left_s)
                return
            running = list(turns())
            if not running:
                # A run that got its reply only delivers and records it now; the others wait for a
                # message the stopped loop never takes.
                await asyncio.wait(list(self._inflight), timeout=min(left_s, RUN_SETTLE_S))
                return
            await asyncio.wait(
                [*self._inflight, *running], timeout=left_s, return_when=asyncio.FIRST_COMPLETED
            )

    async def run_now(self, job_id: str, raise_errors: bool = False) -> str | None:
        """Run a job once right now (it keeps its schedule); raises KeyError for an unknown id.

        A failure is recorded in the job either way; `raise_errors` also re-raises it (for the CLI).
        """
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return await self._execute(job, scheduled=False, raise_errors=raise_errors)

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
            reason = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            logger.error("cron: job {} has an unusable schedule and is disabled: {}", job.id, reason)
            return {"enabled": False, "next_run_at": None, "last_status": _status(f"error: {reason}")}

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
        trigger = build_trigger(job, self.tz)
        run_time = next_fire(job, self.tz, moment)
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
                update["last_status"] = _status(
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

        def change(jobs: builtins.list[CronJob]) -> None:
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
        """APScheduler skipped a run (e.g. the machine slept longer than the grace time)."""
        when = to_iso(event.scheduled_run_time)
        logger.warning("cron: job {} missed its run at {}", event.job_id, when)
        self._apply({event.job_id: {"last_status": f"missed: due {when}"}})

    # ------------------------------------------------------------------ runs
    async def _fire(self, job_id: str) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._inflight.add(task)
        try:
            job = self.get(job_id)
            if job is None or not job.enabled:
                self._unschedule(job_id)
                return
            if repeats_last_run(job, tz_now(self.tz), self.tz):
                logger.info("cron: job {} already ran at this time before the clock went back", job.id)
                self._apply({job.id: {"next_run_at": self._next_run_at(job.id)}})
                return
            await self._execute(job, scheduled=True)
        except CronStoreError as exc:
            logger.error("cron: cannot run job {}: {}", job_id, exc)
        finally:
            if task is not None:
                self._inflight.discard(task)

    def _next_run_at(self, job_id: str) -> str | None:
        timer = self._scheduler.get_job(job_id) if self._scheduler is not None else None
        nxt = timer.next_run_time if timer is not None else None
        return to_iso(nxt, round_up=True) if nxt else None

    async def _execute(self, job: CronJob, scheduled: bool, raise_errors: bool = False) -> str | None:
        started = tz_now(self.tz)
        outcome = await run_and_deliver(job, self._on_job, self._deliver)
        update: dict[str, Any] = {"last_run_at": to_iso(started), "last_status": _status(outcome.status)}
        if scheduled:
            if job.schedule.kind == "at":
                update.update(enabled=False, next_run_at=None)
            else:
                update["next_run_at"] = self._next_run_at(job.id)
        self._apply({job.id: update})
        if scheduled and job.schedule.kind == "at":
            self._scheduled.pop(job.id, None)
        if outcome.error is not None and raise_errors:
            raise outcome.error
        return outcome.result
