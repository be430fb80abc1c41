"""Nearest-neighbour search over the chunk vectors stored in the index file.

Two backends over the same float32 BLOB column: NumPy brute force on a matrix cached in memory
(reloaded when the index generation changes; the default, ~2 ms for 10k x 384 here) and
sqlite-vec's vec_distance_cosine evaluated inside SQLite (~2-3 ms; no copy in Python memory).
"""

from __future__ import annotations

import threading

import numpy as np

from nanobot.memory.index_db import IndexDB


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


class VectorSearcher:
    def __init__(self, db: IndexDB, backend: str = "numpy"):
        self._db = db
        self.backend = "sqlite-vec" if backend == "sqlite-vec" and db.sqlite_vec else "numpy"
        self._lock = threading.Lock()
        self._generation = -1
        self._ids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, 0), dtype=np.float32)

    def _refresh(self) -> None:
        generation = self._db.generation()
        if generation == self._generation:
            return
        rows = self._db.all_vectors()
        if rows:
            # After a model change every stored vector has the new size; guard against strays anyway.
            sizes = [len(blob) for _, blob in rows]
            common = max(set(sizes), key=sizes.count)
            kept = [(i, blob) for i, blob in rows if len(blob) == common]
            self._ids = np.fromiter((i for i, _ in kept), dtype=np.int64, count=len(kept))
            self._matrix = np.frombuffer(b"".join(b for _, b in kept), dtype=np.float32).reshape(
                len(kept), -1
            )
        else:
            self._ids = np.empty(0, dtype=np.int64)
            self._matrix = np.empty((0, 0), dtype=np.float32)
        self._generation = generation

    def knn(self, query: np.ndarray, limit: int) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) for the `limit` nearest chunks, best first."""
        if limit <= 0:
            return []
        query = np.asarray(query, dtype=np.float32)
        if self.backend == "sqlite-vec":
            return self._db.vec_knn(to_blob(query), limit)
        with self._lock:
            self._refresh()
            ids, matrix = self._ids, self._matrix
        if not len(ids) or matrix.shape[1] != query.shape[0]:
            return []
        # einsum runs in this thread; a BLAS matrix-vector product wakes a thread pool that, on a
        # small busy machine, fights the embedding model's threads (4x slower p50 under load).
        sims = np.einsum("ij,j->i", matrix, query)
        k = min(limit, len(sims))
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(ids[i]), float(sims[i])) for i in top]
