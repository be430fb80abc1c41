"""Schedules of cron jobs: parsing what a user or the model asked for (a time, an interval, a
crontab line, in a time zone) into a CronSchedule, checked against the bounds APScheduler can
compute, and the run times that follow from it (next run, a run the clock going back repeats).

Times are stored as ISO-8601 with an offset (`to_iso`), due times rounded up, so a stored time is
never earlier than the real one.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nanobot.scheduler.cron_store import CronJob, CronSchedule
from nanobot.timeutil import parse_iso

if TYPE_CHECKING:  # APScheduler's triggers are imported where a schedule is parsed or run
    from apscheduler.triggers.base import BaseTrigger
    from apscheduler.triggers.cron import CronTrigger

MIN_EVERY_S = 1
# Bounds on a schedule: APScheduler computes run times as datetimes, and one beyond year 9999 in
# UTC (or an interval that reaches past it) raises OverflowError on every start of the gateway.
MAX_AT_AHEAD = timedelta(days=100 * 365 + 25)  # 100 years, leap days included
MAX_EVERY_S = 10 * 366 * 24 * 3600  # about 10 years
MAX_CRON_EXPR_CHARS = 512  # every minute, hour, day, month and weekday listed (~360) fits; 6 KB was a weapon
#: a five-field crontab that runs at all runs within this: a date on a given weekday (29 February
#: on a Monday, the day and weekday fields both restricted, one starting with *) comes back at
#: most 40 years on in the Gregorian calendar. The scheduler searches to year 9999 for a part that
#: never runs: seconds to minutes of the event loop, at every start and after every run of the job.
FIRES_WITHIN = timedelta(days=41 * 366)


# ----------------------------------------------------------------------------- time helpers


def job_zone(name: str, default: tzinfo) -> tzinfo:
    """A job's time zone: an IANA name (ValueError when unknown), or `default` when empty."""
    if not name.strip():
        return default
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Berlin' or 'UTC')"
        ) from None


def to_iso(moment: datetime, round_up: bool = False) -> str:
    """ISO-8601 with a UTC offset and whole seconds, e.g. `2025-03-01T09:00:00+01:00`.

    Due times round up, so a stored time is never earlier than the real one (which would make a
    run that has not happened yet look missed).
    """
    if moment.tzinfo is None:
        moment = moment.astimezone()
    if round_up and moment.microsecond:
        moment += timedelta(seconds=1)
    return moment.isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- schedules

_WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def _weekday_number(token: str) -> int:
    token = token.strip().lower()
    if token in _WEEKDAYS:
        return _WEEKDAYS.index(token)
    if token.isdigit() and int(token) <= 7:
        return int(token)  # 0 and 7 are both Sunday: 7 kept, for a range ending there (`0-7`)
    raise ValueError(f"bad day of week {token!r}")


def _weekday_field(field: str) -> str:
    """Standard crontab weekdays (0/7 = Sunday) as APScheduler names.

    APScheduler 3 counts 0 as Monday, so `1-5` would silently mean Tuesday to Saturday; spelling
    the days out keeps the usual crontab meaning.
    """
    if field == "*":
        return field
    days: list[int] = []
    for part in field.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"bad step in {part!r}")
        if base == "*":
            lo, hi = 0, 6
        elif "-" in base:
            first, last = base.split("-", 1)
            lo, hi = _weekday_number(first) % 7, _weekday_number(last)
            hi = 7 if hi == 0 and lo > 0 else hi  # `5-7` / `fri-sun` end on Sunday, `0-7` is every day
        else:
            lo = _weekday_number(base) % 7
            hi = 6 if step_text else lo
        if lo > hi:
            raise ValueError(f"bad day-of-week range {part!r}")
        days.extend(d % 7 for d in range(lo, hi + 1, step))
    return ",".join(_WEEKDAYS[d] for d in sorted(set(days)))


def crontab_trigger(expr: str, tz: tzinfo) -> BaseTrigger:
    """A five-field crontab (minute hour day-of-month month day-of-week) in `tz`.

    As in crontab, when both the day of the month and the day of the week are restricted, a day
    matching either one runs the job (`0 9 1 * 1`: the 1st and every Monday); a trigger given both
    would need both at once (a Monday the 1st, months away).
    """
    if len(expr) > MAX_CRON_EXPR_CHARS:
        raise ValueError(f"longer than {MAX_CRON_EXPR_CHARS} characters")
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    minute, hour, day, month, weekday = fields
    from apscheduler.triggers.combining import OrTrigger
    from apscheduler.triggers.cron import CronTrigger

    def cron(day_field: str, weekday_field: str, end: datetime | None = None) -> CronTrigger:
        return CronTrigger(
            minute=minute, hour=hour, day=day_field, month=month, day_of_week=weekday_field, timezone=tz,
            end_date=end,
        )

    now = datetime.now(tz)

    def runs(day_field: str, weekday_field: str) -> bool:  # searched no further than FIRES_WITHIN
        return cron(day_field, weekday_field, now + FIRES_WITHIN).get_next_fire_time(None, now) is not None

    weekdays = _weekday_field(weekday)
    parts = [(day, weekdays)] if day.startswith("*") or weekday.startswith("*") else [(day, "*"), ("*", weekdays)]
    # a part that never runs is left out, as crontab ignores it (`0 9 31 2 1`: Mondays)
    running = [cron(*part) for part in parts if runs(*part)]
    if not running:
        raise ValueError("it never runs (a date that does not exist, such as 30 February)")
    return running[0] if len(running) == 1 else OrTrigger(running)


def most_runs_per_hour(schedule: CronSchedule) -> int:
    """The most times a repeating schedule runs in any one hour: an interval's ceil(3600 / every_s)
    (every two hours is still once in some hour: jobs added together fire together), a crontab's
    minutes (`*/5`: 12); 0 for a one-shot job (counted by its time) and for a schedule that does
    not parse (it never runs)."""
    if schedule.kind == "every":
        every = schedule.every_s
        return math.ceil(3600 / every) if isinstance(every, int) and every > 0 else 0
    if schedule.kind != "cron" or not schedule.expr:
        return 0
    minutes: set[int] = set()
    try:
        for part in schedule.expr.split()[0].split(","):
            span, _, step = part.partition("/")
            if span == "*":
                low, high = 0, 59
            elif "-" in span:
                low, high = (int(n) for n in span.split("-", 1))
            else:
                low = int(span)
                high = 59 if step else low
            minutes.update(range(low, high + 1, int(step) if step else 1))
    except ValueError:
        return 0
    return len(minutes)


def checked_every(every_s: object) -> int:
    """A job's interval in whole seconds within MIN_EVERY_S..MAX_EVERY_S; ValueError otherwise."""
    if isinstance(every_s, bool) or not isinstance(every_s, int) or every_s < MIN_EVERY_S:
        raise ValueError(f"'every' must be a whole number of seconds >= {MIN_EVERY_S}")
    if every_s > MAX_EVERY_S:
        raise ValueError(f"'every' must be at most {MAX_EVERY_S} seconds (about 10 years)")
    return every_s


def make_schedule(
    *,
    at: str | None = None,
    every_s: int | None = None,
    expr: str | None = None,
    tz: str = "",
    default_tz: tzinfo,
    now: datetime,
) -> CronSchedule:
    """Validate exactly one of at/every_s/expr; raises ValueError with a user-facing message.

    A naive `at` is wall time in `tz` (or `default_tz`) and is stored with its offset. `at` lies at
    most MAX_AT_AHEAD ahead and `every_s` is at most MAX_EVERY_S: the scheduler could not represent
    runs beyond year 9999.
    """
    given = [
        name for name, value in (("at", at), ("every", every_s), ("cron", expr)) if value not in (None, "")
    ]
    if len(given) != 1:
        raise ValueError("give exactly one schedule: at (ISO time), every (seconds) or cron (expression)")
    zone = job_zone(tz, default_tz)
    if at:
        try:
            moment = parse_iso(at, zone)
        except ValueError:
            raise ValueError(
                f"'at' must be an ISO-8601 time such as 2025-03-01T09:00:00+01:00, got {at!r}"
            ) from None
        try:
            moment.astimezone(UTC)  # the scheduler works in UTC: the time must exist there too
        except OverflowError:
            raise ValueError(f"'at' time {at!r} is out of range") from None
        if moment <= now:
            raise ValueError(f"'at' time {to_iso(moment)} is in the past")
        if moment - now > MAX_AT_AHEAD:
            raise ValueError(f"'at' time {to_iso(moment)} is too far ahead (at most 100 years)")
        return CronSchedule(kind="at", at=to_iso(moment, round_up=True), tz=tz)
    if every_s is not None:
        return CronSchedule(kind="every", every_s=checked_every(every_s), tz=tz)
    expr = " ".join(str(expr).split())
    shown = expr if len(expr) <= 80 else expr[:60] + "…"
    try:
        trigger = crontab_trigger(expr, zone)
    except ValueError as exc:
        raise ValueError(f"invalid cron expression {shown!r}: {exc}") from None
    if trigger.get_next_fire_time(None, now) is None:  # the last run before the scheduler's end
        raise ValueError(f"cron expression {shown!r} never runs")
    return CronSchedule(kind="cron", expr=expr, tz=tz)


def build_trigger(job: CronJob, default_tz: tzinfo) -> BaseTrigger:
    """The APScheduler trigger for a job. `every` is anchored on the creation time, one interval on."""
    from apscheduler.triggers.date import DateTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    sched = job.schedule
    zone = job_zone(sched.tz, default_tz)
    if sched.kind == "at":
        return DateTrigger(run_date=parse_iso(str(sched.at), zone), timezone=zone)
    if sched.kind == "every":
        created = parse_iso(job.created_at, zone) if job.created_at else datetime.now(zone)
        # checked again: jobs.json may be edited by hand, and a negative interval had the scheduler
        # list run times backwards without end (the gateway froze, then filled its memory)
        every = checked_every(sched.every_s)
        return IntervalTrigger(seconds=every, start_date=created + timedelta(seconds=every), timezone=zone)
    unknown = f"; unknown there: {', '.join(sorted(sched.extra))}" if sched.extra else ""
    if sched.kind != "cron":
        raise ValueError(f"schedule kind {sched.kind!r} is none of at, every, cron{unknown}")
    if not isinstance(sched.expr, str) or not sched.expr.strip():
        raise ValueError(f"a cron schedule without its crontab expression in schedule.expr{unknown}")
    return crontab_trigger(sched.expr, zone)


def problem_text(exc: Exception) -> str:
    """A schedule's failure as its job's status says it."""
    return str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"


def schedule_problem(job: CronJob, default_tz: tzinfo) -> str | None:
    """Why a job's schedule cannot run (a jobs.json edited by hand: a misspelled key, a malformed
    time), None when it can: what the gateway would disable the job for, said before it does."""
    try:
        build_trigger(job, default_tz)
    except Exception as exc:  # noqa: BLE001 - any failure here is the schedule's
        return problem_text(exc)
    return None


def repeats_last_run(job: CronJob, now: datetime, default_tz: tzinfo) -> bool:
    """Whether a crontab job with fixed hours fires in the second pass of the hour an autumn clock
    change repeats after it already ran in the first (`30 2 * * *` at 02:30 CEST, then at 02:30 CET;
    `0,30 2 * * *` ran all four). crontab runs such a job once per wall time; a job whose hour field
    is `*` or a step runs in both hours, as there."""
    sched = job.schedule
    if sched.kind != "cron" or not job.last_run_at:
        return False
    hours = str(sched.expr).split()[1]
    if "*" in hours or "/" in hours:
        return False
    zone = job_zone(sched.tz, default_tz)
    last = parse_iso(job.last_run_at, zone).astimezone(zone)
    here = now.astimezone(zone)

    def wall(moment: datetime) -> datetime:
        return moment.replace(tzinfo=None, second=0, microsecond=0)

    def repeated(moment: datetime) -> bool:
        """Whether its wall time comes twice (the clock went back over it)."""
        naive = moment.replace(tzinfo=None)
        return naive.replace(tzinfo=zone, fold=0).utcoffset() != naive.replace(tzinfo=zone, fold=1).utcoffset()

    # in UTC: within one zone Python compares wall times and ignores the fold (CEST 02:30 == CET 02:30)
    here_utc, last_utc = here.astimezone(UTC), last.astimezone(UTC)
    if here_utc <= last_utc:
        return False
    if wall(here) == wall(last):
        return True
    # the second pass of the repeated hour, after a run in its first pass (within hours, not a year)
    second_pass = repeated(here) and here.fold == 1
    ran_in_first_pass = repeated(last) and last.fold == 0 and here_utc - last_utc < timedelta(hours=3)
    return second_pass and ran_in_first_pass


def next_fire(job: CronJob, default_tz: tzinfo, now: datetime) -> datetime | None:
    """The next run at or after `now`; None when a one-shot job's time has passed."""
    if job.schedule.kind == "at":
        due = parse_iso(str(job.schedule.at), default_tz)
        return due if due >= now else None
    return build_trigger(job, default_tz).get_next_fire_time(None, now)


# ----------------------------------------------------------------------------- the file
