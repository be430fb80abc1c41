"""Running one cron job: its turn, the verdict, the delivery of its result. No scheduling here.

`run_and_deliver(job, on_job, deliver, still_wanted)` runs the job's turn and sends its result to the
job's chat, returning `Outcome(result, status, error)`: status "ok", "skipped: …" (JobRefused: the
sender who asked for it is no longer allowed; or the job was removed or switched off while its turn
ran, so its result is not sent), "error: …" (the turn failed; a failure notice of the model,
JobFailed, is still delivered, naming the job, at the first failure of a run of them) or
"error: delivery failed: …" (the chat never got it).
`send_notice(job, deliver, text)` tells the job's chat something about the job (best effort).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loguru import logger

from nanobot.logs import prompts_logged
from nanobot.scheduler.cron_store import CronJob
from nanobot.util.text import one_line

OnJob = Callable[[CronJob], Awaitable[str | None]]
Deliver = Callable[[str, str, str], Awaitable[None]]  # (channel, chat_id, text)


class JobRefused(Exception):
    """The job may not run now (the sender who asked for it is no longer allowed): nothing runs,
    nothing is delivered, and the run is recorded as skipped with the reason."""


class JobFailed(Exception):
    """The job's turn ended in a failure notice (the model could not answer): the notice is still
    delivered to the job's chat, and the run is recorded as failed."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


@dataclass(frozen=True)
class Outcome:
    result: str | None  # the turn's reply (or the failure notice), None when there was none
    status: str
    error: Exception | None  # the turn's failure, for a caller that re-raises it (the CLI)
    failure_told: bool = False  # the job's chat knows of this failure (told now, or at an earlier run)


def shown_name(job: CronJob) -> str:
    """The job's name for a log line: its text by default, so only when chat text may be logged."""
    return f" ({job.name})" if prompts_logged() else ""


async def run_and_deliver(
    job: CronJob, on_job: OnJob, deliver: Deliver | None, still_wanted: Callable[[], bool] = lambda: True
) -> Outcome:
    logger.info("cron: running job {}{}", job.id, shown_name(job))
    result: str | None = None
    error: Exception | None = None
    try:
        result = await on_job(job)
        status = "ok"
    except asyncio.CancelledError:
        raise
    except JobRefused as exc:
        logger.warning("cron: job {} skipped: {}", job.id, exc)
        status = f"skipped: {exc}"
    except JobFailed as exc:
        logger.error("cron: job {} failed: {}", job.id, exc)
        result, status, error = exc.reply, f"error: {exc}", exc
    except Exception as exc:  # noqa: BLE001 - one failing job must not stop the others
        logger.opt(exception=exc).error("cron: job {} failed", job.id)
        status = f"error: {type(exc).__name__}: {exc}"
        error = exc
    if result and result.strip() and (error is None or isinstance(error, JobFailed)):
        if not still_wanted():  # "stop that reminder" said while it ran: its result must not follow
            logger.info("cron: job {} was removed or switched off during its run; its result is not sent", job.id)
            return Outcome(result, "skipped: removed or switched off during its run", error)
        if error is None:
            return Outcome(result, await _deliver_result(job, deliver, result), error)
        if job.failure_told:  # a provider down: an every-minute job said so every minute
            logger.info("cron: job {} failed again; its chat was told at an earlier failure", job.id)
            return Outcome(result, status, error, failure_told=True)
        name = one_line(job.name)
        name = name if len(name) <= 60 else name[:59] + "…"
        text = f'{result}\n\n(Scheduled job "{name}", {job.id}: while it keeps failing, this is not said again.)'
        delivered = await _deliver_result(job, deliver, text)
        # told only when it reached the chat (not run by hand into a terminal, not a failed send)
        told = delivered == "ok" and job.deliver_to is not None
        return Outcome(result, status, error, failure_told=told)
    return Outcome(result, status, error)


async def _deliver_result(job: CronJob, deliver: Deliver | None, result: str) -> str:
    if job.deliver_to is None:
        logger.info("cron: job {} produced a result with no chat to deliver it to", job.id)
        return "ok"
    if deliver is None:  # `nanobot cron run`: the result goes to the terminal, not to the chat
        return f"ok (run by hand; not delivered to {job.deliver_to.channel}:{job.deliver_to.chat_id})"
    try:
        await deliver(job.deliver_to.channel, job.deliver_to.chat_id, result)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - record it; the next run tries again
        logger.opt(exception=exc).error("cron: delivering job {} to {} failed", job.id, job.deliver_to.channel)
        return f"error: delivery failed: {type(exc).__name__}: {exc}"
    return "ok"


async def send_notice(job: CronJob, deliver: Deliver, text: str) -> None:
    """Tell the job's chat `text` (a missed reminder); a failure is only logged."""
    if job.deliver_to is None:
        return
    try:
        await deliver(job.deliver_to.channel, job.deliver_to.chat_id, text)
    except Exception as exc:  # noqa: BLE001 - its status already says what happened
        logger.warning("cron: could not tell chat {} about job {}: {}", job.deliver_to.chat_id, job.id, exc)
