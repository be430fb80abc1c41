"""Answering messages a crash left unanswered: delivery is at-least-once up to the reply.

A user message is saved before its turn runs (and only then confirmed to the platform), so after a
kill -9 the platform will not send it again; the session file is the only record that it still
waits for an answer. At start the gateway looks at the live session of every enabled channel: when
its last user message has no final assistant reply after it (only, perhaps, tool steps of the
interrupted turn), that message is unanswered. If it is younger than
`gateway.answerMissedWithinS` the turn is run again (the saved message is not saved twice: the
InboundMessage carries `metadata["resume"]`); older ones are only logged, since a late answer to a
stale question would surprise more than help.

A sub-agent's report saved without its answer (the gateway stopped before the report's turn ran,
or cut it short) is answered the same way: the user was told the result would come.

A sub-agent that was running when the gateway was killed (kill -9, OOM, power cut) left no note:
gateway/stranded.py saves the one a shutdown would have left, and it is answered here like one.

A turn the user cancelled with /stop is not "missed": the loop records the position it stopped at
(`stopped_through` in the session's metadata), and such a message is left alone.

A reply that was saved but perhaps never sent (the kill came between the two) is sent again: every
delivered reply is recorded in its session (`delivered_through` in the metadata, written by the
gateway once the channel has sent it; a channel sends a chat's replies in order), so every young
final reply past that mark goes out once more, before the resumed turn's reply. That is
at-least-once: the user may see such a reply twice, never zero times. A reply delivered after /new
archived its transcript is recorded in the archive, so it is not sent again at every start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from loguru import logger

from nanobot.agent.message_context import SPAWN_DEPTH_KEY
from nanobot.bus.events import DELIVERY_KEY, RESUME_KEY, InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.config.paths import session_file_name
from nanobot.session.session import delivery_of
from nanobot.session.store import Session, SessionStore
from nanobot.timeutil import parse_iso_or_none, seconds_since

ARCHIVES_SEARCHED = 5  # a reply delivered after /new belongs to one of its chat's newest archives...
ARCHIVE_DELIVERY_WINDOW_S = 86_400.0  # ...changed within this many seconds
MAX_TOO_OLD_LOGGED = 10  # missed messages too old to act on, named one by one at a start; the rest counted


Kind = Literal["turn", "reply"]
#: (channel, sender id, username, is_group) -> would the channel let this sender in now
Admits = Callable[[str, str, str | None, bool], bool]
#: (channel, sender id, username) -> is the sender on allowFrom or paired (not only let in as a guest)
Listed = Callable[[str, str, str | None], bool]


@dataclass(frozen=True)
class Missed:
    session_key: str
    channel: str
    chat_id: str
    index: int  # of the user message (kind "turn") or of the saved reply (kind "reply")
    message: dict[str, Any]
    is_group: bool
    age_s: float | None  # None: no readable timestamp
    kind: Kind = "turn"
    archived: bool = False  # in a transcript /new archived (its delivery is recorded in that file)
    first: str | None = None  # an archived transcript's first timestamp: which archive it is


def undelivered_replies(session: Session) -> list[int]:
    """Indices of final replies past the recorded delivery mark (replies go out in order per chat)."""
    start = max(0, int(session.metadata.get("delivered_through", 0) or 0))
    # one pass: a mark below the consolidation pointer reads those messages from the file once
    return [
        i
        for i, m in enumerate(session.messages.iter_from(start), start)
        if m.get("role") == "assistant" and not m.get("tool_calls") and str(m.get("content") or "").strip()
    ]


def unanswered_index(session: Session) -> int | None:
    """Index of the session's last user message if no final assistant reply follows it."""
    messages = session.messages
    last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if last_user is None:
        return None
    # A sub-agent's report (name "system") counts too: the user was told the result would come, and
    # a report a shutdown kept (subagents.py) has no other way to reach them.
    if int(session.metadata.get("stopped_through", 0) or 0) > last_user:
        return None  # the user stopped this turn
    replied = any(m.get("role") == "assistant" and not m.get("tool_calls") for m in messages[last_user + 1 :])
    return None if replied else last_user


def find_missed(
    sessions: SessionStore, channels: Collection[str], now: float | None = None, recent_s: float | None = None
) -> list[Missed]:
    """In the live sessions of `channels`: saved replies not recorded as delivered ("reply") and the
    unanswered last user message ("turn"), in session order; with `recent_s`, also the undelivered
    replies of transcripts archived within that many seconds."""
    now = time.time() if now is None else now
    found: list[Missed] = []
    for session in live_sessions(sessions, channels):
        key = session.key
        channel, _, chat_id = key.partition(":")
        is_group = bool(session.metadata.get("is_group", True))  # unknown: treated as shared (safe)
        items: list[tuple[int, Kind]] = [(i, "reply") for i in undelivered_replies(session)]
        turn = unanswered_index(session)
        if turn is not None:
            items.append((turn, "turn"))
        for index, kind in items:
            message = session.messages[index]
            stamp = parse_iso_or_none(str(message.get("timestamp") or ""))
            age = None if stamp is None else seconds_since(stamp.timestamp(), now)
            found.append(Missed(key, channel, chat_id, index, message, is_group, age, kind))
    found.extend(_archived_replies(sessions, channels, now, recent_s))
    return sorted(found, key=lambda m: (m.session_key, m.index))  # in order within each chat


def _archived_replies(
    sessions: SessionStore, channels: Collection[str], now: float, recent_s: float | None
) -> list[Missed]:
    """Undelivered replies in transcripts /new archived recently (the kill came after the archive but
    before the replies went out). Only files changed within `recent_s` are read."""
    if recent_s is None or recent_s <= 0:
        return []
    found: list[Missed] = []
    for _stem, path in sessions.archived_since(recent_s):
        try:
            channel, _, chat_id = sessions.key_of(path).partition(":")
            if channel not in channels or not chat_id:
                continue
            session = sessions.load_archived(path)
        except OSError as exc:  # one unreadable archive must not cancel every chat's check
            logger.error("{} cannot be read ({}); not checked for undelivered replies", path.name, exc.strerror or exc)
            continue
        try:
            for index in undelivered_replies(session):
                message = session.messages[index]
                stamp = parse_iso_or_none(str(message.get("timestamp") or ""))
                age = None if stamp is None else seconds_since(stamp.timestamp(), now)
                key = f"{channel}:{chat_id}"
                first = session.messages[0].get("timestamp") if session.messages else None
                found.append(
                    Missed(key, channel, chat_id, index, message, False, age, "reply", archived=True, first=first)
                )
        finally:
            sessions.release(session)  # after the reads: older messages come from its file
    return found


def live_sessions(sessions: SessionStore, channels: Collection[str]) -> Iterator[Session]:
    """The live session of every chat of `channels`."""
    for stem in sessions.list_keys():
        try:
            key = sessions.key_of(sessions.dir / f"{stem}.jsonl")
            channel, _, chat_id = key.partition(":")
            if not (channel in channels and chat_id and session_file_name(key) == f"{stem}.jsonl"):
                continue
            session = sessions.get(key)
        except OSError as exc:  # one unreadable transcript (another user's, once run with sudo)
            # cancelled the check of every other chat: their unanswered messages were never answered
            logger.error("sessions/{}.jsonl cannot be read ({}); its chat is not checked for unanswered "
                         "messages", stem, exc.strerror or exc)
            continue
        yield session


def sender_of(missed: Missed) -> tuple[str, str | None]:
    """(sender id, username) of a missed user message: kept with it when the sender is not the chat
    (older files: the chat, which in a private chat is the user)."""
    username = missed.message.get("username")
    return str(missed.message.get("sender_id") or missed.chat_id), str(username) if username else None


def resume_message(missed: Missed, *, guest: bool = False) -> InboundMessage:
    """The InboundMessage that runs the missed turn again without saving the message twice."""
    return InboundMessage(
        channel=missed.channel,
        sender_id=sender_of(missed)[0],
        chat_id=missed.chat_id,
        content=str(missed.message.get("content") or ""),
        media=[str(p) for p in missed.message.get("media") or []],
        is_group=missed.is_group,
        guest=guest,
        metadata={RESUME_KEY: True, **_spawn_depth(missed.message)},
    )


def _spawn_depth(message: dict[str, Any]) -> dict[str, int]:
    """A sub-agent's report keeps its depth when answered again (older files: a report is 1 deep)."""
    if message.get("name") != "system":
        return {}
    depth = message.get(SPAWN_DEPTH_KEY, 1)
    return {SPAWN_DEPTH_KEY: depth if isinstance(depth, int) and not isinstance(depth, bool) and depth > 0 else 1}


def resend_message(missed: Missed, session: Session | None) -> OutboundMessage:
    """The saved reply, sent again; its delivery is recorded like any reply's (an archived one's in
    its archive, so the next start does not send it once more)."""
    metadata: dict[str, Any] = {}
    if session is not None:
        metadata[DELIVERY_KEY] = delivery_of(session, missed.index + 1)
    elif missed.archived:
        metadata[DELIVERY_KEY] = {"session": missed.session_key, "through": missed.index + 1, "first": missed.first}
    return OutboundMessage(
        channel=missed.channel,
        chat_id=missed.chat_id,
        content=str(missed.message.get("content") or ""),
        metadata=metadata,
    )


def mark_delivered(sessions: SessionStore, msg: OutboundMessage) -> None:
    """Record in the session that a reply was delivered (only for replies that answer a turn)."""
    delivery = msg.metadata.get(DELIVERY_KEY)
    if not isinstance(delivery, dict) or not delivery.get("session"):
        return
    key = str(delivery["session"])
    session = sessions.get(key)
    first = session.messages[0].get("timestamp") if session.messages else None
    through = int(delivery.get("through") or 0)
    if first != delivery.get("first"):
        _mark_archived(sessions, key, delivery.get("first"), through)  # /new archived it since
        return
    if through > int(session.metadata.get("delivered_through", 0) or 0):
        sessions.set_metadata(session, delivered_through=through)


def _mark_archived(sessions: SessionStore, key: str, first: Any, through: int) -> None:
    """Record a delivery in the archived transcript it belongs to (one of the newest few of `key`):
    otherwise every start within answerMissedWithinS would send that reply again."""
    if not first:
        return
    stem = session_file_name(key).removesuffix(".jsonl")
    archives = [path for of, path in sessions.archived_since(ARCHIVE_DELIVERY_WINDOW_S) if of == stem]
    for path in sorted(archives, reverse=True)[:ARCHIVES_SEARCHED]:
        # Loaded and written at once (no await between): the line carries the file's latest metadata.
        archived = sessions.load_archived(path)
        try:
            if archived.messages and archived.messages[0].get("timestamp") == first:
                if through > int(archived.metadata.get("delivered_through", 0) or 0):
                    sessions.set_metadata(archived, delivered_through=through)
                return
        finally:
            sessions.release(archived)


async def answer_missed(
    sessions: SessionStore,
    bus: MessageBus,
    channels: Collection[str],
    within_s: float,
    now: float | None = None,
    admits: Admits | None = None,
    listed: Listed | None = None,
) -> int:
    """Publish the young missed messages of `channels`; log the old ones. Returns how many were resumed.

    Called before the channels start: the resumed turns are then first in the bus, ahead of anything
    the platforms deliver again, so each runs before newer messages of its session. With `admits`, a
    turn whose sender would not be let in now (removed from allowFrom while the gateway was down,
    the usual way to remove someone) is not answered; with `listed`, a private-chat sender let in
    only by dmPolicy "open" is answered as the guest they are.
    """
    resumed = too_old = 0
    for missed in find_missed(sessions, channels, now, recent_s=within_s):
        age = "unknown" if missed.age_s is None else f"{missed.age_s:.0f} s"
        guest = not missed.is_group and listed is not None and not listed(missed.channel, *sender_of(missed))
        # a group message saved by an earlier version carries no sender: its chat id is no one's
        # id, so there is nobody to check again (it was let in when it came; groups get no owner trust)
        unknown_sender = missed.is_group and not missed.message.get("sender_id")
        if missed.kind == "turn" and admits is not None and not unknown_sender:
            sender, username = sender_of(missed)
            if not admits(missed.channel, sender, username, missed.is_group):
                logger.warning(
                    "{}: an unanswered message stays unanswered: its sender {} is no longer allowed",
                    missed.session_key,
                    sender,
                )
                continue
        if within_s <= 0 or missed.age_s is None or missed.age_s > within_s:
            too_old += 1
            if too_old > MAX_TOO_OLD_LOGGED:  # a workspace copied without its times: thousands
                continue
            logger.warning(
                "{}: a {} saved {} ago was left unhandled when the gateway stopped; too old to act on now "
                "(gateway.answerMissedWithinS is {:.0f} s)",
                missed.session_key,
                "user message" if missed.kind == "turn" else "reply",
                age,
                within_s,
            )
            continue
        if missed.kind == "reply":
            if bus.outbound.full():  # nothing drains it before the channels start: never wait here
                continue
            logger.info(
                "{}: sending again a reply saved {} ago that may never have been sent",
                missed.session_key,
                age,
            )
            live = None if missed.archived else sessions.get(missed.session_key)
            await bus.publish_outbound(resend_message(missed, live))
            resumed += 1
            continue
        if bus.inbound.full():  # before the loop runs nothing drains it: never wait here
            logger.warning(
                "{}: too many unanswered messages to resume; this one stays unanswered", missed.session_key
            )
            continue
        logger.info("{}: answering a message saved {} ago that was never answered", missed.session_key, age)
        await bus.publish_inbound(resume_message(missed, guest=guest))
        resumed += 1
    if too_old > MAX_TOO_OLD_LOGGED:
        logger.warning(
            "{} more messages and replies left unhandled at a stop are too old to act on (not listed)",
            too_old - MAX_TOO_OLD_LOGGED,
        )
    return resumed
