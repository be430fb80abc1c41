"""The SQLite file behind memory search: files, chunks (+ vectors), an FTS5 table, an embedding cache.

A chunk row holds its chunk vector (float32, what nearest-neighbour search scans); its line vectors
(float16, see vectors.py) are kept once, in the embedding cache under the chunk's text hash, and
read with the chunk rows of a search. The cache keeps every row a chunk refers to and at most
CACHE_SPARE_ROWS others (the newest: text that was edited away may come back).

Two connections in WAL mode: the writer (used by sync, in a worker thread) and the reader (used
by search), so a search never waits for a sync. A file that is not a valid index is deleted and
created anew; it only holds data derived from the memory files. An error that says the file
cannot be used now although nothing is wrong with it (another process has held the write lock
longer than BUSY_TIMEOUT_MS, the disk is full) raises IndexUnavailable and leaves the file alone:
a rebuild would not help and would throw away every vector. Opening an up-to-date index writes
nothing, so searching what is committed never needs the write lock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.memory.chunking import Chunk
from nanobot.memory.fts import to_fts_text
from nanobot.memory.index_schema import SCHEMA, SCHEMA_VERSION, UPGRADABLE, schema_version, upgrade
from nanobot.util.fs import open_private

CACHE_SPARE_ROWS = 500  # cached embeddings of text no chunk holds any more (~10 KB each)
BUSY_TIMEOUT_MS = 5000
SQLITE_HEADER_BYTES = 100  # a database file shorter than its header was truncated
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
_SQLITE_NOMEM, _SQLITE_FULL = 7, 13
# Primary result codes (an extended code carries its primary code in the low byte) of errors that
# are not the file's fault: another process holds it, or there is no room (memory or disk). A file
# that cannot be opened or written for its permissions is rebuilt, which helps when its folder is
# writable (an index left behind by another user).
_NOT_DAMAGE = frozenset({_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_NOMEM, _SQLITE_FULL})
TITLE_WEIGHT = 0.5  # a heading/day match counts half a body match in BM25



class IndexUnavailable(Exception):
    """The index cannot be used now but is not damaged, so it is left as it is."""


def unavailable_error(exc: BaseException, path: Path) -> IndexUnavailable | None:
    """The IndexUnavailable a database error amounts to, or None when it may be damage."""
    code = getattr(exc, "sqlite_errorcode", None)  # sqlite3 and sqlean errors carry it (Python 3.11+)
    if not isinstance(code, int) or code & 0xFF not in _NOT_DAMAGE:
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


@dataclass(frozen=True)
class FileRow:
    hash: str
    mtime_ns: int
    size: int
    resume: str  # where chunking of a grown transcript starts again ("" : from the start)


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    start_line: int
    end_line: int
    text: str
    embedding: bytes | None
    title: str
    day: str
    line_vectors: bytes | None  # float16 (lines x dims), see vectors.py; from the embedding cache


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


class IndexDB:
    """Owns the index file and its two connections."""

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
        self._df_cache: dict[str, int] = {}
        self._df_generation = -1

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
            self._open_once()
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

    # ------------------------------------------------------------------ sync side
    def file_rows(self) -> dict[str, FileRow]:
        with self._write_lock:
            rows = self._writer.execute("SELECT path, hash, mtime_ns, size, resume FROM files").fetchall()
        return {r[0]: FileRow(*r[1:]) for r in rows}

    def replace_file(
        self,
        path: str,
        source: str,
        digest: str,
        mtime_ns: int,
        size: int,
        chunks: list[tuple[Chunk, bytes | None]],
        *,
        from_line: int = 1,
        resume: str = "",
    ) -> int:
        """Replace a file's chunks (each with its chunk vector blob when the cache has it); returns
        how many rows were written. With `from_line`, only the chunks starting at that line or later
        are replaced (a grown transcript chunked again from there); `resume` is kept for the next sync.

        Rows of chunks that did not change are kept: a transcript grows at its end, so after a turn
        only its last chunks are new, and rewriting thousands of rows (and their FTS entries) after
        every turn cost seconds on a months-long session and bloated the index file."""
        with self.write() as conn:
            unchanged: dict[tuple[Any, ...], list[int]] = {}
            for row in conn.execute(
                "SELECT id, start_line, end_line, hash, title, day FROM chunks WHERE path=? AND start_line>=?",
                (path, from_line),
            ):
                unchanged.setdefault(tuple(row[1:]), []).append(row[0])
            written = 0
            for chunk, vector in chunks:
                same = unchanged.get((chunk.start_line, chunk.end_line, chunk.hash, chunk.title, chunk.day))
                if same:
                    same.pop()  # kept as it is (with its vector, or still waiting for one)
                    continue
                written += 1
                cur = conn.execute(
                    "INSERT INTO chunks(path, start_line, end_line, text, hash, embedding, title, day)"
                    " VALUES(?,?,?,?,?,?,?,?)",
                    (path, chunk.start_line, chunk.end_line, chunk.text, chunk.hash, vector, chunk.title, chunk.day),
                )
                conn.execute(
                    "INSERT INTO chunks_fts(rowid, title, body) VALUES(?, ?, ?)",
                    (cur.lastrowid, to_fts_text(chunk.title), to_fts_text(chunk.text)),
                )
            gone = [(rowid,) for rowids in unchanged.values() for rowid in rowids]
            conn.executemany("DELETE FROM chunks_fts WHERE rowid=?", gone)
            conn.executemany("DELETE FROM chunks WHERE id=?", gone)
            conn.execute(
                "INSERT OR REPLACE INTO files VALUES(?,?,?,?,?,?)", (path, source, digest, mtime_ns, size, resume)
            )
        return written

    def adopt_chunks(self, source: str, target: str, before_line: int, resume: str) -> int:
        """`target` (a transcript /new archived) takes over `source`'s chunks that start before
        `before_line`, and `resume` with them; `source` is marked changed with no resume point, so
        its next sync chunks it whole. Returns how many chunks moved."""
        with self.write() as conn:
            moved = conn.execute(
                "UPDATE chunks SET path=? WHERE path=? AND start_line<?", (target, source, before_line)
            ).rowcount
            conn.execute("INSERT OR REPLACE INTO files VALUES(?, 'sessions', '', -1, -1, ?)", (target, resume))
            conn.execute("UPDATE files SET hash='', mtime_ns=-1, size=-1, resume='' WHERE path=?", (source,))
        return moved

    def touch_file(self, path: str, mtime_ns: int, size: int) -> None:
        with self.write() as conn:
            conn.execute("UPDATE files SET mtime_ns=?, size=? WHERE path=?", (mtime_ns, size, path))

    def delete_file(self, path: str) -> None:
        with self.write() as conn:
            self._delete_chunks(conn, path)
            conn.execute("DELETE FROM files WHERE path=?", (path,))

    @staticmethod
    def _delete_chunks(conn: Any, path: str) -> None:
        conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE path=?)", (path,))
        conn.execute("DELETE FROM chunks WHERE path=?", (path,))

    def clear_all(self) -> None:
        with self.write() as conn:
            conn.execute("DELETE FROM chunks_fts")
            conn.execute("DELETE FROM chunks")
            conn.execute("DELETE FROM files")

    def clear_embeddings(self, stale_model: tuple[str, str] | None = None) -> None:
        """Every chunk without a vector; stale_model (provider, model): its cached vectors go too."""
        with self.write() as conn:
            conn.execute("UPDATE chunks SET embedding=NULL")
            if stale_model is not None:
                conn.execute("DELETE FROM embedding_cache WHERE provider=? AND model=?", stale_model)

    def chunks_without_embedding(self) -> list[tuple[int, str, str, str]]:
        """(id, title, text, hash) of every chunk still without a vector."""
        with self._write_lock:
            rows = self._writer.execute(
                "SELECT id, title, text, hash FROM chunks WHERE embedding IS NULL"
            ).fetchall()
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def set_embeddings(self, rows: Iterable[tuple[int, bytes]]) -> None:
        """(chunk id, chunk vector blob) of chunks whose line vectors the cache already holds."""
        with self.write() as conn:
            conn.executemany("UPDATE chunks SET embedding=? WHERE id=?", [(v, i) for i, v in rows])

    def store_embeddings(
        self, provider: str, model: str, dims: int, lines: list[tuple[str, bytes]], rows: list[tuple[int, bytes]]
    ) -> None:
        """Newly made vectors in one transaction: (hash, line vectors blob) into the cache and
        (chunk id, chunk vector blob) onto the chunks, so no chunk has a vector without its lines."""
        with self.write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache VALUES(?,?,?,?,?)",
                [(provider, model, h, dims, v) for h, v in lines],
            )
            conn.executemany("UPDATE chunks SET embedding=? WHERE id=?", [(v, i) for i, v in rows])

    def cache_get(self, provider: str, model: str, hashes: list[str]) -> dict[str, tuple[int, bytes]]:
        """hash -> (dims, line vectors blob) of the cached chunks among `hashes`."""
        found: dict[str, tuple[int, bytes]] = {}
        with self._write_lock:
            for start in range(0, len(hashes), 500):  # stay under SQLite's variable limit
                part = hashes[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._writer.execute(
                    "SELECT hash, dims, vector FROM embedding_cache "
                    f"WHERE provider=? AND model=? AND hash IN ({marks})",
                    (provider, model, *part),
                ).fetchall()
                found.update({h: (int(d), v) for h, d, v in rows})
        return found

    def prune_cache(self) -> int:
        """Drop cached embeddings of text no chunk holds, all but the CACHE_SPARE_ROWS newest; how
        many went. A live transcript changes its last chunk every turn: unpruned, the cache grows
        for ever."""
        with self._write_lock:  # counting first: the DELETE costs ~20 ms at 10k chunks, the counts ~1 ms
            cached, chunks = self._writer.execute(
                "SELECT (SELECT count(*) FROM embedding_cache), (SELECT count(*) FROM chunks)"
            ).fetchone()
        if cached <= chunks + CACHE_SPARE_ROWS:
            return 0
        with self.write() as conn:
            cur = conn.execute(
                "DELETE FROM embedding_cache WHERE rowid IN ("
                " SELECT rowid FROM embedding_cache WHERE hash NOT IN (SELECT hash FROM chunks)"
                " ORDER BY rowid DESC LIMIT -1 OFFSET ?)",
                (CACHE_SPARE_ROWS,),
            )
            return cur.rowcount

    # ------------------------------------------------------------------ search side
    def fts_scores(self, match: str, title_weight: float = TITLE_WEIGHT) -> dict[int, float]:
        """bm25 of every chunk matching (FTS5's value: negative, lower is better).

        One pass without ORDER BY/LIMIT: FTS5 computes bm25 for each matching row either way, and
        having them all gives exact text scores for vector candidates too. The caller bounds the
        matched rows (selective_terms).
        """
        with self.read() as conn:
            rows = conn.execute(
                "SELECT rowid, bm25(chunks_fts, ?, 1.0) FROM chunks_fts WHERE chunks_fts MATCH ?",
                (title_weight, match),
            ).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}

    def doc_counts(self, terms: list[str]) -> tuple[int, dict[str, int]]:
        """(number of chunks, chunks containing each term); cached until the index changes."""
        generation = self.generation()
        with self.read() as conn:
            if generation != self._df_generation:
                self._df_cache = {"": conn.execute("SELECT count(*) FROM chunks").fetchone()[0]}
                self._df_generation = generation
            for term in terms:
                if term not in self._df_cache:
                    quoted = '"' + term.replace('"', '""') + '"'
                    row = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (quoted,))
                    self._df_cache[term] = row.fetchone()[0]
            return self._df_cache[""], {t: self._df_cache[t] for t in terms}

    def chunk_rows(self, ids: list[int], lines_of: tuple[str, str] | None = None) -> dict[int, ChunkRow]:
        """The chunks `ids`; with lines_of = (provider, model), each with that model's line vectors."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        provider, model = lines_of or ("", "")
        with self.read() as conn:
            rows = conn.execute(
                "SELECT c.id, c.path, c.start_line, c.end_line, c.text, c.embedding, c.title, c.day, e.vector"
                " FROM chunks c LEFT JOIN embedding_cache e"
                " ON e.provider=? AND e.model=? AND e.hash=c.hash AND c.embedding IS NOT NULL"
                f" WHERE c.id IN ({marks})",
                (provider, model, *ids),
            ).fetchall()
        return {r[0]: ChunkRow(*r) for r in rows}

    def ids_between_days(self, first: str, last: str, limit: int) -> list[int]:
        """Chunks whose day lies in [first, last] (ISO dates), newest first, at most `limit`."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT id FROM chunks WHERE day != '' AND day BETWEEN ? AND ? ORDER BY day DESC LIMIT ?",
                (first, last, limit),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def all_vectors(self) -> list[tuple[int, bytes]]:
        with self.read() as conn:
            return conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL").fetchall()

    def vec_knn(self, query: bytes, limit: int) -> list[tuple[int, float]]:
        """sqlite-vec brute force over the chunk vectors: (id, cosine similarity) best first."""
        with self.read() as conn:
            rows = conn.execute(
                "SELECT id, vec_distance_cosine(embedding, ?) AS d FROM chunks "
                "WHERE embedding IS NOT NULL ORDER BY d LIMIT ?",
                (query, limit),
            ).fetchall()
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def counts(self) -> dict[str, int]:
        with self.read() as conn:
            files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            embedded = conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0]
            cached = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
        return {"files": files, "chunks": chunks, "embeddedChunks": embedded, "cachedEmbeddings": cached}
