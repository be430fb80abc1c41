"""MessageLog: a session's messages by absolute index, with only the recent ones held as dicts.

Contract:
- Index `i` counts messages from the start of the session's transcript file (as loaded, then appended
  to), so `last_consolidated`, `delivered_through` and `stopped_through` index it directly.
- Messages `[0, cold)` are "cold": not held in RAM, only the byte span (offset, length) of each one's
  line in the file. Reading one preads that line and parses it again exactly as the loader did
  (UTF-8 with replacement, `json.loads`), so it returns the message a full load would give, as a
  fresh dict each time (changing it changes nothing). Messages `[cold, len)` are dicts in a list.
- A message can turn cold (`freeze`) only when its span in the log's file is known: it was loaded
  from that file, or the store appended it to that same file (same device and inode). A message
  added without a span (a plain list given to `Session`, or a write to a recreated file) stays hot,
  and so does everything after it.
- Cold lines are read through a read-only descriptor held while there are cold messages, so reads
  still work after the file was moved (`/new` archives with `os.replace`, which keeps the inode).
  `close()` lets it go (the store calls it when it releases, re-reads or closes the session), and a
  `weakref.finalize` closes it when the log is collected. A cold read after `close()` opens the path
  again only if it is still the same file; otherwise it raises `ColdReadError`.
- It is a read-only `Sequence` (int and negative indices, slices returning lists, iteration, truth,
  equality with lists) plus `append`/`extend`; there is no item assignment or deletion, since the
  file it mirrors is append-only.
"""

from __future__ import annotations

import json
import os
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from loguru import logger

# Messages kept hot below the consolidation pointer: the history view, flush and missed-reply
# recovery read from the pointer on, rarely a few before it; anything older is read on demand.
COLD_MARGIN = 32
# One pread covers consecutive cold lines up to this many bytes (slices and iteration).
READ_CHUNK = 1 << 20
ITER_BATCH = 256  # cold messages parsed ahead while iterating

Span = tuple[int, int]  # (byte offset of the line, its length without the newline)
_UNKNOWN = -1


class ColdReadError(OSError):
    """A cold message could not be read back (file gone or replaced, or the line changed)."""


def parse_message_line(raw: bytes) -> Any:
    """A transcript line parsed the one way the loader and cold reads share (may raise ValueError)."""
    return json.loads(raw.decode("utf-8", errors="replace"))


class _ColdFile:
    """The transcript file a log's spans point into: its path, identity and read descriptor."""

    def __init__(self, path: Path, ident: tuple[int, int] | None, fd: int | None) -> None:
        self.path = path
        self.ident = ident  # (st_dev, st_ino); None: not known yet (no file when loaded)
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None
        if fd is not None:
            self._keep(fd)

    def _keep(self, fd: int) -> None:
        self._fd = fd
        # A log nobody closed (dropped by a caller) must not leak its descriptor.
        self._finalizer = weakref.finalize(self, os.close, fd)

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def is_same(self, st: os.stat_result) -> bool:
        return self.ident == (st.st_dev, st.st_ino)

    def fd(self) -> int:
        """The read descriptor, opened again from the path if closed and still the same file."""
        if self._fd is not None:
            return self._fd
        if self.ident is None:
            raise ColdReadError(f"{self.path}: the transcript these messages came from is gone")
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise ColdReadError(f"{self.path}: cannot read older messages again: {exc}") from exc
        if not self.is_same(os.fstat(fd)):
            os.close(fd)
            raise ColdReadError(f"{self.path}: replaced since it was loaded; older messages unreadable")
        self._keep(fd)
        return fd

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # closes once; later calls do nothing
        self._fd = None
        self._finalizer = None

    def forget(self) -> None:
        """The file at the path is another one now: never open it for these spans again."""
        self.ident = None


class MessageLog(Sequence[dict[str, Any]]):
    """The messages of one session, the older ones read from the transcript on demand."""

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    def __init__(self, messages: Iterable[dict[str, Any]] = ()) -> None:
        self._hot: list[dict[str, Any]] = list(messages)
        self._cold = 0
        self._offsets = array("q", [_UNKNOWN] * len(self._hot))
        self._lengths = array("q", [0] * len(self._hot))
        self._file: _ColdFile | None = None
        self._accepts_spans = True  # False once the file was recreated under us

    @classmethod
    def from_file(
        cls,
        path: Path,
        st: os.stat_result,
        fd: int | None,
        offsets: array[int],
        lengths: array[int],
        hot: list[dict[str, Any]],
    ) -> MessageLog:
        """What the loader built: every message's span; dicts only for the last `len(hot)` of them.
        Takes ownership of `fd` (may be None when nothing is cold)."""
        if len(offsets) != len(lengths) or len(hot) > len(offsets):
            raise ValueError("spans and messages do not match")
        log = cls()
        log._hot = hot
        log._cold = len(offsets) - len(hot)
        log._offsets, log._lengths = offsets, lengths
        log._file = _ColdFile(path, (st.st_dev, st.st_ino), fd)
        if log._cold and fd is None:
            log._file.fd()  # cold messages need the file held from the start
        return log

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._cold + len(self._hot)

    def __bool__(self) -> bool:
        return len(self) > 0

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        # The hot path (every history message, several times a turn): a held message by index.
        if type(index) is int and index >= self._cold:
            return self._hot[index - self._cold]  # past the end: the list's IndexError
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if stop <= start:
                return []
            cold_end = min(stop, self._cold)
            out = self._read_cold(start, cold_end) if start < cold_end else []
            out.extend(self._hot[max(start, self._cold) - self._cold : stop - self._cold])
            return out
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        if i >= self._cold:
            return self._hot[i - self._cold]
        return self._read_cold(i, i + 1)[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_from(0)

    def iter_from(self, start: int) -> Iterator[dict[str, Any]]:
        """Messages `start`, `start + 1`, ... (cold ones read in batches, never all at once)."""
        cold = self._cold
        for first in range(max(0, start), cold, ITER_BATCH):
            yield from self._read_cold(first, min(cold, first + ITER_BATCH))
        i = max(start, cold)
        while i < len(self):  # by index: appends and freezes during the loop are seen correctly
            yield self[i]
            i += 1

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageLog | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        return f"MessageLog({len(self)} messages, {self._cold} cold)"

    @property
    def cold_count(self) -> int:
        """How many leading messages are not held in RAM."""
        return self._cold

    @property
    def held(self) -> int:
        """How many messages are held as dicts."""
        return len(self._hot)

    def _read_cold(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Messages [start, stop) (all cold), read in as few preads as READ_CHUNK allows."""
        if self._file is None:
            raise ColdReadError("cold messages without a transcript")  # unreachable: freeze needs one
        fd = self._file.fd()
        out: list[dict[str, Any]] = []
        i = start
        while i < stop:
            base = self._offsets[i]
            j = i + 1
            while j < stop and self._offsets[j] + self._lengths[j] - base <= READ_CHUNK:
                j += 1
            end = self._offsets[j - 1] + self._lengths[j - 1]
            data = os.pread(fd, end - base, base)
            for k in range(i, j):
                off = self._offsets[k] - base
                out.append(self._parse(data[off : off + self._lengths[k]], k))
            i = j
        return out

    def _parse(self, raw: bytes, index: int) -> dict[str, Any]:
        try:
            obj = parse_message_line(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or "role" not in obj or "_type" in obj:
            assert self._file is not None
            raise ColdReadError(f"{self._file.path}: message {index} is no longer where it was loaded from")
        return obj

    # ------------------------------------------------------------------ growing
    def append(self, message: dict[str, Any], span: Span | None = None) -> None:
        """Add a message; `span` is its line in this log's file (then it can turn cold)."""
        self._hot.append(message)
        offset, length = span if span is not None and self._accepts_spans else (_UNKNOWN, 0)
        self._offsets.append(offset)
        self._lengths.append(length)

    def extend(self, messages: Iterable[dict[str, Any]], spans: Sequence[Span] | None = None) -> None:
        items = list(messages)
        if spans is not None and len(spans) != len(items):
            raise ValueError("one span per message")
        for k, message in enumerate(items):
            self.append(message, None if spans is None else spans[k])

    def take(self, other: MessageLog) -> None:
        """Become `other` (a fresh load of the same key), which is left empty; the old file is let go."""
        self.close()
        self._hot, self._cold = other._hot, other._cold
        self._offsets, self._lengths = other._offsets, other._lengths
        self._file, self._accepts_spans = other._file, other._accepts_spans
        other._hot, other._cold, other._file = [], 0, None
        other._offsets, other._lengths = array("q"), array("q")

    # ------------------------------------------------------------------ the file
    def written_to(self, path: Path, st: os.stat_result) -> bool:
        """Whether spans of lines just written to the file `st` (at `path`) point into this log's
        file; a log loaded before the file existed adopts it here."""
        if not self._accepts_spans:
            return False
        if self._file is None:
            self._file = _ColdFile(path, (st.st_dev, st.st_ino), None)
            return True
        return self._file.is_same(st)

    def file_recreated(self) -> None:
        """The store had to create the file again (deleted under us): spans of messages not cold yet
        point into the lost file and later lines into another, so nothing more turns cold."""
        self._accepts_spans = False
        for i in range(self._cold, len(self)):
            self._offsets[i] = _UNKNOWN
        if self._file is not None and not self._file.is_open:
            self._file.forget()  # the path now names another file: never read it for these spans

    def freeze(self, boundary: int) -> int:
        """Let go of the dicts of messages before `boundary` (as far as their spans are known);
        returns the new cold count."""
        target = self._cold
        limit = min(boundary, len(self))
        while target < limit and self._offsets[target] != _UNKNOWN:
            target += 1
        if target == self._cold or self._file is None:
            return self._cold
        try:
            self._file.fd()  # held from now on, so the cold lines stay readable if the file moves
        except ColdReadError:
            return self._cold
        del self._hot[: target - self._cold]
        self._cold = target
        return self._cold

    def hold_file(self) -> None:
        """Make sure the descriptor is open (before the file is moved) if any message is cold."""
        if self._cold and self._file is not None:
            try:
                self._file.fd()
            except ColdReadError as exc:  # replaced already: a later cold read says so, the move goes on
                logger.warning("{}", exc)

    def close(self) -> None:
        """Close the read descriptor (a later cold read opens the path again if still the same file)."""
        if self._file is not None:
            self._file.close()
