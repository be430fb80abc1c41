"""Token counts for context budgeting: a table-free estimate that leans high, never a download.

Models count tokens with their own tokenizers (cl100k/o200k for OpenAI, SentencePiece for Llama,
Qwen, Gemini…), so no count here is exact for every model; what budgeting needs is a count that
rarely falls below the real one and does not waste much of the window. Holding a BPE table costs
~40 MiB and ~0.5 s to load, so the text is instead cut the way BPE pre-tokenizers cut it (words
with their leading space, 1–3 digit groups, punctuation runs, whitespace runs) and each piece is
priced from its shape: short words one token, longer words and camelCase more, non-ASCII letters
by their script (Han characters cost the most). The prices were fitted against cl100k on English
prose, Python code, JSON tool schemas and Chinese/Japanese/Korean text, then raised by
`SAFETY_MARGIN`; `benchmarks/token_estimate.py` prints the current ratios (estimate / cl100k).
Very short CJK strings and base64-like blobs can still come out below cl100k; the memory
settings' safety buffer absorbs that.

`configure_offline_tokenizer` keeps litellm (the translating route, which counts with tiktoken
itself) on the BPE files bundled inside it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from nanobot.providers.image_tokens import image_part_tokens

SAFETY_MARGIN = 1.05
MESSAGE_OVERHEAD_TOKENS = 4  # role, separators
_TEXT_CACHE_MAX_CHARS = 2_000  # short strings share a big memo; long ones a small one
_LONG_CACHE_ENTRIES = 64  # system prompts (private/group) and tool lists, with room for edits

#: the pre-tokenizer's cut: contractions, words with their leading space, digit groups,
#: punctuation runs (with trailing newlines), newline runs, whitespace runs
_PIECE = re.compile(
    r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+|\d{1,3}| ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: camelCase and ACRONYMWord boundaries: BPE rarely merges across them
_CASE_STEP = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
_ASCII_IN_WORD = 0.3  # an ASCII letter inside a word that also holds non-ASCII letters
_TWO_BYTE = 1.2  # Latin with diacritics, Greek, Cyrillic, Hebrew, Arabic
_HAN = 1.8  # CJK ideographs: common ones are one token, many are two or three
_THREE_BYTE = 1.3  # kana, Hangul, other BMP scripts
_FOUR_BYTE = 3.0  # emoji and rare ideographs
_WIDE = 2.2  # half- and full-width forms (Japanese receipts, full-width Latin typed with an IME)
_COMBINING = 2.0  # combining marks (decomposed accents, zalgo): seldom merged with their letter
#: the words of JSON tool schemas: long, but one token each, and sent with every request
_SCHEMA_WORDS = frozenset(
    [
        "description",
        "parameters",
        "properties",
        "function",
        "required",
        "string",
        "integer",
        "boolean",
        "number",
        "object",
        "array",
        "items",
        "enum",
        "minimum",
        "maximum",
        "default",
        "additionalProperties",
    ]
)


def _bundled_tokenizer_dir() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return folder if folder.is_dir() else None


def configure_offline_tokenizer() -> None:
    """Point tiktoken (and litellm) at the bundled BPE files; keep litellm's price map local."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    folder = _bundled_tokenizer_dir()
    if folder is not None:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
        os.environ.setdefault("CUSTOM_TIKTOKEN_CACHE_DIR", str(folder))


def _char_cost(ch: str) -> float:
    code = ord(ch)
    if code < 0x80:
        return _ASCII_IN_WORD
    if 0x300 <= code < 0x370 or 0x1AB0 <= code < 0x1B00 or 0x20D0 <= code < 0x2100:
        return _COMBINING
    if code < 0x800:
        return _TWO_BYTE
    if code < 0x10000:
        if 0xFF00 <= code <= 0xFFEF:
            return _WIDE
        return _HAN if 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF else _THREE_BYTE
    return _FOUR_BYTE


def _piece_cost(piece: str) -> float:
    if not piece.isascii():
        return max(1.0, sum(_char_cost(ch) for ch in piece))
    if piece.isspace():
        return _whitespace_cost(piece)
    core = piece.rstrip("\r\n") or piece  # punctuation takes the newlines after it along
    last = core[-1]
    length = len(core.lstrip(" ")) or len(core)
    if last.isalpha():
        if piece in _SCHEMA_WORDS:
            return 1.0
        steps = len(_CASE_STEP.findall(piece))
        return (1.0 if length <= 6 else 1.0 + (length - 6) / 5) + 0.8 * steps
    if last.isdigit():
        return 1.0
    # punctuation: JSON's `":"`, `","`, `":{"` are single tokens; longer runs split; a long run of
    # blank lines it takes along (a Windows file's `.\r\n\r\n…`) costs like whitespace alone
    tail = piece[len(core):]
    # a bare CR (an old Mac file, a progress line) merges with nothing: a token each
    blank_lines = _whitespace_cost(tail) if len(tail) > 2 else float(tail.count("\r") - tail.count("\r\n"))
    return (1.0 if length <= 4 else 1.0 + (length - 4) / 2.5) + blank_lines


#: how many of one whitespace character (or CRLF pair) a token holds when they repeat: a run of
#: spaces merges far (indentation costs a token or two), tabs, newlines and CRLFs much less, and
#: alternating kinds hardly at all (15,600 characters of blank lines indented with spaces and tabs
#: are ~7,600 tokens; counted as one run of 2 they took a paste, or a read file, past the window)
_REPEATS_PER_TOKEN = {" ": 64, "\n": 12, "\t": 8, "\r\n": 4, "\r": 1}
_WHITESPACE_UNIT = re.compile(r"\r\n|\s")


def _whitespace_cost(piece: str) -> float:
    if len(piece) <= 2:
        return 1.0
    cost, unit, repeats = 0.0, "", 0
    for match in _WHITESPACE_UNIT.finditer(piece):
        if match.group() == unit:
            repeats += 1
            continue
        if unit:
            cost += 1.0 + (repeats - 1) / _REPEATS_PER_TOKEN.get(unit, 2)
        unit, repeats = match.group(), 1
    # at least 2: a newline and the next line's indentation (a run of spaces alone is often one
    # token, but counting it so keeps the estimate of code above the real count)
    return max(2.0, cost + 1.0 + (repeats - 1) / _REPEATS_PER_TOKEN.get(unit, 2))


def estimate_tokens(text: str) -> int:
    """The estimated token count of `text` (see the module docstring); 0 for an empty text."""
    if not text:
        return 0
    return math.ceil(sum(_piece_cost(piece) for piece in _PIECE.findall(text)) * SAFETY_MARGIN)


@lru_cache(maxsize=8192)
def _count_short(text: str) -> int:
    return estimate_tokens(text)


@lru_cache(maxsize=_LONG_CACHE_ENTRIES)
def _count_long(text: str) -> int:
    """Long texts that recur every turn (the system prompt, the tool schemas) are counted once."""
    return estimate_tokens(text)


def count_text(text: str) -> int:
    if not text:
        return 0
    if len(text) <= _TEXT_CACHE_MAX_CHARS:
        return _count_short(text)
    return _count_long(text)


def count_message(message: dict[str, Any]) -> int:
    """Tokens of one chat message as the LLM will see it (content, tool calls, name)."""
    total = MESSAGE_OVERHEAD_TOKENS
    content = message.get("content")
    if isinstance(content, str):
        total += count_text(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                total += count_text(str(part.get("text", "")))
            else:
                total += image_part_tokens(part)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        total += count_text(str(fn.get("name", ""))) + count_text(str(fn.get("arguments", ""))) + 3
    if message.get("name"):
        total += count_text(str(message["name"]))
    return total


def count_messages(messages: list[dict[str, Any]]) -> int:
    return sum(count_message(m) for m in messages) + 3


def count_tools(schemas: list[dict[str, Any]]) -> int:
    """Tokens of the tool schemas; the same list (byte-stable across turns) is estimated only once."""
    if not schemas:
        return 0
    return count_text(json.dumps(schemas, ensure_ascii=False, separators=(",", ":")))


def cut_to_tokens(
    text: str, max_tokens: int, cut: Callable[[str, int], str], *, max_chars: int | None = None, min_chars: int = 200
) -> str:
    """`text` cut (by `cut(text, chars)`, which says what it left out) to at most `max_chars` and until
    its estimate is at most `max_tokens`; never below `min_chars`. Each round cuts the whole text
    again, so what the cut says it left out is the truth (cut twice, a 100,000-character file was
    said to be 16,000 long)."""
    limit = len(text) if max_chars is None else min(len(text), max_chars)
    shown = text if limit >= len(text) else cut(text, limit)
    for _ in range(6):
        tokens = count_text(shown)
        if tokens <= max_tokens or limit <= min_chars:
            return shown
        limit = max(min_chars, int(limit * max_tokens / tokens * 0.95))
        shown = cut(text, limit)
    return shown
