"""CronService: scheduled agent jobs kept in `workspace/cron/jobs.json`, run on time.

Adding, listing, switching on or off and removing jobs work without start() (the CLI does that
beside a running gateway, which notices the change). start() builds the timers (cron_timers.py,
which also handles runs missed while nothing was running); a timer going off runs its job here and
records the run in jobs.json (last run, status, next run; a one-shot job is then disabled). A stop
starts no more runs and lets those in flight finish within its grace (result delivered, status
recorded); a run cancelled after the grace is not recorded, so it is still due at the next start.
Running one job (its turn, its verdict, its delivery) is cron_run.py's.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.scheduler.cron_run import (
    Deliver,
    JobFailed,
    JobRefused,
    OnJob,
    run_and_deliver,
    shown_name,
)
from nanobot.scheduler.cron_store import (
    CRON_SESSION_PREFIX,
    CronJob,
    CronSchedule,
    CronStoreError,
    DeliverTo,
    cron_session_key,
    job_prompt,
    jobs_path,
    make_room,
    new_job_id,
)
from nanobot.scheduler.cron_timers import MISFIRE_GRACE_S, RELOAD_CHECK_S, CronTimers, clipped_status
from nanobot.scheduler.schedules import make_schedule, next_fire, repeats_last_run, to_iso
from nanobot.timeutil import now as tz_now
from nanobot.util.text import one_line

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

STOP_TIMEOUT_S = 5.0  # how long stop() waits for cancelled in-flight runs to unwind
RUN_SETTLE_S = 0.5  # at a stop, how long a run whose turn has ended may take to deliver and record


class CronService(CronTimers):
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
        super().__init__(
            store_path,
            timezone,
            deliver=deliver,
            misfire_grace_s=misfire_grace_s,
            reload_interval_s=reload_interval_s,
        )
        self._on_job = on_job
        self._inflight: set[asyncio.Task[Any]] = set()
        self._removed_by_own_run: set[str] = set()  # their running turn's answer still goes out

    # ------------------------------------------------------------------ management
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
            name=one_line(name) or job_id,
            message=message.strip(),
            schedule=schedule,
            deliver_to=deliver_to,
            created_at=to_iso(moment),
            created_by=created_by,
        )
        first = next_fire(job, self.tz, moment)
        job.next_run_at = to_iso(first, round_up=True) if first else None

        def append(jobs: builtins.list[CronJob]) -> None:
            make_room(jobs, deliver_to, moment)
            jobs.append(job)

        self.store.mutate(append)
        logger.info("cron: added job {}{} {}", job.id, shown_name(job), schedule.describe())
        self._resync()
        return job

    def remove(self, job_id: str, *, by_its_own_run: bool = False) -> bool:
        def drop(jobs: builtins.list[CronJob]) -> bool:
            before = len(jobs)
            jobs[:] = [j for j in jobs if j.id != job_id]
            return len(jobs) != before

        removed = self.store.mutate(drop)
        if removed and by_its_own_run:
            self._removed_by_own_run.add(job_id)
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

    # ------------------------------------------------------------------ stop and run now
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
        if not self.running:
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
        await self._shut_down_timers()

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

    def _still_wanted(self, job_id: str, scheduled: bool) -> bool:
        """Whether a run's result may still go out: not once its job was removed (or, for a run
        the schedule started, switched off) while the turn ran. An unreadable jobs.json keeps it."""
        if job_id in self._removed_by_own_run:
            self._removed_by_own_run.discard(job_id)
            return True
        try:
            job = self.get(job_id)
        except CronStoreError:
            return True
        return job is not None and (job.enabled or not scheduled)

    async def _execute(self, job: CronJob, scheduled: bool, raise_errors: bool = False) -> str | None:
        started = tz_now(self.tz)
        outcome = await run_and_deliver(job, self._on_job, self._deliver, lambda: self._still_wanted(job.id, scheduled))
        update: dict[str, Any] = {
            "last_run_at": to_iso(started),
            "last_status": clipped_status(outcome.status),
            "failure_told": outcome.failure_told,
        }
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
