"""Retry markers of archived sessions whose `/new` processing has not finished (SessionStore's).

`/new` leaves `sessions/archive/<name>.jsonl.pending` next to the kept transcript until the archive
is consolidated. The marker records the session key, how many attempts failed, when the last one
ran and why it failed (JSON; an older marker holding only the session key reads as no attempts).

Retries happen at start-up and back off: after `n` failed attempts the next one waits
`backoff_s * 2**(n-1)` seconds, so a restart loop does not hammer the model. After the configured
number of failures the retries stop: the memory lifecycle raw-archives the transcript into HISTORY.md
and the marker becomes `<name>.jsonl.failed`, which `nanobot status` (and `doctor`) report instead of
retrying silently forever. Only SessionStore (session/store.py) calls the functions that touch disk.

Processing an archive holds `<name>.jsonl.lock` (flock): a second process starting meanwhile (a
`nanobot agent` beside the gateway) sees the marker but leaves the archive to its holder, instead of
consolidating it a second time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from nanobot.timeutil import parse_iso_or_none
from nanobot.util.fs import atomic_write, open_private, try_flock
from nanobot.util.retry import backoff_s as retry_backoff_s

PENDING_SUFFIX = ".pending"
FAILED_SUFFIX = ".failed"
LOCK_SUFFIX = ".lock"
MAX_ERROR_CHARS = 300


@dataclass
class ArchiveMarker:
    key: str
    attempts: int = 0
    last_attempt: str = ""  # ISO-8601 with offset; empty before the first failure
    last_error: str = ""

    def next_attempt(self, backoff_s: float) -> datetime | None:
        """When a start-up may retry (None: at once)."""
        last = parse_iso_or_none(self.last_attempt)
        if self.attempts <= 0 or last is None:
            return None
        return last + timedelta(seconds=retry_backoff_s(self.attempts - 1, backoff_s, math.inf))


def marker_path(archived: Path, suffix: str = PENDING_SUFFIX) -> Path:
    return archived.with_name(archived.name + suffix)


def archived_path(marker: Path) -> Path:
    return marker.with_name(marker.name.removesuffix(PENDING_SUFFIX).removesuffix(FAILED_SUFFIX))


def read_marker(marker: Path) -> ArchiveMarker:
    """The marker's record; an unreadable or old-style one counts as no failed attempt yet."""
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except OSError:
        text = ""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return ArchiveMarker(key=text or archived_path(marker).stem)
    return ArchiveMarker(
        key=str(data.get("key") or archived_path(marker).stem),
        attempts=_count(data.get("attempts")),
        last_attempt=str(data.get("last_attempt") or ""),
        last_error=str(data.get("last_error") or "")[:MAX_ERROR_CHARS],
    )


def _count(value: object) -> int:
    """A hand-edited or damaged attempt count reads as none: one bad marker must not stop a start."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@contextmanager
def claim(archived: Path) -> Iterator[bool]:
    """Hold the archive's processing lock for the block; yields True when this process may process
    it: no other process holds it and its pending marker is still there (not processed meanwhile)."""
    lock = marker_path(archived, LOCK_SUFFIX)
    fd = open_private(lock, os.O_RDWR, beneath=archived.parent)
    try:
        if not try_flock(fd):
            yield False
            return
        try:
            yield marker_path(archived).exists()
        finally:
            if not marker_path(archived).exists():  # processed: no lock file left behind
                lock.unlink(missing_ok=True)
    finally:
        os.close(fd)


def write_marker(marker: Path, record: ArchiveMarker) -> None:
    atomic_write(marker, json.dumps(asdict(record), ensure_ascii=False) + "\n")


def record_failure(marker: Path, when: datetime, error: str) -> ArchiveMarker:
    """Count one more failed attempt on the marker and return the updated record."""
    record = read_marker(marker)
    record.attempts += 1
    record.last_attempt = when.isoformat(timespec="seconds")
    record.last_error = error[:MAX_ERROR_CHARS]
    write_marker(marker, record)
    return record


def give_up(marker: Path) -> Path:
    """Stop retrying: the `.pending` marker becomes `.failed` (kept for status and doctor)."""
    failed = marker.with_name(marker.name.removesuffix(PENDING_SUFFIX) + FAILED_SUFFIX)
    marker.replace(failed)
    return failed


@dataclass
class ArchiveSummary:
    """What `nanobot status` shows about archived sessions not (yet) consolidated."""

    pending: list[tuple[Path, ArchiveMarker]]
    failed: list[tuple[Path, ArchiveMarker]]


def summarise(archive_dir: Path) -> ArchiveSummary:
    if not archive_dir.is_dir():
        return ArchiveSummary([], [])
    return ArchiveSummary(
        [(p, read_marker(p)) for p in sorted(archive_dir.glob(f"*{PENDING_SUFFIX}"))],
        [(p, read_marker(p)) for p in sorted(archive_dir.glob(f"*{FAILED_SUFFIX}"))],
    )


def status_lines(summary: ArchiveSummary, max_attempts: int, backoff_s: float) -> list[str]:
    """Human lines for `nanobot status` / `doctor`: nothing when every archive was processed."""
    lines = []
    for path, rec in summary.pending:
        due = rec.next_attempt(backoff_s)
        when = f"next retry at start-up after {due:%Y-%m-%d %H:%M}" if due else "retried at next start-up"
        error = f"; last error: {rec.last_error}" if rec.last_error else ""
        lines.append(
            f"  {archived_path(path).name} ({rec.key}): consolidation pending, "
            f"{rec.attempts}/{max_attempts} attempts failed, {when}{error}"
        )
    for path, rec in summary.failed:
        lines.append(
            f"  {archived_path(path).name} ({rec.key}): consolidation gave up after {rec.attempts} attempts "
            "(raw excerpt in memory/HISTORY.md, transcript kept; delete the .failed file to dismiss); "
            f"last error: {rec.last_error or 'unknown'}"
        )
    return lines
