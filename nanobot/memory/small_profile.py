"""The small-model profile: plain-text memory prompts for models that cannot be trusted with tools.

Small local models (the embedded `local` provider, or any model configured with
`agents.defaults.smallModel`) rarely produce usable tool calls: they echo the schema, emit template
tokens or skip the call. With this profile consolidation, the pre-compaction flush and session notes
ask for the plainest answer instead, two labelled parts in a fenced block:

    SUMMARY: one or two sentences about the conversation
    FACTS:
    - one fact about the user per line

The model never rewrites MEMORY.md here: its facts are added to the existing file, so it cannot drop
old ones. Everything parsed here is still checked by `memory.validation` like a tool call's arguments.
"""

from __future__ import annotations

import re

from nanobot.memory.validation import Refusal

MAX_REPLY_TOKENS = 256
MAX_FACTS = 12

INSTRUCTIONS = """Read the conversation and write notes about it.
Answer with exactly this block and nothing else:
SUMMARY: one or two sentences saying what the user said or asked.
FACTS:
- one fact about the user per line (write NONE when there is no fact)"""

RETRY_NOTE = """Your answer was refused: {reason}.
Write it again in your own words: SUMMARY: then one or two sentences, FACTS: then '- ' lines."""

NOTE_INSTRUCTIONS = """Read the conversation and write a short note about it.
Answer with two or three plain sentences: what was discussed and what the user wants remembered."""

FLUSH_INSTRUCTIONS = """Read the conversation. List the facts about the user worth remembering,
one per line starting with '- '. If there is nothing new, answer exactly NO_REPLY."""

_FENCE_RE = re.compile(r"```[a-zA-Z]*\n?(.*?)(?:```|\Z)", re.S)
_LABEL_RE = re.compile(r"^\s*[#*]*\s*(SUMMARY|FACTS)\s*\**\s*:\s*\**[ \t]*", re.I | re.M)
_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)")
_NONE_RE = re.compile(r"^\s*(none|nothing|n/a|no facts?)\.?\s*$", re.I)


def consolidation_messages(transcript: str, stamp: str) -> list[dict[str, str]]:
    """The chat messages of a small-profile consolidation (no tools offered)."""
    return [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": f"Conversation (started {stamp}):\n{transcript}"},
    ]


def plain_messages(instructions: str, transcript: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": instructions}, {"role": "user", "content": transcript}]


def bullets(text: str) -> list[str]:
    """The `- ` lines of a text (numbered and `*` lists accepted), normalised to `- fact`."""
    found = []
    for line in text.splitlines():
        match = _BULLET_RE.match(line)
        if match and not _NONE_RE.match(match.group(1)):
            found.append(f"- {match.group(1).strip()}")
    return found[:MAX_FACTS]


def parse_reply(text: str) -> tuple[str, list[str]] | Refusal:
    """(summary, fact bullets) from a small-profile answer, or why it cannot be read."""
    fenced = _FENCE_RE.search(text)
    body = fenced.group(1) if fenced else text
    parts = _LABEL_RE.split(body)
    if len(parts) < 3:  # no label at all: bullets are facts, the other lines the summary
        facts = bullets(body)
        summary = "\n".join(line for line in body.splitlines() if not _BULLET_RE.match(line)).strip()
    else:
        labelled: dict[str, str] = {}
        for label, value in zip(parts[1::2], parts[2::2], strict=False):
            labelled.setdefault(label.upper(), value.strip())
        summary = labelled.get("SUMMARY", parts[0]).strip()
        facts = bullets(labelled.get("FACTS", ""))
        # a summary written as a bullet list still is a summary
        summary = " ".join(b[2:] for b in bullets(summary)) or summary
    if not summary:
        return Refusal("empty", "summary", "there is no SUMMARY line")
    return " ".join(summary.split()), facts
