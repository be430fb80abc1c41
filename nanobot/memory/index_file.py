"""The SQLite file behind memory search: opening it, its two connections, its transactions, its meta table.

Two connections in WAL mode: the writer (used by sync, in a worker thread) and the reader (used
by search), so a search never waits for a sync. A file that is not a valid index is deleted and
created anew; it only holds data derived from the memory files. An index of an older schema is
upgraded in place (index_schema.py). An error that says the file cannot be used now although
nothing is wrong with it (another process has held the write lock longer than BUSY_TIMEOUT_MS,
the disk is full) raises IndexUnavailable and leaves the file alone: a rebuild would not help and
would throw away every vector. Opening an up-to-date index writes nothing, so searching what is
committed never needs the write lock. Every write transaction moves the index's generation on,
so what is derived from the rows can be cached until it changes. What the tables hold and the
queries on them are index_db.py's.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory.index_schema import SCHEMA, SCHEMA_VERSION, UPGRADABLE, schema_version, upgrade
from nanobot.util.fs import open_private

BUSY_TIMEOUT_MS = 5000
SQLITE_HEADER_BYTES = 100  # a database file shorter than its header was truncated
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_SQLITE_NOMEM, _SQLITE_FULL = 7, 13
# Primary result codes (an extended code carries its primary code in the low byte) of errors that
# are not the file's fault: another process holds it, or there is no room (memory or disk). A file
# that cannot be opened or written for its permissions is rebuilt, which helps when its folder is
# writable (an index left behind by another user).
_NOT_DAMAGE = frozenset({_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_NOMEM, _SQLITE_FULL})
# Extended codes of the same kind: the shared-memory file beside a WAL database could not be opened,
# grown or mapped. On a full disk opening the index fails so (not with SQLITE_FULL), and the index
# was deleted to be rebuilt, which then failed too: every vector lost for a disk that had no room.
_IOERR_SHMOPEN, _IOERR_SHMSIZE, _IOERR_SHMMAP = 4618, 4874, 5386
_NOT_DAMAGE_EXTENDED = frozenset({_IOERR_SHMOPEN, _IOERR_SHMSIZE, _IOERR_SHMMAP})
MIN_FREE_BYTES = 1024 * 1024  # below this on the index's disk, a failing index is not deleted


def no_room_for_index(path: Path) -> bool:
    """Whether the index's disk is (nearly) full: no error is taken for damage then, since a
    rebuild could not write the new file."""
    try:
        return shutil.disk_usage(path.parent).free < MIN_FREE_BYTES
    except OSError:
        return False


class IndexUnavailable(Exception):
    """The index cannot be used now but is not damaged, so it is left as it is."""


def unavailable_error(exc: BaseException, path: Path) -> IndexUnavailable | None:
    """The IndexUnavailable a database error amounts to, or None when it may be damage."""
    code = getattr(exc, "sqlite_errorcode", None)  # sqlite3 and sqlean errors carry it (Python 3.11+)
    if not isinstance(code, int):
        return None
    if code in _NOT_DAMAGE_EXTENDED or (code & 0xFF not in _NOT_DAMAGE and no_room_for_index(path)):
        return IndexUnavailable(f"the memory index {path} cannot be used now ({exc}; the disk is "
                                "full or nearly so); it is kept as it is")
    if code & 0xFF not in _NOT_DAMAGE:
        return None
    if code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED) and _truncated(path):
        return IndexUnavailable(
            f"the memory index {path} was truncated while another process (the gateway) has it open; "
            "it opens it again at its next search, or run `nanobot doctor --fix`"
        )
    if code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return IndexUnavailable(
            f"the memory index {path} is busy: another process has been writing it for over "
            f"{BUSY_TIMEOUT_MS / 1000:g} s; try again"
        )
    return IndexUnavailable(f"the memory index {path} cannot be used now ({exc}); it is kept as it is")


def _truncated(path: Path) -> bool:
    try:
        return path.stat().st_size < SQLITE_HEADER_BYTES
    except OSError:
        return False


def _connect_module(use_sqlite_vec: bool) -> tuple[Any, bool]:
    """The DB-API module to use: sqlean (can load sqlite-vec) when asked and installed."""
    if use_sqlite_vec:
        try:
            import sqlean
            import sqlite_vec  # noqa: F401

            return sqlean, True
        except ImportError:
            logger.warning("memory search: sqlite-vec backend needs sqlean.py and sqlite-vec; using NumPy")
    return sqlite3, False


class IndexFile:
    """Owns the index file and its two connections. Reads that must see the sync's own writes use
    the writer connection under the write lock."""

    def __init__(self, path: Path, *, use_sqlite_vec: bool = False):
        self.path = path
        self._module, self.sqlite_vec = _connect_module(use_sqlite_vec)
        self._errors = (sqlite3.DatabaseError, self._module.DatabaseError)
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer: Any = None
        self._reader: Any = None
        self.rebuilt = False  # True when the last open replaced a corrupt file
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file opened

    # ------------------------------------------------------------------ lifecycle
    def _connect(self) -> Any:
        conn = self._module.connect(str(self.path), check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.isolation_level = None  # transactions are opened explicitly (BEGIN IMMEDIATE)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if self.sqlite_vec:
            import sqlite_vec

            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
        return conn

    def _open_once(self) -> None:
        # Created private before SQLite opens it: SQLite gives -wal and -shm the database file's mode.
        os.close(open_private(self.path, os.O_RDWR))
        writer = self._connect()
        try:
            writer.execute("PRAGMA journal_mode=WAL")
            writer.execute("PRAGMA synchronous=NORMAL")
            writer.executescript(SCHEMA)
            check = writer.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                raise sqlite3.DatabaseError(f"quick_check: {check}")
            version = schema_version(writer)
            if version in UPGRADABLE:
                self._upgrade(writer)
            elif version is None:
                writer.execute("INSERT OR IGNORE INTO meta VALUES('schema_version', ?)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                raise sqlite3.DatabaseError("index schema version changed")
        except Exception:
            writer.close()
            raise
        self._writer = writer
        self._reader = self._connect()
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def _upgrade(self, conn: Any) -> None:
        """Upgrade an older index in place (index_schema.py); no vector is made again."""
        with self._transaction(conn):
            freed = upgrade(conn)
        if not freed:
            return
        try:
            conn.execute("VACUUM")
        except (sqlite3.OperationalError, self._module.OperationalError) as exc:
            # e.g. another process is reading: the free pages get reused as the index grows
            logger.info("memory index: space not given back after the upgrade ({})", exc)

    def open(self) -> None:
        """Open (creating if needed); a corrupt or foreign file is replaced by an empty index."""
        self.rebuilt = False
        try:
            self._open_once()
        except self._errors as exc:
            unavailable = unavailable_error(exc, self.path)
            if unavailable is not None:
                raise unavailable from exc
            logger.warning("memory index {} is unusable ({}); rebuilding it", self.path, exc)
            self.close()
            self.delete_files()
            try:
                self._open_once()
            except self._errors as again:
                raise unavailable_error(again, self.path) or IndexUnavailable(
                    f"the memory index {self.path} could not be made again ({again})"
                ) from again
            self.rebuilt = True

    def close(self) -> None:
        # Taking both locks waits for a statement running in a worker thread to finish.
        with self._write_lock, self._read_lock:
            self._close_connections()

    def _close_connections(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                try:
                    conn.close()
                except Exception as exc:  # closing a broken handle must not mask the real error
                    logger.debug("closing memory index connection: {}", exc)
        self._reader = self._writer = None

    def changed_on_disk(self) -> str:
        """How the open file was changed behind SQLite's back since it was opened ("" when it was
        not): "replaced" (deleted, or another file renamed over it: another process rebuilt it) or
        "truncated" (its header gone). Writes through SQLite, ours or another process's, change
        neither; an open index keeps reading the old inode otherwise, and other processes find it
        busy for as long as this one holds the old write-ahead log."""
        if self._writer is None or self._identity is None:
            return ""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "replaced"
        if (st.st_dev, st.st_ino) != self._identity:
            return "replaced"
        return "truncated" if st.st_size < SQLITE_HEADER_BYTES else ""

    def delete_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    def is_unusable(self, exc: BaseException) -> bool:
        """Whether an error means the file must be rebuilt (a database error that may be damage)."""
        return isinstance(exc, self._errors) and unavailable_error(exc, self.path) is None

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _meta(conn: Any, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @contextmanager
    def write(self) -> Iterator[Any]:
        """One write transaction on the writer connection; it moves the index's generation on."""
        with self._write_lock, self._transaction(self._writer) as conn:
            yield conn
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='generation'")
            conn.execute("INSERT OR IGNORE INTO meta VALUES('generation', '1')")

    @contextmanager
    def _transaction(self, conn: Any) -> Iterator[Any]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error; a lock wait or a full disk comes
        out as IndexUnavailable."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield conn
            conn.commit()
        except BaseException as exc:
            conn.rollback()
            unavailable = unavailable_error(exc, self.path) if isinstance(exc, self._errors) else None
            if unavailable is not None:
                raise unavailable from exc
            raise

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self._read_lock:
            yield self._reader

    def get_meta(self, key: str) -> str | None:
        with self.read() as conn:
            return self._meta(conn, key)

    def set_meta(self, values: dict[str, str]) -> None:
        with self.write() as conn:
            conn.executemany("INSERT OR REPLACE INTO meta VALUES(?, ?)", list(values.items()))

    def generation(self) -> int:
        value = self.get_meta("generation")
        return int(value) if value else 0
