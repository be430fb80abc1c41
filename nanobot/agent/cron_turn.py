"""A due cron job as one turn through the agent loop, with the trust of the chat it reports to.

`run_cron_job(bus, job, sessions, listed)` is CronService's `on_job`: the job's prompt goes on the
bus as one inbound message in the job's own session (`cron_session_key`), and the reply text comes
back; a refusal (`JobRefused`: its asker is no longer allowed) and a failed turn (`JobFailed`, or
the turn's exception) raise, for the job's run record. `job_chat(sessions, target)` reads the
trust of the chat a job delivers to from what that chat's session recorded when it began
(`JobChat`). `deliver_and_confirm` is CronService's `deliver`: it sends the result and waits
until the channel has sent it. Scheduling, run records and delivery policy stay in scheduler/.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.scheduler.cron import JobFailed, JobRefused
from nanobot.scheduler.cron_store import CronJob, DeliverTo, cron_session_key, job_prompt
from nanobot.session.store import SessionStore

CRON_DELIVERY_TIMEOUT_S = 600.0  # a channel's send retries (rate limits, outages) fit well inside


async def deliver_and_confirm(bus: MessageBus, channel: str, chat_id: str, text: str) -> None:
    """Send a job's result and wait until its channel has sent it: a refusal (the bot was blocked,
    the channel is not enabled or failed) raises, and the job records the failure instead of "ok"."""
    sent: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await bus.publish_outbound(OutboundMessage(channel=channel, chat_id=chat_id, content=text, sent=sent))
    await asyncio.wait_for(sent, CRON_DELIVERY_TIMEOUT_S)


async def run_cron_job(
    bus: MessageBus,
    job: CronJob,
    sessions: SessionStore,
    listed: Callable[[str, str, str | None], bool] | None = None,
) -> str:
    """A due job is one inbound message in its own session, through the agent loop like any chat
    message; CronService records the reply and delivers it to the job's chat. It runs with the trust
    of that chat: a job whose results go to a group gets a group's tools and no MEMORY.md. With
    `listed(channel, sender, username)` (the gateway's channels), a job whose asker was removed from
    allowFrom since does not run: it would be an owner's turn for someone no longer let in (a
    `dmPolicy: "open"` still lets them talk, as a guest); and a job for a private chat whose user is
    no longer listed runs with a guest's trust."""
    target = job.deliver_to or DeliverTo("cli", "direct")
    chat = job_chat(sessions, target)
    asker_name = chat.username if chat.user == job.created_by else None
    if listed is not None and job.created_by and not listed(target.channel, job.created_by, asker_name):
        raise JobRefused(f"{job.created_by}, who asked for it, is no longer allowed on {target.channel}")
    shared, guest = chat_trust(chat, target.channel, listed)
    out = await bus.request(
        InboundMessage(
            channel=target.channel,
            sender_id="user",
            chat_id=target.chat_id,
            content=job_prompt(job),
            session_key_override=cron_session_key(job.id),
            is_group=shared,
            guest=guest,
        )
    )
    if out is None:
        return ""
    if isinstance(out.metadata.get("exception"), Exception):
        raise out.metadata["exception"]  # recorded as the job's failure, like any other
    if out.metadata.get("failed"):
        raise JobFailed(out.content)  # the model could not answer: told to the chat, recorded as failed
    return out.content


@dataclass(frozen=True)
class JobChat:
    """A job's chat as its session recorded it when it began: shared (a group, a guest's chat, or a
    chat nanobot never talked in: the owner's memory stays out; the terminal is not), and a private
    chat's user with their username (allowFrom may name them by it)."""

    shared: bool
    user: str = ""
    username: str | None = None
    is_group: bool = False


def chat_trust(
    chat: JobChat, channel: str, listed: Callable[[str, str, str | None], bool] | None
) -> tuple[bool, bool]:
    """(is_group, guest) for a turn nobody in `chat` asked for just now (a cron job, the heartbeat)."""
    if listed is not None and not chat.is_group and chat.user:
        # a private chat's trust is its user's now: a guest later put on allowFrom is the owner
        # (the chat's first message recorded them as a guest for good), and the reverse
        return False, not listed(channel, chat.user, chat.username)
    return chat.shared, False


def job_chat(sessions: SessionStore, target: DeliverTo) -> JobChat:
    if target.channel == "cli":
        return JobChat(shared=False)
    first = sessions.chat_identity(sessions.path_for(f"{target.channel}:{target.chat_id}"))
    is_group = first.get("is_group", True)
    user = "" if is_group else str(first.get("sender_id") or "")
    username = first.get("username") if user else None
    return JobChat(
        bool(is_group or first.get("guest")), user, str(username) if username else None, bool(is_group)
    )
