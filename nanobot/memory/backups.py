"""Earlier versions of the memory files, kept in `memory/.backups/` before a file is replaced.

MEMORY.md's versions are `.backups/MEMORY-<stamp>.md`; a note's (a daily or session note a tool
rewrote) are `.backups/notes/<note name>/<stamp>.md`. Each keeps its `kept` newest versions, by the
order they were written, plus the fullest one (most fact lines) and the last one of each of the
DAILY_KEPT days before today, whatever their age: a model that halves the file write after write
(or pads it with filler first), then writes the same line again and again, would otherwise rotate
every version holding the user's facts out. A version identical to the newest is not kept twice.
The index never reads dot-folders, so backups are not searched.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from nanobot.util.fs import atomic_write, unused_path

DAILY_KEPT = 7  # days before today whose last version is kept, beside the newest ones


def _fact_count(text: str) -> int:
    """Lines that say something: not blank, not a heading."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def versions(folder: Path, prefix: str = "") -> list[Path]:
    """The versions in `folder` named `<prefix>*.md`, oldest first (by when they were written)."""
    found = []
    for path in folder.glob(f"{prefix}*.md"):
        try:
            found.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:
            continue
    return [path for _, _, path in sorted(found)]


def keep_version(folder: Path, prefix: str, data: bytes, *, kept: int, now: datetime, beneath: Path) -> None:
    """Save `data` (the file's bytes as they are: a file in another encoding read as Windows-1252
    lost its characters in a backup of the decoded text) as the newest version in `folder`, unless
    it is the newest already, then prune."""
    if not data.strip() or kept <= 0:
        return
    earlier = versions(folder, prefix)
    if earlier and _read_bytes(earlier[-1]) == data:
        return
    path = unused_path(folder, f"{prefix}{now.strftime('%Y%m%dT%H%M%S%f')}", ".md")
    atomic_write(path, data, beneath=beneath)
    # The wall-clock name is for people; the order is the order of writing. A clock set back (a time
    # zone change, the repeated hour in autumn, an NTP step) gives a new version a name that sorts
    # before older ones: its mtime is moved past theirs so it is never the one pruned.
    if earlier:
        newest = max(p.stat().st_mtime_ns for p in earlier)
        if path.stat().st_mtime_ns <= newest:
            os.utime(path, ns=(newest + 1, newest + 1))
    every = versions(folder, prefix)
    protected = {max(reversed(every), key=lambda p: _fact_count(_read(p)))}  # the newest among equals
    protected |= _last_of_each_day(every, now) | _first_of_each_day(every, now)
    for old in every[:-kept]:
        if old not in protected:
            old.unlink(missing_ok=True)


def _last_of_each_day(paths: list[Path], now: datetime) -> set[Path]:
    """The newest version of each of the DAILY_KEPT days before today: what a model rewrites today,
    write after write (padding the file with filler first, so "fullest" is filler too), cannot reach."""
    today = now.date()
    newest: dict[object, Path] = {}
    for path in paths:  # oldest first: a later one of the same day replaces an earlier
        try:
            day = datetime.fromtimestamp(path.stat().st_mtime, now.tzinfo).date()
        except OSError:
            continue
        if 0 < (today - day).days <= DAILY_KEPT:
            newest[day] = path
    return set(newest.values())


def _first_of_each_day(paths: list[Path], now: datetime) -> set[Path]:
    """The oldest version of today and of each of the DAILY_KEPT days before: what the day's first
    tool write replaced, the owner's own text (a model writing AGENTS.md seven times today with
    filler, each version fuller than the owner's, rotated the owner's out: it was neither the
    fullest nor of an earlier day)."""
    today = now.date()
    oldest: dict[object, Path] = {}
    for path in paths:  # oldest first: the first of a day stays
        try:
            day = datetime.fromtimestamp(path.stat().st_mtime, now.tzinfo).date()
        except OSError:
            continue
        if 0 <= (today - day).days <= DAILY_KEPT:
            oldest.setdefault(day, path)
    return set(oldest.values())


def _read(path: Path) -> str:
    return _read_bytes(path).decode("utf-8", errors="replace")


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
