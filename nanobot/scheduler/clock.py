"""Steps of the wall clock, which timers built from wall-clock times do not notice by themselves.

APScheduler arms a monotonic timer for a job's next run, computed from the wall clock at that
moment. A wall clock stepped forward (NTP syncing a box without an RTC after boot, a resume from
suspend) leaves the timer asleep past every run that fell due meanwhile; one stepped back leaves an
interval job's next run as far in the future as the step. `ClockWatch` sees a step as a change of
the wall clock's offset from the monotonic clock between two looks.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, tzinfo

from nanobot.scheduler.cron_store import CronJob
from nanobot.scheduler.schedules import MIN_EVERY_S, next_fire
from nanobot.timeutil import now as tz_now

CLOCK_STEP_S = 2.0  # a wall-clock jump larger than this between two looks is a step


class ClockWatch:
    def __init__(self) -> None:
        self._offset = self._wall_minus_monotonic()

    @staticmethod
    def _wall_minus_monotonic() -> float:
        return tz_now(UTC).timestamp() - time.monotonic()

    def step_s(self) -> float | None:
        """How far the wall clock jumped since the last look (seconds, negative: back), or None."""
        offset = self._wall_minus_monotonic()
        moved_s = offset - self._offset
        self._offset = offset
        return moved_s if abs(moved_s) > CLOCK_STEP_S else None


def interval_run_after_step_back(
    job: CronJob, armed: datetime, moment: datetime, tz: tzinfo
) -> datetime | None:
    """The next run of an `every` job whose timer is `armed` for a run that a clock stepped back has
    put more than one interval away: the interval's next run from `moment` on the creation time's
    grid (or one interval from now, when the clock went back past the job's creation). None when
    the armed run stands: other kinds name wall-clock times, and a small step changes nothing."""
    if job.schedule.kind != "every":
        return None
    interval = timedelta(seconds=int(job.schedule.every_s or MIN_EVERY_S))
    if armed - moment <= interval:
        return None
    on_grid = next_fire(job, tz, moment)
    return min(on_grid, moment + interval) if on_grid is not None else moment + interval
