"""A session in memory (its messages and bookkeeping) and the line-level rules of its JSONL file.

`Session.messages` is a MessageLog (message_log.py): indexed from the file's first message, with the
consolidated past read from the file on demand; a plain list given to the constructor is wrapped.

A line with `role` is a message; a line with `_type` is bookkeeping (the last `metadata` line wins).
A bad metadata value is replaced by the previous line's (warned), so one bad line never breaks the
session. Appends write all of a line batch or nothing (`append_all`). SessionStore (store.py) is the
only user of the file-level helpers here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.providers.tokens import count_message
from nanobot.session.message_log import MessageLog
from nanobot.util.fs import append_whole
from nanobot.util.nofollow import open_regular
from nanobot.util.text import with_attachment_notes

METADATA_FORMAT = 1
METADATA_SCAN_LINES = 5  # sessions record `is_group` in their first metadata line


@dataclass
class Session:
    key: str
    path: Path
    messages: MessageLog = field(default_factory=MessageLog)
    metadata: dict[str, Any] = field(default_factory=dict)
    _token_cache: list[int | None] = field(default_factory=list, repr=False)
    archived: bool = False  # set by /new: this object no longer owns the live file
    # per-role content caps of the LLM's view (e.g. {"user": 32000, "tool": 16000}), from the store
    count_caps: Mapping[str, int] = field(default_factory=dict, repr=False)
    # history_indices() memo, keyed by (message count, consolidation pointer): messages are append-only
    _history_memo: tuple[tuple[int, int], list[int], int | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.messages, MessageLog):  # built from a list (tests, callers)
            self.messages = MessageLog(self.messages)

    def replace_with(self, other: Session) -> None:
        """Take `other`'s messages and metadata (the same key's file as another process left it),
        so everyone holding this object sees the file as it is now."""
        self.messages.take(other.messages)
        self.metadata = dict(other.metadata)
        self._token_cache.clear()
        self._history_memo = None

    @property
    def last_consolidated(self) -> int:
        return int(self.metadata.get("last_consolidated", 0))

    def tokens_of(self, index: int) -> int:
        """Token estimate of message `index` as the LLM is sent it (capped content), computed once."""
        while len(self._token_cache) < len(self.messages):
            self._token_cache.append(None)
        cached = self._token_cache[index]
        if cached is None:
            message = self.messages[index]
            content = message.get("content")
            cap = self.count_caps.get(str(message.get("role")))
            if cap and isinstance(content, str) and len(content) > cap:
                # a 1 MB message is stored whole but sent cut to the cap: count what is sent
                message = {**message, "content": content[:cap]}
            if message.get("role") == "user" and message.get("media"):  # sent with its files' notes
                text = str(message.get("content") or "")
                message = {**message, "content": with_attachment_notes(text, [str(p) for p in message["media"]])}
            if message.get("role") == "user" and self.metadata.get("is_group"):  # sent naming its sender
                message = {**message, "content": sender_label(message) + str(message.get("content") or "")}
            cached = count_message(message)
            self._token_cache[index] = cached
        return cached


def speaker(message: Mapping[str, Any]) -> str:
    """Who wrote a stored user message, when its session records it (a group member, a Discord DM):
    "555 (@alice)", "555", or ""."""
    sender = str(message.get("sender_id") or "")
    if not sender.lstrip("-").isdigit():  # a platform's id; the terminal's "user" is the owner
        return ""
    name = str(message.get("username") or "")
    return f"{sender} (@{name})" if name else sender


def sender_label(message: Mapping[str, Any]) -> str:
    """What a group's earlier user message is sent with: "[Sender: 555 (@alice)] ", or ""."""
    who = speaker(message)
    return f"[Sender: {who}] " if who else ""


def first_metadata(path: Path, key: str) -> dict[str, Any]:
    """The first metadata line holding `key` among the first few lines of a transcript ({} if none)."""
    try:
        with open(open_regular(path), encoding="utf-8", errors="replace") as fh:  # never a FIFO's open
            for _, line in zip(range(METADATA_SCAN_LINES), fh, strict=False):
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("_type") == "metadata" and key in obj:
                    return obj
    except OSError:
        pass
    return {}


class StorageError(OSError):
    """A session could not be saved (disk full, read-only workspace); nothing partial was left."""

    def __init__(self, path: Path, cause: OSError) -> None:
        reason = cause.strerror or str(cause)
        self.message = (
            f"cannot save the conversation to {path}: {reason}. Free disk space or make the "
            "workspace writable; this message was not processed."
        )
        super().__init__(cause.errno, self.message)

    def __str__(self) -> str:
        return self.message


def append_all(fd: int, data: bytes, end: int, path: Path) -> None:
    """Write all of `data` at the end of the file, or nothing: a failure (ENOSPC, EROFS, EIO)
    cuts the file back to `end`, so no half line is left for the next load to trip over."""
    try:
        append_whole(fd, data, end)
    except OSError as exc:
        raise StorageError(path, exc) from exc


def valid_pointer(value: Any) -> bool:
    """Whether a `last_consolidated` value can be used: a count of messages (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def valid_metadata(key: str, lineno: int, obj: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """A metadata line's fields with bad values replaced by the previous line's (warned), so one
    bad line never breaks the session."""
    meta = {k: v for k, v in obj.items() if k != "_type"}
    pointer = meta.get("last_consolidated", 0)
    if not valid_pointer(pointer):
        logger.warning(
            "session {}: ignoring invalid last_consolidated {!r} on line {}", key, pointer, lineno
        )
        meta.pop("last_consolidated", None)
        if "last_consolidated" in previous:
            meta["last_consolidated"] = previous["last_consolidated"]
    if not isinstance(meta.get("is_group", False), bool):
        logger.warning("session {}: ignoring invalid is_group {!r} on line {}", key, meta["is_group"], lineno)
        meta.pop("is_group")
    return meta


_ROLES = frozenset({"user", "assistant", "tool", "system"})


def message_problem(obj: dict[str, Any]) -> str | None:
    """Why a transcript line with a role cannot be a message the model is sent (None when it can):
    a line edited by hand or damaged (`"tool_calls": "bad"`) loaded, then failed every later turn
    of the chat, whose messages were not saved."""
    if obj.get("role") not in _ROLES:
        return f"unknown role {obj.get('role')!r}"
    if not isinstance(obj.get("content"), (str, list, type(None))):
        return "content is neither text nor a list of parts"
    calls = obj.get("tool_calls")
    if calls is not None and not (
        isinstance(calls, list)
        and all(
            isinstance(c, dict) and isinstance(c.get("id"), str)
            and isinstance(c.get("function"), dict) and isinstance(c["function"].get("name"), str)
            for c in calls
        )
    ):
        return "tool_calls is not a list of calls with an id and a function name"
    if not isinstance(obj.get("tool_call_id", ""), str):
        return "tool_call_id is not text"
    return None


def delivery_of(session: Session, through: int | None = None) -> dict[str, Any]:
    """What a reply carries so its delivery can be recorded: the session, how many of its messages
    the reply covers, and the session's first timestamp (a session restarted by /new meanwhile is
    another session under the same key)."""
    first = session.messages[0].get("timestamp") if session.messages else None
    count = len(session.messages) if through is None else through
    return {"session": session.key, "through": count, "first": first}
