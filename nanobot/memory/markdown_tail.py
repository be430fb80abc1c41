"""Chunking a note that grew: from its last chunk start, not from its first line.

HISTORY.md only grows (nanobot appends one paragraph per consolidation), yet after every append it
was read, decoded and chunked whole: about 1 s for 10 MB, a search meanwhile waiting for it. The
index keeps, per note, where chunking can start again (`NoteResume`: the line of the last chunk
start in the last section, its byte offset, chunk_markdown's state there, and the size and SHA-256
of the whole file as chunked). The next sync hashes that many bytes without decoding them; when
they are unchanged (the file only grew) it decodes and chunks the rest from the resume line, and
the chunks from there on are replaced, the earlier ones kept: none of them reaches past the old end
of the file, so none can differ. Any other change (an edit, `forget`, a rewrite of MEMORY.md, a
file cut shorter) fails the check and the file is chunked whole, as before. A file that is not
UTF-8 throughout, or does not end with a line break, gets no resume point.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

from nanobot.memory.chunking import MarkdownChunks, MarkdownState, chunk_markdown_from, text_hash
from nanobot.memory.transcript_tail import READ_BLOCK_BYTES, Chunking, hash_prefix
from nanobot.util.nofollow import open_regular
from nanobot.util.text import decode_text

# Where str.splitlines ends a line (chunk_markdown's line numbers): found one at a time, not as a list
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass(frozen=True)
class NoteResume:
    size: int  # bytes of the file when it was chunked
    sha256: str  # of those bytes
    line: int  # 1-based line chunking starts again at
    offset: int  # its byte offset
    state: MarkdownState

    def encode(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def decode(cls, value: str) -> NoteResume | None:
        """The stored resume point ("", a transcript's, anything unreadable: none)."""
        try:
            raw = json.loads(value)
            state = raw.pop("state")
            state["path"] = tuple((int(level), str(heading)) for level, heading in state["path"])
            resume = cls(state=MarkdownState(**state), **raw)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return resume if 0 < resume.offset < resume.size and resume.line > 1 else None


def chunk_note_file(path: Path, max_tokens: int, overlap_tokens: int, file_day: str, previous: str = "") -> Chunking:
    """Chunk the note at `path` (a regular file, never a symlink), from the `previous` resume point
    when the file only grew since, else whole."""
    fd = open_regular(path)
    try:
        resume = NoteResume.decode(previous)
        grown = _chunk_grown(fd, resume, max_tokens, overlap_tokens, file_day) if resume else None
        data = _read_from(fd, 0) if grown is None else b""
    finally:
        os.close(fd)
    if grown is not None:
        return grown
    size, raw_digest, ends_line = len(data), hashlib.sha256(data).hexdigest(), data.endswith(b"\n")
    text = decode_text(data)
    del data  # a long HISTORY.md: not held twice while it is chunked
    found = chunk_markdown_from(text, max_tokens, overlap_tokens, file_day)
    digest = text_hash(text)
    exact = digest == raw_digest  # UTF-8 throughout: byte offsets are computable
    following = _following(found, text, 1, size, digest) if exact and ends_line else ""
    return Chunking(digest, found.chunks, 1, following)


def _chunk_grown(fd: int, resume: NoteResume, max_tokens: int, overlap_tokens: int, file_day: str) -> Chunking | None:
    """The chunks from the resume line on when the file's first `resume.size` bytes are the ones
    chunked before, else None."""
    whole = hashlib.sha256()
    if not hash_prefix(fd, whole, resume.size) or whole.hexdigest() != resume.sha256:
        return None
    tail = _read_from(fd, resume.offset)
    try:
        text = tail.decode("utf-8")
    except UnicodeDecodeError:  # what was added is not UTF-8: read whole, as decode_text reads it
        return None
    whole.update(tail[resume.size - resume.offset :])
    found = chunk_markdown_from(text, max_tokens, overlap_tokens, file_day, resume.line, resume.state)
    size, digest = resume.offset + len(tail), whole.hexdigest()
    following = _following(found, text, resume.line, size, digest) if tail.endswith(b"\n") else ""
    return Chunking(digest, found.chunks, resume.line, following)


def _following(found: MarkdownChunks, text: str, first_line: int, size: int, sha256: str) -> str:
    """The next resume point, encoded ("" when the chunking has none); `text` is the end of a file
    of `size` bytes whose SHA-256 is `sha256`, from its line `first_line` on."""
    if not found.resume_line or found.resume_state is None:
        return ""
    breaks = islice(_LINE_BREAK.finditer(text), found.resume_line - first_line)
    end = deque((match.end() for match in breaks), maxlen=1)  # where the line after the last one starts
    at = size - len(text[end[0] if end else 0 :].encode("utf-8"))  # the rest is short: counted from the end
    return NoteResume(size, sha256, found.resume_line, at, found.resume_state).encode()


def _read_from(fd: int, start: int) -> bytes:
    """The file's bytes from `start` to its end."""
    parts = []
    while block := os.pread(fd, READ_BLOCK_BYTES, start):
        parts.append(block)
        start += len(block)
    return b"".join(parts)
