"""A cheap "has anything the index reads changed since the last sync?" test for the search path.

A search checks for files edited by hand (at most once a second) before it answers. Listing the
sources again (sources.discover: a symlink-safe walk building a Path per file) takes ~85 ms for
~700 files on a busy 2-core machine, and that walk was most of the hybrid search's p95. This
test does not list the files: it lstat()s the files indexed at the last sync (size and mtime, as
before) and every folder the sources can live in (the workspace root, memory/ and its non-dot
sub-folders, sessions/ and sessions/archive/). Creating, deleting or renaming a file changes
its folder's mtime, so a new or removed source is noticed too; any change sends the caller to
the full sync, which walks and reads with the symlink rules of sources.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nanobot.config.paths import MEMORY_DIR
from nanobot.session.transcripts import TRANSCRIPT_FOLDERS

Stamp = tuple[int, int]  # (mtime_ns, size)


@dataclass(frozen=True)
class Snapshot:
    files: dict[str, Stamp]  # workspace-relative path -> stamp, as indexed
    folders: dict[str, int]  # workspace-relative folder ("" = the workspace) -> mtime_ns, -1 missing


def _folders(root: str, include_sessions: bool) -> list[str]:
    found = ["", MEMORY_DIR]
    if include_sessions:
        found += TRANSCRIPT_FOLDERS
    memory = os.path.join(root, MEMORY_DIR)
    for here, dirs, _files in os.walk(memory, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(here, root).replace(os.sep, "/")
        found.extend(f"{rel}/{d}" for d in dirs)
    return found


def _mtime(path: str) -> int:
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return -1


def folder_times(workspace: str, include_sessions: bool) -> dict[str, int]:
    """The source folders' mtimes; taken before a sync lists the files, so nothing added during
    the sync goes unnoticed."""
    return {f: _mtime(os.path.join(workspace, f)) for f in _folders(workspace, include_sessions)}


def unchanged(workspace: str, snap: Snapshot, include_sessions: bool) -> bool:
    """True when no indexed file and no source folder changed since the snapshot."""
    for rel, stamp in snap.files.items():
        try:
            st = os.lstat(os.path.join(workspace, rel))
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) != stamp:
            return False
    folders = _folders(workspace, include_sessions)
    if len(folders) != len(snap.folders):
        return False
    return all(snap.folders.get(f) == _mtime(os.path.join(workspace, f)) for f in folders)
