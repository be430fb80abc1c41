"""Chunking of memory files into search units that follow the document's own structure.

- Markdown notes: a chunk never spans two sections; it carries its heading path as a title
  ("Preferences > Food"), so a hit shows where it came from.
- Transcripts: a chunk is a run of whole messages, started at a user message where possible and
  never spanning two days; its title is the day and the conversation it comes from.
- Every chunk knows its day (ISO date or ""): from a date in the file name, a dated heading, a
  `[YYYY-MM-DD ...]` stamp on a line (HISTORY.md) or the messages' timestamps. Ranking uses it
  for questions about a time ("last week", "in March").

Chunks start and end on line boundaries so a result can cite `path#Lx-Ly`; a single line longer
than the budget is cut into pieces that all carry that line's number.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

from nanobot.memory.fts import cjk_char_count, is_cjk_char
from nanobot.session.transcripts import transcript_lines
from nanobot.util.text import pack

# Bump when chunks change: indexes built before are re-chunked (2: bare headings; 3: an archived
# transcript's chunks titled with the live session's name, not the archive's file name).
CHUNKER_VERSION = 3
CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ISO_DAY = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_LINE_STAMP = re.compile(r"^\s*(?:[-*]\s*)?\[(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class Chunk:
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str  # the file's lines start_line..end_line (pieces of one line when it was split)
    hash: str  # of title + "\n" + text (what is embedded): same title and text -> same vector
    title: str = ""  # heading path or transcript day/name; searchable, shown above the snippet
    day: str = ""  # YYYY-MM-DD the chunk is about, "" when unknown


@dataclass(frozen=True)
class Unit:
    line: int
    text: str
    tokens: int
    day: str = ""
    starts_turn: bool = True  # a good place to begin a chunk (a user message, any note line)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: one per CJK character, one per four other characters."""
    cjk = cjk_char_count(text)
    return cjk + (len(text) - cjk + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def iso_day(text: str) -> str:
    """The first valid YYYY-MM-DD in the text, else ""."""
    for m in _ISO_DAY.finditer(text):
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if 1900 <= y <= 2200 and 1 <= mo <= 12 and 1 <= d <= 31:
            return m.group(0)
    return ""


def _split_long_line(line: str, max_tokens: int) -> list[str]:
    """Cut a line that alone exceeds the budget into pieces of about max_tokens each."""
    costs = [1.0 if is_cjk_char(ch) else 1.0 / CHARS_PER_TOKEN for ch in line]
    return ["".join(piece) for piece in pack(line, costs, max_tokens)]


def _units(lines: list[tuple[int, str]], max_tokens: int, day: str = "", turns: list[bool] | None = None,
           days: list[str] | None = None) -> list[Unit]:
    units: list[Unit] = []
    for i, (number, text) in enumerate(lines):
        unit_day = days[i] if days else day
        starts = turns[i] if turns else True
        cost = estimate_tokens(text) + 1  # +1 for the newline
        if cost > max_tokens:
            for k, piece in enumerate(_split_long_line(text, max_tokens)):
                units.append(Unit(number, piece, estimate_tokens(piece), unit_day, starts and k == 0))
        else:
            units.append(Unit(number, text, cost, unit_day, starts))
    return units


def chunk_units(units: list[Unit], max_tokens: int, overlap_tokens: int, title: str = "") -> list[Chunk]:
    """Group units into chunks of at most max_tokens, repeating ~overlap_tokens of units.

    A chunk ends early rather than split a turn (it is cut before the last turn start in its second
    half) and never spans two days.
    """
    return _chunks_of(units, _spans(units, max_tokens, overlap_tokens), title)


def _spans(units: list[Unit], max_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    """(start, end) unit ranges of the chunks. A span depends only on the units from its start on,
    so chunking again from any span's start gives the same spans from there."""
    overlap_tokens = max(0, min(overlap_tokens, max_tokens // 2))
    spans: list[tuple[int, int]] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (end == start or used + units[end].tokens <= max_tokens):
            if end > start and units[end].day != units[start].day:
                break
            used += units[end].tokens
            end += 1
        if end < len(units) and units[end].day == units[start].day and not units[end].starts_turn:
            # Cut before the last turn start in the chunk's second half, if there is one.
            half, acc = start, 0
            while half < end and acc < used // 2:
                acc += units[half].tokens
                half += 1
            for cut in range(end - 1, max(half, start + 1) - 1, -1):
                if units[cut].starts_turn:
                    end = cut
                    break
        spans.append((start, end))
        if end >= len(units):
            break
        back, kept = end, 0
        while (
            back - 1 > start
            and kept + units[back - 1].tokens <= overlap_tokens
            and units[back - 1].day == units[end].day
        ):
            back -= 1
            kept += units[back].tokens
        while back < end and not units[back].starts_turn:  # the overlap starts at a turn too
            back += 1
        start = back if back < end else end
    return spans


def _chunks_of(units: list[Unit], spans: list[tuple[int, int]], title: str) -> list[Chunk]:
    chunks: list[Chunk] = []
    for start, end in spans:
        body = "\n".join(u.text for u in units[start:end])
        if body.strip():
            chunk_title = f"{title} {units[start].day}".strip() if units[start].day not in title else title
            embed = f"{chunk_title}\n{body}" if chunk_title else body
            chunks.append(
                Chunk(units[start].line, units[end - 1].line, body, text_hash(embed), chunk_title, units[start].day)
            )
    return chunks


@dataclass(frozen=True)
class MarkdownState:
    """Where chunk_markdown stands before a line of the last section: chunking the rest of the file
    from that line with this state gives the same chunks from there on."""

    path: tuple[tuple[int, str], ...]  # (level, heading) of the enclosing headings, own one last
    heading_line: int  # of the section's heading (0: no heading above)
    has_text: bool  # the section has a non-blank line besides its heading before this line
    section_day: str
    current_day: str  # the day of the entry above (a HISTORY.md stamp or a dated heading)


@dataclass(frozen=True)
class MarkdownChunks:
    chunks: list[Chunk]
    # The last chunk start of the last section past its heading (else that heading) and the state
    # there: a file that only grew is chunked again from that line (0 and None: no such place).
    resume_line: int
    resume_state: MarkdownState | None


def chunk_markdown(text: str, max_tokens: int = 400, overlap_tokens: int = 80, file_day: str = "") -> list[Chunk]:
    """Chunk a Markdown note section by section (a section starts at its heading line).

    A chunk is titled with the headings above it: the enclosing ones when it starts at its own
    heading line (which it then shows), the full path (own heading included) when it continues a
    long section.
    """
    return chunk_markdown_from(text, max_tokens, overlap_tokens, file_day).chunks


def chunk_markdown_from(
    text: str,
    max_tokens: int,
    overlap_tokens: int,
    file_day: str = "",
    first_line: int = 1,
    state: MarkdownState | None = None,
) -> MarkdownChunks:
    """chunk_markdown of the part of a note from line `first_line` on (`text`), which must start at
    the resume line of an earlier chunking of the same file, `state` being its resume state (or be
    the whole file, with no state)."""
    chunks: list[Chunk] = []
    path = list(state.path) if state else []
    heading_line = state.heading_line if state else 0
    opened_with_text = state.has_text if state else False  # before the section's first line here
    section_day = state.section_day if state else file_day
    current_day = day_before_section = state.current_day if state else file_day
    section: list[tuple[int, str]] = []
    line_days: list[str] = []
    resume: tuple[int, MarkdownState | None] = (0, None)
    before_heading: MarkdownState | None = None  # the state before the last heading line

    def has_text(lines: list[tuple[int, str]]) -> bool:
        return opened_with_text or any(t.strip() for n, t in lines if n != heading_line)

    def flush(last: bool = False) -> None:
        nonlocal resume
        if not section:
            return
        days = list(line_days)
        if heading_line == section[0][0] and len(days) > 1:
            days[0] = days[1]  # a heading goes with the first entry below it
        full = " > ".join(h for _, h in path)
        parents = " > ".join(h for _, h in path[:-1]) if heading_line else full
        units = _units(section, max_tokens, days=days)
        spans = _spans(units, max_tokens, overlap_tokens)
        for chunk in _chunks_of(units, spans, full):
            if heading_line and chunk.start_line == heading_line:
                title = f"{parents} {chunk.day}".strip() if chunk.day not in parents else parents
                embed = f"{title}\n{chunk.text}" if title else chunk.text
                chunk = replace(chunk, title=title, hash=text_hash(embed))
            chunks.append(chunk)
        starts = [units[s].line for s, _ in spans if units[s].starts_turn and units[s].line > heading_line]
        if last and starts:
            at = next(i for i, (number, _) in enumerate(section) if number == starts[-1])
            before = line_days[at - 1] if at else day_before_section
            here = MarkdownState(tuple(path), heading_line, has_text(section[:at]), section_day, before)
            resume = (starts[-1], here)
        elif last and heading_line == section[0][0]:  # a heading alone: from it, as the old state saw it
            resume = (heading_line, before_heading)

    for number, line in enumerate(text.splitlines(), start=first_line):
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            before_heading = MarkdownState(tuple(path), heading_line, has_text(section), section_day, current_day)
            if heading_line and path and level > path[-1][0] and not has_text(section):
                # A bare heading over a deeper one ("# 2026-04-14" then "## Work"): it titles the
                # chunks below it and would only be a result without content on its own.
                section.clear()
                line_days.clear()
            flush()
            section.clear()
            line_days.clear()
            opened_with_text, day_before_section = False, current_day
            path = [(lv, h) for lv, h in path if lv < level] + [(level, heading.group(2))]
            section_day = iso_day(heading.group(2)) or (section_day if level > 1 else file_day) or file_day
            current_day = section_day
            heading_line = number
        stamp = _LINE_STAMP.match(line)
        if stamp and iso_day(stamp.group(1)):
            current_day = stamp.group(1)  # HISTORY.md: each entry starts with its own stamp
        section.append((number, line))
        line_days.append(current_day)
    flush(last=True)
    return MarkdownChunks(chunks, *resume)


@dataclass(frozen=True)
class TranscriptChunks:
    chunks: list[Chunk]
    # Line of the last chunk that starts at a user message: chunking the file again from that line
    # gives the same chunks from there on, so a transcript that grew is chunked from there (0: none).
    resume_line: int


def chunk_transcript(text: str, name: str, max_tokens: int = 400, overlap_tokens: int = 80) -> list[Chunk]:
    """Chunk a JSONL transcript by turns and days; titled with the conversation's name."""
    return chunk_transcript_from(text, name, max_tokens, overlap_tokens).chunks


def chunk_transcript_from(
    text: str, name: str, max_tokens: int, overlap_tokens: int, first_line: int = 1
) -> TranscriptChunks:
    """chunk_transcript of the part of a transcript from line `first_line` on (`text`), which must
    start at a resume line of an earlier chunking of the same file (or be the whole file)."""
    lines = transcript_lines(text, first_line)
    units = _units(
        [(t.number, t.text) for t in lines],
        max_tokens,
        turns=[t.text.startswith("user:") for t in lines],
        days=[t.day for t in lines],
    )
    spans = _spans(units, max_tokens, overlap_tokens)
    # A turn start is always a line's first piece, so chunking from its line makes the same units.
    resume = next((units[start].line for start, _ in reversed(spans) if units[start].starts_turn), 0)
    return TranscriptChunks(_chunks_of(units, spans, name), resume)
