"""Sub-agents a kill stranded: the gateway was stopped without a shutdown (kill -9, OOM, a power
cut) while a sub-agent ran, so no note says it stopped, and the user, told its result would come,
never heard of it again.

`stranded_spawns(session)` finds a `spawn` whose answer says it started with no report after it (a
report, or a shutdown's note, is a `system` message quoting the task); `note_stranded(...)` saves,
at a start, the note a shutdown would have left, through the agent's own `keep_result`, for each
that started within answerMissedWithinS; gateway/missed.py then answers it like any such note.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from loguru import logger

from nanobot.agent.message_context import SPAWN_DEPTH_KEY
from nanobot.agent.subagents import STOPPED_NOTE
from nanobot.agent.tools.spawn import STARTED_REPLY, label_of
from nanobot.bus.events import InboundMessage
from nanobot.gateway.missed import live_sessions
from nanobot.session.store import Session, SessionStore
from nanobot.timeutil import parse_iso_or_none, seconds_since
from nanobot.util.tool_args import decode_lenient

STRANDED_LOOKBACK = 200  # messages: a sub-agent stranded by a kill is recent (answerMissedWithinS)
_STARTED_HEAD, _, _STARTED_TAIL = STARTED_REPLY.partition("{task_id}")


@dataclass(frozen=True)
class Stranded:
    task: str
    label: str
    sender_id: str  # who asked for it (the user message of that turn)
    age_s: float | None


def stranded_spawns(session: Session, now: float | None = None) -> list[Stranded]:
    """The sub-agents this session started that never reported: a report (or a shutdown's note)
    is a `system` message quoting its task, and none follows the spawn. Called at a start, when
    no sub-agent of an earlier process can still be running."""
    now = time.time() if now is None else now
    asked: dict[str, tuple[str, str]] = {}  # tool call id -> (task, label)
    started: list[Stranded] = []
    sender = ""
    start = max(0, len(session.messages) - STRANDED_LOOKBACK)
    for message in session.messages.iter_from(start):
        role = message.get("role")
        if role == "user" and message.get("name") != "system":
            sender = str(message.get("sender_id") or "")
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and function.get("name") == "spawn":
                    args = decode_lenient(function.get("arguments")) or {}
                    if isinstance(args, dict) and isinstance(args.get("task"), str):
                        label = args.get("label")
                        asked[str(call.get("id"))] = (args["task"], label_of(args["task"], str(label or "")))
        elif role == "tool" and message.get("tool_call_id") in asked:
            content = str(message.get("content") or "")
            if content.startswith(_STARTED_HEAD) and content.endswith(_STARTED_TAIL):
                task, label = asked[message["tool_call_id"]]
                stamp = parse_iso_or_none(str(message.get("timestamp") or ""))
                age = None if stamp is None else seconds_since(stamp.timestamp(), now)
                started.append(Stranded(task, label, sender, age))
        elif role == "user" and started:
            content = str(message.get("content") or "")
            started = [s for s in started if f"Task: {s.task}" not in content]
    return started


def stopped_note(session: Session, stranded: Stranded) -> InboundMessage:
    """The note a shutdown leaves for a sub-agent it stopped, for one a kill left without it."""
    channel, _, chat_id = session.key.partition(":")
    return InboundMessage(
        channel="system",
        sender_id=stranded.sender_id or chat_id,
        chat_id=chat_id,
        content=STOPPED_NOTE.format(label=stranded.label, task=stranded.task),
        session_key_override=session.key,
        is_group=bool(session.metadata.get("is_group", True)),
        metadata={"origin_channel": channel, "origin_chat_id": chat_id, SPAWN_DEPTH_KEY: 1},
    )


def note_stranded(
    sessions: SessionStore,
    channels: Collection[str],
    within_s: float,
    keep: Callable[[InboundMessage], None],
    now: float | None = None,
) -> int:
    """Save a stopped note (through `keep`, as a shutdown would) for each sub-agent of the live
    sessions of `channels` that a kill left without a report, when it started within `within_s`;
    answer_missed then answers the note. Returns how many were noted."""
    noted = 0
    for session in live_sessions(sessions, channels):
        for stranded in stranded_spawns(session, now):
            if stranded.age_s is None or stranded.age_s > within_s:
                continue
            logger.warning(
                "{}: sub-agent '{}' was running when the gateway stopped without a shutdown; the chat is told",
                session.key,
                stranded.label,
            )
            keep(stopped_note(session, stranded))
            noted += 1
    return noted
