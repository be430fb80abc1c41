"""Session notes written on /new: `memory/YYYY-MM-DD-<slug>.md` with a summary of the session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory.store import MemoryStore
from nanobot.memory.transcript import render_transcript
from nanobot.providers.base import LLMError, LLMProvider
from nanobot.util.tool_args import as_dict

MIN_USER_MESSAGES = 3
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


async def write_session_note(
    provider: LLMProvider,
    memory: MemoryStore,
    messages: list[dict[str, Any]],
    session_key: str,
    *,
    model: str | None = None,
) -> Path | None:
    """Write the note (LLM summary, or a raw excerpt as fallback). None when the session was too short."""
    users = [m for m in messages if m.get("role") == "user"]
    if len(users) < MIN_USER_MESSAGES:
        return None
    transcript = render_transcript(messages)
    if len(transcript) > MAX_TRANSCRIPT_CHARS:
        transcript = "[...]\n" + transcript[-MAX_TRANSCRIPT_CHARS:]
    started = str(messages[0].get("timestamp", ""))[:16].replace("T", " ")
    header = f"Session: {session_key}\nStarted: {started or 'unknown'}\nMessages: {len(messages)}"
    try:
        response = await provider.chat(
            [{"role": "system", "content": NOTE_SYSTEM}, {"role": "user", "content": transcript}],
            [SESSION_NOTE_TOOL],
            model=model,
            max_tokens=1500,
            temperature=0.0,
            tool_choice={"type": "function", "function": {"name": "save_session_note"}},
        )
        call = next((c for c in response.tool_calls if c.name == "save_session_note"), None)
        args = as_dict(call.arguments) if call else None
        if args and isinstance(args.get("summary"), str) and args["summary"].strip():
            slug = str(args.get("slug") or "session")
            title = str(args.get("title") or slug.replace("-", " ").capitalize())
            return memory.write_session_note(slug, f"# {title}\n\n{header}\n\n{args['summary'].strip()}")
        logger.warning("session note: no usable save_session_note call; writing a raw excerpt")
    except LLMError as exc:
        logger.warning("session note call failed ({}); writing a raw excerpt", exc)
    excerpt = transcript[-RAW_EXCERPT_CHARS:]
    slug = memory.now().strftime("%H%M")
    return memory.write_session_note(slug, f"# Session {slug}\n\n{header}\n\n## Excerpt\n\n{excerpt}")
