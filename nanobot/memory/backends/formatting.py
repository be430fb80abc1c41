"""format_context: one `<memory-context backend=… scope=…>` section, fitted to the request budget.

Only final prompt shaping happens here: items arrive already ranked and top-k'd by the
backend; the formatter keeps source labels (score, time, native id), keeps native groups apart,
keeps prose as prose, and drops whole trailing items when the token budget is reached.
"""

from __future__ import annotations

import re
from datetime import datetime
from xml.sax.saxutils import quoteattr

from nanobot.memory.backends.contract import MemoryItem, RetrieveResult
from nanobot.providers.tokens import count_text
from nanobot.util.text import truncate_head

MAX_ITEM_CHARS = 1_000
ID_SHOWN_CHARS = 12
# The section's own tags inside a memory's text (which comes from chat text, group members' too):
# a planted "</memory-context>" ended the data early and what followed read as instructions.
_SECTION_TAG = re.compile(r"<\s*/?\s*memory-context", re.IGNORECASE)


def _inert(text: str) -> str:
    """`text` with the section's tags made plain text (the angle bracket replaced)."""
    return _SECTION_TAG.sub(lambda m: "\u2039" + m.group(0)[1:], text)


def _stamp(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M")


def item_line(item: MemoryItem) -> str:
    text = _inert(" ".join(item.text.split()))
    text = truncate_head(text, MAX_ITEM_CHARS)
    labels: list[str] = []
    if item.score is not None:
        labels.append(f"score {item.score:.2f}")
    if item.timestamp is not None:
        labels.append(_stamp(item.timestamp))
    if item.label:
        labels.append(_inert(item.label))
    if item.native_id:
        labels.append(f"id {item.native_id[:ID_SHOWN_CHARS]}")
    return f"- {text}" + (f" [{' · '.join(labels)}]" if labels else "")


def _trim_prose(text: str, max_tokens: int) -> str:
    if count_text(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # binary search on characters: the longest head that fits
        mid = (lo + hi + 1) // 2
        if count_text(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo].rstrip() + " …"


def format_result(backend: str, result: RetrieveResult) -> str:
    """The prompt section, or "" when there is nothing to say."""
    scope = result.request.scope
    budget = result.request.budget
    head = f"<memory-context backend={quoteattr(backend)} scope={quoteattr(scope.label)}>"
    tail = "</memory-context>"
    used = count_text(head) + count_text(tail) + 2
    body: list[str] = []
    if result.prose and result.prose.strip():
        prose = _trim_prose(_inert(result.prose.strip()), max(budget.max_tokens - used, 0))
        if prose.strip():
            body.append(prose)
            used += count_text(prose) + 1
    dropped = 0
    current_group: str | None = None
    for item in result.items:
        lines: list[str] = []
        if item.group and item.group != current_group:
            lines.append(f"[{_inert(item.group)}]")
        lines.append(item_line(item))
        cost = sum(count_text(line) + 1 for line in lines)
        if used + cost > budget.max_tokens:
            dropped += 1
            continue
        if item.group:
            current_group = item.group
        body.extend(lines)
        used += cost
    if dropped:
        result.trace.warnings.append(f"format_context: {dropped} item(s) over the token budget dropped")
    if used < budget.min_tokens:
        result.trace.warnings.append(
            f"format_context: {used} tokens, short of min_tokens {budget.min_tokens}"
        )
    result.trace.token_count = used if body else 0
    if not body:
        return ""
    return "\n".join([head, *body, tail])
