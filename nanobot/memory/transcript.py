"""Render session messages as a plain transcript for memory LLM calls, and pick legal boundaries."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from nanobot.config.paths import MEMORY_DIR
from nanobot.session.session import speaker
from nanobot.timeutil import parse_iso_or_none
from nanobot.util.text import truncate_middle

MAX_TOOL_RESULT_IN_TRANSCRIPT = 1_500
MAX_MESSAGE_IN_TRANSCRIPT = 20_000


def _stamp(msg: dict[str, Any]) -> str:
    ts = str(msg.get("timestamp", ""))
    return f"[{ts[:16].replace('T', ' ')}] " if ts else ""


def render_message(msg: dict[str, Any]) -> str:
    role = msg.get("role", "?")
    content = msg.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "[image]")) for p in content if isinstance(p, dict))
    text = str(content or "")
    if role == "tool":  # indented as a message's further lines are: a page's "USER: …" is the page's
        body = truncate_middle(text, MAX_TOOL_RESULT_IN_TRANSCRIPT).replace("\n", "\n  ")
        return f"{_stamp(msg)}TOOL {msg.get('name', '')}: {body}"
    if role == "assistant" and msg.get("tool_calls"):
        calls = ", ".join(c.get("function", {}).get("name", "?") for c in msg["tool_calls"])
        text = (text + " " if text else "") + f"[called tools: {calls}]"
    who = f" {speaker(msg)}" if role == "user" and speaker(msg) else ""  # a group member: by name
    # a message's further lines are indented: a member's "[stamp] USER 555 (@owner): …" typed on a
    # line of its own reads as part of their message, not as the owner's line
    body = truncate_middle(text, MAX_MESSAGE_IN_TRANSCRIPT).replace("\n", "\n  ")
    return f"{_stamp(msg)}{role.upper()}{who}: {body}"


def render_transcript(messages: list[dict[str, Any]]) -> str:
    return "\n".join(render_message(m) for m in messages)


def render_tail(messages: Sequence[dict[str, Any]], max_chars: int) -> str:
    """render_transcript cut to its last `max_chars` characters (after a "[...]" line when cut),
    rendering only the messages that reach into them, from the last one back."""
    rendered: list[str] = []
    length = -1  # the separators: one fewer than the messages
    turn: list[str] = []  # the messages after the last user message seen, not yet kept
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        turn.append(render_message(message))
        if message.get("role") != "user" and index > 0:
            continue
        if message.get("role") == "user" and message.get("guest"):  # as owners_part: left out
            turn = []
            continue
        for text in turn:
            rendered.append(text)
            length += len(text) + 1
        turn = []
        if length > max_chars:
            return "[...]\n" + "\n".join(reversed(rendered))[-max_chars:]
    return "\n".join(reversed(rendered))


def boundary_after(messages: Sequence[dict[str, Any]], start: int, min_end: int) -> int:
    """The first legal cut at or after `min_end`: just before a user message.

    A tail without a later user message is cut at the end of a complete tool group instead (just
    before an assistant message, never between a tool call and its results); failing that, at the end.
    """
    n = len(messages)
    min_end = max(min_end, start + 1)
    for i in range(min_end, n):
        if messages[i].get("role") == "user":
            return i
    for i in range(min_end, n):
        if messages[i].get("role") == "assistant":  # the previous tool group (if any) is complete
            return i
    return n


def chunk_time(messages: list[dict[str, Any]], tz: Any, default: datetime) -> tuple[datetime, datetime]:
    """(first, last) message time of a chunk in the memory timezone; `default` when unknown."""
    found = (parse_iso_or_none(m.get("timestamp"), tz) for m in messages)
    stamps = [s.astimezone(tz) for s in found if s is not None]
    return (stamps[0], stamps[-1]) if stamps else (default, default)


#: tools whose results are the owner's own memory, not text from outside
MEMORY_TOOLS = frozenset({"memory_search", "memory_get"})


def tool_text(messages: Sequence[dict[str, Any]], workspace: Path) -> str:
    """The text of the tool results among `messages` that came from outside (web pages, files,
    command output), one per line. What the agent read back from the owner's memory (memory_search,
    memory_get, read_file under the workspace's memory/, by any spelling of the path) is left out:
    a fact it corrects is theirs."""
    from_memory = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {} if isinstance(call, dict) else {}
            if function.get("name") == "read_file" and _reads_memory(function.get("arguments"), workspace):
                from_memory.add(call.get("id"))
    return "\n".join(
        str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool" and m.get("name") not in MEMORY_TOOLS and m.get("tool_call_id") not in from_memory
    )


def _reads_memory(arguments: Any, workspace: Path) -> bool:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return False
    raw = arguments.get("path") if isinstance(arguments, dict) else None
    if not isinstance(raw, str) or not raw.strip() or "\0" in raw:
        return False
    path = Path(os.path.expanduser(raw.strip()))
    try:
        where = (path if path.is_absolute() else workspace / path).resolve()
        return where.is_relative_to((workspace / MEMORY_DIR).resolve())
    except (OSError, RuntimeError, ValueError):
        return False


def last_time(messages: Sequence[dict[str, Any]], tz: Any, default: datetime) -> datetime:
    """The time of the last message that has one, in the memory timezone (`default` when none
    has): read from the end, so a long archive's older messages stay on disk."""
    for message in reversed(messages):
        if (stamp := parse_iso_or_none(message.get("timestamp"), tz)) is not None:
            return stamp.astimezone(tz)
    return default


def owners_part(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` without the guests' turns: a user message marked `guest` and what followed it up
    to the next user message. A session's trust is its first message's, and a new one starts when
    it changes; a message saved without a turn (given up with /stop, kept at a shutdown) can still
    land in the owner's session, and must not reach the owner's memory as the owner's words."""
    kept: list[dict[str, Any]] = []
    guests_turn = False
    for message in messages:
        if message.get("role") == "user":
            guests_turn = bool(message.get("guest"))
        if not guests_turn:
            kept.append(message)
    return kept
