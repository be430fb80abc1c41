"""How many runs a chat's jobs make in their busiest hour: what the cron tool's limit counts.

A steered model must not flood a chat: a hundred jobs of every two hours, or reminders for one
moment (next week or next year), fire together. Each job's next RUNS_PLACED runs within
PLACED_WITHIN (and its next one, however far ahead) are placed on one time line, and the fullest
hour of it is counted; a job whose RUNS_PLACED-th run
is within a day (more often than hourly) counts at its own busiest hour (`most_runs_per_hour`), as
if it ran with all the others. At most RUNS_PLACED trigger steps per job: the check stays cheap
with a chat's hundred jobs, and the tool runs it off the event loop.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from nanobot.scheduler.cron_store import CronJob
from nanobot.scheduler.schedules import build_trigger, job_zone, most_runs_per_hour
from nanobot.timeutil import parse_iso

RUNS_PLACED = 24
FREQUENT_WITHIN = timedelta(days=1)  # RUNS_PLACED runs within this: counted by the schedule instead
PLACED_WITHIN = timedelta(days=400)  # runs beyond this are not placed (a yearly job: its next one)
HOUR_S = 3600


def busiest_hour(jobs: list[CronJob], default_tz: tzinfo, now: datetime) -> int:
    """The most runs of `jobs` together within any one hour from `now` on."""
    frequent = 0
    moments: list[float] = []
    for job in jobs:
        runs = _next_runs(job, default_tz, now)
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


def _next_runs(job: CronJob, default_tz: tzinfo, now: datetime) -> list[float] | None:
    """The job's next RUNS_PLACED run times (POSIX seconds) within PLACED_WITHIN, its next one however
    far ahead; None when RUNS_PLACED fall within FREQUENT_WITHIN, or its schedule cannot be computed
    (it is then counted by its schedule)."""
    schedule = job.schedule
    try:
        if schedule.kind == "at":
            due = parse_iso(str(schedule.at), job_zone(schedule.tz, default_tz))
            return [due.timestamp()] if due >= now else []
        trigger = build_trigger(job, default_tz)
        runs: list[float] = []
        moment = trigger.get_next_fire_time(None, now)
        last = now + PLACED_WITHIN
        while moment is not None and len(runs) < RUNS_PLACED and (not runs or moment <= last):
            runs.append(moment.timestamp())
            moment = trigger.get_next_fire_time(moment, moment)
    except (ValueError, OverflowError):
        return None
    if len(runs) == RUNS_PLACED and runs[-1] - now.timestamp() <= FREQUENT_WITHIN.total_seconds():
        return None
    return runs
