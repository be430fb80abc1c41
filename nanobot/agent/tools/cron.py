"""The `cron` tool: the agent schedules, lists and removes jobs for the chat it is talking in.

A job's result goes back to the chat that created it (ToolContext channel and chat id). A chat only
sees and removes its own jobs; `nanobot cron list` shows everything. A job that is running cannot
schedule further jobs, so a job can never multiply itself.
"""

from __future__ import annotations

from typing import Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.scheduler.cron import (
    CRON_SESSION_PREFIX,
    CronJob,
    CronService,
    CronStoreError,
    DeliverTo,
    cron_session_key,
)
from nanobot.scheduler.cron_store import MAX_JOBS_PER_CHAT, finished
from nanobot.scheduler.heartbeat import HEARTBEAT_SESSION_KEY
from nanobot.scheduler.run_rate import busiest_hour
from nanobot.scheduler.schedules import make_schedule, to_iso
from nanobot.timeutil import now as tz_now
from nanobot.util.text import truncate_head

MIN_TOOL_EVERY_S = 60  # the LLM may not schedule anything more often than once a minute
# nor, over all of a chat's jobs together, more runs an hour than one a minute: a hundred jobs of
# every_seconds=60 (one steered turn) were a hundred turns and messages a minute into the chat
MAX_TOOL_RUNS_PER_HOUR = 60
MAX_NAME_CHARS = 80
UNREACHABLE_CHANNELS = frozenset({"cli"})  # the terminal: nothing receives a job's result there later
MAX_MESSAGE_CHARS = 4000


def describe_job(job: CronJob) -> str:
    state = "" if job.enabled else " [disabled]"
    nxt = f", next {job.next_run_at}" if job.next_run_at else ""
    last = f", last {job.last_status}" if job.last_status else ""
    return f"- {job.id}: {job.name} — {job.schedule.describe()}{nxt}{last}{state}"


class CronTool(Tool):
    name = "cron"
    description = (
        "Schedule tasks or reminders for this chat. action=add needs 'message' (what you should do "
        "or say when it runs) and exactly one of: 'every_seconds' (repeat), 'cron_expr' (5-field "
        "crontab, optional 'tz' like 'Europe/Berlin') or 'at' (ISO time, one-shot). The result is "
        "sent to this chat. action=list shows this chat's jobs; action=remove needs 'job_id'."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "list", "remove"]},
            "name": {"type": "string", "description": "Short label for the job."},
            "message": {"type": "string", "description": "What to do when the job runs."},
            "every_seconds": {"type": "integer", "minimum": MIN_TOOL_EVERY_S},
            "cron_expr": {"type": "string", "description": "e.g. '0 9 * * 1-5' for 09:00 on weekdays."},
            "tz": {"type": "string", "description": "IANA time zone for cron_expr/at; default: the user's."},
            "at": {"type": "string", "description": "ISO-8601 time, e.g. 2025-03-01T09:00:00+01:00."},
            "job_id": {"type": "string", "description": "For remove: the id shown by list."},
        },
        "required": ["action"],
    }

    def __init__(self, service: CronService) -> None:
        self.service = service

    async def execute(self, ctx: ToolContext, **kwargs: Any) -> str:
        action = kwargs.get("action")
        try:
            if action == "add":
                # checked and added with no await between: parallel calls of one reply see each other
                self._check_add(ctx, kwargs)
                self._check_rate(ctx, kwargs)
                return self._add(ctx, kwargs)
            if action == "list":
                return self._list(ctx)
            if action == "remove":
                return self._remove(ctx, str(kwargs.get("job_id") or ""))
        except CronStoreError as exc:
            raise ToolError(f"the job list cannot be used right now: {exc}") from None
        raise ToolError("action must be one of add, list, remove")

    def _own(self, ctx: ToolContext, job: CronJob) -> bool:
        target = job.deliver_to
        return target is not None and target.channel == ctx.channel and target.chat_id == ctx.chat_id

    def _check_add(self, ctx: ToolContext, args: dict[str, Any]) -> None:
        """What refuses an add before its schedule is looked at (cheap checks first)."""
        if ctx.session_key.startswith(CRON_SESSION_PREFIX):
            raise ToolError("a scheduled job cannot schedule further jobs")
        if ctx.channel in UNREACHABLE_CHANNELS:
            # its results would go to a terminal that is not there when the job runs (dropped)
            raise ToolError(
                "this chat cannot receive scheduled results; ask in Telegram or Discord, or run "
                "`nanobot cron add --channel <telegram|discord> --to <chat id>`"
            )
        message = str(args.get("message") or "").strip()
        if not message:
            raise ToolError("'message' is required for add")
        if len(message) > MAX_MESSAGE_CHARS:
            raise ToolError(f"'message' is too long (max {MAX_MESSAGE_CHARS} characters)")
        every = args.get("every_seconds")
        if every is not None and (not isinstance(every, int) or every < MIN_TOOL_EVERY_S):
            raise ToolError(f"'every_seconds' must be an integer >= {MIN_TOOL_EVERY_S}")
        own = sum(1 for j in self.service.list() if self._own(ctx, j) and not finished(j))
        if own >= MAX_JOBS_PER_CHAT:  # as `add` would say
            raise ToolError(f"this chat has {MAX_JOBS_PER_CHAT} jobs already; remove some first")

    def _add(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        message = str(args.get("message") or "").strip()
        every = args.get("every_seconds")
        name = truncate_head(str(args.get("name") or message), MAX_NAME_CHARS, marker="")  # never half an emoji
        try:
            job = self.service.add(
                name,
                message,
                at=args.get("at") or None,
                every_s=every,
                expr=args.get("cron_expr") or None,
                tz=str(args.get("tz") or ""),
                deliver_to=DeliverTo(ctx.channel, ctx.chat_id),
                # the heartbeat's turn has no asker to re-check at run time ("user" is nobody's
                # id): the job runs with the trust of its chat, like one from `nanobot cron add`
                created_by="" if ctx.session_key == HEARTBEAT_SESSION_KEY else ctx.sender_id,
            )
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return f"Scheduled job {job.id} ({job.schedule.describe()}); next run {job.next_run_at}."

    def _check_rate(self, ctx: ToolContext, args: dict[str, Any]) -> None:
        """Refuse a job that would let this chat's jobs run more than MAX_TOOL_RUNS_PER_HOUR times
        in their busiest hour (scheduler/run_rate.py; `nanobot cron add`, the owner's own
        command, has no such limit). A schedule that is no schedule is left to `add` to refuse."""
        now = tz_now(self.service.tz)
        try:
            schedule = make_schedule(
                at=args.get("at") or None, every_s=args.get("every_seconds"), expr=args.get("cron_expr") or None,
                tz=str(args.get("tz") or ""), default_tz=self.service.tz, now=now,
            )
        except ValueError:
            return
        new = CronJob(id="new", name="", message="", schedule=schedule, created_at=to_iso(now))
        own = [j for j in self.service.list() if j.enabled and self._own(ctx, j)]
        most = busiest_hour([*own, new], self.service.tz)
        if most > MAX_TOOL_RUNS_PER_HOUR:
            raise ToolError(
                f"this chat's jobs could run {most} times in one hour, more than {MAX_TOOL_RUNS_PER_HOUR}: "
                "remove some (action=list) or schedule this one less often"
            )

    def _list(self, ctx: ToolContext) -> str:
        jobs = [j for j in self.service.list() if self._own(ctx, j)]
        if not jobs:
            return "No scheduled jobs for this chat."
        return "Scheduled jobs:\n" + "\n".join(describe_job(j) for j in jobs)

    def _remove(self, ctx: ToolContext, job_id: str) -> str:
        if not job_id:
            raise ToolError("'job_id' is required for remove")
        job = self.service.get(job_id)
        if job is None or not self._own(ctx, job):
            raise ToolError(f"no job {job_id!r} in this chat (use action=list)")
        # a job removing itself in its own turn ("tell me when it arrives, then stop") still sends
        # that turn's answer; a removal from elsewhere while it runs stops it
        self.service.remove(job_id, by_its_own_run=ctx.session_key == cron_session_key(job_id))
        return f"Removed job {job_id} ({job.name})."
