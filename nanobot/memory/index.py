"""MemoryIndex: hybrid keyword + vector search over the memory files, kept in memory/.index.sqlite.

Sync is incremental by content hash: a file whose mtime and size are unchanged is skipped
without reading it, a file whose content hash is unchanged is not re-chunked, and a chunk whose
text hash is in the embedding cache for (provider, model) is not re-embedded. Chunks are written
first (keyword search sees them at once) and their vectors are back-filled in batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from nanobot.config.paths import INDEX_FILE, index_path
from nanobot.config.schema import Config, MemorySearchConfig
from nanobot.memory.chunking import Chunk, chunk_lines, chunk_markdown, session_lines, text_hash
from nanobot.memory.embeddings import Embedder, EmbeddingError, build_embedder
from nanobot.memory.index_db import IndexDB
from nanobot.memory.qmd import QmdBackend
from nanobot.memory.ranking import rank
from nanobot.memory.search import SearchResponse, SearchResult
from nanobot.memory.vectors import VectorSearcher, to_blob

EMBED_BATCH = 64  # chunks embedded and committed together during back-fill
STALE_CHECK_INTERVAL_S = 1.0  # how often a search looks for files edited by hand
WATCH_INTERVAL_S = 30.0
ROOT_SOURCES = ("MEMORY.md", "HISTORY.md")  # legacy locations at the workspace root


@dataclass
class SyncStats:
    files_scanned: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_indexed: int = 0
    chunks_embedded: int = 0
    embedding_cache_hits: int = 0
    embedding_errors: int = 0
    full_reindex: bool = False
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class MemoryIndex:
    """The memory search index of one workspace."""

    def __init__(
        self,
        workspace: Path,
        config: MemorySearchConfig,
        *,
        embedder: Embedder | None = None,
        today: Callable[[], date] = date.today,
    ):
        self.workspace = Path(workspace)
        self.config = config
        self.embedder = embedder if embedder is not None else build_embedder(config)
        self.path = index_path(self.workspace)
        self._today = today
        self._db = IndexDB(self.path, use_sqlite_vec=config.vector_backend == "sqlite-vec")
        self._vectors: VectorSearcher | None = None
        self._qmd = QmdBackend(self.workspace, timeout_s=config.qmd_timeout_s) if config.qmd else None
        self._sync_lock = asyncio.Lock()
        self._dirty = True
        self._signature: dict[str, tuple[int, int]] | None = None
        self._last_check = 0.0
        self._last_sync: float | None = None
        self._background: asyncio.Task[Any] | None = None

    # ------------------------------------------------------------------ lifecycle
    def _ensure_open(self) -> None:
        if self._vectors is None:
            self._db.open()
            self._vectors = VectorSearcher(self._db, self.config.vector_backend)

    def _reset_db(self) -> None:
        self._db.close()
        self._db.delete_files()
        self._vectors = None
        self._ensure_open()

    def close(self) -> None:
        if self._background is not None and not self._background.done():
            self._background.cancel()
        self._db.close()
        self._vectors = None

    async def drain(self) -> None:
        """Wait for a background sync started by mark_dirty()."""
        if self._background is not None:
            await asyncio.gather(self._background, return_exceptions=True)

    def mark_dirty(self) -> None:
        """A memory file changed: the next search syncs first (and, in a running loop, a task does)."""
        self._dirty = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._background is None or self._background.done():
            self._background = loop.create_task(self._background_sync())

    async def _background_sync(self) -> None:
        try:
            await self.sync()
        except Exception as exc:  # a failed background sync is retried by the next search
            logger.warning("memory index background sync failed: {}", exc)

    async def watch(self, interval_s: float = WATCH_INTERVAL_S) -> None:
        """Sync whenever files changed on disk; run it as a tracked task, cancel to stop."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._sync_if_stale(force_check=True)
            except Exception as exc:
                logger.warning("memory index watch: {}", exc)

    # ------------------------------------------------------------------ discovery
    def discover(self) -> list[tuple[str, Path, str]]:
        """(relative path, absolute path, source) of every file to index; dot-folders never."""
        found: list[tuple[str, Path, str]] = []
        for name in ROOT_SOURCES:
            path = self.workspace / name
            if path.is_file():
                found.append((name, path, "memory"))
        roots = [("memory", "*.md", "memory")]
        if self.config.include_sessions:
            roots.append(("sessions", "*.jsonl", "sessions"))
        for folder, pattern, source in roots:
            base = self.workspace / folder
            if not base.is_dir():
                continue
            for path in sorted(base.rglob(pattern)):
                rel = path.relative_to(self.workspace)
                if any(part.startswith(".") for part in rel.parts) or not path.is_file():
                    continue
                found.append((rel.as_posix(), path, source))
        return found

    def _stat_signature(self) -> dict[str, tuple[int, int]]:
        sig: dict[str, tuple[int, int]] = {}
        for rel, path, _ in self.discover():
            try:
                st = path.stat()
            except OSError:
                continue
            sig[rel] = (st.st_mtime_ns, st.st_size)
        return sig

    # ------------------------------------------------------------------ sync
    def _chunking_signature(self) -> str:
        sources = "memory+sessions" if self.config.include_sessions else "memory"
        return f"{self.config.chunk_tokens}/{self.config.chunk_overlap_tokens}/{sources}"

    def _embedding_signature(self) -> str:
        return f"{self.embedder.provider}:{self.embedder.model}" if self.embedder else "none"

    async def sync(self, force: bool = False) -> SyncStats:
        """Bring the index up to date with the files; force=True rebuilds everything."""
        async with self._sync_lock:
            try:
                return await self._sync(force)
            except Exception as exc:
                if not self._db.is_database_error(exc):
                    raise
                logger.warning("memory index failed during sync ({}); rebuilding it", exc)
                await asyncio.to_thread(self._reset_db)
                return await self._sync(True)

    async def _sync(self, force: bool) -> SyncStats:
        started = time.perf_counter()
        self._dirty = False
        stats = SyncStats()
        await asyncio.to_thread(self._ensure_open)
        db = self._db
        if force or db.get_meta("chunking") != self._chunking_signature():
            await asyncio.to_thread(db.clear_all)
            await asyncio.to_thread(db.set_meta, {"chunking": self._chunking_signature()})
            stats.full_reindex = True
        if db.get_meta("embedding") != self._embedding_signature():
            # Another model (or none before): vectors are re-made for every chunk, text stays.
            await asyncio.to_thread(db.clear_embeddings)
            await asyncio.to_thread(db.set_meta, {"embedding": self._embedding_signature(), "dims": ""})
            stats.full_reindex = True

        existing = await asyncio.to_thread(db.file_rows)
        found = await asyncio.to_thread(self.discover)
        signature: dict[str, tuple[int, int]] = {}
        for rel, path, source in found:
            stats.files_scanned += 1
            try:
                st = path.stat()
                known = existing.get(rel)
                signature[rel] = (st.st_mtime_ns, st.st_size)
                if known and known[1:] == (st.st_mtime_ns, st.st_size):
                    stats.files_unchanged += 1
                    continue
                content = await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
            except OSError as exc:
                logger.warning("memory index: cannot read {}: {}", rel, exc)
                continue
            digest = text_hash(content)
            if known and known[0] == digest:
                await asyncio.to_thread(db.touch_file, rel, st.st_mtime_ns, st.st_size)
                stats.files_unchanged += 1
                continue
            chunks = self._chunk(content, source)
            vectors = await asyncio.to_thread(self._cached_vectors, [c.hash for c in chunks])
            stats.embedding_cache_hits += sum(1 for c in chunks if c.hash in vectors)
            rows = [(c, vectors.get(c.hash)) for c in chunks]
            await asyncio.to_thread(db.replace_file, rel, source, digest, st.st_mtime_ns, st.st_size, rows)
            stats.files_indexed += 1
            stats.chunks_indexed += len(chunks)
        for rel in set(existing) - {r for r, _, _ in found}:
            await asyncio.to_thread(db.delete_file, rel)
            stats.files_removed += 1
        if self.embedder is not None:
            await self._backfill(stats)
        self._signature = signature
        self._last_sync = time.time()
        self._last_check = time.monotonic()
        stats.duration_s = time.perf_counter() - started
        logger.debug("memory index sync: {}", stats)
        return stats

    def _chunk(self, content: str, source: str) -> list[Chunk]:
        tokens, overlap = self.config.chunk_tokens, self.config.chunk_overlap_tokens
        if source == "sessions":
            return chunk_lines(session_lines(content), tokens, overlap)
        return chunk_markdown(content, tokens, overlap)

    def _cached_vectors(self, hashes: list[str]) -> dict[str, bytes]:
        if self.embedder is None or not hashes:
            return {}
        return self._db.cache_get(self.embedder.provider, self.embedder.model, sorted(set(hashes)))

    async def _backfill(self, stats: SyncStats) -> None:
        """Embed every chunk without a vector, EMBED_BATCH distinct texts at a time."""
        assert self.embedder is not None
        db = self._db
        missing = await asyncio.to_thread(db.chunks_without_embedding)
        by_hash: dict[str, tuple[str, list[int]]] = {}
        for chunk_id, text, digest in missing:
            by_hash.setdefault(digest, (text, []))[1].append(chunk_id)
        cached = await asyncio.to_thread(self._cached_vectors, list(by_hash))
        if cached:
            await asyncio.to_thread(
                db.set_embeddings, [(i, cached[h]) for h in cached for i in by_hash[h][1]]
            )
            stats.embedding_cache_hits += len(cached)
        todo = [h for h in by_hash if h not in cached]
        dims_text = db.get_meta("dims") or ""
        for start in range(0, len(todo), EMBED_BATCH):
            batch = todo[start : start + EMBED_BATCH]
            try:
                matrix = await self.embedder.embed_documents([by_hash[h][0] for h in batch])
            except EmbeddingError as exc:
                # Text search keeps working; the next sync retries the chunks still without vectors.
                logger.warning(
                    "memory index: embedding failed, {} chunks stay keyword-only: {}", len(todo) - start, exc
                )
                stats.embedding_errors += 1
                return
            dims = int(matrix.shape[1])
            if dims_text and int(dims_text) != dims:
                # Same model name, other output size: every stored vector is stale.
                logger.info(
                    "memory index: embedding dimensions changed {} -> {}; re-embedding", dims_text, dims
                )
                await asyncio.to_thread(db.clear_embeddings)
                await asyncio.to_thread(db.set_meta, {"dims": str(dims)})
                stats.full_reindex = True
                return await self._backfill(stats)
            if not dims_text:
                dims_text = str(dims)
                await asyncio.to_thread(db.set_meta, {"dims": dims_text})
            blobs = [(h, to_blob(v)) for h, v in zip(batch, matrix, strict=True)]
            await asyncio.to_thread(db.cache_put, self.embedder.provider, self.embedder.model, dims, blobs)
            await asyncio.to_thread(
                db.set_embeddings, [(i, blob) for h, blob in blobs for i in by_hash[h][1]]
            )
            stats.chunks_embedded += len(batch)

    async def _sync_if_stale(self, force_check: bool = False) -> None:
        if self._sync_lock.locked():
            return  # a sync is running: search what is already committed
        if self._dirty or self._signature is None:
            await self.sync()
            return
        now = time.monotonic()
        if not force_check and now - self._last_check < STALE_CHECK_INTERVAL_S:
            return
        self._last_check = now
        if await asyncio.to_thread(self._stat_signature) != self._signature:
            await self.sync()

    # ------------------------------------------------------------------ search
    @property
    def mode(self) -> str:
        if self._qmd is not None and self._qmd.executable():
            return "qmd"
        return "hybrid" if self.embedder is not None else "keyword"

    async def search(
        self, query: str, max_results: int | None = None, min_score: float | None = None
    ) -> SearchResponse:
        limit = max_results or self.config.max_results
        threshold = self.config.min_score if min_score is None else min_score
        query = query.strip()
        if not query:
            return SearchResponse("hybrid" if self.embedder else "keyword", [])
        if self._qmd is not None:
            response = await self._qmd.search(query, limit, threshold)
            if response is not None:
                return response
        try:
            await self._sync_if_stale()
        except Exception as exc:  # searching what is indexed beats failing the turn
            logger.warning("memory index sync before search failed: {}", exc)
        qvec: np.ndarray | None = None
        if self.embedder is not None:
            try:
                qvec = await self.embedder.embed_query(query)
            except EmbeddingError as exc:
                logger.warning("memory search: query embedding failed, keyword search only: {}", exc)
        mode = "hybrid" if qvec is not None else "keyword"
        try:
            results = self._rank(query, qvec, limit, threshold)
        except Exception as exc:
            if not self._db.is_database_error(exc):
                raise
            logger.warning("memory index unusable during search ({}); rebuilding it", exc)
            async with self._sync_lock:
                await asyncio.to_thread(self._reset_db)
                await self._sync(True)
            results = self._rank(query, qvec, limit, threshold)
        return SearchResponse(mode, results)

    def _rank(self, query: str, qvec: np.ndarray | None, limit: int, min_score: float) -> list[SearchResult]:
        self._ensure_open()
        assert self._vectors is not None
        return rank(self._db, self._vectors, self.config, query, qvec, limit, min_score, self._today())

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        self._ensure_open()
        info: dict[str, Any] = {
            "path": str(self.path),
            "mode": self.mode,
            "embeddingProvider": self.embedder.provider if self.embedder else "none",
            "embeddingModel": self.embedder.model if self.embedder else "",
            "dims": int(self._db.get_meta("dims") or 0),
            "vectorBackend": self._vectors.backend if self._vectors else self.config.vector_backend,
            **self._db.counts(),
            "sizeBytes": sum(
                p.stat().st_size for p in self.path.parent.glob(INDEX_FILE + "*") if p.is_file()
            ),
            "lastSync": self._last_sync,
            "dirty": self._dirty,
            "syncing": self._sync_lock.locked(),
        }
        return info


def build_index(
    config: Config, workspace: Path | None = None, *, embedder: Embedder | None = None
) -> MemoryIndex:
    """The memory index for a loaded config (workspace defaults to the configured one)."""
    return MemoryIndex(workspace or config.workspace_path, config.memory.search, embedder=embedder)
