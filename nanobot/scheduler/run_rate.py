"""How many runs a chat's jobs could make in one hour: what the cron tool's limit counts.

A steered model must not flood a chat: a hundred jobs of every two hours, or reminders for one
moment next year, fire together. The count is a bound that holds for every hour, however far
ahead: each repeating job at its busiest hour (`most_runs_per_hour`: an interval's ceil(3600 /
seconds), a crontab's minutes), as if they all ran in the same one, plus the most one-shot
reminders due within any one hour. It needs no trigger to be stepped (one add stays cheap with a
chat's hundred jobs); repeating jobs that never meet (yearly reminders on different days) are
counted as if they did.
"""

from __future__ import annotations

from datetime import tzinfo

from nanobot.scheduler.cron_store import CronJob
from nanobot.scheduler.schedules import job_zone, most_runs_per_hour
from nanobot.timeutil import parse_iso

HOUR_S = 3600


def busiest_hour(jobs: list[CronJob], default_tz: tzinfo) -> int:
    """At least as many runs as `jobs` make together within any one hour."""
    repeating = sum(most_runs_per_hour(job.schedule) for job in jobs if job.schedule.kind != "at")
    moments: list[float] = []
    for job in jobs:
        if job.schedule.kind == "at":
            try:
                moments.append(parse_iso(str(job.schedule.at), job_zone(job.schedule.tz, default_tz)).timestamp())
            except (ValueError, OverflowError):
                continue  # it never runs
    moments.sort()
    most = start = 0
    for end, moment in enumerate(moments):
        while moment - moments[start] >= HOUR_S:
            start += 1
        most = max(most, end - start + 1)
    return repeating + most
