"""SessionRecords: what the agent keeps in a session beside the messages of its turns.

- The user message as its session stores it (`stored`: with its platform id, its asker, media), and
  the chat's identity, recorded with a session's first message (`record_identity`): whose chat it
  is, whether it is shared, a private chat's user. Cron jobs and the heartbeat read that identity.
- Platform messages served again after a crash (Telegram resends every update from the oldest one
  not yet confirmed): a turn's message already in its session is only confirmed (`served_again`),
  an immediate command already handled is not handled twice (`command_served_again`).
- Messages saved without a turn of their own: one a shutdown left unanswered (`keep_unanswered`),
  one `/stop` gave up (`save_given_up`), a sub-agent's report no loop takes any more (`keep_result`),
  and the note a failed turn answered with (`record_failure_reply`). The next start answers what
  was kept unanswered (nanobot/gateway/missed.py).
- What `/new` carries into the new session (`new_done_before`, `answered_ids`, `carry_into_new`):
  the chat's identity, and the platform ids answered before, so none of them is answered again.

The Agent owns one; the AgentLoop calls it for the messages it keeps or gives up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import tzinfo
from typing import Any

from loguru import logger

from nanobot.agent.message_context import SPAWN_DEPTH_KEY, MessageContext
from nanobot.bus.events import DELIVERY_KEY, RESUME_KEY, InboundMessage
from nanobot.scheduler.cron_store import CRON_SESSION_PREFIX
from nanobot.scheduler.heartbeat import HEARTBEAT_SESSION_KEY
from nanobot.session.message_log import MessageLog
from nanobot.session.session import delivery_of
from nanobot.session.store import Session, SessionStore
from nanobot.timeutil import now as tz_now

SERVED_AGAIN_WINDOW = 500  # newest messages of a session searched for a platform message served again
ANSWERED_BEFORE_NEW_KEPT = 50  # platform ids of the messages before a /new, kept in the new session
IDENTITY_KEYS = ("is_group", "session_key", "guest", "sender_id", "username")  # see _first_metadata
#: InboundMessage.metadata: the text of the answer streamed so far (the current model call's)
STREAMED_KEY = "streamed_text"
STOPPED_MARK = " … [stopped by the user here]"
COMMANDS_REMEMBERED = 20  # ids of the last immediate commands handled per session (served again?)


class SessionRecords:
    def __init__(
        self, sessions: SessionStore, tz: tzinfo, context_of: Callable[[InboundMessage], MessageContext]
    ) -> None:
        self.sessions = sessions
        self.tz = tz
        self._context_of = context_of  # the Agent's one decision about a message's context

    # ------------------------------------------------------------------ a turn's user message
    def stored(self, msg: InboundMessage, ctx: MessageContext) -> dict[str, Any]:
        """The user message as its session keeps it (with its platform id: see served_again)."""
        stored: dict[str, Any] = {
            "role": "user",
            "content": msg.content,
            "timestamp": tz_now(self.tz).isoformat(),
        }
        if msg.metadata.get("message_id") is not None:
            stored["message_id"] = msg.metadata["message_id"]
        if msg.sender_id != msg.chat_id:  # a group member, or a Discord DM (its channel is not the user)
            stored["sender_id"] = msg.sender_id  # who asked, for a turn answered again after a crash
        if msg.metadata.get("username"):  # allowFrom may name them by it: checked again at a resume
            stored["username"] = msg.metadata["username"]
        if msg.media:
            stored["media"] = list(msg.media)
        if ctx.from_system:
            stored["name"] = "system"
            # a report answered again after a restart keeps its depth (it restarted at 0: each
            # restart let a model that spawns from every report go two levels further)
            stored[SPAWN_DEPTH_KEY] = ctx.spawn_depth
        if ctx.guest:  # a guest's words, wherever they end up: never consolidated as the owner's
            stored["guest"] = True
        return stored

    @staticmethod
    def _first_metadata(ctx: MessageContext, msg: InboundMessage) -> dict[str, Any]:
        """What a session records with its first message: whose it is (a file name cannot tell a
        forum topic from a chat id with `_`), whether it is shared (a guest's chat is), and a
        private chat's user with their username (the heartbeat and cron jobs go only to a user
        still allowed, and allowFrom may name them by username)."""
        first: dict[str, Any] = {"is_group": ctx.is_group, "session_key": ctx.session_key}
        if ctx.guest:
            first["guest"] = True
        if not ctx.is_group:
            first["sender_id"] = ctx.sender_id
            if msg.metadata.get("username"):
                first["username"] = str(msg.metadata["username"])
        return first

    @staticmethod
    def trust_changed(session: Session, ctx: MessageContext) -> bool:
        """Whether the session was recorded as a guest's and this message is not, or the reverse;
        for the heartbeat's session (it follows gateway.heartbeat.target) and a cron job's (its
        chat may be talked in since), also as shared and this message is not, or the reverse. Not
        for a chat's own session: the owner's `nanobot agent -s telegram:<group>` is no group turn."""
        recorded = session.metadata
        if "is_group" not in recorded or not session.messages:
            return False
        follows_target = ctx.session_key == HEARTBEAT_SESSION_KEY or ctx.session_key.startswith(CRON_SESSION_PREFIX)
        shared_changed = follows_target and bool(recorded.get("is_group")) != ctx.is_group
        return bool(recorded.get("guest")) != ctx.guest or shared_changed

    def record_identity(self, session: Session, ctx: MessageContext, msg: InboundMessage) -> None:
        """`_first_metadata` with a session's first message, unless the session has it already (one
        /new started carries its chat's identity over)."""
        if not session.messages and "is_group" not in session.metadata:
            self.sessions.set_metadata(session, **self._first_metadata(ctx, msg))

    # ------------------------------------------------------------------ served again
    def served_again(self, msg: InboundMessage, ctx: MessageContext) -> bool:
        """A platform message that is in its session already: Telegram serves again, after a crash,
        every update from the oldest one not yet confirmed, and a reply can be sent before an older
        message of another chat lets the confirmation pass its own. That message was answered (or
        is answered again from the session at start, gateway/missed.py): it is only confirmed now.
        Replies sent twice after a kill came mostly from this."""
        platform_id = msg.metadata.get("message_id")
        if platform_id is None or msg.metadata.get(RESUME_KEY):
            return False
        recent = _newest_held(self.sessions.get(ctx.session_key).messages)
        before_new = self.sessions.get(ctx.session_key).metadata.get("answered_before_new") or []
        if platform_id not in before_new and not any(
            m.get("role") == "user" and m.get("message_id") == platform_id for m in recent
        ):
            return False
        logger.info(
            "{}: message {} is in the session already; not answered twice", ctx.session_key, platform_id
        )
        msg.saved = True
        msg.ack()
        return True

    def command_served_again(self, msg: InboundMessage, ctx: MessageContext) -> bool:
        """Whether an immediate command (/stop, /status) was handled before: its platform serves it
        again after a restart when an older message of another chat was not confirmed yet. The ids
        of the last few handled are kept in the session's metadata."""
        platform_id = msg.metadata.get("message_id")
        if platform_id is None:
            return False
        session = self.sessions.get(ctx.session_key)
        seen = list(session.metadata.get("commands_seen") or [])
        if platform_id in seen:
            logger.info("{}: command {} was handled before; not again", ctx.session_key, platform_id)
            return True
        self.sessions.set_metadata(session, commands_seen=[*seen[-(COMMANDS_REMEMBERED - 1) :], platform_id])
        return False

    # ------------------------------------------------------------------ kept without a turn
    def keep_unanswered(self, msg: InboundMessage, ctx: MessageContext) -> bool:
        """Save a message whose turn a shutdown cancelled before it was saved (or that no turn took
        yet), when its platform will not send it again (Discord): the next start answers it
        (nanobot/gateway/missed.py) instead of the message being lost without a trace. True when
        saved here."""
        if msg.saved or msg.on_persisted is not None or msg.reply_future is not None or ctx.command:
            return False  # saved already, served again by its platform (Telegram), in-process, or a command
        self._save_message(msg, ctx)
        logger.info(
            "{}: kept a message the shutdown left unanswered; the next start answers it", ctx.session_key
        )
        return True

    def save_given_up(self, msg: InboundMessage, ctx: MessageContext) -> None:
        """Save a message /stop gave up before its turn saved it: the user's words stay in the
        transcript (for memory and search), unanswered. When /stop cut a streamed answer, the part
        the chat was shown is saved as the answer, marked: the model then knows what the user read
        (the chat kept it, the session did not)."""
        if not msg.saved and not ctx.command:
            self._save_message(msg, ctx)
        shown = str(msg.metadata.get(STREAMED_KEY) or "").strip()
        if shown and msg.saved:
            session = self.sessions.get(ctx.session_key)
            stamp = tz_now(self.tz).isoformat()
            self.sessions.append(
                session, {"role": "assistant", "content": shown + STOPPED_MARK, "timestamp": stamp}
            )

    def _save_message(self, msg: InboundMessage, ctx: MessageContext) -> None:
        session = self.sessions.get(ctx.session_key)
        self.record_identity(session, ctx, msg)
        self.sessions.append(session, self.stored(msg, ctx))
        msg.saved = True

    def keep_result(self, msg: InboundMessage) -> None:
        """Save a sub-agent's report that no loop will take any more (a shutdown) in its session:
        the next start answers it (gateway/missed.py). A heartbeat's or a cron job's sub-agent
        reports to the chat that turn answered in: kept in the turn's own session (not a chat's),
        nobody would answer it."""
        channel, chat_id = msg.metadata.get("origin_channel"), msg.metadata.get("origin_chat_id")
        if channel and chat_id and not msg.session_key.startswith(f"{channel}:"):
            msg.session_key_override = f"{channel}:{chat_id}"
            # sent as the chat's own user (the heartbeat's and a job's turns have no real sender):
            # the next start answers it while that user is still allowed; a group's, as a group's
            identity = self.sessions.chat_identity(self.sessions.path_for(msg.session_key))
            private = identity.get("is_group") is False and identity.get("sender_id")
            msg.sender_id = str(identity["sender_id"]) if private else ""
        try:
            self.keep_unanswered(msg, self._context_of(msg))
        except Exception as exc:  # noqa: BLE001 - a full disk: say what was lost
            logger.error("{}: a sub-agent's report could not be kept: {}", msg.session_key, exc)

    def record_failure_reply(self, ctx: MessageContext, text: str) -> dict[str, Any]:
        """Save the note a failed turn answered with, after its saved user message: the session
        then shows the message answered (gateway/missed.py would answer it again at a restart).
        Returns what the note's outbound message carries so its delivery is recorded too."""
        try:
            session = self.sessions.get(ctx.session_key)
            stamp = tz_now(self.tz).isoformat()
            self.sessions.append(session, {"role": "assistant", "content": text, "timestamp": stamp})
            return {DELIVERY_KEY: delivery_of(session)}
        except Exception as exc:  # noqa: BLE001 - the turn failed already; say why this is missing
            logger.warning("{}: the failure note could not be saved: {}", ctx.session_key, exc)
            return {}

    # ------------------------------------------------------------------ /new
    @staticmethod
    def new_done_before(session: Session, message_id: Any) -> bool:
        """A `/new` its platform served again after a crash (its id is recorded in the session it
        started): done already, it must not archive what was said since."""
        if message_id is not None and session.metadata.get("new_by") == message_id:
            logger.info("{}: /new {} was done before; not again", session.key, message_id)
            return True
        return False

    @staticmethod
    def answered_ids(session: Session) -> list[Any]:
        """The platform ids of what was said before a /new: one of them served again after a crash
        (its confirmation held back by another chat's message) must not be answered again in the
        new session, nor come back into it. Taken before the transcript is archived."""
        return [
            m["message_id"]
            for m in _newest_held(session.messages)
            if m.get("role") == "user" and m.get("message_id") is not None
        ]

    def carry_into_new(
        self, session_key: str, old_metadata: Mapping[str, Any], answered: list[Any], message_id: Any
    ) -> None:
        """Mark the session a /new started: the ids answered before it, the /new's own id, and whose
        chat it is (`old_metadata`, the archived session's)."""
        # whose chat it is goes on: cron jobs and the heartbeat read it before the chat's next message
        # (without it, the owner's reminders ran with a stranger's trust and the heartbeat found no
        # chat). A guest's is not carried: their next message says what they are now.
        carried = {key: old_metadata[key] for key in IDENTITY_KEYS if key in old_metadata}
        marks: dict[str, Any] = {} if old_metadata.get("guest") else carried
        if answered:
            marks["answered_before_new"] = answered[-ANSWERED_BEFORE_NEW_KEPT:]
        if message_id is not None:
            marks["new_by"] = message_id
        if marks:
            self.sessions.set_metadata(self.sessions.get(session_key), **marks)


def _newest_held(messages: MessageLog) -> list[dict[str, Any]]:
    """The newest messages still held in RAM (no file reads per message): a message served again
    was saved moments before the crash, and messages from 32 before the consolidation pointer on
    are held."""
    return messages[max(messages.cold_count, len(messages) - SERVED_AGAIN_WINDOW) :]
