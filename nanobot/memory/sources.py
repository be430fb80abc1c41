"""What the memory index reads: regular files only, never through a symlink.

Sources: the root MEMORY.md/HISTORY.md (legacy location), `memory/**/*.md` (MEMORY.md, HISTORY.md,
daily and session notes) and, unless turned off, the session transcripts `sessions/*.jsonl` and
`sessions/archive/*.jsonl` - the safety net for whatever consolidation did not keep.

A symlink anywhere on the way (the folder itself, a sub-folder, the file) is skipped, and files
are opened with O_NOFOLLOW and checked to be regular after opening, so a link swapped in between
the walk and the read is refused too. Dot-folders (`.backups`, the index itself) are never read.
This module is also the index's one transcript reader (`transcript_lines`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from loguru import logger

from nanobot.config.paths import ARCHIVE_DIR, MEMORY_DIR, SESSIONS_DIR

ROOT_SOURCES = ("MEMORY.md", "HISTORY.md")  # legacy locations at the workspace root
MAX_TRANSCRIPT_LINE_CHARS = 4000  # one transcript message as indexed


@dataclass(frozen=True)
class SourceFile:
    rel: str  # workspace-relative, "/"-separated
    path: Path
    kind: str  # "memory" (Markdown) | "sessions" (JSONL transcript)


def _is_plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _walk(base: Path, suffix: str, recursive: bool) -> list[Path]:
    """Regular files ending in `suffix` under base; symlinked entries and dot-names are skipped."""
    found: list[Path] = []
    for root, dirs, files in os.walk(base, followlinks=False):
        here = Path(root)
        # os.walk lists a symlink to a folder under `dirs` but never descends it (followlinks=False);
        # dropping it here also keeps it out of the listing.
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and _is_plain_dir(here / d))
        if not recursive:
            dirs[:] = []
        for name in sorted(files):
            path = here / name
            if name.endswith(suffix) and not name.startswith(".") and _is_regular(path):
                found.append(path)
    return found


def discover(workspace: Path, include_sessions: bool) -> list[SourceFile]:
    """Every file the index should hold, in a stable order."""
    out: list[SourceFile] = []
    if not workspace.is_dir():  # the workspace itself may be a link (e.g. onto another disk)
        return out
    for name in ROOT_SOURCES:
        if _is_regular(workspace / name):
            out.append(SourceFile(name, workspace / name, "memory"))
    roots = [(MEMORY_DIR, ".md", True, "memory")]
    if include_sessions:
        archive = f"{SESSIONS_DIR}/{ARCHIVE_DIR}"
        roots += [(SESSIONS_DIR, ".jsonl", False, "sessions"), (archive, ".jsonl", False, "sessions")]
    for folder, suffix, recursive, kind in roots:
        base = workspace / folder
        parts = folder.split("/")
        if not all(_is_plain_dir(workspace.joinpath(*parts[: i + 1])) for i in range(len(parts))):
            if any(workspace.joinpath(*parts[: i + 1]).is_symlink() for i in range(len(parts))):
                logger.warning("memory index: {} is reached through a symlink; not indexed", folder)
            continue
        for path in _walk(base, suffix, recursive):
            out.append(SourceFile(path.relative_to(workspace).as_posix(), path, kind))
    return out


def read_text(path: Path) -> str:
    """The file's text, refusing anything that is not a regular file at open time (no symlinks)."""
    # O_NONBLOCK: a FIFO planted in memory/ must not hang the open; it is refused just below.
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class TranscriptLine:
    number: int  # 1-based line of the JSONL file
    text: str  # "user: ..." / "assistant: ..."
    day: str  # YYYY-MM-DD of the message's timestamp, "" when it has none


def transcript_lines(text: str) -> list[TranscriptLine]:
    """The user/assistant messages of a JSONL transcript, with file line numbers and dates.

    Tool calls and results, bookkeeping lines and a truncated last line (after a crash) are skipped.
    """
    out: list[TranscriptLine] = []
    for number, raw in enumerate(text.splitlines(), start=1):
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
