"""Ranking choices of memory search through the real SQLite index: rank fusion, the snippet budget,
month names without a year, an empty date range, and the query-embedding cache, and
the cheap check for files changed by hand."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory import index as index_mod
from nanobot.memory import staleness
from nanobot.memory.index import MemoryIndex
from nanobot.memory.ranking import fuse_by_rank
from nanobot.memory.search import Candidate
from nanobot.memory.temporal import parse_time_range
from tests.test_memory_index import FakeEmbedder, PlantedEmbedder, write

TODAY = date(2026, 11, 26)


def cand(cid: int, text_score: float, vector: float | None) -> Candidate:
    c = Candidate(cid, "memory/x.md", 1, 1, "x", text_score=text_score, keyword_hit=text_score > 0)
    if vector is not None:
        c.vector_score = vector
        c.embedding = np.ones(2, dtype=np.float32)
    return c


def test_rank_fusion_scores_by_position_not_by_scale() -> None:
    # Keyword order: 1, 2; vector order: 2, 3, 1 (cosines all within 0.02 of each other).
    cands = [cand(1, 0.9, 0.741), cand(2, 0.2, 0.760), cand(3, 0.0, 0.750)]
    fuse_by_rank(cands, k=10, vector_weight=0.5, text_weight=0.5)
    score = {c.id: c.score for c in cands}
    assert score[2] == pytest.approx((0.5 / 12 + 0.5 / 11) / (1 / 11))  # 2nd by keyword, 1st by vector
    assert score[1] == pytest.approx((0.5 / 11 + 0.5 / 13) / (1 / 11))
    assert score[3] == pytest.approx((0.5 / 12) / (1 / 11))  # no keyword match: the vector side only
    assert score[2] > score[1] > score[3]
    both_first = [cand(7, 0.5, 0.8)]
    fuse_by_rank(both_first, k=60, vector_weight=0.7, text_weight=0.3)
    assert both_first[0].score == pytest.approx(1.0)


async def test_rrf_lifts_the_keyword_match_a_flat_cosine_buries(tmp_path: Path) -> None:
    # The keyword hit's vector is the least similar; a weighted sum (vector 0.7) ranks the three
    # notes without the word above it, rank fusion brings it to the top.
    write(tmp_path, "memory/a.md", "- The kiln firing schedule for the ceramics class is on Thursdays.\n")
    for i, text in enumerate(("We talked about the weather.", "A walk along the river.", "Bought bread.")):
        write(tmp_path, f"memory/other{i}.md", f"- {text}\n")

    results = {}
    for fusion in ("weighted", "rrf"):
        cfg = MemorySearchConfig(embedding_provider="local", fusion=fusion, rrf_k=10, min_score=0.0)
        idx = MemoryIndex(tmp_path, cfg, embedder=PlantedEmbedder(lambda text: 0.60 if "kiln" in text else 0.95))
        await idx.sync()
        results[fusion] = (await idx.search("kiln firing schedule", max_results=4)).results
        idx.close()
    assert results["weighted"][0].path != "memory/a.md"
    assert results["rrf"][0].path == "memory/a.md"
    assert all(0.0 <= r.score <= 1.0 for r in results["rrf"])


async def test_snippet_budget_follows_the_config(tmp_path: Path) -> None:
    lines = [f"- filler entry number {i} about nothing in particular at all" for i in range(120)]
    lines[60] = "- The locksmith's number is 0172 555 0199."
    write(tmp_path, "memory/MEMORY.md", "\n".join(lines) + "\n")
    for chars in (300, 900):
        idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none", snippet_chars=chars))
        hit = (await idx.search("locksmith number")).results[0]
        body = hit.snippet.split("\n", 1)[1] if hit.snippet.startswith("[") else hit.snippet
        assert "locksmith" in body and chars - 200 < len(body) <= chars
        idx.close()


def test_month_without_a_year_is_marked_as_such() -> None:
    when, _ = parse_time_range("camping in June", TODAY)
    assert (when.first, when.year_implied) == (date(2026, 6, 1), True)
    assert when.year_before().year_before().first == date(2024, 6, 1)
    assert parse_time_range("camping in June 2023", TODAY)[0].year_implied is False
    leap = parse_time_range("in February", date(2024, 3, 1))[0]
    assert leap.last == date(2024, 2, 29) and leap.year_before().last == date(2023, 2, 28)


def test_parts_of_a_month_or_a_year_narrow_the_range() -> None:
    def span(query: str) -> tuple[date, date] | None:
        when, _ = parse_time_range(query, TODAY)
        return (when.first, when.last) if when else None

    assert span("the leak in early March") == (date(2026, 3, 1), date(2026, 3, 10))
    assert parse_time_range("the leak in early March", TODAY)[0].year_implied
    assert span("mid-March 2025") == (date(2025, 3, 11), date(2025, 3, 20))
    assert span("what broke towards the end of October?") == (date(2026, 10, 21), date(2026, 10, 31))
    assert span("rent paid at the end of last month") == (date(2026, 10, 21), date(2026, 10, 31))
    assert span("at the beginning of the month") == (date(2026, 11, 1), date(2026, 11, 10))
    assert span("the raise I got at the start of the year") == (date(2026, 1, 1), date(2026, 2, 28))
    assert span("late last year") == (date(2025, 11, 1), date(2025, 12, 31))
    assert span("in the middle of 2024") == (date(2024, 5, 1), date(2024, 8, 31))
    assert parse_time_range("How big was the raise I got at the start of the year?", TODAY)[1] == (
        "How big was the raise I got ?"
    )
    assert parse_time_range("earlier this year we moved", TODAY)[1] == "we moved"
    for query in ("in the middle of the night", "I may be late", "early in the morning", "the end of the day"):
        assert span(query) is None, query


async def test_the_end_of_last_month_prefers_its_last_days(tmp_path: Path) -> None:
    write(tmp_path, "memory/2026-10-03.md", "- Dinner at the Ethiopian place. Dinner was great, dinner again soon.\n")
    write(tmp_path, "memory/2026-10-29.md", "- Dinner at the new ramen bar with Jonas.\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"), today=lambda: TODAY)
    assert (await idx.search("dinner last month")).results[0].path == "memory/2026-10-03.md"
    found = (await idx.search("Where did we have dinner at the end of last month?")).results
    assert found[0].path == "memory/2026-10-29.md"
    idx.close()


async def test_month_without_a_year_reaches_the_latest_year_with_notes(tmp_path: Path) -> None:
    write(tmp_path, "memory/2023-06-20.md", "- Went camping at the lake with the kids.\n")
    write(tmp_path, "memory/2023-08-02.md", "- Went camping again; camping camping at the coast.\n")
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"), today=lambda: TODAY)
    assert (await idx.search("When did we go camping in June?")).results[0].path == "memory/2023-06-20.md"
    # No note in any October: no date preference, the keyword order stands and nothing is cut.
    plain = [r.path for r in (await idx.search("camping")).results]
    assert [r.path for r in (await idx.search("camping in October")).results] == plain
    idx.close()


async def test_a_repeated_query_is_embedded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "memory/MEMORY.md", "- The user's cat is called Miso.\n")

    embedder = FakeEmbedder()
    monkeypatch.setattr(index_mod, "QUERY_CACHE_SIZE", 2)
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="local"), embedder=embedder)
    await idx.sync()
    first = (await idx.search("cat name")).results
    again = (await idx.search("  cat name ")).results
    assert embedder.queries == ["cat name"] and first == again and first[0].path == "memory/MEMORY.md"
    await idx.search("dog name")
    await idx.search("bird name")  # the cache holds two: "cat name" goes
    await idx.search("cat name")
    assert embedder.queries == ["cat name", "dog name", "bird name", "cat name"]
    idx.close()


@pytest.mark.parametrize(
    "change",
    ["edit", "same_size_edit", "new_in_empty_folder", "new_nested_folder", "delete", "new_archive", "swap_link"],
)
async def test_cheap_staleness_check_notices_every_kind_of_change(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_mod, "STALE_CHECK_INTERVAL_S", 0.0)

    write(tmp_path, "memory/MEMORY.md", "- The user's cat is called Miso.\n")
    write(tmp_path, "memory/2025-01-02.md", "- Booked the dentist.\n")
    write(tmp_path, "sessions/archive/cli_direct-1.jsonl", '{"_type": "metadata", "format": 1}\n')
    (tmp_path / "memory/projects").mkdir()
    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"))
    await idx.sync()
    assert staleness.unchanged(str(tmp_path), idx._snapshot, True)
    note = tmp_path / "memory/2025-01-02.md"
    if change == "edit":
        note.write_text("- Booked the dentist for Friday.\n")
    elif change == "same_size_edit":
        before = note.stat()
        note.write_text("- Booked the dentisT.\n")
        os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    elif change == "new_in_empty_folder":
        write(tmp_path, "memory/projects/roof.md", "- The roofer comes in May.\n")
    elif change == "new_nested_folder":
        write(tmp_path, "memory/projects/house/roof.md", "- The roofer comes in May.\n")
    elif change == "delete":
        note.unlink()
    elif change == "new_archive":
        write(tmp_path, "sessions/archive/cli_direct-2.jsonl", '{"_type": "metadata", "format": 1}\n')
    else:  # a note replaced by a symlink to a file outside: noticed, and the sync then refuses the link
        outside = write(tmp_path.parent / f"{tmp_path.name}-outside", "secret.md", "- walrus secret\n")
        note.unlink()
        note.symlink_to(outside)
    assert not staleness.unchanged(str(tmp_path), idx._snapshot, True)
    await idx.search("anything")  # the search's own check: a sync, then a fresh snapshot
    assert staleness.unchanged(str(tmp_path), idx._snapshot, True)
    assert (await idx.search("walrus secret")).results == []
    idx.close()


async def test_keyword_pass_runs_while_the_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import threading

    from nanobot.memory.index_db import IndexDB

    write(tmp_path, "memory/MEMORY.md", "- The user's cat is called Miso.\n")
    bm25_done = threading.Event()
    real_fts = IndexDB.fts_scores

    def fts_scores(self: IndexDB, match: str, title_weight: float = 0.5) -> dict[int, float]:
        found = real_fts(self, match, title_weight)
        bm25_done.set()
        return found

    class Waiting(FakeEmbedder):
        async def embed_query(self, text: str) -> np.ndarray:
            # Done one after the other, BM25 would only start after this returns: the wait fails.
            assert await asyncio.to_thread(bm25_done.wait, 5.0), "BM25 did not run during the embedding"
            return await super().embed_query(text)

    idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="local"), embedder=Waiting())
    await idx.sync()
    monkeypatch.setattr(IndexDB, "fts_scores", fts_scores)
    response = await idx.search("cat called Miso")
    assert response.mode == "hybrid" and response.results[0].path == "memory/MEMORY.md"
    idx.close()
