"""SessionStore: the one owner of `workspace/sessions/` (docs/contract.md, Workspace files).

One append-only JSONL file per session key, one line per message. Every message is written and
flushed when it is added (O(1), never a rewrite), under an OS file lock so two processes never
interleave lines; fsync follows the configured policy. `/new` moves the file into `archive/`.

What is in RAM: per cached session its metadata and the messages from a little before the
consolidation pointer on (`COLD_MARGIN`), as dicts; every older message is only the byte span of its
line (16 bytes), read again from the file when someone asks for it (loading.py, message_log.py).
The store records the span of every message line it appends, so when the pointer moves
(`set_metadata(last_consolidated=...)`) the newly consolidated messages let go of their dicts too.
A session with cold messages holds a read-only descriptor of its file (kept across `/new`'s move);
`release`, a re-read, eviction from the cache and `close` close it.

Another process may use the same key (an open `nanobot agent` and a `nanobot agent -m`): a session
whose file changed since this process last read or wrote it is read again when it is next taken
(`get`), and a file that another process's /new moved away is never appended to: the session is
read again from its path (a new file) first. Two turns on one key at the same moment, in two
processes, are not reconciled.

Everyone else who needs these files goes through the store: the memory lifecycle's retry markers
beside archived transcripts (`markers.py`), the memory index's listing and reading of transcripts
and the gateway's look at recently archived ones (`transcripts.py`), whose chat a transcript is and the
heartbeat's last private chat (`chats.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any, Literal

from loguru import logger

from nanobot.config.paths import ARCHIVE_DIR, SESSIONS_DIR
from nanobot.session import chats, markers
from nanobot.session.loading import load_transcript
from nanobot.session.markers import ArchiveMarker, ArchiveSummary
from nanobot.session.message_log import COLD_MARGIN, Span
from nanobot.session.session import (
    METADATA_FORMAT,
    Session,
    StorageError,
    append_all,
)
from nanobot.session.transcripts import (
    TRANSCRIPT_SUFFIX,
    TranscriptFile,
    archived_stem,
    list_transcripts,
    transcript_path,
)
from nanobot.timeutil import seconds_since
from nanobot.util.fs import ensure_private_dir, fd_lock, file_lock_waiting, open_private, unused_path
from nanobot.util.nofollow import is_regular

__all__ = ["Session", "SessionStore", "StorageError"]

DEFAULT_MAX_CACHED_SESSIONS = 128
FsyncPolicy = Literal["always", "everysec", "never"]
FSYNC_INTERVAL_S = 1.0
LOCKS_DIR = ".locks"  # sessions/.locks/<transcript stem>.lock (see memory_lock)


_UNSEEN = (-1, -1)  # a file state no file has


def _file_state(path: Path) -> tuple[int, int] | None:
    """(inode, size) of the file at `path`, None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size


def _same_file(fh: IO[str], path: Path) -> bool:
    """Whether the open handle is still the file at `path` (not moved away or replaced)."""
    try:
        return os.path.samestat(os.fstat(fh.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


class SessionStore:
    """Owner of `workspace/sessions/`: loads, appends, records metadata, archives."""

    def __init__(
        self,
        workspace: Path,
        *,
        fsync: FsyncPolicy = "everysec",
        max_cached: int = DEFAULT_MAX_CACHED_SESSIONS,
        count_caps: Mapping[str, int] | None = None,
    ) -> None:
        self.dir = workspace / SESSIONS_DIR
        self.archive_dir = self.dir / ARCHIVE_DIR
        self.fsync_policy = fsync
        self.max_cached = max_cached
        # per-role caps of what the LLM is sent: token estimates count what is sent, not what is stored
        self.count_caps: Mapping[str, int] = MappingProxyType(dict(count_caps or {}))
        self._cache: OrderedDict[str, Session] = OrderedDict()
        # Sessions evicted from the LRU but still held by a running turn: handed out again instead of
        # a second copy loaded from disk that would miss the turn's later appends.
        self._live: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._handles: dict[str, IO[str]] = {}
        # (inode, size) of each session file as this process last read or wrote it (None: absent)
        self._seen: dict[str, tuple[int, int] | None] = {}
        self._dirty: set[str] = set()
        self._fsync_timer: asyncio.TimerHandle | None = None
        self._last_fsync = time.monotonic()

    # ------------------------------------------------------------------ loading
    def path_for(self, key: str) -> Path:
        """The key's transcript (see transcripts.transcript_path: an earlier version's name too)."""
        return transcript_path(self.dir, key)

    def get(self, key: str) -> Session:
        """The session for `key`, from the cache or loaded from disk (created empty if absent); read
        again when another process changed its file since."""
        session = self._cache.get(key) or self._live.get(key)
        if session is None:
            session = self._load(key, self.path_for(key))
            self._live[key] = session
        else:
            self.refresh(session)
        self._cache[key] = session
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_cached:
            old_key, old = self._cache.popitem(last=False)
            self._close_handle(old_key)
            old.messages.close()  # a turn still holding it reads cold lines through the path again
        return session

    def _reread(self, session: Session) -> None:
        self._close_handle(session.key)
        session.replace_with(self._load(session.key, session.path))

    def _load(self, key: str, path: Path) -> Session:
        loaded = load_transcript(key, path, self.count_caps)
        if path == self.path_for(key):  # not an archived transcript
            self._seen[key] = loaded.state
        return loaded.session

    def refresh(self, session: Session) -> None:
        """Read the session again if another process wrote or archived its file since this one
        last did (a pointer it moved, a /new it made): memory work must start from what is on disk."""
        if not session.archived and self._seen.get(session.key, _UNSEEN) != _file_state(session.path):
            logger.info("session {}: its file was changed by another process; reading it again", session.key)
            self._reread(session)

    def memory_lock(self, key: str) -> AbstractAsyncContextManager[None]:
        """Memory work on the key's conversation (flush, consolidation, /new's archive) by one process
        at a time: a one-shot `nanobot agent` beside the gateway consolidated the same messages again
        (HISTORY.md twice), or archived the file under a consolidation whose pointer then landed in
        the new conversation's file (what was said after /new counted as consolidated)."""
        return file_lock_waiting(self.dir / LOCKS_DIR / f"{self.path_for(key).stem}.lock")

    def cached(self) -> list[Session]:
        return list(self._cache.values())

    def list_keys(self) -> list[str]:
        """Session file stems on disk (keys with ':' shown as '_')."""
        if not self.dir.exists():
            return []
        stems = []
        for path in self.dir.glob("*.jsonl"):
            if is_regular(path):
                stems.append(path.stem)
            else:
                logger.warning("sessions/{} is not a regular file (a link, a FIFO or a folder): its chat is "
                               "skipped; remove it", path.name)
        return sorted(stems)

    # ------------------------------------------------------------------ writing
    def _handle(self, session: Session) -> IO[str]:
        fh = self._handles.get(session.key)
        if fh is not None and not fh.closed and os.fstat(fh.fileno()).st_nlink == 0:
            # The file (or the whole workspace) was deleted under us: appends to the open handle
            # would vanish with the inode. Say so loudly and start the file again.
            logger.error(
                "session file {} was deleted while in use (workspace removed?); recreating it", session.path
            )
            fh.close()
            session.messages.file_recreated()
        elif fh is not None and not fh.closed and not _same_file(fh, session.path):
            # Another process's /new moved it into the archive (already processed there): what
            # follows belongs to the key's new file, so the session is read again from its path.
            logger.info("session {}: archived by another process; continuing in its new file", session.key)
            self._reread(session)
            fh = None
        if fh is None or fh.closed:
            fd = open_private(session.path, os.O_RDWR | os.O_APPEND)
            fh = open(fd, "a+", encoding="utf-8")  # noqa: SIM115 - kept open for appends
            self._handles[session.key] = fh
        return fh

    def _write_lines(self, session: Session, objs: list[dict[str, Any]]) -> list[Span] | None:
        """Append one line per object; returns each line's span in the session's file (None when
        the file is not the one its messages were loaded from: those messages never turn cold)."""
        if session.archived:
            raise RuntimeError(f"session {session.key} was archived; write to the new session instead")
        lines = [(json.dumps(o, ensure_ascii=False) + "\n").encode("utf-8") for o in objs]
        try:
            fh = self._handle(session)
        except OSError as exc:
            raise StorageError(session.path, exc) from exc
        fd = fh.fileno()
        with fd_lock(fd):
            end = os.lseek(fd, 0, os.SEEK_END)
            # A crash may have left a truncated last line: start ours on a fresh line
            # (pread on the open handle: no second open per append).
            at = end + 1 if end > 0 and os.pread(fd, 1, end - 1) != b"\n" else end
            append_all(fd, b"\n" * (at - end) + b"".join(lines), end, session.path)
            spans: list[Span] = []
            for line in lines:
                spans.append((at, len(line) - 1))
                at += len(line)
            st = os.fstat(fd)
            same_file = session.messages.written_to(session.path, st)
            inode, before = st.st_ino, self._seen.get(session.key, _UNSEEN)
            if before == (inode, end) or (before is None and end == 0):
                # nobody else wrote since this process last looked: the file is what it holds
                self._seen[session.key] = (inode, os.lseek(fd, 0, os.SEEK_END))
            if self.fsync_policy == "always":
                os.fsync(fh.fileno())
            elif self.fsync_policy == "everysec":
                self._dirty.add(session.key)
        if self.fsync_policy == "everysec":
            if time.monotonic() - self._last_fsync >= FSYNC_INTERVAL_S:
                self.fsync_dirty()
            else:
                self._schedule_fsync()
        return spans if same_file else None

    def _schedule_fsync(self) -> None:
        """everysec: make sure dirty files are synced within a second even if no write follows."""
        if self._fsync_timer is not None or not self._dirty:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # synchronous use: the next write or close() syncs
        self._fsync_timer = loop.call_later(FSYNC_INTERVAL_S, self._timer_fsync)

    def _timer_fsync(self) -> None:
        self._fsync_timer = None
        self.fsync_dirty()

    def append(self, session: Session, *messages: dict[str, Any]) -> None:
        """Add messages to the session and hand them to the OS before returning."""
        if not messages:
            return
        spans = self._write_lines(session, list(messages))
        session.messages.extend(messages, spans)

    def set_metadata(self, session: Session, **fields: Any) -> None:
        """Update bookkeeping (appended as a `_type: metadata` line; the last one wins)."""
        session.metadata.update(fields)
        line = {"_type": "metadata", "format": METADATA_FORMAT, **session.metadata}
        self._write_lines(session, [line])
        if "last_consolidated" in fields:  # what is consolidated now need not stay in RAM
            session.messages.freeze(session.last_consolidated - COLD_MARGIN)

    def fsync_dirty(self) -> None:
        for key in list(self._dirty):
            fh = self._handles.get(key)
            if fh is not None and not fh.closed:
                try:
                    os.fsync(fh.fileno())
                except OSError as exc:
                    logger.warning("fsync of session {} failed: {}", key, exc)
        self._dirty.clear()
        self._last_fsync = time.monotonic()

    # ------------------------------------------------------------------ archive
    def archive(self, session: Session, now: datetime, *, pending: bool = False) -> Path | None:
        """Move the transcript into sessions/archive/ and start the key afresh. Returns the archive
        path. With `pending`, its `.pending` marker (memory work to do) is written before the move: a
        crash between the two left an archive no start ever processed, and doctor said all was done."""
        self._close_handle(session.key)
        self._cache.pop(session.key, None)
        self._live.pop(session.key, None)
        self._seen.pop(session.key, None)
        session.archived = True
        if not session.path.exists():
            return None
        session.messages.hold_file()  # a running turn may still read its older messages after the move
        ensure_private_dir(self.archive_dir)
        stamp = now.strftime("%Y%m%dT%H%M%S")
        target = unused_path(self.archive_dir, f"{session.path.stem}-{stamp}", ".jsonl")
        if pending:
            self.mark_pending(target, session.key)  # a marker without its transcript is dropped at start
        try:
            os.replace(session.path, target)
        except OSError:
            markers.marker_path(target).unlink(missing_ok=True)
            raise
        return target

    def load_archived(self, path: Path) -> Session:
        return self._load(path.stem, path)

    # ------------------------------------------------------------------ chats (chats.py)
    def key_of(self, path: Path) -> str:
        return chats.key_of(path)

    def chat_identity(self, path: Path) -> dict[str, Any]:
        return chats.chat_identity(path, self.archive_dir)

    def last_private_chat(
        self, skip_channels: tuple[str, ...], allowed: Callable[[str, str, str | None], bool] | None = None
    ) -> tuple[str, str] | None:
        return chats.last_private_chat(self.dir, self.archive_dir, skip_channels, allowed)

    # ------------------------------------------------------------------ retry markers
    def mark_pending(self, archived: Path, key: str) -> None:
        """Leave the `.pending` marker beside an archived transcript until it has been processed."""
        markers.write_marker(markers.marker_path(archived), ArchiveMarker(key=key))

    def pending_archives(self) -> list[tuple[Path, ArchiveMarker]]:
        """(archived transcript, its marker) of every archive still pending, in name order; a marker
        whose transcript is gone is removed."""
        if not self.archive_dir.is_dir():
            return []
        found = []
        for marker in sorted(self.archive_dir.glob(f"*{markers.PENDING_SUFFIX}")):
            archived = markers.archived_path(marker)
            if not archived.exists():
                marker.unlink(missing_ok=True)
                continue
            found.append((archived, markers.read_marker(marker)))
        return found

    def record_archive_failure(self, archived: Path, when: datetime, error: str) -> ArchiveMarker:
        """Count one more failed attempt on the archive's pending marker; returns the updated record."""
        return markers.record_failure(markers.marker_path(archived), when, error)

    def give_up_archive(self, archived: Path) -> Path:
        """Stop retrying the archive: its `.pending` marker becomes `.failed` (shown by status and doctor)."""
        return markers.give_up(markers.marker_path(archived))

    def claim_archive(self, archived: Path) -> AbstractContextManager[bool]:
        """Hold the lock that makes one process at a time process `archived` (see markers.claim)."""
        return markers.claim(archived)

    def clear_pending(self, archived: Path) -> None:
        """The archive has been processed: remove its pending marker."""
        markers.marker_path(archived).unlink(missing_ok=True)

    def archive_markers(self) -> ArchiveSummary:
        """Every pending and failed marker with its record (for `nanobot status` and `doctor`)."""
        return markers.summarise(self.archive_dir)

    # ------------------------------------------------------------------ transcripts as documents
    def transcript_files(self) -> list[TranscriptFile]:
        """Live, then archived transcripts (regular files only, never through a symlink)."""
        return list_transcripts(self.dir.parent)

    def archived_since(self, max_age_s: float) -> list[tuple[str, Path]]:
        """(live file stem, path) of the transcripts /new archived within the last `max_age_s` seconds."""
        if not self.archive_dir.is_dir():
            return []
        found = []
        for path in sorted(self.archive_dir.glob(f"*{TRANSCRIPT_SUFFIX}")):
            if not is_regular(path):
                continue
            stem = archived_stem(path)
            try:
                age_s = seconds_since(path.stat().st_mtime, time.time())
                young = age_s is not None and age_s <= max_age_s
            except OSError:
                continue
            if stem and young:
                found.append((stem, path))
        return found

    def release(self, session: Session) -> None:
        """Close the file handles of a session that is no longer used (e.g. an archived one)."""
        self._close_handle(session.key)
        session.messages.close()

    def _close_handle(self, key: str) -> None:
        fh = self._handles.pop(key, None)
        if fh is not None and not fh.closed:
            try:
                fh.flush()
                if self.fsync_policy != "never":
                    os.fsync(fh.fileno())
            finally:
                fh.close()
        self._dirty.discard(key)

    def close(self) -> None:
        if self._fsync_timer is not None:
            self._fsync_timer.cancel()
            self._fsync_timer = None
        for key in list(self._handles):
            self._close_handle(key)
        for session in [*self._cache.values(), *self._live.values()]:
            session.messages.close()
