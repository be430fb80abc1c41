"""A grown transcript is chunked from its resume point (memory/transcript_tail.py): the same chunks as
chunking it whole, and the whole file again when the part before that point changed."""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from pathlib import Path

import pytest

from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.memory import MemoryGetTool
from nanobot.config.schema import MemorySearchConfig
from nanobot.memory import transcript_tail
from nanobot.memory.chunking import chunk_transcript
from nanobot.memory.index import MemoryIndex
from nanobot.session.transcripts import archived_stem

REL = "sessions/telegram_42.jsonl"
WORDS = ["garden", "tomato", "invoice", "dentist", "ferry", "violin", "budget", "kayak", "sister", "parcel"]


def message(rng: random.Random, n: int) -> dict[str, object]:
    role = rng.choice(["user", "assistant", "assistant", "tool"])
    size = rng.choice([3, 20, 80, 200, 900])  # 900 words: one line cut into several pieces
    text = " ".join(rng.choice(WORDS) for _ in range(size)) + f" marker{n}"
    if rng.random() < 0.05:
        text += " line\u2028separator and next\x85line"  # JSON leaves these unescaped
    day = 1 + n // 25  # a few days, so chunks end at day changes
    return {"role": role, "content": text, "timestamp": f"2026-03-{day:02d}T10:00:00+00:00"}


def lines_of(rng: random.Random, first: int, count: int) -> str:
    out = []
    for n in range(first, first + count):
        out.append(json.dumps(message(rng, n), ensure_ascii=False))
        if rng.random() < 0.05:
            out.append(json.dumps({"_type": "metadata", "format": 1, "last_consolidated": n}))
    return "".join(line + "\n" for line in out)


def indexed(ws: Path) -> list[tuple[int, int, str, str, str]]:
    with sqlite3.connect(ws / "memory" / ".index.sqlite") as db:
        rows = db.execute("SELECT start_line, end_line, hash, title, day FROM chunks WHERE path=?", (REL,))
        return sorted(rows)


def whole(path: Path) -> list[tuple[int, int, str, str, str]]:
    name = archived_stem(path) or path.stem  # an archive is titled like the live session it was
    chunks = chunk_transcript(path.read_text(encoding="utf-8"), name)
    return sorted((c.start_line, c.end_line, c.hash, c.title, c.day) for c in chunks)


@pytest.mark.parametrize("seed", range(6))
async def test_a_growing_transcript_indexes_the_same_chunks_as_chunking_it_whole(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    transcript = tmp_path / REL
    transcript.parent.mkdir(parents=True)
    transcript.write_text(lines_of(rng, 0, 60), encoding="utf-8")
    starts: list[int] = []
    chunk_from = transcript_tail.chunk_transcript_from

    def recording(text: str, name: str, tokens: int, overlap: int, first_line: int = 1):  # type: ignore[no-untyped-def]
        starts.append(first_line)
        return chunk_from(text, name, tokens, overlap, first_line)

    monkeypatch.setattr(transcript_tail, "chunk_transcript_from", recording)
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync_text()
    written = 60
    for step in range(8):
        added = rng.choice([1, 2, 5, 30])
        text = lines_of(rng, written, added)
        if step == 3:
            text = text[: len(text) // 2]  # a crash cut the last line; the next append starts a new one
        with transcript.open("a", encoding="utf-8") as fh:
            fh.write(text if step != 4 else "\n" + text)
        written += added
        await idx.sync_text()
        assert indexed(tmp_path) == whole(transcript), f"step {step}"
    assert starts[0] == 1 and all(first > 1 for first in starts[1:])  # only the first sync read it all
    with transcript.open("a", encoding="utf-8") as fh:
        zebra = {"role": "user", "content": "the zebra crossing", "timestamp": "2026-04-01T10:00:00+00:00"}
        fh.write(json.dumps(zebra) + "\n")
    await idx.sync_text()
    hit = (await idx.search("zebra crossing")).results
    assert hit and hit[0].path == REL and hit[0].start_line == transcript.read_text().count("\n")
    idx.close()


async def test_an_edit_before_the_resume_point_chunks_the_file_again(tmp_path: Path) -> None:
    transcript = tmp_path / REL
    transcript.parent.mkdir(parents=True)
    rng = random.Random(7)
    transcript.write_text(lines_of(rng, 0, 80), encoding="utf-8")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync_text()
    # The same length, so only the content tells: an early message now names a walrus.
    text = transcript.read_text(encoding="utf-8").replace('marker1"', 'walrus1"', 1)
    assert "walrus1" in text
    transcript.write_text(text + lines_of(rng, 80, 3), encoding="utf-8")
    await idx.sync_text()
    assert indexed(tmp_path) == whole(transcript)
    assert (await idx.search("walrus1")).results[0].path == REL
    # Replaced by a shorter file (another session under the same name): chunked whole as well.
    transcript.write_text(lines_of(random.Random(8), 0, 5), encoding="utf-8")
    await idx.sync_text()
    assert indexed(tmp_path) == whole(transcript)
    assert (await idx.search("walrus1")).results == []
    idx.close()


async def test_a_message_with_a_unicode_line_separator_is_found_and_cited_at_its_file_line(tmp_path: Path) -> None:
    """splitlines() cut such a JSON line in two halves that did not parse: the message was never
    indexed, and every later citation pointed one line too far."""
    transcript = tmp_path / REL
    transcript.parent.mkdir(parents=True)
    lines = [
        {"role": "user", "content": "the gate code is 4417\u2028remember it", "timestamp": "2026-03-01T09:00:00+00:00"},
        {"role": "assistant", "content": "noted", "timestamp": "2026-03-01T09:00:05+00:00"},
        {"role": "user", "content": "my locker number is 88", "timestamp": "2026-03-01T09:01:00+00:00"},
    ]
    transcript.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in lines), encoding="utf-8")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    gate = (await idx.search("gate code")).results
    assert gate and gate[0].path == REL and gate[0].start_line == 1
    locker = (await idx.search("locker number")).results[0]
    got = json.loads(await MemoryGetTool(idx).execute(ToolContext(), path=REL, **{"from": locker.end_line, "lines": 1}))
    assert "locker number is 88" in got["text"] and got["totalLines"] == 3
    idx.close()


@pytest.mark.parametrize("seed", range(4))
def test_chunking_a_file_a_block_at_a_time_gives_the_chunks_of_chunking_it_whole(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 160 MB transcript read, decoded and split whole took ~650 MB of RAM to index; it is read a
    block of lines at a time now (here blocks of 2 KB: many boundaries, long lines over several)."""
    monkeypatch.setattr(transcript_tail, "BLOCK_BYTES", 2048)
    rng = random.Random(seed)
    transcript = tmp_path / REL
    transcript.parent.mkdir(parents=True)
    tool_run = "".join(json.dumps({"role": "tool", "content": "x" * 900}) + "\n" for _ in range(12))
    transcript.write_text(lines_of(rng, 0, 150) + tool_run + lines_of(rng, 150, 100), encoding="utf-8")
    got = transcript_tail.chunk_transcript_file(transcript, transcript.stem, 400, 80)
    assert sorted((c.start_line, c.end_line, c.hash, c.title, c.day) for c in got.chunks) == whole(transcript)
    assert got.from_line == 1 and got.digest == hashlib.sha256(transcript.read_bytes()).hexdigest()
    # its resume point is the one chunking the file in one piece gives
    monkeypatch.setattr(transcript_tail, "BLOCK_BYTES", 1 << 30)
    assert transcript_tail.chunk_transcript_file(transcript, transcript.stem, 400, 80).resume == got.resume


async def test_memory_get_on_a_long_transcript_does_not_hold_it_whole(tmp_path: Path) -> None:
    import tracemalloc

    transcript = tmp_path / REL
    transcript.parent.mkdir(parents=True)
    line = json.dumps({"role": "user", "content": "tomato " * 300, "timestamp": "2026-03-01T10:00:00+00:00"})
    with transcript.open("w", encoding="utf-8") as fh:
        for n in range(8000):  # ~17 MB
            fh.write(line.replace("tomato", f"tomato{n}", 1) + "\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    tool = MemoryGetTool(idx)
    tracemalloc.start()
    try:
        got = json.loads(await tool.execute(ToolContext(), path=REL, **{"from": 7000, "lines": 2}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got["totalLines"] == 8000 and got["from"] == 7000 and got["to"] == 7001
    assert "tomato6999 " in got["text"] and "tomato7000 " in got["text"]
    assert peak < 2 * 1024 * 1024  # read line by line (the whole file decoded and split: ~50 MB)
    idx.close()


@pytest.mark.parametrize("moved", [True, False])
async def test_new_moves_the_indexed_chunks_with_the_transcript_into_the_archive(tmp_path: Path, moved: bool) -> None:
    """/new on a months-long chat moved its file into the archive, which the index saw as a new file
    to chunk and write whole (and the live name's rows to delete). The archived copy takes the rows
    over now; a copy (the live file left as it was) is indexed whole under both names."""
    import shutil
    from datetime import UTC, datetime

    from nanobot.session.store import SessionStore

    rng = random.Random(3)
    store = SessionStore(tmp_path, fsync="never")
    live = store.path_for("telegram:42")
    live.parent.mkdir(parents=True)
    live.write_text(lines_of(rng, 0, 300), encoding="utf-8")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync_text()
    before = len(indexed(tmp_path))
    if moved:
        archived = store.archive(store.get("telegram:42"), datetime(2026, 4, 1, tzinfo=UTC))
        assert archived is not None
        live.write_text(lines_of(rng, 300, 4), encoding="utf-8")  # the new session's first turns
    else:
        archived = store.archive_dir / "telegram_42-20260401T000000.jsonl"
        archived.parent.mkdir(parents=True)
        shutil.copyfile(live, archived)
    stats = await idx.sync_text()
    with sqlite3.connect(tmp_path / "memory" / ".index.sqlite") as db:
        for path in (live, archived):
            rel = path.relative_to(tmp_path).as_posix()
            rows = sorted(db.execute("SELECT start_line, end_line, hash, title, day FROM chunks WHERE path=?", (rel,)))
            assert rows == whole(path), rel
    if moved:
        assert stats.chunks_indexed < before // 10  # the archive's rows moved, only its tail was written
    idx.close()


async def test_new_embeds_nothing_again(tmp_path: Path) -> None:
    """The archive's chunks were titled with its file name, so every chunk of a session was embedded
    a second time after /new (minutes of local-model time for an ordinary chat)."""
    from datetime import UTC, datetime

    from nanobot.session.store import SessionStore
    from tests.test_memory_index import FakeEmbedder

    store = SessionStore(tmp_path, fsync="never")
    live = store.path_for("telegram:42")
    live.parent.mkdir(parents=True)
    live.write_text(lines_of(random.Random(5), 0, 120), encoding="utf-8")
    embedder = FakeEmbedder()
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    await idx.sync()
    embedded = len(embedder.embedded)
    assert embedded > 50
    assert store.archive(store.get("telegram:42"), datetime(2026, 4, 1, tzinfo=UTC)) is not None
    await idx.sync()
    assert len(embedder.embedded) == embedded
    idx.close()
