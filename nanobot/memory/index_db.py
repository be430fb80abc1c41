"""The rows of the memory index: files, chunks (+ vectors), the FTS5 table, the embedding cache.

Sync writes through it (a file's chunks replaced, vectors stored) and search reads through it
(BM25 scores, chunk rows, vectors); opening the file, its connections and its transactions are
index_file.py's (IndexDB is an IndexFile).

A chunk row holds its chunk vector (float32, what nearest-neighbour search scans); its line vectors
(float16, see vectors.py) are kept once, in the embedding cache under the chunk's text hash, and
read with the chunk rows of a search. The cache keeps every row a chunk refers to and at most
CACHE_SPARE_ROWS others (the newest: text that was edited away may come back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanobot.memory.chunking import Chunk
from nanobot.memory.fts import to_fts_text
from nanobot.memory.index_file import IndexFile

CACHE_SPARE_ROWS = 500  # cached embeddings of text no chunk holds any more (~10 KB each)
TITLE_WEIGHT = 0.5  # a heading/day match counts half a body match in BM25


@dataclass(frozen=True)
class FileRow:
    hash: str
    mtime_ns: int
    size: int
    resume: str  # where chunking of a grown transcript or note starts again ("" : from the start)


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


class IndexDB(IndexFile):
    """The queries on the index's rows."""

    def __init__(self, path: Path, *, use_sqlite_vec: bool = False):
        super().__init__(path, use_sqlite_vec=use_sqlite_vec)
        self._df_cache: dict[str, int] = {}
        self._df_generation = -1

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
        anew: bool = False,
    ) -> int:
        """Replace a file's chunks (each with its chunk vector blob when the cache has it); returns
        how many rows were written. With `from_line`, only the chunks starting at that line or later
        are replaced (a grown transcript chunked again from there); `resume` is kept for the next sync.

        Rows of chunks that did not change are kept: a transcript grows at its end, so after a turn
        only its last chunks are new, and rewriting thousands of rows (and their FTS entries) after
        every turn cost seconds on a months-long session and bloated the index file. With `anew`
        (a rebuild), every row of the file is written again, in the same transaction: a search
        meanwhile sees the file's old rows or its new ones, never none."""
        with self.write() as conn:
            if anew:
                self._delete_chunks(conn, path)
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

    def keep_only(self, paths: list[str]) -> None:
        """Drop every row of a file not in `paths` (the end of a rebuild: what no file holds now)."""
        with self.write() as conn:
            listed = json.dumps(paths)
            conn.execute("DELETE FROM files WHERE path NOT IN (SELECT value FROM json_each(?))", (listed,))
            conn.execute("DELETE FROM chunks WHERE path NOT IN (SELECT value FROM json_each(?))", (listed,))
            conn.execute("DELETE FROM chunks_fts WHERE rowid NOT IN (SELECT id FROM chunks)")

    # ------------------------------------------------------------------ vectors and the embedding cache
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
