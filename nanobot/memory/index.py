"""MemoryIndex: hybrid keyword + vector search over memory files and transcripts (memory/.index.sqlite).

What is indexed (sources.py): MEMORY.md, HISTORY.md, daily and session notes, and the live and
archived session transcripts - regular files only, never through a symlink.

MemoryIndex keeps the index in step with the files and answers searches. Sync has two phases:
the text phase (text_sync.py, incremental by content hash) makes new text searchable by keyword at
once; the embedding phase (backfill.py) back-fills vectors in batches, reusing the embedding cache
by chunk hash, and runs in the background. A search waits at most for the text phase of changed
files, never for a model to embed, and a search during a sync answers from what is committed; its
ranking is ranking.py's. An index file that may be damaged is rebuilt from the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from nanobot.config.paths import index_path, index_size_bytes
from nanobot.config.schema import Config, MemorySearchConfig
from nanobot.memory.backfill import SyncStats, embed_missing
from nanobot.memory.embeddings import Embedder, EmbeddingError, select_embedder
from nanobot.memory.index_db import IndexDB
from nanobot.memory.qmd import QmdBackend
from nanobot.memory.ranking import KeywordPass, keyword_pass, rank
from nanobot.memory.search import SearchResponse, SearchResult
from nanobot.memory.sources import ROOT_SOURCES, SourceFile, discover
from nanobot.memory.staleness import Snapshot, unchanged
from nanobot.memory.text_sync import sync_files
from nanobot.memory.vectors import VectorSearcher
from nanobot.util.text import truncate_tail, valid_unicode

__all__ = ["ROOT_SOURCES", "MemoryIndex", "SyncStats", "build_index"]

EMBED_BATCH = 32  # chunks embedded and committed together during back-fill
QUERY_CACHE_SIZE = 128  # query embeddings kept per index
MAX_EMBEDDED_QUERY_CHARS = 2000  # of a query, embedded (about what the embedding models read)
STALE_CHECK_INTERVAL_S = 1.0  # how often a search looks for files edited by hand
# How long a search waits for a running sync of a change nanobot made itself (a note the agent wrote
# a moment ago must be found by its next search); past it, the search reads what is committed.
FRESH_WAIT_S = 5.0
_FROM_CONFIG: Any = object()  # MemoryIndex(embedder=...) not given: choose from the config


class MemoryIndex:
    """The memory search index of one workspace."""

    def __init__(
        self,
        workspace: Path,
        config: MemorySearchConfig,
        *,
        embedder: Embedder | None = _FROM_CONFIG,
        providers: Any = None,
        today: Callable[[], date] = date.today,
        tz: tzinfo | None = None,
    ):
        self.workspace = Path(workspace)
        self.config = config
        if embedder is _FROM_CONFIG:
            self.embedder, self.selection = select_embedder(config, providers)
        else:
            self.embedder = embedder
            self.selection = f"hybrid ({embedder.provider} {embedder.model})" if embedder else "keyword"
        self.path = index_path(self.workspace)
        self._today = today
        self._tz = tz  # the user's zone, for the times shown (None: the machine's)
        self._db = IndexDB(self.path, use_sqlite_vec=config.vector_backend == "sqlite-vec")
        self._vectors: VectorSearcher | None = None
        self._qmd = QmdBackend(self.workspace, timeout_s=config.qmd_timeout_s) if config.qmd else None
        self._sync_lock = asyncio.Lock()  # the text phase
        self._embed_lock = asyncio.Lock()  # the embedding back-fill
        self._dirty = True
        # False in a one-shot command beside a running gateway: the gateway embeds, not both
        self.embeds_in_background = True
        self._changes = 0  # mark_dirty calls so far
        self._synced_changes = 0  # how many of them the last completed text sync covered
        self._snapshot: Snapshot | None = None  # what the last sync saw (staleness.py)
        self._last_check = 0.0
        self._last_sync: float | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # (phase, done, total) during sync and back-fill, for a command's progress line
        self.progress: Callable[[str, int, int], None] | None = None
        self._sync_task: asyncio.Task[Any] | None = None
        self._query_vectors: dict[str, np.ndarray] = {}  # insertion order = least recently used first

    # ------------------------------------------------------------------ lifecycle
    def _ensure_open(self) -> None:
        if self._vectors is None:
            self._db.open()
            embedded_by = (self.embedder.provider, self.embedder.model) if self.embedder else None
            self._vectors = VectorSearcher(self._db, self.config.vector_backend, embedded_by)

    def _reset_db(self) -> None:
        self._db.close()
        self._db.delete_files()
        self._vectors = None
        self._ensure_open()

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._db.close()
        self._vectors = None

    async def drain(self) -> None:
        """Wait for the background work started by mark_dirty() or a search (sync, back-fill)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, work: Callable[[], Awaitable[Any]]) -> asyncio.Task[Any] | None:
        """Run work() in the background; it is only called once the task runs (cancelled by close()
        before that, no coroutine is left un-awaited)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        task = loop.create_task(self._background(work))
        self._tasks.add(task)  # a strong reference until it finishes
        task.add_done_callback(self._tasks.discard)
        return task

    def mark_dirty(self) -> None:
        """A memory file changed: sync in the background (and the next search syncs its text first)."""
        self._dirty = True
        self._changes += 1
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = self._spawn(self.sync)

    async def _background(self, work: Callable[[], Awaitable[Any]]) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed background sync is retried by the next search
            logger.warning("memory index background work failed: {}", exc)

    # ------------------------------------------------------------------ discovery
    def discover(self) -> list[SourceFile]:
        """Every file to index (regular files only, no symlinks, no dot-folders)."""
        return discover(self.workspace, self.config.include_sessions)

    # ------------------------------------------------------------------ sync
    async def sync(self, force: bool = False) -> SyncStats:
        """Bring the index up to date with the files, vectors included; force=True rebuilds everything."""
        stats = await self.sync_text(force)
        await self.backfill(stats)
        return stats

    async def sync_text(self, force: bool = False) -> SyncStats:
        """The text phase only: chunks and keyword index up to date, vectors left for backfill()."""
        async with self._sync_lock:
            try:
                return await self._sync(force)
            except Exception as exc:
                if not self._db.is_unusable(exc):
                    self._dirty = True  # not done: the next search tries again
                    raise
                logger.warning("memory index failed during sync ({}); rebuilding it", exc)
                await asyncio.to_thread(self._reset_db)
                return await self._sync(True)

    async def _sync(self, force: bool) -> SyncStats:
        started = time.perf_counter()
        self._dirty = False
        covered = self._changes
        await asyncio.to_thread(self._ensure_open)
        stats, self._snapshot = await sync_files(
            self._db, self.workspace, self.config, self.embedder, force=force, progress=self.progress
        )
        self._synced_changes = covered
        self._last_sync = time.time()
        await asyncio.to_thread(self._db.set_meta, {"last_sync": f"{self._last_sync:.3f}"})  # for `status`
        self._last_check = time.monotonic()
        stats.duration_s = time.perf_counter() - started
        logger.debug("memory index sync: {}", stats)
        return stats

    async def backfill(self, stats: SyncStats | None = None) -> SyncStats:
        """Embed every chunk without a vector, EMBED_BATCH distinct texts at a time."""
        stats = stats or SyncStats()
        if self.embedder is None:
            return stats
        async with self._embed_lock:
            await asyncio.to_thread(self._ensure_open)
            await embed_missing(self._db, self.embedder, stats, EMBED_BATCH, self.progress)
            await asyncio.to_thread(self._db.prune_cache)  # here, not in the text phase a search waits for
        return stats

    async def _reopen_if_changed_on_disk(self) -> None:
        """An index file deleted, replaced or truncated by hand (or by another nanobot's reset) while
        open: open it again (rebuilt when truncated) instead of searching the old one for ever."""
        if not self._db.changed_on_disk():
            return
        async with self._sync_lock:
            how = self._db.changed_on_disk()
            if not how:
                return
            logger.warning("memory index {} was {} on disk while open; opening it again", self.path, how)
            self._db.close()
            if how == "truncated":
                self._db.delete_files()
            self._vectors = None
            await asyncio.to_thread(self._ensure_open)
            self._dirty, self._snapshot = True, None

    async def _sync_if_stale(self, force_check: bool = False) -> None:
        """Text-sync changed files now (fast), then embed them in the background."""
        await self._reopen_if_changed_on_disk()
        if self._sync_lock.locked():
            if self._synced_changes >= self._changes:
                return  # a sync of hand edits or a rebuild is running: search what is committed
            try:  # a note nanobot just wrote: its sync is running or about to, and it is fast
                async with asyncio.timeout(FRESH_WAIT_S), self._sync_lock:
                    pass
            except TimeoutError:
                return
            if self._synced_changes >= self._changes:
                return
        if not (self._dirty or self._snapshot is None):
            now = time.monotonic()
            if not force_check and now - self._last_check < STALE_CHECK_INTERVAL_S:
                return
            self._last_check = now
            snap = self._snapshot
            if await asyncio.to_thread(unchanged, str(self.workspace), snap, self.config.include_sessions):
                return
        await self.sync_text()
        if self.embedder is not None and self.embeds_in_background and not self._embed_lock.locked():
            self._spawn(self.backfill)

    # ------------------------------------------------------------------ search
    @property
    def mode(self) -> str:
        if self._qmd is not None and self._qmd.executable():
            return "qmd"
        return "hybrid" if self.embedder is not None else "keyword"

    async def search(
        self,
        query: str,
        max_results: int | None = None,
        min_score: float | None = None,
        *,
        wait_for_vectors: bool = False,
        vector_wait_s: float | None = None,
    ) -> SearchResponse:
        """Search memory. wait_for_vectors=True (one-shot CLI) embeds pending chunks first, for at
        most `vector_wait_s` (None: all of them); what is left is found by its words."""
        limit = max_results or self.config.max_results
        threshold = self.config.min_score if min_score is None else min_score
        query = valid_unicode(query).strip()  # a query typed in another encoding (bad bytes)
        if not query:
            return SearchResponse(self.mode if self.mode != "qmd" else "keyword", [])
        if self._qmd is not None:
            response = await self._qmd.search(query, limit, threshold)
            if response is not None:
                return response
        stale = ""
        try:
            await self._sync_if_stale()
            if wait_for_vectors:
                try:
                    async with asyncio.timeout(vector_wait_s):
                        await self.drain()
                        await self.backfill()
                except TimeoutError:  # a months-old backlog takes hours: the caller says what is left
                    logger.info("search: stopped embedding after {} s; the rest is found by its words", vector_wait_s)
        except Exception as exc:  # searching what is indexed beats failing the turn
            logger.warning("memory index sync before search failed: {}", exc)
            # said with the results: "nothing found" could be a note written since
            why = truncate_tail(str(exc), 200)
            stale = f"the index could not be brought up to date ({why}); recent changes may be missing"
        qvec: np.ndarray | None = None
        keyword: asyncio.Future[KeywordPass] | None = None
        try:
            if self.embedder is not None and query not in self._query_vectors:
                # The BM25 pass runs in a thread while the model embeds the query.
                keyword = asyncio.ensure_future(asyncio.to_thread(self._keyword_pass, query))
            if self.embedder is not None:
                try:
                    qvec = await self._query_vector(query)
                except EmbeddingError as exc:
                    logger.warning("memory search: query embedding failed, keyword search only: {}", exc)
            found = await keyword if keyword is not None else self._keyword_pass(query)
            results = self._rank(found, qvec, limit, threshold)
        except Exception as exc:
            if keyword is not None and not keyword.done():
                keyword.cancel()  # its thread finishes on its own; the result is not wanted
            elif keyword is not None and not keyword.cancelled():
                keyword.exception()  # retrieved: not reported again as "never retrieved"
            if not self._db.is_unusable(exc):
                raise
            logger.warning("memory index unusable during search ({}); rebuilding it", exc)
            async with self._sync_lock:
                await asyncio.to_thread(self._reset_db)
                await self._sync(True)
            results = self._rank(self._keyword_pass(query), qvec, limit, threshold)
        return SearchResponse("hybrid" if qvec is not None else "keyword", results, stale)

    async def _query_vector(self, query: str) -> np.ndarray:
        """The query's embedding; the last QUERY_CACHE_SIZE are kept (an agent often repeats a search).
        Only its start is embedded (the model reads ~512 tokens): a 30,000-character query took 15 s
        in the local model, and a 100,000-character one over two minutes."""
        query = query[:MAX_EMBEDDED_QUERY_CHARS]
        cached = self._query_vectors.pop(query, None)
        if cached is None:
            assert self.embedder is not None
            cached = await self.embedder.embed_query(query)
        self._query_vectors[query] = cached
        while len(self._query_vectors) > QUERY_CACHE_SIZE:
            del self._query_vectors[next(iter(self._query_vectors))]
        return cached

    def _keyword_pass(self, query: str) -> KeywordPass:
        self._ensure_open()
        return keyword_pass(self._db, query, self._today())

    def _rank(self, found: KeywordPass, qvec: np.ndarray | None, limit: int, min_score: float) -> list[SearchResult]:
        self._ensure_open()
        assert self._vectors is not None
        return rank(self._db, self._vectors, self.config, found, qvec, limit, min_score, self._today())

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        self._ensure_open()
        info: dict[str, Any] = {
            "path": str(self.path),
            "mode": self.mode,
            "selection": self.selection,
            "embeddingProvider": self.embedder.provider if self.embedder else "none",
            "embeddingModel": self.embedder.model if self.embedder else "",
            "dims": int(self._db.get_meta("dims") or 0),
            "vectorBackend": self._vectors.backend if self._vectors else self.config.vector_backend,
            **self._db.counts(),
            "sizeBytes": index_size_bytes(self.workspace),
            "lastSync": self._last_sync_text(),
            "dirty": self._dirty if self._snapshot is not None else self._behind_files(),
            "syncing": self._sync_lock.locked() or self._embed_lock.locked(),
        }
        return info


    def _last_sync_text(self) -> str | None:
        """When a sync last completed, by any process (ISO 8601, local time), or None."""
        stamp = self._last_sync
        if stamp is None:
            with contextlib.suppress(TypeError, ValueError):
                stamp = float(self._db.get_meta("last_sync") or "")
        if stamp is None:
            return None
        return datetime.fromtimestamp(stamp, self._tz).astimezone(self._tz).isoformat(timespec="seconds")

    def _behind_files(self) -> bool:
        """For a process that has not synced: does any source differ from what the index holds
        (added, removed, or another size or mtime)? What the next sync would look at, unread."""
        held = self._db.file_rows()
        found = self.discover()
        if {s.rel for s in found} != set(held):
            return True
        for source in found:
            try:
                st = source.path.lstat()
            except OSError:
                return True
            if (st.st_mtime_ns, st.st_size) != (held[source.rel].mtime_ns, held[source.rel].size):
                return True
        return False


def build_index(
    config: Config, workspace: Path | None = None, *, embedder: Embedder | None = _FROM_CONFIG
) -> MemoryIndex:
    """The memory index for a loaded config (workspace defaults to the configured one). "Yesterday"
    and "last week" are the user's (agents.defaults.timezone), as the daily notes' names are: the
    machine's date was a day off for users far from its zone."""
    from nanobot.timeutil import now, resolve_tz

    tz = resolve_tz(config.agents.defaults.timezone)
    return MemoryIndex(
        workspace or config.workspace_path,
        config.memory.search,
        embedder=embedder,
        providers=config.providers,
        today=lambda: now(tz).date(),
        tz=tz,
    )
