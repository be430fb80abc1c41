"""Listing and reading files without ever following a symlink.

Used where a planted link must not pull outside data in (the memory index reading the workspace).
A symlink anywhere on the way (a folder, a sub-folder, the file) is skipped, and files are opened with
O_NOFOLLOW and checked to be regular after opening, so a link swapped in between the walk and the
read is refused too. Dot-names are never listed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def is_plain_dir(path: Path) -> bool:
    """A real folder (not a symlink to one)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_regular(path: Path) -> bool:
    """A regular file (not a symlink, FIFO or device)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def plain_path(root: Path, rel: str) -> bool:
    """Whether every folder of `rel` ("a/b") below `root` is a real folder, no link on the way."""
    parts = rel.split("/")
    return all(is_plain_dir(root.joinpath(*parts[: i + 1])) for i in range(len(parts)))


def regular_files(base: Path, suffix: str, *, recursive: bool) -> list[Path]:
    """Regular files ending in `suffix` under `base`, sorted; symlinked entries and dot-names are skipped."""
    found: list[Path] = []
    for root, dirs, files in os.walk(base, followlinks=False):
        here = Path(root)
        # os.walk lists a symlink to a folder under `dirs` but never descends it (followlinks=False);
        # dropping it here also keeps it out of the listing.
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and is_plain_dir(here / d)) if recursive else []
        for name in sorted(files):
            path = here / name
            if name.endswith(suffix) and not name.startswith(".") and is_regular(path):
                found.append(path)
    return found


def read_regular_text(path: Path) -> str:
    """The file's text, refusing anything that is not a regular file at open time (no symlinks)."""
    # O_NONBLOCK: a planted FIFO must not hang the open; it is refused just below.
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
