"""One search over the index: keyword and vector candidates, merged, filtered and cut to size."""

from __future__ import annotations

import heapq
from datetime import date

import numpy as np

from nanobot.config.schema import MemorySearchConfig
from nanobot.memory.fts import keywords, match_query, selective_terms
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
from nanobot.memory.vectors import VectorSearcher, from_blob


def rank(
    db: IndexDB,
    vectors: VectorSearcher,
    cfg: MemorySearchConfig,
    query: str,
    qvec: np.ndarray | None,
    limit: int,
    min_score: float,
    today: date,
) -> list[SearchResult]:
    """Top `limit` results: hybrid when a query vector is given, keyword-only otherwise.

    Each side contributes limit x candidateMultiplier candidates; every candidate then gets both
    exact component scores (its cosine from the stored vector, its BM25 from the one FTS pass),
    so the merge does not depend on which side found it.
    """
    terms = keywords(query)
    total, doc_counts = db.doc_counts(terms)
    matched = selective_terms(terms, total, doc_counts)
    match = match_query(matched) if matched else ""
    pool = limit * cfg.candidate_multiplier
    bm25 = db.fts_scores(match) if match else {}
    text_ids = heapq.nsmallest(pool, bm25, key=bm25.__getitem__)
    vector_ids = [i for i, _ in vectors.knn(qvec, pool)] if qvec is not None else []
    rows = db.chunk_rows(list(dict.fromkeys([*text_ids, *vector_ids])))
    candidates: list[Candidate] = []
    for chunk_id, row in rows.items():
        cand = Candidate(chunk_id, row.path, row.start_line, row.end_line, row.text)
        if chunk_id in bm25:  # exact for vector candidates too: a chunk not matching scores 0
            cand.text_score = text_score(bm25[chunk_id], coverage(row.text, terms))
            cand.keyword_hit = True
        if qvec is not None and row.embedding is not None:
            vec = from_blob(row.embedding)
            if vec.shape == qvec.shape:
                cand.embedding = vec
                cand.vector_score = cosine_to_score(float(vec @ qvec))
        if qvec is not None:
            cand.score = hybrid_score(cand.vector_score, cand.text_score, cfg.vector_weight, cfg.text_weight)
        else:
            cand.score = cand.text_score
        candidates.append(cand)
    if cfg.temporal_decay:
        apply_decay(candidates, today, cfg.half_life_days)
    chosen = select_by_min_score(candidates, min_score, limit)
    chosen = mmr_rerank(chosen, limit, cfg.mmr_lambda) if cfg.mmr else chosen[:limit]
    out: list[SearchResult] = []
    for cand in chosen:
        snippet, _, _ = make_snippet(cand.text, cand.start_line, cand.end_line, terms)
        cite = citation(cand.path, cand.start_line, cand.end_line)
        out.append(SearchResult(cand.path, cand.start_line, cand.end_line, cand.score, snippet, cite))
    return out
