"""Chunking a transcript that grew: from the start of its last turn's chunk, not from its first line.

A live transcript only grows at its end (SessionStore appends), yet after every turn it was read,
hashed, parsed and chunked whole: about 0.8 s a turn for 20 MB, and a search made meanwhile waits
for that text phase. The index keeps, per transcript, where chunking can start again (`Resume`: the
byte offset and line of the last chunk that begins at a user message, and the SHA-256 of the bytes
before it; chunking.py says why chunking from there gives the same chunks). The next sync hashes
those bytes without parsing them; when they are unchanged it parses and chunks only the rest, and
the chunks from that line on are replaced, the earlier ones kept. When they differ (the file was
edited there, replaced or cut shorter) the file is chunked whole, as before. `/new` moves the live
file into the archive: the archived copy takes over the live file's chunks before its resume point
(`archived_continuations`), and the live name, a new file now, is chunked whole.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from nanobot.config.paths import SESSIONS_DIR
from nanobot.memory.chunking import Chunk, chunk_transcript_from
from nanobot.memory.index_db import FileRow
from nanobot.session.transcripts import TRANSCRIPT_SUFFIX, archived_stem, open_transcript

READ_BLOCK_BYTES = 1 << 20  # the unchanged part is hashed in reads of this size, never held whole
# Lines parsed and chunked at a time: a 160 MB transcript read whole peaked at ~650 MB of RAM.
BLOCK_BYTES = 8 << 20


@dataclass(frozen=True)
class Resume:
    offset: int  # byte offset of the line chunking starts again at
    line: int  # its 1-based line number
    prefix_sha256: str  # of the file's bytes before `offset`

    def encode(self) -> str:
        return f"{self.offset}:{self.line}:{self.prefix_sha256}"

    @classmethod
    def decode(cls, value: str) -> Resume | None:
        """The stored resume point ("" or anything unreadable: none, chunk the file whole)."""
        try:
            offset, line, digest = value.split(":")
            resume = cls(int(offset), int(line), digest)
        except ValueError:
            return None
        return resume if resume.offset > 0 and resume.line > 1 else None


@dataclass(frozen=True)
class Chunking:
    """A file's digest and chunks (of a transcript: maybe only those from its resume line on)."""

    digest: str  # SHA-256 of the whole file as read
    chunks: list[Chunk]  # the chunks starting at `from_line` or later
    from_line: int  # 1 when the file was chunked whole
    resume: str  # Resume.encode() for the next sync, "" when there is none


def chunk_transcript_file(
    path: Path, name: str, max_tokens: int, overlap_tokens: int, previous: str = ""
) -> Chunking:
    """Chunk the transcript at `path`, from the `previous` resume point when the bytes before it are
    unchanged, else whole; either way BLOCK_BYTES of lines at a time."""
    fd = open_transcript(path)
    try:
        resume = Resume.decode(previous)
        prefix = _unchanged_before(fd, resume) if resume is not None else None
        if resume is None or prefix is None:
            return _chunk_blocks(fd, hashlib.sha256(), 0, 1, name, max_tokens, overlap_tokens)
        return _chunk_blocks(fd, prefix, resume.offset, resume.line, name, max_tokens, overlap_tokens)
    finally:
        os.close(fd)


def _chunk_blocks(
    fd: int, prefix: hashlib._Hash, start: int, first_line: int, name: str, max_tokens: int, overlap_tokens: int
) -> Chunking:
    """Chunk the file from `start` (line `first_line`; `prefix` has hashed the bytes before it) one
    block of whole lines at a time. The chunks of a block before its resume line are final (they
    are the same whatever follows); the next block starts at that line. A block without a resume
    line past its first one (a long stretch without user messages) is read again twice as large."""
    chunks: list[Chunk] = []
    block = bytearray()  # the file's bytes from `start` on, as far as read
    line, want, at_end = first_line, BLOCK_BYTES, False
    while True:
        while not at_end and len(block) < want:
            data = os.pread(fd, READ_BLOCK_BYTES, start + len(block))
            at_end = not data
            block += data
        end = len(block) if at_end else block.rfind(b"\n") + 1
        piece = bytes(block[:end])
        text = piece.decode("utf-8", errors="replace")  # never makes or removes a "\n" byte
        found = chunk_transcript_from(text, name, max_tokens, overlap_tokens, line)
        if at_end:
            chunks.extend(found.chunks)
            break
        if found.resume_line <= line:
            want *= 2
            continue
        chunks.extend(c for c in found.chunks if c.start_line < found.resume_line)
        consumed = _line_start(piece, found.resume_line - line)
        prefix.update(piece[:consumed])
        del block[:consumed]
        start, line, want = start + consumed, found.resume_line, BLOCK_BYTES
    whole = prefix.copy()
    whole.update(piece)
    following = ""
    if found.resume_line:
        offset = _line_start(piece, found.resume_line - line)
        prefix.update(piece[:offset])
        following = Resume(start + offset, found.resume_line, prefix.hexdigest()).encode()
    return Chunking(whole.hexdigest(), chunks, first_line, following)


def archived_continuations(
    transcripts: list[tuple[str, Path]], rows: Mapping[str, FileRow]
) -> list[tuple[str, str, Resume]]:
    """(live rel, archived rel, resume point) for each transcript (rel, path) that /new archived, the
    index does not hold yet, and that begins with the bytes an indexed live transcript had before its
    resume point: `/new` moved that file into the archive, so its chunks before the resume line can
    move with it instead of the whole file being chunked and written again (seconds for a months-long
    chat)."""
    found = []
    for rel, path in transcripts:
        stem = archived_stem(path)
        live = f"{SESSIONS_DIR}/{stem}{TRANSCRIPT_SUFFIX}"
        row = rows.get(live)
        resume = Resume.decode(row.resume) if stem and row and rel not in rows else None
        if resume is None:
            continue
        try:
            fd = open_transcript(path)
        except OSError:
            continue
        try:
            if _unchanged_before(fd, resume) is not None:
                found.append((live, rel, resume))
        finally:
            os.close(fd)
    return found


def _unchanged_before(fd: int, resume: Resume) -> hashlib._Hash | None:
    """A hasher fed the file's bytes before the resume point when they are the ones it recorded
    (to go on hashing the rest), else None."""
    prefix = hashlib.sha256()
    if hash_prefix(fd, prefix, resume.offset) and prefix.hexdigest() == resume.prefix_sha256:
        return prefix
    return None


def hash_prefix(fd: int, hasher: hashlib._Hash, end: int) -> bool:
    """Feed the file's bytes [0, end) to `hasher`; False when the file is shorter than that."""
    done = 0
    while done < end:
        block = os.pread(fd, min(READ_BLOCK_BYTES, end - done), done)
        if not block:
            return False
        hasher.update(block)
        done += len(block)
    return True


def _line_start(data: bytes, newlines_before: int) -> int:
    """Offset in `data` of the line that follows its first `newlines_before` newlines (the resume
    line is near the end: searched from there)."""
    if newlines_before <= 0:
        return 0
    from_end = data.count(b"\n") - newlines_before + 1  # that newline, counted from the end
    position = len(data)
    for _ in range(from_end):
        position = data.rfind(b"\n", 0, position)
    return position + 1
