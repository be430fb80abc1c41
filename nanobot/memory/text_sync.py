"""The text phase of an index sync: the files on disk become chunk rows and keyword-index entries.

`sync_files(db, workspace, config, embedder, force=..., progress=...)` brings the index's files and
chunks up to date with the sources (sources.py) and returns what it did (SyncStats) and what it saw
(a staleness.Snapshot, for the cheap "changed since?" test of the search path). It is incremental:
a file whose mtime and size are unchanged is not read, one whose content hash is unchanged is not
chunked again, and a transcript or note that only grew is chunked from its resume point
(transcript_tail.py, markdown_tail.py).
A transcript /new archived takes over the live one's chunks, so none of them is embedded again. A
change of chunking settings (or force) clears the index first; a change of embedding model clears
the vectors and keeps the text. New chunks get the vectors the embedding cache already holds for
their text; the others are left for the embedding phase (backfill.py). One file that cannot be
read is skipped with a warning, without stopping the others or the removal of deleted files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from loguru import logger

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory.backfill import SyncStats, cached_vectors
from nanobot.memory.chunking import CHUNKER_VERSION
from nanobot.memory.embeddings import Embedder
from nanobot.memory.fts import FTS_TEXT_VERSION
from nanobot.memory.index_db import IndexDB
from nanobot.memory.markdown_tail import chunk_note_file
from nanobot.memory.search import file_date
from nanobot.memory.sources import SourceFile, discover
from nanobot.memory.staleness import Snapshot, folder_times
from nanobot.memory.transcript_tail import Chunking, archived_continuations, chunk_transcript_file
from nanobot.session.transcripts import archived_stem


def _chunking_signature(config: MemorySearchConfig) -> str:
    sources = "memory+sessions" if config.include_sessions else "memory"
    chunker = f"v{CHUNKER_VERSION}/fts{FTS_TEXT_VERSION}"  # either changing re-chunks the index
    return f"{chunker}/{config.chunk_tokens}/{config.chunk_overlap_tokens}/{sources}"


def _embedding_signature(embedder: Embedder | None) -> str:
    return f"{embedder.provider}:{embedder.model}" if embedder else "none"


async def sync_files(
    db: IndexDB,
    workspace: Path,
    config: MemorySearchConfig,
    embedder: Embedder | None,
    *,
    force: bool,
    progress: Callable[[str, int, int], None] | None,
) -> tuple[SyncStats, Snapshot]:
    """Chunks and keyword index up to date with the files (db open); force=True re-chunks everything.
    `progress` (phase, done, total) hears after every file."""
    stats = SyncStats()
    # A rebuild writes each file's rows again one file at a time, not after emptying the index: a
    # gateway searching during `memory reindex` found nothing for as long as it ran
    rebuild = force or db.get_meta("chunking") != _chunking_signature(config)
    stats.full_reindex = rebuild
    if db.get_meta("embedding") != _embedding_signature(embedder):
        # Another model (or none before): vectors are re-made for every chunk, text stays.
        await asyncio.to_thread(db.clear_embeddings)
        await asyncio.to_thread(db.set_meta, {"embedding": _embedding_signature(embedder), "dims": ""})
        stats.full_reindex = True

    folders = await asyncio.to_thread(folder_times, str(workspace), config.include_sessions)
    existing = await asyncio.to_thread(db.file_rows)
    found = await asyncio.to_thread(discover, workspace, config.include_sessions)
    transcripts = [(s.rel, s.path) for s in found if s.kind == "sessions"]
    moved = await asyncio.to_thread(archived_continuations, transcripts, existing)
    for live, rel, resume in moved:
        await asyncio.to_thread(db.adopt_chunks, live, rel, resume.line, resume.encode())
    if moved:
        existing = await asyncio.to_thread(db.file_rows)
    signature: dict[str, tuple[int, int]] = {}
    for source in found:
        rel = source.rel
        stats.files_scanned += 1
        if progress is not None:
            progress("indexing files", stats.files_scanned, len(found))
        try:
            st = source.path.lstat()
            known = None if rebuild else existing.get(rel)
            signature[rel] = (st.st_mtime_ns, st.st_size)
            if known and (known.mtime_ns, known.size) == (st.st_mtime_ns, st.st_size):
                stats.files_unchanged += 1
                continue
            # Reading, hashing and chunking a long transcript take seconds: off the event loop.
            prepared = await asyncio.to_thread(_prepare, source, known.resume if known else "", config)
        except (OSError, ValueError) as exc:  # one bad file must not stop the others or the deletions
            logger.warning("memory index: cannot read {}: {}", rel, exc)
            signature.pop(rel, None)
            continue
        if known and known.hash == prepared.digest:
            await asyncio.to_thread(db.touch_file, rel, st.st_mtime_ns, st.st_size)
            stats.files_unchanged += 1
            continue
        chunks = prepared.chunks
        vectors = await asyncio.to_thread(cached_vectors, db, embedder, [c.hash for c in chunks])
        stats.embedding_cache_hits += sum(1 for c in chunks if c.hash in vectors)
        rows = [(c, vectors.get(c.hash)) for c in chunks]
        stats.chunks_indexed += await asyncio.to_thread(
            db.replace_file,
            rel,
            source.kind,
            prepared.digest,
            st.st_mtime_ns,
            st.st_size,
            rows,
            from_line=prepared.from_line,
            resume=prepared.resume,
            anew=rebuild,
        )
        stats.files_indexed += 1
    for rel in set(existing) - set(signature):
        await asyncio.to_thread(db.delete_file, rel)
        stats.files_removed += 1
    if rebuild:  # marked done only now: a rebuild cut short is done again at the next sync
        await asyncio.to_thread(db.keep_only, list(signature))
        await asyncio.to_thread(db.set_meta, {"chunking": _chunking_signature(config)})
    return stats, Snapshot(signature, folders)


def _prepare(source: SourceFile, resume: str, config: MemorySearchConfig) -> Chunking:
    """A file's hash and chunks; a file that only grew is chunked from its resume point."""
    tokens, overlap = config.chunk_tokens, config.chunk_overlap_tokens
    if source.kind == "sessions":
        # An archived transcript is titled like the live one it was: /new changes no chunk, so
        # no vector has to be made again and the live file's chunks move with it.
        name = archived_stem(source.path) or source.path.stem
        return chunk_transcript_file(source.path, name, tokens, overlap, resume)
    day = file_date(source.rel)
    return chunk_note_file(source.path, tokens, overlap, day.isoformat() if day else "", resume)
