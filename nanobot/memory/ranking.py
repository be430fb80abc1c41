"""One search over the index: keyword, vector and date candidates, merged, filtered and cut to size.

Steps: the query is normalised (a time expression is taken out and becomes a date range; stop
words, quotes and punctuation go, and when a date was found, a rest of stop words only goes too;
English words are stemmed by the FTS5 porter tokenizer, CJK runs become bigrams). Keyword
candidates come from one BM25 pass, vector candidates from the nearest neighbours of the query
vector (the chunk vectors'; a chunk's vector score then mixes in its best line, vectors.py), date
candidates from the chunks dated in the asked range. Every candidate gets both exact
component scores, so the merge does not depend on which side found it. A chunk written in another
script than the query (a Chinese note, an English question) cannot share its words, and a chunk
dated in the asked range is already chosen by its date (a past event is seldom asked about in its
own words: "the pay bump at the start of the year" for "the January raise"): neither is held back
by an empty keyword side, each scores at least VECTOR_FLOOR_SHARE of its vector score. A date range
lifts chunks inside it. Results that repeat lines of a better result of the same file are dropped,
and each snippet is centred on the lines that match.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from datetime import date

import numpy as np

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory.fts import keywords, match_query, non_latin_share, selective_terms
from nanobot.memory.index_db import IndexDB
from nanobot.memory.search import (
    Candidate,
    SearchResult,
    apply_decay,
    citation,
    cosine_to_score,
    coverage,
    hybrid_score,
    make_snippet,
    mmr_rerank,
    select_by_min_score,
    text_score,
)
from nanobot.memory.temporal import TimeRange, parse_time_range
from nanobot.memory.vectors import VectorSearcher, from_blob, line_index, lines_from_blob, similarity

TIME_WEIGHT = 0.35  # share of the final score given to "the chunk is dated in the asked range"
MAX_YEARS_BACK = 10  # how far "in March" (no year) may reach back for notes of a March
CROSS_SCRIPT = 0.5  # a query and a chunk whose non_latin_share() differ by more are in different scripts
# A chunk in another script than the query, or dated in the asked range and matching no query word,
# scores at least this share of its vector score (tuned on the memory QA set's tuning and fresh
# questions with line vectors, for the other script: 0.91-0.92 best; 0.90 and 0.94 each lose two
# questions of 80, 0.85 nine).
VECTOR_FLOOR_SHARE = 0.92
MAX_SHARED_LINES = 0.5  # a result sharing more than this share of its lines with a better one is dropped


def _in_range(day: str, when: TimeRange) -> bool:
    try:
        return when.contains(date.fromisoformat(day))
    except ValueError:
        return False


def _range_with_notes(db: IndexDB, when: TimeRange | None, pool: int) -> TimeRange | None:
    """The asked range if memory has chunks dated in it; "in March" without a year falls back to
    the latest earlier March that has some; None (no date preference) when nothing is dated there,
    so an empty range does not scale every score down."""
    tries = MAX_YEARS_BACK if when is not None and when.year_implied else 1
    for _ in range(tries):
        if when is None or db.ids_between_days(when.first.isoformat(), when.last.isoformat(), 1):
            return when
        when = when.year_before()
    return None


def _lift(score: float, in_range: bool) -> float:
    return (1 - TIME_WEIGHT) * score + TIME_WEIGHT * in_range


def _overlaps(cand: Candidate, chosen: list[Candidate]) -> bool:
    lines = cand.end_line - cand.start_line + 1
    for other in chosen:
        if other.path != cand.path:
            continue
        shared = min(cand.end_line, other.end_line) - max(cand.start_line, other.start_line) + 1
        if shared > MAX_SHARED_LINES * lines:
            return True
    return False


def _distinct(candidates: list[Candidate], limit: int) -> list[Candidate]:
    chosen: list[Candidate] = []
    for cand in candidates:
        if not _overlaps(cand, chosen):
            chosen.append(cand)
            if len(chosen) >= limit:
                break
    return chosen


def fuse_by_rank(candidates: list[Candidate], k: int, vector_weight: float, text_weight: float) -> None:
    """Reciprocal-rank fusion of the keyword and vector orders, scaled to [0, 1] (1: first in both).

    Each side adds weight / (k + rank) for the candidates it ranks (keyword: the chunks that match
    at all); the cosine scale of a small model (every chunk near 0.75) then no longer flattens the
    keyword side. A date-range lift is applied afterwards, as in the weighted merge.
    """
    best = (vector_weight + text_weight) / (k + 1) or 1.0
    fused = {c.id: 0.0 for c in candidates}
    by_text = sorted((c for c in candidates if c.keyword_hit), key=lambda c: c.text_score, reverse=True)
    by_vector = sorted((c for c in candidates if c.embedding is not None), key=lambda c: c.vector_score,
                       reverse=True)
    for weight, order in ((text_weight, by_text), (vector_weight, by_vector)):
        for position, cand in enumerate(order, start=1):
            fused[cand.id] += weight / (k + position)
    for cand in candidates:
        cand.score = fused[cand.id] / best


def _lead_line(cand: Candidate) -> int | None:
    """The chunk's line nearest the query by meaning, where the snippet goes without keyword hits."""
    return None if cand.best_unit is None else line_index(cand.text, cand.best_unit)


def _other_script(text: str, query_share: float | None) -> bool:
    share = non_latin_share(text)
    return query_share is not None and share is not None and abs(share - query_share) > CROSS_SCRIPT


@dataclass(frozen=True)
class KeywordPass:
    """What the keyword side found; needs no query vector, so it can run while the model embeds."""

    when: TimeRange | None  # the date range the query asks about
    terms: list[str]  # the query's keywords (time expression and stop words out)
    total: int  # chunks in the index
    doc_counts: dict[str, int]  # chunks containing each keyword
    bm25: dict[int, float]  # FTS5 bm25 of every matching chunk
    non_latin: float | None = None  # non_latin_share() of the query: which script it is written in


def keyword_pass(db: IndexDB, query: str, today: date) -> KeywordPass:
    """Normalise the query and run its one BM25 pass."""
    when, rest = parse_time_range(query, today)
    terms = keywords(rest, only_stopwords_ok=when is None) if rest.strip() else []
    total, doc_counts = db.doc_counts(terms)
    matched = selective_terms(terms, total, doc_counts)
    bm25 = db.fts_scores(match_query(matched)) if matched else {}
    return KeywordPass(when, terms, total, doc_counts, bm25, non_latin_share(query))


def rank(
    db: IndexDB,
    vectors: VectorSearcher,
    cfg: MemorySearchConfig,
    found: KeywordPass,
    qvec: np.ndarray | None,
    limit: int,
    min_score: float,
    today: date,
) -> list[SearchResult]:
    """Top `limit` results: hybrid when a query vector is given, keyword-only otherwise."""
    when, terms, total, doc_counts, bm25 = found.when, found.terms, found.total, found.doc_counts, found.bm25
    pool = limit * cfg.candidate_multiplier
    ids = heapq.nsmallest(pool, bm25, key=bm25.__getitem__)
    if qvec is not None:
        ids += [i for i, _ in vectors.knn(qvec, pool)]
    when = _range_with_notes(db, when, pool)
    if when is not None:
        ids += db.ids_between_days(when.first.isoformat(), when.last.isoformat(), pool)
    rows = db.chunk_rows(list(dict.fromkeys(ids)), lines_of=vectors.embedded_by if qvec is not None else None)
    candidates: list[Candidate] = []
    dated: set[int] = set()  # chunks inside the asked date range
    cross: set[int] = set()  # chunks written in another script than the query
    for chunk_id, row in rows.items():
        cand = Candidate(chunk_id, row.path, row.start_line, row.end_line, row.text, title=row.title)
        if chunk_id in bm25:  # exact for vector candidates too: a chunk not matching scores 0
            cand.text_score = text_score(bm25[chunk_id], coverage(f"{row.title}\n{row.text}", terms))
            cand.keyword_hit = True
        if qvec is not None and row.embedding is not None:
            vec = from_blob(row.embedding)
            if vec.shape == qvec.shape:
                cand.embedding = vec
                lines = lines_from_blob(row.line_vectors, len(vec)) if row.line_vectors else None
                cosine, cand.best_unit = similarity(vec, lines, qvec)
                cand.vector_score = cosine_to_score(cosine)
        if qvec is not None and cand.embedding is None:
            # not embedded yet (written a moment ago, a /new archive, a first back-fill): its keyword
            # score alone, as keyword mode gives it; the weighted merge capped it at 0.3 and minScore
            # dropped it under every vaguely similar chunk that already had a vector
            cand.score = cand.text_score
        elif qvec is not None:
            cand.score = hybrid_score(cand.vector_score, cand.text_score, cfg.vector_weight, cfg.text_weight)
            if cand.embedding is not None and _other_script(row.text, found.non_latin):
                cross.add(chunk_id)
        else:
            cand.score = cand.text_score
        if when is not None and _in_range(row.day, when):
            dated.add(chunk_id)
            cand.keyword_hit = True
        candidates.append(cand)
    for cand in candidates:
        if cand.id in cross or (cand.id in dated and cand.id not in bm25):
            cand.score = max(cand.score, VECTOR_FLOOR_SHARE * cand.vector_score)
        if when is not None:
            cand.score = _lift(cand.score, cand.id in dated)
    if qvec is not None and cfg.fusion == "rrf":
        # min_score keeps its meaning (the weighted score); the fused order ranks what passes it.
        candidates = select_by_min_score(candidates, min_score, pool)
        fuse_by_rank(candidates, cfg.rrf_k, cfg.vector_weight, cfg.text_weight)
        for cand in candidates:
            cand.score = _lift(cand.score, cand.id in dated) if when is not None else cand.score
        min_score = 0.0
    if cfg.temporal_decay:
        apply_decay(candidates, today, cfg.half_life_days)
    chosen = select_by_min_score(candidates, min_score, pool)
    chosen = mmr_rerank(chosen, pool, cfg.mmr_lambda) if cfg.mmr else chosen
    chosen = _distinct(chosen, limit)
    # Snippets centre on rare keywords: a name on every line of a chat must not pull the window.
    rarity = {t: math.log((total + 1) / (doc_counts.get(t, 0) + 1)) + 0.05 for t in terms}
    out: list[SearchResult] = []
    for cand in chosen:
        snippet, first, last = make_snippet(cand.text, cand.start_line, cand.end_line, terms, cfg.snippet_chars,
                                              weights=rarity, lead_line=_lead_line(cand))
        if cand.title:
            snippet = f"[{cand.title}]\n{snippet}"
        out.append(SearchResult(cand.path, cand.start_line, cand.end_line, cand.score, snippet,
                                citation(cand.path, cand.start_line, cand.end_line)))
    return out
