"""Reading transcripts as documents (SessionStore's, for the memory index and the gateway's recovery).

- `list_transcripts`: the live `sessions/*.jsonl` and archived `sessions/archive/*.jsonl` files,
  regular files only and never through a symlink (a linked `sessions/` or `archive/` is skipped
  with a warning); dot-names are never listed.
- `open_transcript` / `transcript_line_range`: a descriptor to read a transcript (or part of it),
  or a range of its lines, refusing anything that is not a regular file at open time.
- `transcript_lines`: the user/assistant messages of a transcript with their file line numbers and
  days, the one parser of the file format outside SessionStore's loader.
- `archived_stem`: the live file name an archived transcript came from (`<stem>-<stamp>[-n]`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from nanobot.config.paths import (
    ARCHIVE_DIR,
    MAX_SESSION_STEM_BYTES,
    SESSIONS_DIR,
    first_digest_session_stem,
    legacy_session_stem,
    session_file_name,
)
from nanobot.session.session import first_metadata
from nanobot.util.nofollow import open_regular, plain_path, regular_files

TRANSCRIPT_SUFFIX = ".jsonl"
#: where transcripts live, workspace-relative: live ones, then the ones /new archived
TRANSCRIPT_FOLDERS = (SESSIONS_DIR, f"{SESSIONS_DIR}/{ARCHIVE_DIR}")
# One message as the index holds it: a long message is cut into chunks like any long line (what
# comes after 4,000 characters was once dropped, unsearchable); only a paste beyond this is cut
# (~63 chunks to embed in the background).
MAX_TRANSCRIPT_LINE_CHARS = 100_000
_ARCHIVE_NAME = re.compile(r"^(.+)-\d{8}T\d{6}(?:-\d+)?$")  # <session file stem>-<stamp>[-n]


@dataclass(frozen=True)
class TranscriptFile:
    rel: str  # workspace-relative, "/"-separated
    path: Path
    archived: bool


def list_transcripts(workspace: Path) -> list[TranscriptFile]:
    """Live transcripts, then archived ones, each in name order; never through a symlink."""
    out: list[TranscriptFile] = []
    for folder, archived in zip(TRANSCRIPT_FOLDERS, (False, True), strict=True):
        if not plain_path(workspace, folder):
            parts = folder.split("/")
            if any(workspace.joinpath(*parts[: i + 1]).is_symlink() for i in range(len(parts))):
                logger.warning("memory index: {} is reached through a symlink; not indexed", folder)
            continue
        for path in regular_files(workspace / folder, TRANSCRIPT_SUFFIX, recursive=False):
            out.append(TranscriptFile(path.relative_to(workspace).as_posix(), path, archived))
    return out


def open_transcript(path: Path) -> int:
    """A read-only descriptor of a transcript (a regular file at open time, never a symlink), for a
    reader that takes only part of it."""
    return open_regular(path)


def transcript_line_range(path: Path, first: int, count: int) -> tuple[list[str], int]:
    """Lines `first`..`first + count - 1` (1-based; lines end at "\n" only) of a transcript, and
    how many lines it has, read one line at a time: a months-long transcript is never held whole
    (decoded and split, a 160 MB file took ~500 MB to return a few lines)."""
    chosen: list[str] = []
    total = 0
    fd = open_transcript(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            for raw in fh:
                total += 1
                if first <= total < first + count:
                    chosen.append(raw.removesuffix(b"\n").decode("utf-8", errors="replace"))
    finally:
        os.close(fd)
    return chosen, total


def archived_stem(path: Path) -> str:
    """`telegram_42-20260102T030405-2.jsonl` -> `telegram_42` ("" for a name /new did not make)."""
    match = _ARCHIVE_NAME.match(path.stem)
    return match.group(1) if match else ""


@dataclass(frozen=True)
class TranscriptLine:
    number: int  # 1-based line of the JSONL file
    text: str  # "user: ..." / "assistant: ..."
    day: str  # YYYY-MM-DD of the message's timestamp, "" when it has none


def transcript_lines(text: str, first_line: int = 1) -> list[TranscriptLine]:
    """The user/assistant messages of a JSONL transcript (or of its part from line `first_line` on),
    with file line numbers and dates.

    Tool calls and results, bookkeeping lines and a truncated last line (after a crash) are skipped.
    Lines end at "\n" only, as SessionStore writes and reads them: a message holding U+2028 or NEL
    (which JSON leaves unescaped) is one line, not two unreadable halves.
    """
    out: list[TranscriptLine] = []
    for number, raw in enumerate(text.split("\n"), start=first_line):
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("role") not in ("user", "assistant"):
            continue
        content = record.get("content")
        if isinstance(content, list):  # multimodal content parts
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not isinstance(content, str) or not content.strip():
            continue
        flat = " ".join(content.split())[:MAX_TRANSCRIPT_LINE_CHARS]
        stamp = str(record.get("timestamp") or "")
        day = stamp[:10] if len(stamp) >= 10 and stamp[4] == "-" and stamp[7] == "-" else ""
        out.append(TranscriptLine(number, f"{record['role']}: {flat}", day))
    return out


NAME_MAX_BYTES = 255  # the longest file name Linux file systems take


def transcript_path(sessions_dir: Path, key: str) -> Path:
    """The live transcript of `key` in `sessions_dir`. For a key whose name got a digest
    (`cli:work project`), the file an earlier version wrote is continued when no other key's
    (recorded in it): under its plain name where it is, which may be another key's too (those
    shared one then), or renamed once when the name was this key's alone (an earlier digest, or
    too long to be any key's name now), so that archives and markers beside it get names that fit."""
    path = sessions_dir / session_file_name(key)
    if path.exists():
        return path
    plain = legacy_session_stem(key)
    for stem in (first_digest_session_stem(key), plain):
        earlier = sessions_dir / f"{stem}{TRANSCRIPT_SUFFIX}"
        if earlier == path or len(earlier.name.encode()) > NAME_MAX_BYTES or not earlier.is_file():
            continue
        owner = first_metadata(earlier, "session_key").get("session_key")
        if owner is not None and owner != key:
            continue
        if stem != plain or len(stem.encode()) > MAX_SESSION_STEM_BYTES:
            earlier.rename(path)
            return path
        return earlier
    return path
