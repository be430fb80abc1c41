"""The one message splitter every channel uses.

Long replies are cut at the platform limit, preferring paragraph, then line, then word boundaries.
A cut inside a code fence closes the fence at the end of the part and reopens it (with the same
language tag) at the start of the next, so every part renders on its own. A fence is closed only by a
bare fence of its own character at least as long (```` around ``` keeps the inner one as text, and
~~~ is closed by ~~~), and a cut one is closed with its own marker.
A cut never leaves a part whose open code block holds only blank lines (a fence opener and its
closer), nor a part of block syntax alone (`#`, `>`, a list marker): when every boundary would, the
window is cut hard at its length instead. Text without spaces (Chinese, Japanese) is cut after a
sentence's end or a comma when there is one, and a hard cut never falls inside what shows as one
character: an emoji sequence (👨‍👩‍👧, 👍🏽, a flag), a letter and its accent, a Hangul syllable.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from nanobot.util.text import character_start

TELEGRAM_MAX_CHARS = 4096
DISCORD_MAX_CHARS = 2000
# Messages one reply may become: a model that ignores max_tokens (5 MB) made 1,250 messages, minutes
# of a flooded chat. Past it the last message says the reply was cut (the session keeps it whole).
MAX_REPLY_PARTS = 10

T = TypeVar("T")


def capped_parts(parts: list[T], note: Callable[[str], T]) -> list[T]:
    """`parts`, or the first MAX_REPLY_PARTS - 1 of them and `note(text)` saying the rest was cut."""
    if len(parts) <= MAX_REPLY_PARTS:
        return parts
    text = (
        f"[The reply was cut here: it would have taken {len(parts)} messages. "
        "Ask for the rest in smaller parts.]"
    )
    return [*parts[: MAX_REPLY_PARTS - 1], note(text)]

_FENCE_LINE = re.compile(r"^ {0,3}(```+|~~~+)(.*)$")
_CLOSE_ROOM = 12  # room kept for a closing fence: a newline and the marker (longer ones are reset)
_SEPARATORS = ("\n\n", "\n", " ")
# CJK marks only: "," or "?" inside a long link is no place to cut it
_SENTENCE_ENDS = ("。！？…", "，、；：")  # kept at the end of the part they close
# A boundary is only preferred when the part it ends uses at least this share of the room.
_MIN_FILL = 0.5
# A part that would be nothing but block syntax (a heading's "#", a quote's ">", a list marker, a
# table's "|"): rendered it is empty (Telegram refuses it) or a lone symbol, so the cut goes elsewhere.
_MARKUP_ONLY = re.compile(r"^(?:\s|[#>*+\-|`~=_]|\d+[.)])*$")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the way Telegram and Discord count message characters (a lone
    surrogate, which a sender can put in a message's JSON, counts as one: it raised)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


Measure = Callable[[str], int]


def _fit(text: str, budget: int, measure: Measure) -> int:
    """The largest k such that measure(text[:k]) <= budget."""
    if measure(text) <= budget:
        return len(text)
    lo, hi = 0, min(len(text), budget)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def cut_to(text: str, max_units: int, measure: Measure = utf16_len) -> str:
    """The longest start of `text` that `measure` counts at most `max_units` (a preview's cut)."""
    return text[: character_start(text, _fit(text, max_units, measure))]


def _find_cut(window: str, open_fence: str | None) -> tuple[int, int]:
    """(cut, skip): the part is window[:cut]; `skip` separator characters are dropped after it.

    `open_fence` is the block open at the start of the window. A boundary that would end the part
    inside a code block with nothing in it yet moves to one of the same kind before that block.
    """
    for min_cut in (max(1, int(len(window) * _MIN_FILL)), 1):
        for sep in _SEPARATORS:
            idx = window.rfind(sep)
            while idx >= min_cut:
                if _MARKUP_ONLY.match(window[:idx]):  # "# ", "> ", "- " or "|" alone: no message
                    idx = window.rfind(sep, 0, idx)
                    continue
                empty_from = _empty_block_start(open_fence, window[:idx])
                if empty_from is None:
                    return idx, len(sep)
                idx = window.rfind(sep, 0, empty_from)
        for ends in _SENTENCE_ENDS:  # prose without spaces: after a sentence's end, else a comma
            idx = max(window.rfind(mark) for mark in ends) + 1
            if idx >= min_cut and _fence_after(open_fence, window[:idx]) is None:  # not in code
                return idx, 0
    return len(window), 0


def _empty_block_start(open_fence: str | None, chunk: str) -> int | None:
    """Where the code block open at the end of `chunk` starts, if it holds only blank lines there.

    None when `chunk` ends outside any block or inside one with text. Sent as a part, such a chunk
    would render as an empty code block (its opener closed at once).
    """
    block_start, block_has_text, offset = 0, False, 0
    for line in chunk.split("\n"):
        after = _fence_after(open_fence, line)
        if open_fence is None:  # outside a block, or this line opens a new one
            block_start, block_has_text = offset, False
        elif after is not None:
            block_has_text = block_has_text or bool(line.strip())
        open_fence = after
        offset += len(line) + 1
    return block_start if open_fence is not None and not block_has_text else None


def _marker(opener: str) -> str:
    """The fence characters an opener line starts with (``` / ~~~~ ...)."""
    m = _FENCE_LINE.match(opener)
    return m.group(1) if m else "```"


def _fence_after(open_fence: str | None, chunk: str) -> str | None:
    """The fence opener still open after `chunk` (None when outside any code block)."""
    for line in chunk.split("\n"):
        m = _FENCE_LINE.match(line)
        if not m:
            continue
        if open_fence is None:
            open_fence = line.strip()
            continue
        marker, opener = m.group(1), _marker(open_fence)
        if not m.group(2).strip() and marker[0] == opener[0] and len(marker) >= len(opener):
            open_fence = None
    return open_fence


def split_message(text: str, max_chars: int, measure: Measure = utf16_len) -> list[str]:
    """Split `text` into parts of at most `max_chars` (as counted by `measure`).

    Returns [] for blank text. Code fences cut by a split are closed and reopened.
    """
    if not text.strip():
        return []
    if measure(text) <= max_chars:
        return [text]
    if max_chars < 32:
        raise ValueError("max_chars too small to split with code fences")
    parts: list[str] = []
    open_fence: str | None = None
    remaining = text
    while remaining:
        prefix = f"{open_fence}\n" if open_fence else ""
        room = max_chars - measure(prefix)
        if measure(remaining) <= room:
            if remaining.strip():  # the blank lines a text ended with are no part of their own
                parts.append(prefix + remaining)
            break
        # Reserve room for a closing fence; the fence opener is reused, so reserve its length too.
        window = remaining[: _fit(remaining, room - _CLOSE_ROOM, measure)]
        cut, skip = _find_cut(window, open_fence)
        if not skip:
            cut = character_start(remaining, cut)
        chunk = remaining[:cut]
        open_fence = _fence_after(open_fence, chunk)
        if open_fence is not None and len(_marker(open_fence)) >= _CLOSE_ROOM:
            open_fence = "```"  # a pathological marker: do not let it eat the next part
        elif open_fence is not None and measure(f"{open_fence}\n") > max_chars // 4:
            # A pathological info string (cut hard inside it): reopen bare, but close with the
            # block's own marker, which ``` would not close when it is ```` or ~~~.
            open_fence = _marker(open_fence)
        part = prefix + chunk
        if open_fence is not None:
            part += "\n" + _marker(open_fence)
        if part.strip():
            parts.append(part)
        remaining = remaining[cut + skip :]
    return parts


class SentSteps:
    """How much of a message reached its chat, in steps (its parts, then its files), kept on the
    message: a reply the channel manager sends again after an outage goes on from the first step
    that did not go out (a part that had arrived was shown twice). `done()` for each step in
    order: whether it went out already; `sent()` after one that went out now."""

    KEY = "sent_steps"

    def __init__(self, msg: Any) -> None:
        self._msg = msg
        self._sent = int(msg.metadata.get(self.KEY, 0) or 0)
        self._step = -1

    def done(self) -> bool:
        self._step += 1
        return self._step < self._sent

    def sent(self) -> None:
        self._sent = self._step + 1
        self._msg.metadata[self.KEY] = self._sent
