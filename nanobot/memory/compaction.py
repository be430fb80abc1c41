"""Adaptive compaction: fit a consolidation batch into one LLM call.

When the transcript of a batch is too large for the window, messages larger than half the window
are left out with a note, the rest is split by tokens with an adaptive chunk ratio (base 0.4,
min 0.15, safety margin 1.2) and summarised progressively into a running summary. If a summary
call fails, a fallback summary with counts stands in. Never raises.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from nanobot.memory.transcript import render_message
from nanobot.providers.base import LLMProvider
from nanobot.providers.tokens import count_message, count_text
from nanobot.util.text import pack

BASE_CHUNK_RATIO = 0.4
MIN_CHUNK_RATIO = 0.15
SAFETY_MARGIN = 1.2
OVERSIZED_SHARE = 0.5  # a message above this share of the window is left out
SUMMARY_MAX_TOKENS = 1024

SUMMARY_SYSTEM = """You maintain a running summary of a long conversation for a memory system.
Update the summary with the new part: keep every durable fact, decision, name, date, preference and
open task; drop chit-chat. Answer with the updated summary only."""


def chunk_ratio(avg_message_tokens: float, window_tokens: int) -> float:
    """Smaller chunks when messages are large relative to the window."""
    ratio = BASE_CHUNK_RATIO - (avg_message_tokens * SAFETY_MARGIN) / max(window_tokens, 1)
    return max(MIN_CHUNK_RATIO, min(BASE_CHUNK_RATIO, ratio))


def fallback_summary(messages: list[dict[str, Any]], omitted_note: str) -> str:
    users = sum(1 for m in messages if m.get("role") == "user")
    tools = sorted({m.get("name", "") for m in messages if m.get("role") == "tool"} - {""})
    first = str(messages[0].get("timestamp", ""))[:16] if messages else ""
    last = str(messages[-1].get("timestamp", ""))[:16] if messages else ""
    return (
        f"[summary unavailable: {len(messages)} messages, {users} from the user, "
        f"from {first or '?'} to {last or '?'}; tools used: {', '.join(tools) or 'none'}]{omitted_note}"
    )


async def compact_transcript(
    provider: LLMProvider,
    messages: list[dict[str, Any]],
    window_tokens: int,
    *,
    reserved_tokens: int = 2000,
    max_tokens: int = SUMMARY_MAX_TOKENS,
) -> str:
    """A transcript of `messages` that fits one call: verbatim when it fits, else a progressive summary
    whose calls ask for at most `max_tokens` (SUMMARY_MAX_TOKENS, or less: agents.defaults.maxTokens)."""
    original = [count_message(m) for m in messages]
    oversized = [i for i, size in enumerate(original) if size > window_tokens * OVERSIZED_SHARE]
    omitted_note = ""
    if oversized:
        total = sum(original[i] for i in oversized)
        plural = "s" if len(oversized) > 1 else ""
        omitted_note = (
            f"\n[omitted {len(oversized)} oversized message{plural}, ~{round(total / 1000)}k tokens]"
        )
    skip = set(oversized)
    lines = [render_message(m) for i, m in enumerate(messages) if i not in skip]
    sizes = [count_text(line) + 4 for line in lines]
    available = max(window_tokens - reserved_tokens, window_tokens // 4)
    if sum(sizes) * SAFETY_MARGIN <= available:
        return "\n".join(lines) + omitted_note
    ratio = chunk_ratio(sum(sizes) / max(len(sizes), 1), window_tokens)
    chunk_tokens = max(256, int(window_tokens * ratio / SAFETY_MARGIN))
    chunks = pack(lines, sizes, chunk_tokens)
    logger.info("compaction: {} messages in {} chunks (ratio {:.2f})", len(lines), len(chunks), ratio)
    summary = ""
    for n, chunk in enumerate(chunks, 1):
        prompt = (
            f"## Running summary so far\n\n{summary or '(none yet)'}\n\n"
            f"## New part ({n} of {len(chunks)})\n\n" + "\n".join(chunk)
        )
        try:
            response = await provider.chat(
                [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": prompt}],
                None,
                max_tokens=min(max_tokens, SUMMARY_MAX_TOKENS),
                temperature=0.0,
            )
        except Exception as exc:  # noqa: BLE001 - compaction never raises into the loop
            logger.warning("compaction chunk {} failed: {}", n, exc)
            return fallback_summary(messages, omitted_note) + ("\n\n" + summary if summary else "")
        if response.content and response.content.strip():
            summary = response.content.strip()
    return f"[progressive summary of {len(lines)} messages]\n{summary}{omitted_note}"
