"""The memory index while another process writes it (the gateway and a `nanobot memory` command, or
two of them starting after an upgrade), and on a full disk: neither is damage. The index is left
as it is (a rebuild would make every vector again), searches read what is committed, and what
needed to write gets a clear error."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.memory import MemorySearchTool
from nanobot.cli.memory import app as memory_app
from nanobot.config.loader import load_config
from nanobot.config.schema import MemorySearchConfig
from nanobot.doctor.local import check_index
from nanobot.memory.index import MemoryIndex
from nanobot.memory.index_file import IndexUnavailable
from tests.test_memory_index import FakeEmbedder, make_schema_3, write

# Another process runs SQL on the index (by default: takes its write lock), says "locked" and holds
# its locks until its stdin closes; then it commits.
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
for statement in sys.argv[2:]:
    conn.execute(statement)
print("locked", flush=True)
sys.stdin.read()
conn.execute("COMMIT")
"""


@contextmanager
def write_lock_held(index_file: Path, *statements: str, begin: bool = True) -> Iterator[None]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(index_file), *(["BEGIN IMMEDIATE"] if begin else []), *statements],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("nanobot.memory.index_file.BUSY_TIMEOUT_MS", 200)
    write(tmp_path, "memory/MEMORY.md", "# Memory\n- The plumber is called Bram.\n")
    return tmp_path


def index_file(ws: Path) -> Path:
    return ws / "memory" / ".index.sqlite"


def mark(ws: Path) -> None:
    """A row only this file holds: gone if the file is deleted and built again."""
    with sqlite3.connect(index_file(ws)) as conn:
        conn.execute("INSERT INTO meta VALUES('test-mark', 'kept')")
    conn.close()


def marked(ws: Path) -> bool:
    with sqlite3.connect(index_file(ws)) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key='test-mark'").fetchone()
    conn.close()
    return row == ("kept",)


async def test_a_lock_held_elsewhere_leaves_the_index_and_search_reads_what_is_committed(ws: Path) -> None:
    first = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await first.sync()
    first.close()
    mark(ws)
    write(ws, "memory/MEMORY.md", "# Memory\n- The plumber is called Bram.\n- The dentist is Dr. Verhoeven.\n")
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    with write_lock_held(index_file(ws)):
        with pytest.raises(IndexUnavailable, match="busy"):
            await idx.sync()
        response = await idx.search("plumber")  # the edit cannot be indexed yet; what is, is searched
        assert [r.path for r in response.results] == ["memory/MEMORY.md"]
        assert "dentist" not in response.results[0].snippet
    assert marked(ws) and not idx._db.rebuilt
    assert "Verhoeven" in (await idx.search("dentist")).results[0].snippet  # the next search catches up
    idx.close()


async def schema_3_index(ws: Path, cfg: MemorySearchConfig) -> None:
    """An embedded index as the release before the current schema left it."""
    first = MemoryIndex(ws, cfg, embedder=FakeEmbedder())
    await first.sync()
    first.close()
    make_schema_3(index_file(ws))
    mark(ws)


async def test_an_upgrade_waiting_for_the_lock_is_reported_not_rebuilt(ws: Path) -> None:
    cfg = MemorySearchConfig(embedding_provider="local")
    await schema_3_index(ws, cfg)
    embedder = FakeEmbedder()
    tool = MemorySearchTool(MemoryIndex(ws, cfg, embedder=embedder))
    with write_lock_held(index_file(ws)), pytest.raises(ToolError, match="busy"):
        await tool.execute(ToolContext(), query="plumber")
    assert '"memory/MEMORY.md"' in await tool.execute(ToolContext(), query="plumber")
    assert embedder.embedded == [] and marked(ws)  # migrated, nothing embedded again
    tool.index.close()


async def test_two_processes_upgrading_at_once_migrate_once(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nanobot.memory.index_file.BUSY_TIMEOUT_MS", 20_000)
    cfg = MemorySearchConfig(embedding_provider="local")
    await schema_3_index(ws, cfg)
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, cfg, embedder=embedder)
    migrating = ("ALTER TABLE chunks DROP COLUMN line_vectors", "UPDATE meta SET value='4' WHERE key='schema_version'")
    with write_lock_held(index_file(ws), *migrating):  # the other process is migrating, not yet committed
        search = asyncio.ensure_future(idx.search("plumber", wait_for_vectors=True))
        await asyncio.sleep(1.0)  # this one reads schema 3 and waits for the lock to migrate too
        assert not search.done()
    response = await search
    assert response.results[0].path == "memory/MEMORY.md" and response.mode == "hybrid"
    assert marked(ws) and embedder.embedded == []
    idx.close()


def keyword_config(ws: Path) -> Path:
    config_file = ws / "config.json"
    config = {"agents": {"defaults": {"workspace": str(ws)}}, "memory": {"search": {"embeddingProvider": "none"}}}
    config_file.write_text(json.dumps(config))
    return config_file


def test_cli_reindex_while_locked_fails_clearly(ws: Path) -> None:
    config_file = keyword_config(ws)
    runner = CliRunner()
    assert runner.invoke(memory_app, ["reindex", "-c", str(config_file)]).exit_code == 0
    mark(ws)
    with write_lock_held(index_file(ws)):
        result = runner.invoke(memory_app, ["reindex", "-c", str(config_file)])
    assert result.exit_code == 1 and "is busy" in result.output and isinstance(result.exception, SystemExit)
    assert marked(ws)


def test_doctor_fix_leaves_an_index_locked_by_another_process(ws: Path) -> None:
    cfg = load_config(keyword_config(ws))
    assert check_index(cfg, fix=True).fixed.startswith("rebuilt")  # not built yet: built
    mark(ws)
    exclusive = ("PRAGMA locking_mode=EXCLUSIVE", "BEGIN EXCLUSIVE", "UPDATE meta SET value=value")
    with write_lock_held(index_file(ws), *exclusive, begin=False):  # not even readers get in
        check = check_index(cfg, fix=True)
    assert (check.status, check.fixed) == ("warn", "") and "busy" in check.detail
    assert marked(ws) and check_index(cfg, fix=False).status == "ok"


async def test_a_full_disk_keeps_the_index_and_search_reads_what_is_committed(ws: Path) -> None:
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    mark(ws)
    pages = idx._db._writer.execute("PRAGMA page_count").fetchone()[0]
    idx._db._writer.execute(f"PRAGMA max_page_count={pages}")  # the disk is full: the file cannot grow
    write(ws, "memory/2026-01-02.md", "".join(f"- aquarium note {n}: the fish tank filter\n" for n in range(3000)))
    with pytest.raises(IndexUnavailable, match="full"):
        await idx.sync()
    assert [r.path for r in (await idx.search("plumber")).results] == ["memory/MEMORY.md"]
    assert marked(ws)
    idx._db._writer.execute(f"PRAGMA max_page_count={2**30}")  # room again: the next search catches up
    assert (await idx.search("aquarium filter")).results[0].path == "memory/2026-01-02.md"
    idx.close()


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
async def test_an_index_file_truncated_or_deleted_while_open_is_opened_again(ws: Path, damage: str) -> None:
    """The gateway kept reading the old file (its write-ahead log), and every `memory` command and
    `doctor --fix` of another process found it busy, or healthy, until a restart."""
    gateway = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none", include_sessions=False))
    assert (await gateway.search("plumber")).results
    if damage == "truncated":
        index_file(ws).open("r+b").truncate(0)
    else:
        index_file(ws).unlink()
    write(ws, "memory/2026-01-03.md", "- The dog is called Wombatine.\n")
    gateway.mark_dirty()
    hit = (await gateway.search("Wombatine")).results[0]
    assert hit.path == "memory/2026-01-03.md"
    assert index_file(ws).stat().st_size > 100
    cli = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none", include_sessions=False))
    assert [r.path for r in (await cli.search("plumber Bram")).results] == ["memory/MEMORY.md"]
    cli.close()
    await gateway.drain()
    gateway.close()


def test_doctor_fix_rebuilds_a_truncated_index(ws: Path) -> None:
    cfg = load_config(keyword_config(ws))
    assert check_index(cfg, fix=True).fixed.startswith("rebuilt")
    index_file(ws).open("r+b").truncate(0)
    assert check_index(cfg, fix=False).status == "ok"  # it may be a file being created
    os.utime(index_file(ws), (time.time() - 60, time.time() - 60))
    assert check_index(cfg, fix=False).status == "fail"
    assert check_index(cfg, fix=True).fixed.startswith("rebuilt")
    assert check_index(cfg, fix=False).status == "ok"
