"""Reading a transcript into a Session without holding its consolidated past in RAM.

The rules are those of the JSONL file (session.py): a line is parsed as UTF-8 (bad bytes replaced);
a dict with `role` (and no `_type`) is the next message; a `_type: metadata` line replaces the
metadata (the last one wins, a bad field keeps the previous line's value); blank, corrupt and other
lines are skipped (warned), so a message's index is not its line number. The pointer is clamped to
the message count.

Only the file as it was when opened is read (its size then): a line another process appends
meanwhile is left for the next re-read. Two passes over that snapshot keep the peak low:
1. only lines that contain `"_type"` are parsed, to learn the consolidation pointer;
2. every line is parsed (only parsing tells a message from a corrupt line), but a dict is kept only
   for messages at or after `pointer - COLD_MARGIN`; older ones keep just their byte span, and the
   MessageLog reads them again on demand through the descriptor this opened.
"""

from __future__ import annotations

import errno
import json
import os
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from loguru import logger

from nanobot.session.message_log import COLD_MARGIN, MessageLog, parse_message_line
from nanobot.session.session import Session, StorageError, message_problem, valid_metadata, valid_pointer
from nanobot.util.nofollow import open_regular

READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class Loaded:
    session: Session
    state: tuple[int, int] | None  # (inode, size) of the file as read; None: there was none


def _lines(fh: IO[bytes], size: int) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line without its newline) of the first `size` bytes."""
    fh.seek(0)
    pos, lineno = 0, 0
    while pos < size:
        raw = fh.readline(size - pos)  # never past the snapshot, even inside a line being written
        if not raw:
            break
        lineno += 1
        start, pos = pos, pos + len(raw)
        yield lineno, start, raw[:-1] if raw.endswith(b"\n") else raw


def _pointer(fh: IO[bytes], size: int) -> int:
    """The consolidation pointer the metadata lines leave (mirrors `valid_metadata`, quietly: the
    message pass warns). Only an estimate for where dicts start to be kept; never trusted further."""
    pointer = 0
    for _, _, raw in _lines(fh, size):
        if b'"_type"' not in raw:  # a `_type` key is always written as this; inside strings it is escaped
            continue
        try:
            obj = parse_message_line(raw)
        except ValueError:
            continue
        if not isinstance(obj, dict) or obj.get("_type") != "metadata":
            continue
        value = obj.get("last_consolidated", 0)
        if valid_pointer(value):
            pointer = value  # an invalid value keeps the previous one
    return pointer


def load_transcript(key: str, path: Path, count_caps: Mapping[str, int]) -> Loaded:
    """The session in the file at `path` (empty when there is none)."""
    session = Session(key=key, path=path, count_caps=count_caps)
    try:
        # a regular file only, opened without blocking: a FIFO named like a transcript (a stray
        # mkfifo, a restore keeping special files) hung the open, and with it every chat
        fd = open_regular(path)
    except FileNotFoundError:
        return Loaded(session, None)
    except OSError as exc:
        if exc.errno not in (None, errno.ELOOP):
            raise  # EACCES, EMFILE…: the file is a transcript, said with its own reason
        # a link (ELOOP) or a FIFO or folder (open_regular's check, no errno): said as what it is
        cause = OSError(exc.errno, f"{path} is a symbolic link or not a regular file: nanobot never reads or "
                        "writes a conversation through one (remove it)")
        raise StorageError(path, cause) from exc
    try:
        st = os.fstat(fd)
        size = st.st_size
        with open(fd, "rb", buffering=READ_BUFFER, closefd=False) as fh:
            cold_before = max(0, _pointer(fh, size) - COLD_MARGIN)
            offsets, lengths, hot = array("q"), array("q"), []
            skipped = 0
            for lineno, offset, raw in _lines(fh, size):
                line = raw.decode("utf-8", errors="replace")  # as parse_message_line, which reads it again
                if not line.strip():  # str.strip: blank in Unicode's sense, as before
                    continue
                try:
                    obj: Any = json.loads(line)
                except ValueError:
                    skipped += 1
                    logger.warning("session {}: skipping corrupt line {} ({} bytes)", key, lineno, len(raw))
                    continue
                if not isinstance(obj, dict):
                    skipped += 1
                    continue
                if "_type" in obj:
                    if obj.get("_type") == "metadata":
                        session.metadata = valid_metadata(key, lineno, obj, session.metadata)
                elif "role" in obj:
                    problem = message_problem(obj)
                    if problem is not None:
                        skipped += 1
                        logger.warning("session {}: skipping line {}: {}", key, lineno, problem)
                        continue
                    if len(offsets) >= cold_before:
                        hot.append(obj)
                    offsets.append(offset)
                    lengths.append(len(raw))
        if skipped:
            logger.warning("session {}: {} unreadable line(s) skipped; the rest is intact", key, skipped)
        log = MessageLog.from_file(path, st, fd if len(hot) < len(offsets) else None, offsets, lengths, hot)
    except BaseException:
        os.close(fd)
        raise
    if len(hot) == len(offsets):
        os.close(fd)  # nothing cold: the log opens the file again if messages turn cold later
    session.messages = log
    if session.last_consolidated > len(log):
        session.metadata["last_consolidated"] = len(log)
    log.freeze(session.last_consolidated - COLD_MARGIN)  # in case the estimate fell short
    return Loaded(session, (st.st_ino, size))
