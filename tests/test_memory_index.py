"""MemoryIndex: sync, incremental re-embedding (through litellm and the fake server), rebuilds, search."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory import index as index_mod
from nanobot.memory.embeddings import HostedEmbedder, LocalEmbedder, normalise
from nanobot.memory.fts import keywords, match_query
from nanobot.memory.index import MemoryIndex
from nanobot.memory.search import cosine_to_score, coverage, hybrid_score, text_score
from tests.fakes.llm_server import FakeLLMServer, hashed_embedding

REPO = Path(__file__).resolve().parent.parent


class FakeEmbedder:
    """Hashed bag-of-words vectors in process; records the texts and queries it embedded; can be
    held at a gate."""

    provider = "fake"

    def __init__(self, model: str = "bow-64", dim: int = 64):
        self.model = model
        self.dim = dim
        self.embedded: list[str] = []
        self.queries: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.embedded.extend(texts)
        return normalise(np.array([hashed_embedding(t, self.dim) for t in texts]))

    async def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return normalise(np.array(hashed_embedding(text, self.dim)))[0]


class PlantedEmbedder(FakeEmbedder):
    """Every query embeds to e0 and each document to a vector whose cosine to it is cosine_of(text)."""

    def __init__(self, cosine_of: Callable[[str], float]):
        super().__init__()
        self.cosine_of = cosine_of

    async def embed_query(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        vec[0] = 1.0
        return vec

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            cos = self.cosine_of(text)
            out[row, 0], out[row, 1] = cos, (1 - cos * cos) ** 0.5
        return out


def write(ws: Path, rel: str, text: str) -> Path:
    path = ws / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    write(
        tmp_path, "memory/MEMORY.md", "# Memory\n- The user prefers PostgreSQL for analytics.\n- Cat: Miso.\n"
    )
    write(tmp_path, "memory/2025-03-01.md", "## Notes\n- Deployed the billing API on Friday.\n- Met Alice.\n")
    return tmp_path


def inputs(server: FakeLLMServer) -> list[str]:
    out: list[str] = []
    for req in server.embedding_requests:
        batch = req["input"]
        out.extend([batch] if isinstance(batch, str) else batch)
    return out


async def test_incremental_sync_through_litellm_and_fake_server(ws: Path) -> None:
    with FakeLLMServer() as server:
        embedder = HostedEmbedder("openai/fake-embed", api_base=server.url, api_key="sk-test")
        idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="litellm"), embedder=embedder)
        first = await idx.sync()
        assert first.files_indexed == 2 and first.chunks_embedded == first.chunks_indexed == 2
        assert len(inputs(server)) == 2

        # Nothing changed: nothing is read, chunked or embedded.
        again = await idx.sync()
        assert (again.files_unchanged, again.files_indexed, again.chunks_embedded) == (2, 0, 0)
        assert len(inputs(server)) == 2

        # Same content, new mtime: hashed, found unchanged, not re-chunked.
        os.utime(ws / "memory/MEMORY.md", ns=(1, 1))
        touched = await idx.sync()
        assert touched.files_indexed == 0 and touched.files_unchanged == 2

        # One new file: only its chunk goes to the embedding server.
        write(ws, "memory/2025-03-02.md", "- Bought a standing desk for the home office.\n")
        third = await idx.sync()
        assert third.files_indexed == 1 and third.chunks_embedded == 1
        sent = inputs(server)
        assert len(sent) == 3 and "standing desk" in sent[-1]

        response = await idx.search("standing desk office")
        assert response.mode == "hybrid"
        assert response.results[0].path == "memory/2025-03-02.md"
        assert response.results[0].citation == "memory/2025-03-02.md#L1-L1"
        idx.close()


async def test_a_turn_appended_to_a_long_transcript_rewrites_only_its_new_chunks(ws: Path) -> None:
    """Every search after a turn re-indexed the whole live transcript: thousands of rows and their
    FTS entries deleted and written again (seconds on a months-long session, and the index file grew
    with each rewrite). Unchanged chunks keep their rows now, vectors included."""
    import json

    def turn(n: int) -> str:
        user = {"role": "user", "content": f"question {n} about the garden plan number{n}"}
        reply = {"role": "assistant", "content": f"answer {n}: " + "water the tomatoes early. " * 20}
        return json.dumps(user) + "\n" + json.dumps(reply) + "\n"

    transcript = ws / "sessions" / "telegram_42.jsonl"
    transcript.parent.mkdir(exist_ok=True)
    transcript.write_text("".join(turn(n) for n in range(300)))
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="litellm"), embedder=embedder)
    await idx.sync()
    db = sqlite3.connect(ws / "memory" / ".index.sqlite")
    rel = "sessions/telegram_42.jsonl"
    before = {row[0] for row in db.execute("SELECT id FROM chunks WHERE path=?", (rel,))}
    assert len(before) > 50
    embedded_before = len(embedder.embedded)

    with transcript.open("a") as fh:
        fh.write(turn(300))
    stats = await idx.sync()
    after = {row[0] for row in db.execute("SELECT id FROM chunks WHERE path=?", (rel,))}
    assert 1 <= stats.chunks_indexed <= 3 and len(before - after) <= 2  # only the tail was rewritten
    assert len(embedder.embedded) - embedded_before <= 3  # and embedded
    fts_rows = db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    assert fts_rows == db.execute("SELECT count(*) FROM chunks").fetchone()[0]  # no stale FTS entry
    for query, where in (("number300", rel), ("number0", rel), ("PostgreSQL", "memory/MEMORY.md")):
        response = await idx.search(query)
        assert response.results and response.results[0].path == where, query
    db.close()
    idx.close()


async def test_model_change_reembeds_everything_and_cache_serves_the_old_model(ws: Path) -> None:
    cfg = MemorySearchConfig(embedding_provider="litellm")
    with FakeLLMServer() as server:
        idx = MemoryIndex(ws, cfg, embedder=HostedEmbedder("openai/model-a", server.url, "k"))
        await idx.sync()
        idx.close()
        assert len(inputs(server)) == 2

        idx = MemoryIndex(ws, cfg, embedder=HostedEmbedder("openai/model-b", server.url, "k"))
        stats = await idx.sync()
        assert stats.full_reindex and stats.chunks_embedded == 2
        assert stats.chunks_indexed == 0  # the text did not change: no re-chunking
        assert len(inputs(server)) == 4
        assert idx.status()["embeddingModel"] == "openai/model-b"
        idx.close()

        # Back to model A: every vector comes from the embedding cache.
        idx = MemoryIndex(ws, cfg, embedder=HostedEmbedder("openai/model-a", server.url, "k"))
        back = await idx.sync()
        assert back.chunks_embedded == 0 and back.embedding_cache_hits == 2
        assert len(inputs(server)) == 4
        assert idx.status()["dims"] > 0  # it read 0: only a vector made anew set it
        idx.close()


async def test_dimension_change_reembeds(ws: Path) -> None:
    cfg = MemorySearchConfig(embedding_provider="local")
    idx = MemoryIndex(ws, cfg, embedder=FakeEmbedder(dim=64))
    await idx.sync()
    idx.close()
    # Same provider and model name, other output size (e.g. a dimensions setting changed).
    wider = FakeEmbedder(dim=32)
    write(ws, "memory/2025-03-03.md", "- New note about the garden.\n")
    idx = MemoryIndex(ws, cfg, embedder=wider)
    stats = await idx.sync()
    assert stats.full_reindex
    assert idx.status()["dims"] == 32 and idx.status()["embeddedChunks"] == 3
    assert (await idx.search("garden")).results[0].path == "memory/2025-03-03.md"
    idx.close()


async def test_keyword_mode_without_embeddings(ws: Path) -> None:
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    response = await idx.search("What did we deploy on Friday?")
    assert response.mode == "keyword"
    assert response.results and response.results[0].path == "memory/2025-03-01.md"
    assert "billing API" in response.results[0].snippet
    assert keywords("What did we deploy on Friday?") == ["deploy", "friday"]
    assert match_query(["deploy", "friday"]) == '"deploy" OR "friday"'
    assert (await idx.search("zebra xylophone")).results == []
    idx.close()


async def test_hybrid_merge_arithmetic(ws: Path) -> None:
    cfg = MemorySearchConfig(embedding_provider="local", min_score=0.0)
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, cfg, embedder=embedder)
    await idx.sync()  # vectors are back-filled in the background; wait for them here
    query = "PostgreSQL analytics"
    response = await idx.search(query, max_results=2)
    assert response.mode == "hybrid"
    top = response.results[0]
    assert top.path == "memory/MEMORY.md"
    text = (ws / top.path).read_text().strip("\n")
    qvec = await embedder.embed_query(query)
    # Each line that says something is embedded; the chunk vector is their normalised mean, and the
    # vector score mixes it (0.3) with the best line's (0.7).
    line_vecs = normalise(np.array([hashed_embedding(line.strip()) for line in text.split("\n")
                                    if len("".join(line.split())) >= 12]))
    mean = line_vecs.mean(axis=0)
    cosine = 0.3 * float(mean / np.linalg.norm(mean) @ qvec) + 0.7 * float(np.max(line_vecs @ qvec))
    terms = keywords(query)
    with idx._db.read() as conn:
        (chunk_id,) = conn.execute("SELECT id FROM chunks WHERE path = 'memory/MEMORY.md'").fetchone()
    bm25 = idx._db.fts_scores(match_query(terms))[chunk_id]
    expected = hybrid_score(
        cosine_to_score(cosine), text_score(bm25, coverage(text, terms)), 0.7, 0.3
    )
    assert top.score == pytest.approx(expected, abs=1e-3)  # line vectors are stored as float16
    idx.close()


async def test_temporal_decay_halves_a_note_one_half_life_old(tmp_path: Path) -> None:
    today = date(2025, 6, 30)
    old = today - timedelta(days=30)
    body = "- Renewed the passport at the embassy.\n"
    write(tmp_path, f"memory/{today.isoformat()}.md", body)
    write(tmp_path, f"memory/{old.isoformat()}.md", body)
    write(tmp_path, "memory/MEMORY.md", body)
    cfg = MemorySearchConfig(embedding_provider="none", temporal_decay=True, half_life_days=30, min_score=0.0)
    idx = MemoryIndex(tmp_path, cfg, today=lambda: today)
    scores = {r.path: r.score for r in (await idx.search("passport embassy")).results}
    assert scores[f"memory/{old.isoformat()}.md"] == pytest.approx(
        scores[f"memory/{today.isoformat()}.md"] * 0.5
    )
    assert scores["memory/MEMORY.md"] == pytest.approx(scores[f"memory/{today.isoformat()}.md"])
    idx.close()


async def test_cjk_two_character_words_are_found(tmp_path: Path) -> None:
    write(tmp_path, "memory/MEMORY.md", "# 记忆\n- 用户喜欢喝咖啡，不喜欢茶。\n- 项目截止日期是五月。\n")
    write(tmp_path, "memory/2025-01-02.md", "- 東京で寿司を食べた。\n- 서울에서 회의를 했다.\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    coffee = await idx.search("咖啡")
    assert coffee.results and coffee.results[0].path == "memory/MEMORY.md"
    assert "咖啡" in coffee.results[0].snippet
    assert (await idx.search("用户什么时候截止日期")).results[0].path == "memory/MEMORY.md"
    assert (await idx.search("寿司")).results[0].path == "memory/2025-01-02.md"
    assert (await idx.search("회의")).results[0].path == "memory/2025-01-02.md"
    assert (await idx.search("啤酒")).results == []
    idx.close()


async def test_corrupt_or_missing_index_is_rebuilt(ws: Path) -> None:
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    idx.close()
    index_file = ws / "memory" / ".index.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(str(index_file) + suffix).unlink(missing_ok=True)
    index_file.write_bytes(b"this is not a database" * 100)
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    response = await idx.search("PostgreSQL")
    assert response.results[0].path == "memory/MEMORY.md"
    assert idx._db.rebuilt
    idx.close()

    index_file.unlink()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    assert (await idx.search("billing")).results[0].path == "memory/2025-03-01.md"
    idx.close()


def _chunks_without_cached_lines(idx: MemoryIndex) -> int:
    with idx._db.read() as conn:
        return conn.execute(
            "SELECT count(*) FROM chunks c WHERE c.embedding IS NULL OR NOT EXISTS"
            " (SELECT 1 FROM embedding_cache e WHERE e.hash = c.hash AND e.provider = 'fake')"
        ).fetchone()[0]


async def test_an_index_of_the_schema_before_line_vectors_is_rebuilt_with_them(ws: Path) -> None:
    cfg = MemorySearchConfig(embedding_provider="local")
    idx = MemoryIndex(ws, cfg, embedder=FakeEmbedder())
    await idx.sync()
    idx.close()
    index_file = ws / "memory" / ".index.sqlite"
    with sqlite3.connect(index_file) as conn:  # an index written before line vectors: one vector a chunk
        conn.execute("DELETE FROM embedding_cache")
        conn.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, cfg, embedder=embedder)
    response = await idx.search("PostgreSQL analytics", wait_for_vectors=True)
    assert idx._db.rebuilt and response.mode == "hybrid" and embedder.embedded
    assert response.results[0].path == "memory/MEMORY.md"
    assert _chunks_without_cached_lines(idx) == 0
    idx.close()


def make_schema_3(index_file: Path) -> None:
    """Turn a closed index into what schema 3 wrote: each chunk kept its line vectors a second time."""
    conn = sqlite3.connect(index_file)
    conn.execute("ALTER TABLE files DROP COLUMN resume")  # schema 5
    conn.execute("ALTER TABLE chunks ADD COLUMN line_vectors BLOB")
    conn.execute("UPDATE chunks SET line_vectors = (SELECT vector FROM embedding_cache WHERE hash = chunks.hash)")
    conn.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    conn.commit()
    conn.close()  # the last connection to close folds the WAL into the file


async def test_an_index_with_line_vectors_on_its_chunks_is_migrated_without_embedding_again(ws: Path) -> None:
    (ws / "memory" / "MEMORY.md").write_text("# Notes\n" + "".join(
        f"- Project {n} runs on PostgreSQL {n} with nightly analytics exports\n" for n in range(400)
    ))
    cfg = MemorySearchConfig(embedding_provider="local")
    idx = MemoryIndex(ws, cfg, embedder=FakeEmbedder())
    await idx.sync()
    expected = [(r.path, r.start_line) for r in (await idx.search("PostgreSQL 7 analytics")).results]
    idx.close()
    index_file = ws / "memory" / ".index.sqlite"
    make_schema_3(index_file)
    schema3_bytes = index_file.stat().st_size
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, cfg, embedder=embedder)
    response = await idx.search("PostgreSQL 7 analytics", wait_for_vectors=True)
    assert not idx._db.rebuilt and embedder.embedded == []
    assert response.mode == "hybrid" and [(r.path, r.start_line) for r in response.results] == expected
    assert _chunks_without_cached_lines(idx) == 0
    with idx._db.read() as conn:
        assert "line_vectors" not in [row[1] for row in conn.execute("PRAGMA table_info(chunks)")]
        assert "resume" in [row[1] for row in conn.execute("PRAGMA table_info(files)")]
        assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "5"
    idx.close()
    assert index_file.stat().st_size < schema3_bytes


async def test_embedding_cache_keeps_what_chunks_use_and_a_bounded_spare(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("nanobot.memory.index_db.CACHE_SPARE_ROWS", 2)
    live = ws / "sessions" / "telegram_42.jsonl"
    live.parent.mkdir(exist_ok=True)
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    for turn in range(8):  # a live transcript: its last chunk changes with every turn
        with live.open("a") as f:
            f.write(f'{{"role": "user", "content": "turn {turn}: the parcel locker code is {turn}41{turn}"}}\n')
        await idx.sync()
    with idx._db.read() as conn:
        used = conn.execute("SELECT count(DISTINCT hash) FROM chunks").fetchone()[0]
        cached = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    assert cached == used + 2
    assert _chunks_without_cached_lines(idx) == 0
    response = await idx.search("parcel locker code 7417")
    assert response.mode == "hybrid" and response.results[0].path == "sessions/telegram_42.jsonl"
    idx.close()


async def test_index_broken_while_open_is_rebuilt_on_search(ws: Path) -> None:
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    with idx._db.write() as conn:
        conn.execute("DROP TABLE chunks_fts")
    assert (await idx.search("PostgreSQL")).results[0].path == "memory/MEMORY.md"
    idx.close()


async def test_search_works_while_a_sync_runs(ws: Path) -> None:
    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    await idx.sync()
    embedder.gate = asyncio.Event()
    embedder.entered.clear()
    write(ws, "memory/2025-03-05.md", "- Planted tomatoes in the garden.\n")
    sync_task = asyncio.create_task(idx.sync())
    await asyncio.wait_for(embedder.entered.wait(), 5)
    assert idx.status()["syncing"]
    # The running sync holds the writer; a search still answers at once from committed data.
    response = await asyncio.wait_for(idx.search("PostgreSQL analytics"), 2)
    assert response.results[0].path == "memory/MEMORY.md"
    tomatoes = await asyncio.wait_for(idx.search("tomatoes garden"), 2)
    assert (
        tomatoes.results and tomatoes.results[0].path == "memory/2025-03-05.md"
    )  # text is in, vector pending
    embedder.gate.set()
    stats = await asyncio.wait_for(sync_task, 5)
    assert stats.chunks_embedded == 1
    idx.close()


async def test_mark_dirty_and_hand_edits_trigger_sync(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    write(ws, "memory/2025-03-06.md", "- Adopted a parrot named Kiwi.\n")
    idx.mark_dirty()
    assert (await idx.search("parrot")).results[0].path == "memory/2025-03-06.md"
    await idx.drain()

    monkeypatch.setattr(index_mod, "STALE_CHECK_INTERVAL_S", 0.0)
    write(ws, "memory/2025-03-07.md", "- The violin lesson moved to Tuesdays.\n")  # by hand, no mark_dirty
    assert (await idx.search("violin lesson")).results[0].path == "memory/2025-03-07.md"
    (ws / "memory/2025-03-07.md").unlink()
    assert (await idx.search("violin lesson")).results == []
    idx.close()


async def test_dot_folders_never_indexed_and_sessions_by_default(ws: Path) -> None:
    write(ws, "memory/.backups/MEMORY-1.md", "- secret backup walrus\n")
    line = '{"role": "user", "content": "remember the kayak trip", "timestamp": "2025-01-01T10:00:00+00:00"}'
    write(ws, "sessions/cli_direct.jsonl", '{"_type": "metadata", "format": 1}\n' + line + "\n")
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none", include_sessions=False))
    assert (await idx.search("walrus")).results == []
    assert (await idx.search("kayak")).results == []
    idx.close()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    hit = (await idx.search("kayak trip")).results[0]
    assert (hit.path, hit.start_line, hit.end_line) == ("sessions/cli_direct.jsonl", 2, 2)
    assert (await idx.search("walrus")).results == []
    idx.close()


@pytest.mark.parametrize("backend", ["numpy", "sqlite-vec"])
async def test_vector_backends_agree(ws: Path, backend: str) -> None:
    cfg = MemorySearchConfig(
        embedding_provider="local", vector_backend=backend, text_weight=0.0, min_score=0.0
    )
    idx = MemoryIndex(ws, cfg, embedder=FakeEmbedder())
    await idx.sync()
    assert idx.status()["vectorBackend"] == backend
    response = await idx.search("Deployed the billing API", max_results=2)
    assert [r.path for r in response.results][0] == "memory/2025-03-01.md"
    idx.close()


def test_keyword_mode_never_imports_litellm(ws: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from nanobot.config.schema import MemorySearchConfig\n"
        "from nanobot.memory.index import MemoryIndex\n"
        f"idx = MemoryIndex(Path({str(ws)!r}), MemorySearchConfig(embedding_provider='none'))\n"
        "r = asyncio.run(idx.search('PostgreSQL'))\n"
        "assert r.results, r\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("model", ["multilingual-e5-small", "wordllama"])
async def test_hybrid_with_real_local_model(tmp_path: Path, model: str) -> None:
    write(tmp_path, "memory/MEMORY.md", "# Memory\n- The user's cat is called Miso.\n")
    write(tmp_path, "memory/2025-04-01.md", "- Fixed the flaky integration test in the payment service.\n")
    write(tmp_path, "memory/2025-04-02.md", "- Booked train tickets to Lyon for the conference.\n")
    embedder = LocalEmbedder(model)
    idx = MemoryIndex(
        tmp_path, MemorySearchConfig(embedding_provider="local", embedding_model=model), embedder=embedder
    )
    stats = await idx.sync()
    assert stats.chunks_embedded == 3 and idx.status()["dims"] in (256, 384)
    response = await idx.search("travel by rail", min_score=0.0)
    assert response.mode == "hybrid"
    assert response.results[0].path == "memory/2025-04-02.md"  # no shared keyword: found by meaning
    idx.close()


async def test_a_note_written_a_moment_ago_is_found_while_its_sync_runs(ws: Path) -> None:
    """The agent writes a memory note (mark_dirty starts a background sync) and searches for it at
    once: the search found the sync's lock held and read the index from before the write."""
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none", include_sessions=False))
    await idx.sync()
    for code in ("1111", "2222", "3333"):
        write(ws, "memory/notes.md", f"# Notes\n- the garage code is {code}\n")
        idx.mark_dirty()  # what MemoryStore writes do
        await asyncio.sleep(0)  # the background sync takes the lock
        hit = (await idx.search("garage code")).results[0]
        assert code in hit.snippet, (code, hit.snippet)
    await idx.drain()
    idx.close()


async def test_a_note_named_in_latin1_does_not_stop_the_others(ws: Path) -> None:
    """A file name that is not UTF-8 (copied from an old disk) broke the whole sync: every file after
    it and every deletion were never applied."""
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none", include_sessions=False))
    write(ws, "memory/old.md", "- the alarm code is 4711\n")
    await idx.sync()
    (ws / "memory" / "old.md").unlink()
    os.close(os.open(os.fsencode(str(ws / "memory")) + b"/caf\xe9.md", os.O_CREAT | os.O_WRONLY, 0o600))
    write(ws, "memory/trip.md", "- flight to Lisbon on Friday\n")
    await idx.sync()
    assert (await idx.search("Lisbon flight")).results[0].path == "memory/trip.md"
    assert (await idx.search("alarm code")).results == []
    idx.close()


async def test_text_not_embedded_yet_is_found_by_its_words(ws: Path) -> None:
    """A note the agent wrote a moment ago (or a /new archive, or anything during a first back-fill)
    has no vector yet: the weighted merge capped it at 0.3 x its keyword score, below minScore and
    below every vaguely similar chunk that had one, so hybrid search lost what keyword search found."""
    class GatedPlanted(PlantedEmbedder):
        async def embed_documents(self, texts: list[str]) -> np.ndarray:
            self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
            return await super().embed_documents(texts)

    embedder = GatedPlanted(lambda text: 0.85)  # every embedded chunk looks fairly similar
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    await idx.sync()
    embedder.gate = asyncio.Event()
    embedder.entered.clear()
    write(ws, "memory/2025-03-08.md", "- The wifi password of the cabin is zebrafinch42.\n")
    sync_task = asyncio.create_task(idx.sync())
    await asyncio.wait_for(embedder.entered.wait(), 5)  # text synced, its vector pending
    response = await asyncio.wait_for(idx.search("wifi password cabin"), 2)
    assert response.results and response.results[0].path == "memory/2025-03-08.md", response.results
    embedder.gate.set()
    await asyncio.wait_for(sync_task, 5)
    idx.close()


def test_cli_search_beside_a_gateway_leaves_the_embedding_to_it(ws: Path, tmp_path: Path) -> None:
    """`nanobot memory search` while the gateway back-filled embedded every pending chunk itself
    (both processes embedding the same ones; silent for minutes at a few hundred chunks)."""
    from typer.testing import CliRunner

    from nanobot.cli.memory import app as memory_app
    from nanobot.service.state import GatewayLock

    with FakeLLMServer() as server:
        search_cfg = {"embeddingProvider": "litellm", "embeddingModel": "openai/fake-embed",
                      "embeddingApiBase": server.url, "embeddingApiKey": "sk-test"}
        config_file = tmp_path / "config.json"
        config_file.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws)}},
                                           "memory": {"search": search_cfg}}))
        embedder = HostedEmbedder("openai/fake-embed", api_base=server.url, api_key="sk-test")
        gateway = MemoryIndex(ws, MemorySearchConfig(embedding_provider="litellm"), embedder=embedder)
        asyncio.run(gateway.sync_text())  # text in, vectors pending: a gateway in mid back-fill
        gateway.close()
        with GatewayLock(ws):
            result = CliRunner().invoke(memory_app, ["search", "PostgreSQL", "-c", str(config_file)])
            assert result.exit_code == 0, result.output
            assert "memory/MEMORY.md" in result.stdout
            assert "still being embedded by the running gateway" in result.stderr
            assert len(inputs(server)) == 1, inputs(server)  # the query only
        alone = CliRunner().invoke(memory_app, ["search", "PostgreSQL", "-c", str(config_file)])
        assert alone.exit_code == 0 and len(inputs(server)) > 2  # no gateway: it embeds them itself


async def test_status_counts_the_write_ahead_log_in_the_index_size(ws: Path, tmp_path: Path) -> None:
    """While a gateway writes, most of the index is in its -wal file: `status` and `doctor` read the
    main file alone ("4 KiB" for 700)."""
    from nanobot.cli.status import _index_line
    from nanobot.config.schema import Config

    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()  # the connection stays open: the pages stay in the write-ahead log
    main = (ws / "memory" / ".index.sqlite").stat().st_size
    total = idx.status()["sizeBytes"]
    assert total > main
    cfg = Config.model_validate({"agents": {"defaults": {"workspace": str(ws)}},
                                 "memory": {"search": {"embeddingProvider": "none"}}})
    assert f"index {total // 1024} KiB" in _index_line(cfg, demo_model=False)
    idx.close()


def test_yesterday_is_the_users_yesterday() -> None:
    """"yesterday" and "last week" were the machine's: for users far from its zone, a day off for
    part of every day (the daily notes are named by the user's date)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from nanobot.config.schema import Config
    from nanobot.memory.index import build_index

    for zone in ("Pacific/Kiritimati", "Pacific/Pago_Pago"):  # 25 h apart: the machine's date is one of them at most
        cfg = Config.model_validate({"agents": {"defaults": {"timezone": zone}},
                                     "memory": {"search": {"embeddingProvider": "none"}}})
        idx = build_index(cfg, Path("/nonexistent-workspace"))
        assert idx._today() == datetime.now(ZoneInfo(zone)).date(), zone


async def test_only_the_start_of_a_very_long_query_is_embedded(ws: Path) -> None:
    """A 100,000-character query went whole to the embedding model: over two minutes in the local
    model (`memory search`, or a model's memory_search call)."""

    embedder = FakeEmbedder()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="local", min_score=0.0), embedder=embedder)
    await idx.sync()
    response = await idx.search("PostgreSQL analytics " + "and more words " * 7000, max_results=2)
    idx.close()
    assert "memory/MEMORY.md" in [r.path for r in response.results]
    assert embedder.queries and max(len(q) for q in embedder.queries) <= 2000


async def test_a_search_during_reindex_finds_what_was_indexed_before(ws: Path) -> None:
    """`nanobot memory reindex` emptied the index and committed that first: the gateway's searches
    found nothing until every file was added again (7 s for a 16 MB note)."""
    for day in range(1, 6):
        write(ws, f"memory/2025-04-0{day}.md", f"## Day {day}\n- Walked {day} km by the river.\n")
    cfg = MemorySearchConfig(embedding_provider="none")
    idx = MemoryIndex(ws, cfg)
    await idx.sync()
    seen: list[tuple[int, int]] = []

    def look(_phase: str, _done: int, _total: int) -> None:  # another process reading meanwhile
        with sqlite3.connect(idx.path) as conn:
            postgres = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'postgresql'").fetchone()
            files = conn.execute("SELECT count(DISTINCT path) FROM chunks").fetchone()
        seen.append((postgres[0], files[0]))

    idx.progress = look
    stats = await idx.sync(force=True)
    assert stats.full_reindex and stats.files_indexed == 7
    assert seen and all(found >= 1 and files == 7 for found, files in seen), seen
    response = await idx.search("PostgreSQL analytics")
    assert response.results and response.results[0].path == "memory/MEMORY.md"
    os.remove(ws / "memory" / "2025-04-01.md")  # a file gone by the next rebuild goes from the index
    await idx.sync(force=True)
    with sqlite3.connect(idx.path) as conn:
        assert conn.execute("SELECT count(DISTINCT path) FROM chunks").fetchone()[0] == 6
        assert conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0] == conn.execute(
            "SELECT count(*) FROM chunks"
        ).fetchone()[0]
    idx.close()


async def test_a_search_that_could_not_sync_first_says_so(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process held the index's write lock: a search for a line added since answered
    "nothing found" with only a log line; the model and the command's user were not told."""
    from nanobot.memory import index_file

    monkeypatch.setattr(index_file, "BUSY_TIMEOUT_MS", 200)
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    assert not (await idx.search("PostgreSQL")).stale
    idx.close()
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="none"))
    with open(ws / "memory" / "MEMORY.md", "a", encoding="utf-8") as fh:
        fh.write("- Sister lives in Oslo.\n")
    holder = sqlite3.connect(idx.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        response = await idx.search("Oslo")
    finally:
        holder.rollback()
        holder.close()
    assert response.stale and "recent changes may be missing" in response.to_json()["stale"], response
    assert (await idx.search("Oslo")).results and not (await idx.search("Oslo")).stale
    idx.close()


async def test_a_search_waiting_for_vectors_answers_by_words_when_its_wait_is_over(ws: Path) -> None:
    """`nanobot memory search` embedded the whole backlog before answering: on a months-old
    workspace (30,000 chunks, the local model at ~2 a second) it printed nothing for hours."""
    embedder = FakeEmbedder()
    embedder.gate = asyncio.Event()  # never opened: an embedding that takes for ever
    idx = MemoryIndex(ws, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    try:
        response = await asyncio.wait_for(
            idx.search("PostgreSQL analytics", wait_for_vectors=True, vector_wait_s=0.3), 30
        )
        assert embedder.entered.is_set()
        assert response.results and response.results[0].path == "memory/MEMORY.md"
        counts = idx.status()
        assert counts["embeddedChunks"] < counts["chunks"]  # what the CLI then reports as left
    finally:
        idx.close()
