"""Cron jobs on disk: the CronJob model and `cron/jobs.json` (atomic, locked); schedules are parsed
in schedules.py. Fired one-shot reminders stay listed FINISHED_KEPT, then make room for new jobs.

The file is owned by CronService; the gateway and a one-shot CLI can both hold a service on the
same file. Every change is a read-modify-write under an exclusive `fcntl` lock on a side file, and
the new content replaces the old one atomically (temp file + `os.replace`), so readers never see a
half-written file and two writers never lose each other's jobs.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from loguru import logger

from nanobot.config.paths import CRON_DIR
from nanobot.timeutil import parse_iso_or_none
from nanobot.util.fs import atomic_write, file_lock

if TYPE_CHECKING:  # APScheduler's triggers are imported where a schedule is parsed or run
    pass

FILE_FORMAT = 1
MAX_JOBS = 500  # a runaway agent must not grow jobs.json without bound
MAX_JOBS_PER_CHAT = 100  # nor one chat's model use up everyone's room
FINISHED_KEPT = timedelta(days=7)  # a reminder that has fired stays listed this long, then goes
MAX_STATUS_CHARS = 300
CRON_SESSION_PREFIX = "cron:"

ScheduleKind = Literal["at", "every", "cron"]
T = TypeVar("T")


class CronStoreError(Exception):
    """jobs.json cannot be read or written (e.g. invalid JSON); it is never overwritten then."""


@dataclass
class CronSchedule:
    """When a job runs: once `at` a moment, `every` N seconds, or on a `cron` expression in `tz`."""

    kind: ScheduleKind
    at: str | None = None  # ISO-8601 with offset
    every_s: int | None = None
    expr: str | None = None  # five-field crontab: minute hour day month weekday
    tz: str = ""  # empty: the service's time zone
    # keys nanobot does not know (a hand-edited "cron" for "expr"), kept on rewrite: adding another
    # job rewrote the file without them, and the user's expression was gone
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "at":
            return f"at {self.at}"
        if self.kind == "every":
            return f"every {self.every_s}s"
        shown = f"'{self.expr}'" if self.expr else "(no expression)"
        return f"cron {shown}" + (f" ({self.tz})" if self.tz else "")


_SCHEDULE_KEYS = frozenset(f for f in CronSchedule.__dataclass_fields__ if f != "extra")


@dataclass
class DeliverTo:
    """The chat that receives a job's result (the chat that created it)."""

    channel: str
    chat_id: str


@dataclass
class CronJob:
    id: str
    name: str
    message: str
    schedule: CronSchedule
    deliver_to: DeliverTo | None = None
    enabled: bool = True
    created_at: str = ""
    created_by: str = ""  # the sender whose chat asked for it (the cron tool); "" for the owner's CLI
    last_run_at: str | None = None
    last_status: str | None = None  # "ok", "error: ...", "missed: ..."
    next_run_at: str | None = None
    # the chat was told of the failure its last run ended in (told once, not at every failing run)
    failure_told: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept on rewrite

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        schedule = data["schedule"]
        data["schedule"] = {**schedule.pop("extra"), **schedule}
        return {**extra, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CronJob:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        sched = data.get("schedule") or {}
        target = data.get("deliver_to")
        return cls(
            id=str(data["id"]),
            name=str(data.get("name") or data["id"]),
            message=str(data.get("message") or ""),
            schedule=CronSchedule(
                kind=sched.get("kind", "every"),
                at=sched.get("at"),
                every_s=sched.get("every_s"),
                expr=sched.get("expr"),
                tz=sched.get("tz") or "",
                extra={k: v for k, v in sched.items() if k not in _SCHEDULE_KEYS},
            ),
            deliver_to=DeliverTo(str(target["channel"]), str(target["chat_id"])) if target else None,
            enabled=_switch(data.get("enabled", True)),
            created_at=_moment(data, "created_at") or "",
            created_by=str(data.get("created_by") or ""),
            last_run_at=_moment(data, "last_run_at"),
            last_status=data.get("last_status"),
            next_run_at=_moment(data, "next_run_at"),
            failure_told=data.get("failure_told") is True,
            extra={k: v for k, v in data.items() if k not in known},
        )


def _moment(data: dict[str, Any], key: str) -> str | None:
    """A time nanobot keeps for itself (`next_run_at`, `created_at`, `last_run_at`); one edited into
    something else ("soon", 12345) is left out and worked out again: taken as the schedule's, it had
    the gateway switch a good job off for good."""
    value = data.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str) and parse_iso_or_none(value) is not None:
        return value
    logger.warning("cron: job {}: {} {!r} is not a time; it is worked out again", data.get("id"), key, value)
    return None


def with_unique_ids(jobs: list[CronJob]) -> list[CronJob]:
    """A job whose id an earlier one has (a block copied in jobs.json) gets `<id>-2` (-3, ...): with
    one id both shared their run times, one never ran, and `cron remove` deleted both."""
    ids = {job.id for job in jobs}
    seen: set[str] = set()
    for job in jobs:
        if job.id in seen:
            new_id = next(f"{job.id}-{n}" for n in itertools.count(2) if f"{job.id}-{n}" not in ids)
            logger.warning("cron: two jobs have the id {}; the later one ({!r}) is {} now", job.id, job.name, new_id)
            ids.add(new_id)
            job.id = new_id
        seen.add(job.id)
    return jobs


def finished(job: CronJob) -> bool:
    """A one-shot job that has run, or was missed while nothing ran (switched off then, for good)."""
    missed = (job.last_status or "").startswith("missed")
    return job.schedule.kind == "at" and not job.enabled and (bool(job.last_run_at) or missed)


def make_room(jobs: list[CronJob], chat: DeliverTo | None, now: datetime) -> None:
    """Before a job is added: reminders that fired over FINISHED_KEPT ago go, and at the limit the
    oldest fired ones too (500 fired reminders, kept switched off, once refused every chat a new
    one). Raises ValueError when the jobs still fill jobs.json, or the chat's share of it."""
    def stale(job: CronJob) -> bool:
        ran = parse_iso_or_none(job.last_run_at or job.schedule.at)  # a missed one: when it was due
        return finished(job) and (ran is None or now - ran > FINISHED_KEPT)

    jobs[:] = [j for j in jobs if not stale(j)]
    done = sorted((j for j in jobs if finished(j)), key=lambda j: j.last_run_at or "")
    while len(jobs) >= MAX_JOBS and done:
        jobs.remove(done.pop(0))
    if len(jobs) >= MAX_JOBS:
        raise ValueError(f"too many jobs ({MAX_JOBS}); remove some first")
    same_chat = [j for j in jobs if j.deliver_to == chat and not finished(j)]
    if chat is not None and len(same_chat) >= MAX_JOBS_PER_CHAT:
        raise ValueError(f"this chat has {MAX_JOBS_PER_CHAT} jobs already; remove some first")


def _switch(value: Any) -> bool:
    """A hand-edited `enabled`: JSON true/false, or the words for them; anything else is off (the
    string "false" was true, and a job paused by hand went on running)."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
        logger.warning("cron: a job's enabled value {!r} is not true or false: the job is off", value)
    return word in ("true", "yes", "on", "1")


def new_job_id() -> str:
    return uuid.uuid4().hex[:10]


def jobs_path(workspace: Path) -> Path:
    """Where a workspace keeps its jobs."""
    return workspace / CRON_DIR / "jobs.json"


def cron_session_key(job_id: str) -> str:
    """The session a job's runs use: its own, so a job never pollutes the chat's history."""
    return f"{CRON_SESSION_PREFIX}{job_id}"


def job_prompt(job: CronJob) -> str:
    """The user message the agent receives when a job runs."""
    return (
        f"[Scheduled job '{job.name}' ({job.schedule.describe()}) is due now. Carry it out; "
        f"your reply is delivered to the chat that scheduled it.]\n\n{job.message}"
    )


class CronStore:
    """jobs.json: `{"version": 1, "jobs": [...]}`, replaced atomically under an fcntl lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_path = path.with_name(f".{path.name}.lock")

    def signature(self) -> tuple[int, int, int] | None:
        """(inode, mtime_ns, size): changes on every replacement, so a poller notices other writers."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self) -> list[CronJob]:
        """All jobs. No lock needed: the file is only ever replaced whole."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CronStoreError(f"{self.path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise CronStoreError(f"{self.path}: not a valid jobs file (not UTF-8: {exc}); fix or remove it") from None
        if not raw.strip():  # nanobot never writes one: what a full disk or `> jobs.json` leaves
            raise CronStoreError(f"{self.path}: the jobs file is empty (the reminders in it are gone); "
                                 "restore it from a copy, or remove it to start with no jobs")
        try:
            data = json.loads(raw)
            items = data["jobs"] if isinstance(data, dict) else data
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise ValueError("'jobs' must be a list of objects")
            return with_unique_ids([CronJob.from_dict(item) for item in items])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CronStoreError(f"{self.path}: not a valid jobs file ({exc}); fix or remove it") from None

    def mutate(self, change: Callable[[list[CronJob]], T]) -> T:
        """Run `change` on the current jobs (it edits the list in place) and save, all under the lock."""
        with self._locked():
            jobs = self.load()
            result = change(jobs)
            self._write(jobs)
            return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with file_lock(self._lock_path):
            yield

    def _write(self, jobs: list[CronJob]) -> None:
        text = json.dumps(
            {"version": FILE_FORMAT, "jobs": [j.to_dict() for j in jobs]}, indent=2, ensure_ascii=False
        )
        atomic_write(self.path, text + "\n")
