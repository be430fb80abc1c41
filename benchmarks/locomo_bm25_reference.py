"""A plain FTS5 BM25 reference on LoCoMo: the floor memory_search must beat.

Independent of nanobot's index: each conversation is written as the same dated session notes that
locomo_retrieval.py writes (one line per turn carrying its [dia_id]), every note is cut into chunks
of about --chunk-tokens tokens (whole lines, 4 characters a token, no overlap by default), the
chunks go into one SQLite FTS5 table (unicode61, with or without the porter stemmer), and every
question of categories 1-4 runs as plain bm25() over the OR of its terms (every word of the
question; --stopwords drops the usual English function words). Unit recall@k: the evidence turn
lies in one of the k best chunks, the definition locomo_retrieval.py uses for memory_search.
Also reported: characters returned at k (whole chunks), and the share of evidence reached within
6,000 characters of whole chunks. Every recall is counted per evidence turn and per question (a
question counts when any of its evidence turns is found), as in locomo_retrieval.py; whole chunks
are returned, so visible recall equals unit recall here.

    python benchmarks/locomo_bm25_reference.py [--no-porter] [--stopwords] [--chunk-tokens 400]
        [--only 0-4] [--data /work/shared/data/locomo10.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo_retrieval import (  # noqa: E402
    BUDGET_CHARS,
    CATEGORIES,
    DEFAULT_DATA,
    TOP_K,
    Recall,
    evidence_turns,
    recall_figures,
    recall_lines,
    select_conversations,
    write_conversation,
)

CHARS_PER_TOKEN = 4
_WORD = re.compile(r"[^\W_]+")
# English function words only (no domain words); used with --stopwords.
_STOP_TEXT = """a an the and or but if of to in on at by for with from as is are was were be been being do does
    did have has had what when where who whom which why how that this these those it its he she they
    them his her their i you we me my your our us not no so than then there here about into over
    would could should will can may might"""
_STOP = frozenset(_STOP_TEXT.split())


def chunk_note(lines: list[str], max_tokens: int, overlap_tokens: int) -> list[tuple[int, int, str]]:
    """(first line, last line, text) of chunks of whole lines within max_tokens (1-based lines)."""
    chunks: list[tuple[int, int, str]] = []
    start = 0
    while start < len(lines):
        end, used = start, 0
        while end < len(lines) and (end == start or used + len(lines[end]) // CHARS_PER_TOKEN + 1 <= max_tokens):
            used += len(lines[end]) // CHARS_PER_TOKEN + 1
            end += 1
        chunks.append((start + 1, end, "\n".join(lines[start:end])))
        if end >= len(lines):
            break
        back, kept = end, 0
        while back - 1 > start and kept + len(lines[back - 1]) // CHARS_PER_TOKEN + 1 <= overlap_tokens:
            back -= 1
            kept += len(lines[back]) // CHARS_PER_TOKEN + 1
        start = back
    return chunks


def match_expression(question: str, stopwords: bool) -> str:
    words = [w for w in _WORD.findall(question.lower()) if not (stopwords and w in _STOP)]
    return " OR ".join(f'"{w}"' for w in dict.fromkeys(words))


def run(samples: list[tuple[int, dict]], porter: bool, stopwords: bool, max_tokens: int, overlap: int) -> dict:
    tokenizer = "porter unicode61" if porter else "unicode61"
    recalls = {f"unit@{k}": Recall() for k in TOP_K}
    recalls["within6000"] = Recall()
    chars: dict[int, list[int]] = {k: [] for k in TOP_K}
    evidence_total = questions = with_evidence = chunk_count = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, sample in samples:
            workspace = Path(tmp) / f"conv{ci}"
            where = write_conversation(sample, workspace)
            db = sqlite3.connect(":memory:")
            db.execute(f"CREATE VIRTUAL TABLE c USING fts5(body, tokenize='{tokenizer}')")
            spans: dict[int, tuple[str, int, int, int]] = {}
            for note in sorted((workspace / "memory").glob("*.md")):
                rel = f"memory/{note.name}"
                for first, last, text in chunk_note(note.read_text(encoding="utf-8").splitlines(), max_tokens, overlap):
                    rowid = db.execute("INSERT INTO c(body) VALUES(?)", (text,)).lastrowid
                    spans[rowid] = (rel, first, last, len(text))
            chunk_count += len(spans)
            for qa in (q for q in sample["qa"] if q.get("category") in CATEGORIES):
                expr = match_expression(str(qa["question"]), stopwords)
                rows = db.execute(
                    "SELECT rowid FROM c WHERE c MATCH ? ORDER BY bm25(c) LIMIT ?", (expr, max(TOP_K) * 3)
                ).fetchall() if expr else []
                top = [spans[r[0]] for r in rows]
                budget, used = [], 0
                for span in top:
                    if used + span[3] > BUDGET_CHARS:
                        break
                    used += span[3]
                    budget.append(span)
                evidence = evidence_turns(qa, where)
                questions += 1
                evidence_total += len(evidence)
                with_evidence += bool(evidence)
                spots = [where[dia] for dia in evidence]
                recalls["within6000"].add([any(p == s and a <= n <= b for p, a, b, _ in budget) for s, n in spots])
                for k in TOP_K:
                    recalls[f"unit@{k}"].add([any(p == s and a <= n <= b for p, a, b, _ in top[:k]) for s, n in spots])
                for k in TOP_K:
                    chars[k].append(sum(s[3] for s in top[:k]))
            db.close()
    figures = recall_figures(recalls, evidence_total, with_evidence)
    report: dict = {"porter": porter, "stopwords": stopwords, "chunkTokens": max_tokens, "overlapTokens": overlap,
                    "questions": questions, "evidenceTurns": evidence_total, "questionsWithEvidence": with_evidence,
                    "chunks": chunk_count, **figures["perTurn"], "perQuestion": figures["perQuestion"]}
    for k in TOP_K:
        report[f"meanChars@{k}"] = round(statistics.mean(chars[k]), 1) if chars[k] else 0.0
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-porter", action="store_true", help="unicode61 without the porter stemmer")
    parser.add_argument("--stopwords", action="store_true", help="drop English function words from the query")
    parser.add_argument("--chunk-tokens", type=int, default=400)
    parser.add_argument("--overlap-tokens", type=int, default=0)
    parser.add_argument("--only", default="", help="conversation indexes, e.g. 0-4 or 5,7 (default: all)")
    args = parser.parse_args()
    if not args.data.is_file():
        sys.exit(f"LoCoMo data not found at {args.data}")
    samples = select_conversations(json.loads(args.data.read_text(encoding="utf-8")), args.only)
    report = run(samples, not args.no_porter, args.stopwords, args.chunk_tokens, args.overlap_tokens)
    print(json.dumps(report, indent=2))
    label = "porter" if report["porter"] else "unicode"
    print("\n".join(recall_lines(label, {"perTurn": {m: report[m] for m in report["perQuestion"]},
                                        "perQuestion": report["perQuestion"]})))


if __name__ == "__main__":
    main()
