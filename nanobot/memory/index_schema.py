"""The memory index's tables and the in-place upgrades of older index files.

Schema history: 2 chunk titles and days, a title column in the FTS table; 3 line vectors; 4 line
vectors only in the embedding cache (schema 3 kept them twice); 5 `files.resume`, where the next
sync of a grown transcript starts chunking again (chunking.py, `TranscriptResume`). An index of
schema 3 or 4 is upgraded in place, nothing embedded again; anything older is rebuilt by the caller.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

SCHEMA_VERSION = "5"
UPGRADABLE = ("3", "4")
# Porter stemming over unicode61 ("hiking" finds "hiked"); CJK runs arrive pre-split into bigrams.
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(
    path TEXT PRIMARY KEY, source TEXT NOT NULL, hash TEXT NOT NULL,
    mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL, resume TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    text TEXT NOT NULL, hash TEXT NOT NULL, embedding BLOB,
    title TEXT NOT NULL DEFAULT '', day TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS chunks_path ON chunks(path);
CREATE INDEX IF NOT EXISTS chunks_day ON chunks(day);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(title, body, tokenize='{FTS_TOKENIZER}');
CREATE TABLE IF NOT EXISTS embedding_cache(
    provider TEXT NOT NULL, model TEXT NOT NULL, hash TEXT NOT NULL, dims INTEGER NOT NULL,
    vector BLOB NOT NULL, PRIMARY KEY(provider, model, hash));  -- vector: the chunk's line vectors
"""


def schema_version(conn: Any) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return row[0] if row else None


def upgrade(conn: Any) -> bool:
    """Bring a schema-3 or -4 index to SCHEMA_VERSION inside the open transaction; returns whether
    space was freed (the caller may VACUUM). Reads the version again under the write lock: another
    process may have upgraded the file while this one waited."""
    version = schema_version(conn)
    freed = False
    if version == "3":
        # Schema 3 kept each chunk's line vectors on the chunk too: the cache already holds them.
        if "line_vectors" in _columns(conn, "chunks"):
            conn.execute("ALTER TABLE chunks DROP COLUMN line_vectors")
            freed = True
        version = "4"
    if version == "4":
        if "resume" not in _columns(conn, "files"):
            conn.execute("ALTER TABLE files ADD COLUMN resume TEXT NOT NULL DEFAULT ''")
        version = "5"
    if version == SCHEMA_VERSION:
        conn.execute("INSERT OR REPLACE INTO meta VALUES('schema_version', ?)", (SCHEMA_VERSION,))
        logger.info("memory index: upgraded to schema {}", SCHEMA_VERSION)
    return freed


def _columns(conn: Any, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
