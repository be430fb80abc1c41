"""LoCoMo retrieval benchmark for memory_search.

Each LoCoMo conversation becomes a workspace of dated memory files (one file per session, one line
per turn carrying its dia_id). Every question of categories 1-4 runs as a memory search (decay
off, default minScore); an evidence turn counts as found at k when its line lies within the line
range of one of the top-k results. "visible" additionally requires the turn's [dia_id] to be in
a returned snippet (what the agent actually reads without calling memory_get).

    .venv/bin/python benchmarks/locomo_retrieval.py --modes keyword,hybrid --model multilingual-e5-small

The data is read in place from ../shared/data/locomo10.json (relative to the repository).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nanobot.config.schema import MemorySearchConfig  # noqa: E402
from nanobot.memory.embeddings import LocalEmbedder  # noqa: E402
from nanobot.memory.index import MemoryIndex  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo10.json"
CATEGORIES = (1, 2, 3, 4)
TOP_K = (5, 10)
_DIA = re.compile(r"D\d+:\d+")


def session_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> '2023-05-08'."""
    day_part = text.split(" on ", 1)[-1].strip()
    return datetime.strptime(day_part, "%d %B, %Y").strftime("%Y-%m-%d")


def write_conversation(sample: dict, workspace: Path) -> dict[str, tuple[str, int]]:
    """Write one memory file per session; return dia_id -> (relative path, 1-based line)."""
    conv = sample["conversation"]
    memory = workspace / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    where: dict[str, tuple[str, int]] = {}
    numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    for n in numbers:
        when = conv.get(f"session_{n}_date_time", "")
        rel = f"memory/{session_date(when)}-session-{n}.md"
        lines = [f"# Session {n} with {conv['speaker_a']} and {conv['speaker_b']} ({when})", ""]
        for turn in conv[f"session_{n}"]:
            text = " ".join(str(turn.get("text", "")).split())
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            lines.append(f"[{turn['dia_id']}] {turn['speaker']}: {text}")
            where[turn["dia_id"]] = (rel, len(lines))
        (workspace / rel).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return where


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


async def run_mode(samples: list[dict], mode: str, model: str, limit: int | None) -> dict:
    config = MemorySearchConfig(
        embedding_provider="local" if mode == "hybrid" else "none", embedding_model=model
    )
    embedder = LocalEmbedder(model) if mode == "hybrid" else None
    if embedder is not None:
        embedder.warm_up()
    found = {k: 0 for k in TOP_K}
    visible = {k: 0 for k in TOP_K}
    complete = {k: 0 for k in TOP_K}
    evidence_total = questions = 0
    chars = {k: [] for k in TOP_K}
    latencies: list[float] = []
    chunks = 0
    index_s = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, sample in enumerate(samples):
            workspace = Path(tmp) / f"conv{ci}"
            where = write_conversation(sample, workspace)
            index = MemoryIndex(workspace, config, embedder=embedder)
            started = time.perf_counter()
            stats = await index.sync()
            index_s += time.perf_counter() - started
            chunks += stats.chunks_indexed
            qas = [q for q in sample["qa"] if q.get("category") in CATEGORIES]
            for qa in qas[:limit]:
                evidence = [e for e in _DIA.findall(" ".join(qa.get("evidence", []))) if e in where]
                started = time.perf_counter()
                response = await index.search(str(qa["question"]), max_results=max(TOP_K))
                latencies.append((time.perf_counter() - started) * 1000)
                questions += 1
                evidence_total += len(evidence)
                for k in TOP_K:
                    top = response.results[:k]
                    chars[k].append(sum(len(r.snippet) for r in top))
                    hits = 0
                    for dia in evidence:
                        path, line = where[dia]
                        if any(r.path == path and r.start_line <= line <= r.end_line for r in top):
                            hits += 1
                            if any(f"[{dia}]" in r.snippet for r in top):
                                visible[k] += 1
                    found[k] += hits
                    complete[k] += int(bool(evidence) and hits == len(evidence))
            index.close()
            print(f"  {mode}: conversation {ci + 1}/{len(samples)} done", file=sys.stderr, flush=True)
    report = {
        "mode": mode,
        "model": model if mode == "hybrid" else None,
        "questions": questions,
        "evidenceTurns": evidence_total,
        "chunks": chunks,
        "indexSeconds": round(index_s, 2),
        "chunksPerSecond": round(chunks / index_s, 1) if index_s else None,
        "searchP50Ms": round(percentile(latencies, 0.5), 2),
        "searchP95Ms": round(percentile(latencies, 0.95), 2),
    }
    for k in TOP_K:
        report[f"recall@{k}"] = round(found[k] / evidence_total, 4) if evidence_total else 0.0
        report[f"visibleRecall@{k}"] = round(visible[k] / evidence_total, 4) if evidence_total else 0.0
        report[f"allEvidence@{k}"] = round(complete[k] / questions, 4) if questions else 0.0
        report[f"meanChars@{k}"] = round(statistics.mean(chars[k]), 1) if chars[k] else 0.0
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="keyword,hybrid", help="comma-separated: keyword,hybrid")
    parser.add_argument("--model", default="multilingual-e5-small", help="local embedding model for hybrid")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument(
        "--questions", type=int, default=None, help="only the first N questions per conversation"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args()
    samples = json.loads(args.data.read_text(encoding="utf-8"))[: args.conversations]
    reports = [
        asyncio.run(run_mode(samples, m.strip(), args.model, args.questions)) for m in args.modes.split(",")
    ]
    text = json.dumps(reports, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
