"""The small-model profile: plain questions for models that cannot be trusted with tools or formats.

Small local models (the embedded `local` provider, or any model configured with
`agents.defaults.smallModel`) rarely produce usable tool calls: they echo the schema, emit template
tokens or skip the call. Measured with the demo model (SmolLM2-135M), even a two-field text format
fails: shown a `USER:`/`ASSISTANT:` transcript it continues the dialogue instead of summarising it.
What such models do follow is one plain question about a quoted text. So this profile:

- quotes what the user said in the chunk (their messages carry the facts to remember);
- asks "Write a one-sentence summary of the text." for the history entry (required);
- asks "List the facts the text states, one per line starting with '- '." for new MEMORY.md facts
  (optional: an answer without bullets adds nothing).

The model never rewrites MEMORY.md here: its facts are added to the existing file, so it cannot drop
old ones. Everything parsed here is checked by `memory.validation` like a tool call's arguments.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from nanobot.memory.asking import ask_until_accepted
from nanobot.memory.validation import Refusal
from nanobot.providers.base import LLMProvider

T = TypeVar("T")

MAX_REPLY_TOKENS = 160
#: one answer plus one retry that states why the first was refused
MAX_FACTS = 12
#: a small model's window is small: only the end of a long chunk is quoted
MAX_QUOTED_CHARS = 6_000

SUMMARY_QUESTION = "Write a one-sentence summary of the text."
FACTS_QUESTION = "List the facts the text states, one per line starting with '- '."
RETRY_NOTE = "Your answer was refused: {reason}. {question} Use your own words."
INSTRUCTIONS = "\n".join((SUMMARY_QUESTION, FACTS_QUESTION, RETRY_NOTE))

#: "A one-sentence summary of the text would be:" and similar lead-ins before the actual answer
_LEAD_IN_RE = re.compile(r"^[^\n:]{0,80}\b(summary|summarised|summarized|facts?)\b[^\n:]{0,40}:\s*", re.I)
_FENCE_RE = re.compile(r"```[a-zA-Z]*\n?(.*?)(?:```|\Z)", re.S)
_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)")
_NONE_RE = re.compile(r"^\s*(none|nothing|n/a|no facts?)\.?\s*$", re.I)
_QUOTES = "\"'“”‘’`"


def pieces_within(messages: Sequence[dict[str, Any]], max_chars: int) -> list[list[dict[str, Any]]]:
    """`messages` cut, between messages, into runs whose user text takes at most `max_chars` (a
    single longer message is a run of its own), so that quoted_user_text reads all of each."""
    pieces: list[list[dict[str, Any]]] = [[]]
    size = 0
    for msg in messages:
        length = len(str(msg.get("content") or "")) if msg.get("role") == "user" else 0
        if pieces[-1] and size + length > max_chars:
            pieces.append([])
            size = 0
        pieces[-1].append(msg)
        size += length
    return pieces


def quoted_user_text(messages: Sequence[dict[str, Any]]) -> str:
    """What the user said in the chunk, as one quoted text (the end of it when long), read from
    the last message back: a long session's older messages are not read."""
    said: list[str] = []
    length = -1  # the separators: one fewer than the parts
    for index in range(len(messages) - 1, -1, -1):
        msg = messages[index]
        if msg.get("role") != "user" or msg.get("guest"):  # a guest's words are not the owner's
            continue
        content = msg.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = " ".join(str(content or "").split())
        if text:
            said.append(text)
            length += len(text) + 1
            if length >= MAX_QUOTED_CHARS:
                break
    return f'Text: "{" ".join(reversed(said))[-MAX_QUOTED_CHARS:]}"'


def question(text: str, ask: str) -> list[dict[str, str]]:
    """One plain question about a quoted text (no system prompt: tiny models follow it best)."""
    return [{"role": "user", "content": f"{text}\n\n{ask}"}]


def bullets(text: str) -> list[str]:
    """The `- ` lines of a text (numbered and `*` lists accepted), normalised to `- fact`."""
    found = []
    for line in text.splitlines():
        match = _BULLET_RE.match(line)
        if match and not _NONE_RE.match(match.group(1)):
            found.append(f"- {match.group(1).strip()}")
    return found[:MAX_FACTS]


def parse_summary(reply: str) -> str | Refusal:
    """The summary sentence(s) of an answer: fences, a lead-in and surrounding quotes removed."""
    fenced = _FENCE_RE.search(reply)
    text = (fenced.group(1) if fenced else reply).strip()
    text = _LEAD_IN_RE.sub("", text, count=1).strip()
    if len(text) > 1 and text[0] in _QUOTES and text[-1] in _QUOTES + ".":
        text = text.strip(_QUOTES + " ").rstrip(_QUOTES)
    text = " ".join(text.split())
    if not text:
        return Refusal("empty", "summary", "there is no summary")
    return text


def parse_facts(reply: str) -> list[str]:
    """New fact bullets from an answer; none when it has no bullet lines."""
    fenced = _FENCE_RE.search(reply)
    return bullets(fenced.group(1) if fenced else reply)


async def ask_checked(
    provider: LLMProvider,
    text: str,
    ask: str,
    check: Callable[[str], T | Refusal],
    outcomes: Counter[str],
) -> T | Refusal:
    """Ask one plain question; a refused answer is asked again once with the reason stated.

    `outcomes` counts "refused:<rule>" and "retried" like the tool-call path does."""
    return await ask_until_accepted(
        lambda p: provider.chat(p, None, max_tokens=MAX_REPLY_TOKENS, temperature=0.0),
        question(text, ask),
        lambda response: check(response.content or ""),
        lambda _p, refusal: question(text, RETRY_NOTE.format(reason=refusal.reason, question=ask)),
        what="small-model memory answer",
        outcomes=outcomes,
    )


def in_plain_text(configured: bool, provider: object) -> bool:
    """Whether memory work asks its questions in plain text (this profile): configured so, or the
    model said it takes no tools (a forced tool call would fail every time)."""
    return configured or bool(getattr(provider, "tools_refused", False))  # duck-typed fakes too
