"""How many runs a chat's jobs make in their busiest hour: what the cron tool's limit counts.

A steered model must not flood a chat: a hundred jobs of every two hours, or reminders for one
moment, fire together. Each job's runs over the next HORIZON are placed on one time line and the
fullest hour of it is counted; a job running more than FREQUENT_RUNS times in the horizon counts
at its own busiest hour (`most_runs_per_hour`) as if it coincided with everything else.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from nanobot.scheduler.cron_store import CronJob
from nanobot.scheduler.schedules import build_trigger, job_zone, most_runs_per_hour
from nanobot.timeutil import parse_iso

HORIZON = timedelta(days=8)  # a week and a day: daily and weekly patterns show whole
FREQUENT_RUNS = 200  # more runs than this within the horizon: counted by the schedule's busiest hour
HOUR_S = 3600


def busiest_hour(jobs: list[CronJob], default_tz: tzinfo, now: datetime) -> int:
    """The most runs of `jobs` together within any one hour from `now` on."""
    frequent = 0
    moments: list[float] = []
    for job in jobs:
        runs = _runs_within(job, default_tz, now, now + HORIZON)
        if runs is None:
            frequent += most_runs_per_hour(job.schedule)
        else:
            moments.extend(runs)
    moments.sort()
    most = start = 0
    for end, moment in enumerate(moments):
        while moment - moments[start] >= HOUR_S:
            start += 1
        most = max(most, end - start + 1)
    return frequent + most


def _runs_within(job: CronJob, default_tz: tzinfo, now: datetime, end: datetime) -> list[float] | None:
    """The job's run times (POSIX seconds) from `now` to `end`; None when there are more than
    FREQUENT_RUNS, or its schedule cannot be computed (it is then counted by its schedule)."""
    schedule = job.schedule
    try:
        if schedule.kind == "at":
            due = parse_iso(str(schedule.at), job_zone(schedule.tz, default_tz))
            return [due.timestamp()] if now <= due <= end else []
        trigger = build_trigger(job, default_tz)
        runs: list[float] = []
        moment = trigger.get_next_fire_time(None, now)
        while moment is not None and moment <= end:
            if len(runs) == FREQUENT_RUNS:
                return None
            runs.append(moment.timestamp())
            moment = trigger.get_next_fire_time(moment, moment)
    except (ValueError, OverflowError):
        return None
    return runs
