"""Line-based chunking of memory files: ~400-token chunks with ~80 tokens of overlap.

Chunks always start and end on line boundaries so a result can cite `path#Lx-Ly`; a single line
longer than the budget is cut into pieces that all carry that line's number.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from nanobot.memory.fts import is_cjk_char

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers
MAX_SESSION_LINE_CHARS = 4000  # one transcript message rendered for the index


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str
    hash: str


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: one per CJK character, one per four other characters."""
    cjk = sum(1 for ch in text if ord(ch) >= 0x1100 and is_cjk_char(ch))
    return cjk + (len(text) - cjk + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _split_long_line(line: str, max_tokens: int) -> list[str]:
    """Cut a line that alone exceeds the budget into pieces of about max_tokens each."""
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for ch in line:
        cost = 1.0 if is_cjk_char(ch) else 1.0 / CHARS_PER_TOKEN
        if current and used + cost > max_tokens:
            pieces.append("".join(current))
            current, used = [], 0.0
        current.append(ch)
        used += cost
    if current:
        pieces.append("".join(current))
    return pieces


def chunk_lines(lines: list[tuple[int, str]], max_tokens: int = 400, overlap_tokens: int = 80) -> list[Chunk]:
    """Group numbered lines into chunks of at most max_tokens, repeating ~overlap_tokens of lines."""
    overlap_tokens = max(0, min(overlap_tokens, max_tokens // 2))
    units: list[tuple[int, str, int]] = []  # (line number, text, tokens)
    for number, text in lines:
        cost = estimate_tokens(text) + 1  # +1 for the newline
        if cost > max_tokens:
            units.extend(
                (number, piece, estimate_tokens(piece)) for piece in _split_long_line(text, max_tokens)
            )
        else:
            units.append((number, text, cost))

    chunks: list[Chunk] = []
    start = 0
    while start < len(units):
        end = start
        used = 0
        while end < len(units) and (end == start or used + units[end][2] <= max_tokens):
            used += units[end][2]
            end += 1
        body = "\n".join(u[1] for u in units[start:end])
        if body.strip():
            chunks.append(Chunk(units[start][0], units[end - 1][0], body, text_hash(body)))
        if end >= len(units):
            break
        # Step back over trailing units worth ~overlap_tokens, always advancing at least one unit.
        back = end
        kept = 0
        while back - 1 > start and kept + units[back - 1][2] <= overlap_tokens:
            back -= 1
            kept += units[back][2]
        start = back
    return chunks


def chunk_markdown(text: str, max_tokens: int = 400, overlap_tokens: int = 80) -> list[Chunk]:
    """Chunk a Markdown file by lines (line numbers are 1-based)."""
    numbered = list(enumerate(text.splitlines(), start=1))
    return chunk_lines(numbered, max_tokens, overlap_tokens)


def session_lines(text: str) -> list[tuple[int, str]]:
    """The user/assistant messages of a JSONL transcript as `role: text`, keeping file line numbers."""
    out: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(raw)
        except ValueError:
            continue  # a truncated last line after a crash
        if not isinstance(record, dict) or record.get("role") not in ("user", "assistant"):
            continue
        content = record.get("content")
        if isinstance(content, list):  # multimodal content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip():
            flat = " ".join(content.split())[:MAX_SESSION_LINE_CHARS]
            out.append((number, f"{record['role']}: {flat}"))
    return out
