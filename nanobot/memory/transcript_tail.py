"""Chunking a transcript that grew: from the start of its last turn's chunk, not from its first line.

A live transcript only grows at its end (SessionStore appends), yet after every turn it was read,
hashed, parsed and chunked whole: about 0.8 s a turn for 20 MB, and a search made meanwhile waits
for that text phase. The index keeps, per transcript, where chunking can start again (`Resume`: the
byte offset and line of the last chunk that begins at a user message, and the SHA-256 of the bytes
before it; chunking.py says why chunking from there gives the same chunks). The next sync hashes
those bytes without parsing them; when they are unchanged it parses and chunks only the rest, and
the chunks from that line on are replaced, the earlier ones kept. When they differ (the file was
edited there, replaced or cut shorter) the file is chunked whole, as before.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from nanobot.memory.chunking import Chunk, chunk_transcript_from
from nanobot.session.transcripts import open_transcript

READ_BLOCK_BYTES = 1 << 20  # the unchanged part is hashed in blocks of this size, never held whole


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
    unchanged, else whole."""
    fd = open_transcript(path)
    try:
        resume = Resume.decode(previous)
        prefix = hashlib.sha256()
        start, first_line = 0, 1
        if resume is not None:
            if _hash_prefix(fd, prefix, resume.offset) and prefix.hexdigest() == resume.prefix_sha256:
                start, first_line = resume.offset, resume.line
            else:
                prefix = hashlib.sha256()
        tail = _read_from(fd, start)
    finally:
        os.close(fd)
    whole = prefix.copy()
    whole.update(tail)
    text = tail.decode("utf-8", errors="replace")  # never makes or removes a "\n" byte
    found = chunk_transcript_from(text, name, max_tokens, overlap_tokens, first_line)
    following = ""
    if found.resume_line:
        offset = _line_start(tail, found.resume_line - first_line)
        before = prefix.copy()
        before.update(memoryview(tail)[:offset])
        following = Resume(start + offset, found.resume_line, before.hexdigest()).encode()
    return Chunking(whole.hexdigest(), found.chunks, first_line, following)


def _hash_prefix(fd: int, hasher: hashlib._Hash, end: int) -> bool:
    """Feed the file's bytes [0, end) to `hasher`; False when the file is shorter than that."""
    done = 0
    while done < end:
        block = os.pread(fd, min(READ_BLOCK_BYTES, end - done), done)
        if not block:
            return False
        hasher.update(block)
        done += len(block)
    return True


def _read_from(fd: int, offset: int) -> bytes:
    with os.fdopen(fd, "rb", closefd=False) as fh:
        fh.seek(offset)
        return fh.read()


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
