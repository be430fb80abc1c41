"""A grown note is chunked from its resume point (memory/markdown_tail.py): the same chunks as
chunking it whole, and the whole file again when anything but an append changed it."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory import markdown_tail
from nanobot.memory.chunking import chunk_markdown, chunk_markdown_from
from nanobot.memory.index import MemoryIndex
from nanobot.memory.store import MemoryStore
from nanobot.util.text import decode_text

REL = "memory/HISTORY.md"
WORDS = ["garden", "tomato", "invoice", "dentist", "ferry", "violin", "budget", "kayak", "sister", "东京", "旅行"]


def entry(rng: random.Random, n: int, longest: int = 900) -> str:
    kind = rng.random()
    if kind < 0.06:
        return f"## Trips {2025 + n % 2}-0{1 + n % 9}-1{n % 9}"  # a hand-made heading now and then
    size = rng.choice([3, 20, 80, longest])  # 900 words: one line cut into several pieces
    text = " ".join(rng.choice(WORDS) for _ in range(size)) + f" marker{n}"
    if rng.random() < 0.05:
        text += " line\u2028separator"
    return f"[2026-{1 + n % 12:02d}-{1 + n % 28:02d} 10:00] {text}"


def indexed(ws: Path) -> list[tuple[int, int, str, str, str]]:
    with sqlite3.connect(ws / "memory" / ".index.sqlite") as db:
        rows = db.execute("SELECT start_line, end_line, hash, title, day FROM chunks WHERE path=?", (REL,))
        return sorted(rows)


def whole(ws: Path) -> list[tuple[int, int, str, str, str]]:
    chunks = chunk_markdown(decode_text((ws / REL).read_bytes()))
    return sorted((c.start_line, c.end_line, c.hash, c.title, c.day) for c in chunks)


@pytest.mark.parametrize("seed", range(4))
async def test_a_growing_history_indexes_the_same_chunks_as_chunking_it_whole(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    store = MemoryStore(tmp_path)
    for n in range(40):
        store.append_history(entry(rng, n))
    starts: list[int] = []
    chunk_from = markdown_tail.chunk_markdown_from

    def recording(text, tokens, overlap, day, first_line=1, state=None):  # type: ignore[no-untyped-def]
        starts.append(first_line)
        return chunk_from(text, tokens, overlap, day, first_line, state)

    monkeypatch.setattr(markdown_tail, "chunk_markdown_from", recording)
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync_text()
    written = 40
    for step in range(8):
        for n in range(written, written + rng.choice([1, 2, 6])):
            store.append_history(entry(rng, n))
            written = n + 1
        await idx.sync_text()
        assert indexed(tmp_path) == whole(tmp_path), f"step {step}"
    assert starts[0] == 1 and all(first > 1 for first in starts[1:])  # only the first sync read it all
    store.append_history("[2026-11-28 12:00] The user booked zeppelin tickets.")
    await idx.sync_text()
    hit = (await idx.search("zeppelin tickets")).results
    lines = (tmp_path / REL).read_text(encoding="utf-8").splitlines()
    assert hit and hit[0].path == REL and "zeppelin" in lines[hit[0].end_line - 1]
    idx.close()


async def test_a_fact_removed_from_the_last_entry_leaves_the_index(tmp_path: Path) -> None:
    """The attack on a resume point: the removed words sit in the overlap of a chunk before it."""
    store = MemoryStore(tmp_path)
    rng = random.Random(3)
    for n in range(30):
        store.append_history(entry(rng, n) if n != 29 else "[2026-11-27 09:00] Lives at 12 Walrus Lane.")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none", chunk_tokens=60, chunk_overlap_tokens=30))
    await idx.sync_text()
    assert (await idx.search("Walrus Lane")).results
    path = tmp_path / REL
    path.write_text(path.read_text(encoding="utf-8").replace("12 Walrus Lane", "(forgotten)   "), encoding="utf-8")
    store.append_history("[2026-11-28 09:00] Bought a kayak.")
    await idx.sync_text()
    assert (await idx.search("Walrus Lane")).results == []
    config = MemorySearchConfig(chunk_tokens=60, chunk_overlap_tokens=30)
    chunks = chunk_markdown(path.read_text(encoding="utf-8"), config.chunk_tokens, config.chunk_overlap_tokens)
    with sqlite3.connect(tmp_path / "memory" / ".index.sqlite") as db:
        rows = sorted(db.execute("SELECT start_line, end_line, hash FROM chunks WHERE path=?", (REL,)))
    assert rows == sorted((c.start_line, c.end_line, c.hash) for c in chunks)
    idx.close()


async def test_a_legacy_encoded_append_and_a_cut_last_line_chunk_the_file_whole(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    rng = random.Random(5)
    for n in range(30):
        store.append_history(entry(rng, n))
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync_text()
    path = tmp_path / REL
    with path.open("ab") as fh:
        fh.write("\n[2026-11-28 09:00] Caf\u00e9 cr\u00e8me au lait\n".encode("cp1252"))  # pasted by an editor
    await idx.sync_text()
    assert indexed(tmp_path) == whole(tmp_path)
    assert (await idx.search("crème")).results
    with path.open("ab") as fh:
        fh.write(b"\n[2026-11-28 10:00] half a line")  # no line break at the end: no resume point
    await idx.sync_text()
    with path.open("ab") as fh:
        fh.write(b" and its end, about a violin\n")
    await idx.sync_text()
    assert indexed(tmp_path) == whole(tmp_path)
    idx.close()


@pytest.mark.parametrize("seed", range(3))
def test_chunking_from_the_resume_line_gives_the_chunks_of_chunking_it_whole(seed: int) -> None:
    rng = random.Random(seed)

    def line() -> str:
        pick = rng.random()
        if pick < 0.1:
            return "#" * rng.randint(1, 4) + " " + rng.choice(["Work", "2026-03-04", "Trips"])
        if pick < 0.3:
            return ""
        if pick < 0.7:
            return entry(rng, rng.randint(0, 99), 200)
        return "- " + " ".join(rng.choice(WORDS) for _ in range(30))

    resumed = 0
    for _ in range(150):
        text = "".join(line() + "\n" for _ in range(rng.randint(1, 60)))
        grown = text + "".join(line() + "\n" for _ in range(rng.randint(0, 20)))
        tokens, overlap = rng.choice([(50, 10), (120, 40), (400, 80)])
        first = chunk_markdown_from(text, tokens, overlap, "2025-05-05")
        if not first.resume_line:
            continue
        resumed += 1
        start = first.resume_line
        tail = "".join(grown.splitlines(keepends=True)[start - 1 :])
        rest = chunk_markdown_from(tail, tokens, overlap, "2025-05-05", start, first.resume_state)
        kept = [c for c in first.chunks if c.start_line < start]
        assert kept + rest.chunks == chunk_markdown(grown, tokens, overlap, "2025-05-05")
    assert resumed > 100
