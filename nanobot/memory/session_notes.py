"""Session notes written on /new: `memory/YYYY-MM-DD-<slug>.md` with a summary of the session.

The note reads the end of the transcript (MAX_TRANSCRIPT_CHARS of it), walking back from the last
message: a months-long session's older messages stay on disk (SessionStore reads them on demand).

The summary is untrusted input: `memory.validation` checks it first. A refused answer is retried once
with the reason stated to the model; a second refusal (or a failed call) writes a raw excerpt of the
transcript instead, so nothing refused reaches the note. The small-model profile asks for plain
sentences without offering a tool.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory import small_profile
from nanobot.memory.asking import ask_until_accepted
from nanobot.memory.store import MemoryStore, slugify
from nanobot.memory.transcript import last_time, render_tail
from nanobot.memory.validation import (
    EchoSources,
    Refusal,
    check_note,
    check_text,
    schema_text,
    tool_arguments,
)
from nanobot.providers.base import LLMError, LLMProvider, LLMResponse
from nanobot.util.tool_args import as_dict

MIN_USER_MESSAGES = 3
SLUG_WORDS = 4
MAX_TRANSCRIPT_CHARS = 60_000
RAW_EXCERPT_CHARS = 3_000

SESSION_NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "save_session_note",
        "description": "Save a note about the finished session.",
        "parameters": {
            "type": "object",
            "properties": {
                "slug": {
                    "type": "string",
                    "description": "2-5 lowercase words joined by '-', naming the topic",
                },
                "title": {"type": "string"},
                "summary": {
                    "type": "string",
                    "description": "Markdown: what was discussed, decisions, facts learned, open TODOs",
                },
            },
            "required": ["slug", "summary"],
        },
    },
}

NOTE_SYSTEM = """A chat session just ended. Call save_session_note with a short topic slug and a
Markdown summary: what was discussed, decisions made, facts learned about the user, open TODOs."""

RETRY_NOTE = """Your previous answer was refused: {reason}.
Call save_session_note again with your own summary of the session."""


async def write_session_note(
    provider: LLMProvider,
    memory: MemoryStore,
    messages: Sequence[dict[str, Any]],
    session_key: str,
    *,
    small_model: bool = False,
    origin: str = "",
    forgotten_since: int | None = None,
) -> Path | None:
    """Write the note (LLM summary, or a raw excerpt as fallback). None when the session was too short.
    `origin` (seam.memory_origin) is named in the header of a conversation not the owner's own."""
    users = islice((m for m in messages if m.get("role") == "user" and not m.get("guest")), MIN_USER_MESSAGES)
    if sum(1 for _ in users) < MIN_USER_MESSAGES:
        return None
    transcript = render_tail(messages, MAX_TRANSCRIPT_CHARS)
    started = str(messages[0].get("timestamp", ""))[:16].replace("T", " ")
    header = f"Session: {session_key}\nStarted: {started or 'unknown'}\nMessages: {len(messages)}"
    if origin:
        header += f"\nFrom: {origin} (what its members said, not the owner's word)"
    # named by the day the conversation ended, not the day it was summarised: a /new retried at the
    # next start, or done at shutdown, is processed days later, and "today" would then find it
    ended = last_time(messages, memory.tz, memory.now())
    # a fact forgotten since the conversation ended (while it was consolidated, or the note written)
    forgets = memory.forget_count if forgotten_since is None else forgotten_since
    try:
        note = await (_small(provider, messages, transcript) if small_model else _with_tool(provider, transcript))
        if not isinstance(note, Refusal):
            slug, title, summary = note
            return memory.write_session_note(slug, f"# {title}\n\n{header}\n\n{summary}", ended, forgets)
        logger.warning("session note: no usable summary ({}); writing a raw excerpt", note.logged_reason)
    except LLMError as exc:
        logger.warning("session note call failed ({}); writing a raw excerpt", exc)
    excerpt = transcript[-RAW_EXCERPT_CHARS:]
    slug = ended.strftime("%H%M")
    return memory.write_session_note(slug, f"# Session {slug}\n\n{header}\n\n## Excerpt\n\n{excerpt}", ended)


async def _with_tool(provider: LLMProvider, transcript: str) -> tuple[str, str, str] | Refusal:
    prompt = [{"role": "system", "content": NOTE_SYSTEM}, {"role": "user", "content": transcript}]
    sources = EchoSources(schema_text(SESSION_NOTE_TOOL), NOTE_SYSTEM + RETRY_NOTE, transcript)
    return await ask_until_accepted(
        lambda p: provider.chat(
            p,
            [SESSION_NOTE_TOOL],
            max_tokens=1500,
            temperature=0.0,
            tool_choice={"type": "function", "function": {"name": "save_session_note"}},
        ),
        prompt,
        lambda response: _check(response, sources),
        lambda p, refusal: [*p, {"role": "user", "content": RETRY_NOTE.format(reason=refusal.reason)}],
        what="session note",
    )


async def _small(
    provider: LLMProvider, messages: Sequence[dict[str, Any]], transcript: str
) -> tuple[str, str, str] | Refusal:
    """The small-model profile: one plain summary question about what the user said."""
    text = small_profile.quoted_user_text(messages)
    sources = EchoSources(schema_text(SESSION_NOTE_TOOL), small_profile.INSTRUCTIONS, transcript + "\n" + text)

    def check(reply: str) -> tuple[str, str, str] | Refusal:
        summary = small_profile.parse_summary(reply)
        return summary if isinstance(summary, Refusal) else _named({"summary": summary}, sources)

    return await small_profile.ask_checked(provider, text, small_profile.SUMMARY_QUESTION, check, Counter())


def _check(response: LLMResponse, sources: EchoSources) -> tuple[str, str, str] | Refusal:
    """(slug, title, summary) of a usable save_session_note call, or the refusal."""
    args = tool_arguments(response, "save_session_note", as_dict)
    return args if isinstance(args, Refusal) else _named(args, sources)


def _named(args: dict[str, Any], sources: EchoSources) -> tuple[str, str, str] | Refusal:
    """The checked summary with a slug and title (unusable ones are made from the summary's words)."""
    summary = check_note(args.get("summary"), "summary", sources)
    if isinstance(summary, Refusal):
        return summary
    slug_raw = args.get("slug")
    title_raw = args.get("title")
    words = "-".join(summary.split()[:SLUG_WORDS])
    slug = slugify(slug_raw if isinstance(check_text(slug_raw, "slug", sources), str) else words)
    title = title_raw if isinstance(check_text(title_raw, "title", sources), str) else slug
    title = " ".join(str(title).split())[:80] or slug
    if title == slug:
        title = slug.replace("-", " ").capitalize()
    return slug, title, summary
