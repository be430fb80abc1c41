"""The embedding phase of an index sync: vectors for every chunk that has none, in batches.

A chunk is embedded line by line (vectors.embedding_units); its line vectors go to the embedding
cache under (provider, model, chunk hash) and its chunk vector, their normalised mean, onto the
chunk. The cache is looked up first, so a moved or re-chunked text is never embedded twice. Each batch is
committed on its own: keyword search sees every chunk at once and hybrid search gains vectors as
batches land. An embedding failure leaves the rest keyword-only until the next sync retries them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from loguru import logger

from nanobot.memory.embeddings import Embedder, EmbeddingError
from nanobot.memory.index_db import IndexDB
from nanobot.memory.vectors import chunk_blob, embedding_units, vector_blobs


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


def cached_vectors(db: IndexDB, embedder: Embedder | None, hashes: list[str]) -> dict[str, bytes]:
    """hash -> the chunk vector blob, for the chunks among `hashes` already embedded by this model."""
    if embedder is None or not hashes:
        return {}
    found = db.cache_get(embedder.provider, embedder.model, sorted(set(hashes)))
    if found and not db.get_meta("dims"):  # back to a model whose vectors are all cached: none is made
        db.set_meta({"dims": str(next(iter(found.values()))[0])})
    return {h: chunk_blob(blob, dims) for h, (dims, blob) in found.items()}


async def embed_missing(
    db: IndexDB, embedder: Embedder, stats: SyncStats, batch_size: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> None:
    """Embed every chunk without a vector, batch_size distinct texts at a time; `progress` (phase, done,
    total) hears after every batch."""
    missing = await asyncio.to_thread(db.chunks_without_embedding)
    by_hash: dict[str, tuple[list[str], list[int]]] = {}
    for chunk_id, title, text, digest in missing:
        by_hash.setdefault(digest, (embedding_units(title, text), []))[1].append(chunk_id)
    cached = await asyncio.to_thread(cached_vectors, db, embedder, list(by_hash))
    if cached:
        rows = [(i, cached[h]) for h in cached for i in by_hash[h][1]]
        await asyncio.to_thread(db.set_embeddings, rows)
        stats.embedding_cache_hits += len(cached)
    todo = [h for h in by_hash if h not in cached]
    dims_text = db.get_meta("dims") or ""
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        units = [unit for h in batch for unit in by_hash[h][0]]
        try:
            matrix = await embedder.embed_documents(units)
        except EmbeddingError as exc:
            logger.warning(
                "memory index: embedding failed, {} chunks stay keyword-only: {}", len(todo) - start, exc
            )
            stats.embedding_errors += 1
            return
        dims = int(matrix.shape[1])
        if dims_text and int(dims_text) != dims:
            # Same model name, other output size: every stored vector is stale.
            logger.info("memory index: embedding dimensions changed {} -> {}; re-embedding", dims_text, dims)
            await asyncio.to_thread(db.clear_embeddings, (embedder.provider, embedder.model))
            await asyncio.to_thread(db.set_meta, {"dims": str(dims)})
            stats.full_reindex = True
            return await embed_missing(db, embedder, stats, batch_size, progress)
        if not dims_text:
            dims_text = str(dims)
            await asyncio.to_thread(db.set_meta, {"dims": dims_text})
        lines: list[tuple[str, bytes]] = []
        vectors: list[tuple[int, bytes]] = []
        first = 0
        for h in batch:
            count = len(by_hash[h][0])
            line_blob, vector = vector_blobs(matrix[first : first + count])
            first += count
            lines.append((h, line_blob))
            vectors += [(i, vector) for i in by_hash[h][1]]
        await asyncio.to_thread(db.store_embeddings, embedder.provider, embedder.model, dims, lines, vectors)
        stats.chunks_embedded += len(batch)
        if progress is not None:
            progress("embedding chunks", start + len(batch), len(todo))
