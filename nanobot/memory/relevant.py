"""The MEMORY.md facts relevant to one message, for when the whole file does not fit the prompt.

MEMORY.md reaches the system prompt cut to its budget (head and tail kept), so facts in the middle
of a long file are invisible to the model. rank_facts() scores every fact line against the message
with the same text pipeline as memory search (keywords without stop words, porter stemming over
unicode61, CJK bigrams, BM25) in a throw-away in-memory FTS5 table: a few milliseconds for
hundreds of facts, nothing stored.
"""

from __future__ import annotations

import sqlite3

from nanobot.memory.fts import keywords, match_query, to_fts_text

MAX_RELEVANT_FACTS = 12
RELEVANT_MAX_CHARS = 1_500  # the runtime-block share of relevant facts


def fact_lines(text: str) -> list[str]:
    """The facts of a Markdown memory file: its non-empty lines that are not headings."""
    return [line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def rank_facts(lines: list[str], query: str, limit: int = MAX_RELEVANT_FACTS) -> list[str]:
    """The lines matching the query's keywords, best first (BM25), at most `limit`."""
    terms = keywords(query)
    if not lines or not terms:
        return []
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE f USING fts5(body, tokenize='porter unicode61 remove_diacritics 2')")
        conn.executemany("INSERT INTO f(rowid, body) VALUES(?, ?)",
                         [(i, to_fts_text(line)) for i, line in enumerate(lines)])
        rows = conn.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match_query(terms), limit)
        ).fetchall()
    finally:
        conn.close()
    return [lines[r[0]] for r in rows]


def relevant_first(text: str, query: str) -> str:
    """The file's facts with those relevant to the query moved to the top (a head cut keeps them)."""
    lines = fact_lines(text)
    top = rank_facts(lines, query)
    chosen = set(top)
    return "\n".join([*top, *(line for line in lines if line not in chosen)])


def relevant_section(text: str, query: str, shown: str, max_chars: int = RELEVANT_MAX_CHARS) -> str:
    """Relevant facts of `text` that are missing from `shown` (what the prompt already carries)."""
    out: list[str] = []
    used = 0
    # whole lines: "- Sister: Ann" is not shown because "- Sister: Anna lives in Rome" is
    shown_lines = {line.strip() for line in shown.splitlines()}
    for line in rank_facts(fact_lines(text), query):
        if line.strip() in shown_lines or used + len(line) + 1 > max_chars:
            continue
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)
