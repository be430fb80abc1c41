"""Scoring for memory search: BM25 normalisation, hybrid merge, min-score rule, decay, MMR, snippets.

BM25 normalisation: FTS5's bm25() is negative with lower meaning better. With s = max(0, -bm25)
the BM25 part is s / (1 + s): monotone, in [0, 1), independent of the other results (a lone weak
hit does not get 1.0). BM25's idf is ~0 in a tiny corpus (a word in half of three files scores
nothing), so the text score also counts query coverage, the share of the query's keywords the
chunk contains: text = (1 - c) * s / (1 + s) + c * coverage, c = COVERAGE_WEIGHT. The vector
score is the cosine similarity clipped to [0, 1]. Hybrid: (w_v * vector + w_t * text) / (w_v + w_t).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from nanobot.memory.fts import hit_offsets, lines_hits, tokenize
from nanobot.util.text import character_start, next_character_start

SNIPPET_MAX_CHARS = 1000  # the default of memory.search.snippetChars
COVERAGE_WEIGHT = 0.25
_DATED_NAME = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
_NEVER_DECAY = frozenset({"MEMORY.md"})


@dataclass
class Candidate:
    """A chunk under consideration, with its component and final scores."""

    id: int
    path: str
    start_line: int
    end_line: int
    text: str
    vector_score: float = 0.0
    text_score: float = 0.0
    keyword_hit: bool = False
    score: float = 0.0
    embedding: np.ndarray | None = field(default=None, repr=False)
    title: str = ""
    best_unit: int | None = None  # which of the chunk's embedded lines is nearest the query vector


def bm25_to_score(bm25: float) -> float:
    s = max(0.0, -bm25)
    return s / (1.0 + s)


def coverage(text: str, terms: list[str]) -> float:
    """Share of the keywords found in the text (case-insensitive substring match)."""
    if not terms:
        return 0.0
    low = text.lower()
    return sum(1 for t in terms if t in low) / len(terms)


def text_score(bm25: float, coverage_share: float) -> float:
    return (1.0 - COVERAGE_WEIGHT) * bm25_to_score(bm25) + COVERAGE_WEIGHT * coverage_share


def cosine_to_score(cosine: float) -> float:
    return min(1.0, max(0.0, cosine))


def hybrid_score(vector_score: float, text_score: float, vector_weight: float, text_weight: float) -> float:
    total = vector_weight + text_weight
    if total <= 0:
        return 0.0
    return (vector_weight * vector_score + text_weight * text_score) / total


def file_date(path: str) -> date | None:
    """The date in a dated memory file's name (YYYY-MM-DD...), or None for undated files."""
    name = path.rsplit("/", 1)[-1]
    if name in _NEVER_DECAY:
        return None
    match = _DATED_NAME.search(name)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def decay_factor(age_days: float, half_life_days: float) -> float:
    """Exponential decay: 1.0 today, exactly 0.5 at one half-life; future dates do not boost."""
    if half_life_days <= 0:
        return 1.0
    return math.pow(0.5, max(0.0, age_days) / half_life_days)


def apply_decay(candidates: list[Candidate], today: date, half_life_days: float) -> None:
    for cand in candidates:
        when = file_date(cand.path)
        if when is not None:
            cand.score *= decay_factor((today - when).days, half_life_days)


def select_by_min_score(candidates: list[Candidate], min_score: float, limit: int) -> list[Candidate]:
    """Candidates at or above min_score; when none pass, the keyword hits are re-admitted."""
    ranked = sorted(candidates, key=lambda c: c.score, reverse=True)
    passing = [c for c in ranked if c.score >= min_score]
    if passing:
        return passing
    return [c for c in ranked if c.keyword_hit][:limit]


def _similarity(a: Candidate, b: Candidate, token_sets: dict[int, set[str]]) -> float:
    if a.embedding is not None and b.embedding is not None:
        return float(np.dot(a.embedding, b.embedding))
    ta, tb = token_sets[a.id], token_sets[b.id]
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def mmr_rerank(candidates: Sequence[Candidate], limit: int, lam: float) -> list[Candidate]:
    """Maximal marginal relevance: lam * relevance - (1 - lam) * max similarity to those chosen."""
    pool = list(candidates)
    token_sets = {c.id: set(tokenize(c.text)) for c in pool}
    chosen: list[Candidate] = []
    while pool and len(chosen) < limit:
        best = max(
            pool,
            key=lambda c: (
                lam * c.score - (1 - lam) * max((_similarity(c, s, token_sets) for s in chosen), default=0.0)
            ),
        )
        chosen.append(best)
        pool.remove(best)
    return chosen


def make_snippet(
    text: str,
    start_line: int,
    end_line: int,
    terms: list[str],
    max_chars: int = SNIPPET_MAX_CHARS,
    weights: dict[str, float] | None = None,
    lead_line: int | None = None,
) -> tuple[str, int, int]:
    """At most max_chars of the chunk: the run of whole lines holding the most keyword hits, centred on them.

    When no line matches a keyword, the window is centred on lead_line (the line nearest the query
    by meaning, from the line vectors) instead of being the middle of the chunk.

    Returns (snippet, first line, last line) of what the snippet shows; when the chunk's lines do
    not map one-to-one onto file lines (a split long line, a transcript) the chunk's range is kept.
    """
    lines = text.split("\n")
    if len(text) <= max_chars:
        return text, start_line, end_line
    hits = lines_hits(lines, terms, weights)
    if lead_line is not None and 0 <= lead_line < len(lines) and max(hits) == 0:
        hits[lead_line] = 1.0
    # Sliding window of whole lines within max_chars. The first window with the most hits pushes
    # the matching lines to its end, cutting the reply that follows them; of the run of windows
    # right after it that hold the same hits, the middle one is taken, so the matches sit centred.
    best_start, best_end, best_hits = 0, 1, -1.0
    ties: list[tuple[int, int]] = []  # consecutive windows holding best_hits, from the first one
    last, used, total = 0, -1, 0.0  # window lines[first:last], its length with newlines, its hits
    for first in range(len(lines)):
        if last < first + 1:
            last, used, total = first + 1, len(lines[first]), hits[first]
        while last < len(lines) and used + 1 + len(lines[last]) <= max_chars:
            used += 1 + len(lines[last])
            total += hits[last]
            last += 1
        if total > best_hits + 1e-9:
            best_hits, ties = total, [(first, last)]
        elif ties and total >= best_hits - 1e-9 and ties[-1][0] == first - 1:
            ties.append((first, last))
        used -= len(lines[first]) + (1 if last > first + 1 else 0)
        total -= hits[first]
    if ties:
        best_start, best_end = ties[len(ties) // 2]
    snippet = _cut_around_hits("\n".join(lines[best_start:best_end]), terms, max_chars)
    if len(lines) != end_line - start_line + 1:
        return snippet, start_line, end_line
    return snippet, start_line + best_start, start_line + best_end - 1


def _cut_around_hits(text: str, terms: list[str], max_chars: int) -> str:
    """`text` cut to max_chars where its keywords are densest (a single line longer than a snippet,
    e.g. a long message: its start would hide what matched), else its start."""
    if len(text) <= max_chars:
        return text
    offsets = hit_offsets(text, terms)
    if not offsets:
        return text[: character_start(text, max_chars)]
    reach = max_chars * 3 // 4  # the hits in the first three quarters, some context after them
    best = max(offsets, key=lambda o: bisect.bisect_right(offsets, o + reach) - bisect.bisect_left(offsets, o))
    start = next_character_start(text, min(max(0, best - max_chars // 4), len(text) - max_chars))
    return text[start : character_start(text, start + max_chars)]


@dataclass(frozen=True)
class SearchResult:
    path: str  # relative to the workspace, "/"-separated
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    score: float
    snippet: str
    citation: str  # "path#Lx-Ly"

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "score": round(self.score, 4),
            "snippet": self.snippet,
            "citation": self.citation,
        }


@dataclass(frozen=True)
class SearchResponse:
    mode: str  # hybrid | keyword | qmd
    results: list[SearchResult]
    stale: str = ""  # why the index could not be brought up to date first ("" when it was)

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"mode": self.mode, "results": [r.to_json() for r in self.results]}
        return {**shown, "stale": self.stale} if self.stale else shown


def citation(path: str, start_line: int, end_line: int) -> str:
    return f"{path}#L{start_line}-L{end_line}"
