"""Whose chat a transcript is, read from the transcripts themselves (for SessionStore).

A transcript's first message records its session key and who the chat belongs to (is_group,
sender_id, username, guest); older files only have their names, and a session an earlier version's
/new started recorded nothing until its next message, so its chat's newest archive answers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot.session.session import first_metadata
from nanobot.session.transcripts import TRANSCRIPT_SUFFIX, archived_stem


def key_of(path: Path) -> str:
    """The session key a transcript (live or archived) belongs to: recorded in its metadata when
    its first message was saved; for older files decoded from the file name, which cannot tell a
    forum topic's `telegram:-100123:7` from a chat `-100123_7`."""
    key = first_metadata(path, "session_key").get("session_key")
    if isinstance(key, str) and ":" in key:
        return key
    channel, _, chat_id = (archived_stem(path) or path.stem).partition("_")
    return f"{channel}:{chat_id}"


def chat_identity(path: Path, archive_dir: Path) -> dict[str, Any]:
    """Whose chat a live transcript is (the metadata its first message recorded), {} when unknown."""
    first = first_metadata(path, "is_group")
    if first or not archive_dir.is_dir():
        return first
    pattern = f"{path.stem}-*{TRANSCRIPT_SUFFIX}"
    archives = [p for p in archive_dir.glob(pattern) if archived_stem(p) == path.stem]
    for archived in sorted(archives, key=lambda p: p.name, reverse=True):  # names end in their stamp
        if found := first_metadata(archived, "is_group"):
            return found
    return {}


def last_private_chat(
    sessions_dir: Path,
    archive_dir: Path,
    skip_channels: tuple[str, ...],
    allowed: Callable[[str, str, str | None], bool] | None = None,
) -> tuple[str, str] | None:
    """(channel, chat id) of the most recently written private session on a channel not in
    `skip_channels` whose user `allowed(channel, sender id, username)` still lists; a session that
    does not say whether it is a group counts as one, a guest's is skipped."""
    if not sessions_dir.is_dir():
        return None
    for path in sorted(sessions_dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        channel, _, chat_id = key_of(path).partition(":")
        if channel in skip_channels or not chat_id:
            continue
        first = chat_identity(path, archive_dir)
        if first.get("is_group", True) or first.get("guest"):
            continue
        user = str(first.get("sender_id") or chat_id)
        if allowed is None or allowed(channel, user, first.get("username")):
            return channel, chat_id
    return None
