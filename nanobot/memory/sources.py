"""What the memory index reads: regular files only, never through a symlink.

Sources: the root MEMORY.md/HISTORY.md (legacy location), `memory/**/*.md` (MEMORY.md, HISTORY.md,
daily and session notes) and, unless turned off, the session transcripts `sessions/*.jsonl` and
`sessions/archive/*.jsonl` - the safety net for whatever consolidation did not keep. Transcripts
are listed and read through SessionStore, their owner.

A symlink anywhere on the way (the folder itself, a sub-folder, the file) is skipped, and files
are opened with O_NOFOLLOW and checked to be regular after opening, so a link swapped in between
the walk and the read is refused too (`util/nofollow.py`). Dot-folders (`.backups`, the index
itself) are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loguru import logger

from nanobot.config.paths import LEGACY_MEMORY_FILES, MEMORY_DIR
from nanobot.session.store import SessionStore
from nanobot.util.nofollow import is_regular, plain_path, regular_files

ROOT_SOURCES = LEGACY_MEMORY_FILES  # memory files at the workspace root, where early versions kept them


@dataclass(frozen=True)
class SourceFile:
    rel: str  # workspace-relative, "/"-separated
    path: Path
    kind: Literal["memory", "sessions"]  # Markdown memory file | JSONL transcript


def discover(workspace: Path, include_sessions: bool) -> list[SourceFile]:
    """Every file the index should hold, in a stable order."""
    out: list[SourceFile] = []
    if not workspace.is_dir():  # the workspace itself may be a link (e.g. onto another disk)
        return out
    for name in ROOT_SOURCES:
        # a copy at the root beside memory/'s own is a stray one: memory_get reads memory/'s by
        # that name, so a hit cited as the root file could never be read back (the wrong text came)
        if is_regular(workspace / name) and not is_regular(workspace / MEMORY_DIR / name):
            out.append(SourceFile(name, workspace / name, "memory"))
    if plain_path(workspace, MEMORY_DIR):
        for path in regular_files(workspace / MEMORY_DIR, ".md", recursive=True):
            out.append(SourceFile(path.relative_to(workspace).as_posix(), path, "memory"))
    elif (workspace / MEMORY_DIR).is_symlink():
        logger.warning("memory index: {} is reached through a symlink; not indexed", MEMORY_DIR)
    if include_sessions:
        out += [SourceFile(t.rel, t.path, "sessions") for t in SessionStore(workspace).transcript_files()]
    return [source for source in out if _nameable(source)]


_warned_names: set[str] = set()


def _nameable(source: SourceFile) -> bool:
    """Whether the file's name is valid UTF-8: one copied from an old disk in Latin-1 (`caf\xe9.md`)
    cannot be stored, cited or read back by its name, so it is left out with a warning (once)."""
    try:
        source.rel.encode("utf-8")
        return True
    except UnicodeEncodeError:
        shown = source.rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if shown not in _warned_names:
            _warned_names.add(shown)
            logger.warning("memory index: {} is not indexed: its name is not UTF-8; rename it", shown)
        return False

