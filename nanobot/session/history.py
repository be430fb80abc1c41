"""The LLM's view of a session: the unconsolidated tail, aligned to a user turn, tool groups intact."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nanobot.session.session import sender_label
from nanobot.session.store import Session
from nanobot.util.text import truncate_middle, with_attachment_notes

_LLM_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def _complete_indices(messages: Sequence[dict[str, Any]], start: int) -> list[int]:
    """Indices from `start` whose tool groups are whole: no orphan results, no unanswered calls."""
    indices: list[int] = []
    i, n = start, len(messages)
    while i < n:
        msg = messages[i]
        role = msg.get("role")
        if role == "tool":
            i += 1  # a result without its call in the window
            continue
        if role == "assistant" and msg.get("tool_calls"):
            wanted = {c.get("id") for c in msg["tool_calls"]}
            j = i + 1
            group = [i]
            while j < n and messages[j].get("role") == "tool":
                if messages[j].get("tool_call_id") in wanted:
                    group.append(j)
                j += 1
            answered = {messages[k].get("tool_call_id") for k in group[1:]}
            if wanted <= answered:
                indices.extend(group)
            i = j
            continue
        indices.append(i)
        i += 1
    return indices


def history_indices(session: Session, start: int | None = None) -> list[int]:
    """Message indices the LLM sees: from the consolidation pointer, starting at a user message.

    A tool-heavy tail with no user message starts at its first complete assistant message instead.
    """
    messages = session.messages
    key = (len(messages), session.last_consolidated)
    if start is None and session._history_memo is not None and session._history_memo[0] == key:
        return session._history_memo[1]  # computed several times per turn; callers only read it
    begin = session.last_consolidated if start is None else start
    first_user = next((i for i in range(begin, len(messages)) if messages[i].get("role") == "user"), None)
    if first_user is not None:
        begin = first_user
    indices = _complete_indices(messages, begin)
    if start is None:
        session._history_memo = (key, indices, None)
    return indices


def history_tokens(session: Session) -> int:
    """Token estimate of the LLM's view of the session (memoised with the indices)."""
    indices = history_indices(session)
    memo = session._history_memo
    if memo is not None and memo[1] is indices and memo[2] is not None:
        return memo[2]
    total = sum(session.tokens_of(i) for i in indices)
    if memo is not None and memo[1] is indices:
        session._history_memo = (memo[0], indices, total)
    return total


def to_llm_message(
    msg: dict[str, Any], max_user_chars: int, max_tool_chars: int, *, speakers: bool = False
) -> dict[str, Any]:
    """A stored message as the model is sent it; with `speakers` (a group) a user message names
    who wrote it, as the runtime block does for the newest one: without it, "I will pick up the
    kids" of one member read as the next member's promise."""
    out = {k: msg[k] for k in _LLM_KEYS if k in msg and msg[k] is not None}
    if out.get("role") == "assistant" and "content" not in out:
        out["content"] = None
    content = out.get("content")
    if out.get("role") == "user" and msg.get("media") and isinstance(content, str):
        # the files a user sent stay known in later turns (only their own turn showed them)
        content = out["content"] = with_attachment_notes(content, [str(p) for p in msg["media"]])
    if isinstance(content, str):
        if out["role"] == "user":
            out["content"] = truncate_middle(content, max_user_chars)
            if speakers:
                out["content"] = sender_label(msg) + out["content"]
        elif out["role"] == "tool":
            out["content"] = truncate_middle(content, max_tool_chars)
    return out


def build_history(
    session: Session, indices: list[int], max_user_chars: int, max_tool_chars: int
) -> list[dict[str, Any]]:
    speakers = bool(session.metadata.get("is_group"))
    return [
        to_llm_message(session.messages[i], max_user_chars, max_tool_chars, speakers=speakers) for i in indices
    ]
