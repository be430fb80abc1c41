"""LoCoMo retrieval benchmark for memory_search: does the search return the turns that answer?

Each LoCoMo conversation becomes a workspace of dated memory notes (one file per session, a heading
with the session's date, one line per turn carrying its [dia_id]). Every question of categories
1-4 (single-hop, temporal, open-domain, multi-hop; 1,540 questions, 2,359 evidence turns) runs as
one memory search with the default configuration except the embedding provider. Reported per mode:

- unit recall@k: the evidence turn's line lies within the line range of one of the top-k results
  (what memory_get would reach from the result);
- visible recall@k: the turn's [dia_id] is in a returned snippet (what the agent reads at once);
- recall within 6,000 chars: visible in the results taken in rank order until the returned
  snippet characters would exceed 6,000 (a fixed context budget, whatever the result count);
- returned characters at k, p50/p95 search latency.

Each recall is counted two ways, printed side by side: per evidence turn (the share of all evidence
turns found; the goals below use this one) and per question (the share of questions with evidence
of which at least one evidence turn is found; figures quoted elsewhere for LoCoMo are often of this
kind, and for questions with several evidence turns it is the more lenient of the two).

Goals (printed with PASS/FAIL): unit @10 >= 0.92 keyword, >= 0.95 hybrid; visible @10 >= 0.85 and
within 6,000 chars >= 0.85 in both modes.

    python benchmarks/locomo_retrieval.py [--modes keyword,hybrid] [--data /work/shared/data/locomo10.json]

The data is read in place (never copied into the repository). Workspaces (and with them the
embedding cache) are kept under --cache-dir so a second run does not embed again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nanobot.config.schema import MemorySearchConfig  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.memory.embeddings import LocalEmbedder  # noqa: E402
from nanobot.memory.index import MemoryIndex  # noqa: E402

DEFAULT_DATA = Path(os.environ.get("LOCOMO_DATA", "/work/shared/data/locomo10.json"))
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nanobot-bench" / "locomo"
CATEGORIES = (1, 2, 3, 4)
TOP_K = (5, 10)
BUDGET_CHARS = 6000
POOL = 30  # results asked for when filling the character budget
GOALS = {"keyword": {"unit@10": 0.92}, "hybrid": {"unit@10": 0.95}}
SHARED_GOALS = {"visible@10": 0.85, "within6000": 0.85}
_DIA = re.compile(r"D\d+:\d+")


class Recall:
    """Hits of one recall metric, counted per evidence turn and per question."""

    def __init__(self) -> None:
        self.turns = 0
        self.questions = 0

    def add(self, hits: list[bool]) -> None:
        """One question's hits, one per evidence turn: each turn counts, the question counts once."""
        self.turns += sum(hits)
        self.questions += any(hits)


def recall_figures(recalls: dict[str, Recall], turns: int, questions: int) -> dict:
    """{'perTurn': {metric: share}, 'perQuestion': {metric: share}} over the given totals."""
    return {
        "perTurn": {m: round(r.turns / (turns or 1), 4) for m, r in recalls.items()},
        "perQuestion": {m: round(r.questions / (questions or 1), 4) for m, r in recalls.items()},
    }


def recall_lines(label: str, figures: dict) -> list[str]:
    """Both countings of every metric, labelled, one line each."""
    return [
        f"{label:>8} {metric:<11} per turn {figures['perTurn'][metric]:.3f}   "
        f"per question {figures['perQuestion'][metric]:.3f}"
        for metric in figures["perTurn"]
    ]


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
        path = workspace / rel
        content = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
    return where


def evidence_turns(qa: dict, where: dict[str, tuple[str, int]]) -> list[str]:
    """The question's evidence turns that exist in the written notes."""
    return [e for e in _DIA.findall(" ".join(qa.get("evidence", []))) if e in where]


def select_conversations(samples: list[dict], only: str) -> list[tuple[int, dict]]:
    """(index, conversation) for '0-4', '5,7' or '' (all): held-out sets are chosen by index."""
    if not only.strip():
        return list(enumerate(samples))
    chosen: set[int] = set()
    for part in only.split(","):
        first, _, last = part.strip().partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return [(i, s) for i, s in enumerate(samples) if i in chosen]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else 0.0


async def run_mode(samples: list[tuple[int, dict]], mode: str, model: str, limit: int | None, cache: Path,
                   overrides: dict) -> dict:
    config = MemorySearchConfig(embedding_provider="local" if mode == "hybrid" else "none",
                                embedding_model=model, **overrides)
    embedder = LocalEmbedder(model) if mode == "hybrid" else None
    if embedder is not None:
        embedder.warm_up()
    recalls = {f"{kind}@{k}": Recall() for kind in ("unit", "visible") for k in TOP_K}
    recalls["within6000"] = Recall()
    chars: dict[int, list[int]] = {k: [] for k in TOP_K}
    evidence_total = questions = with_evidence = chunks = 0
    latencies: list[float] = []
    index_s = 0.0
    for done, (ci, sample) in enumerate(samples, start=1):
        workspace = cache / f"conv{ci}"
        where = write_conversation(sample, workspace)
        index = MemoryIndex(workspace, config, embedder=embedder)
        started = time.perf_counter()
        await index.sync()
        index_s += time.perf_counter() - started
        chunks += index.status()["chunks"]
        for qa in [q for q in sample["qa"] if q.get("category") in CATEGORIES][:limit]:
            evidence = evidence_turns(qa, where)
            started = time.perf_counter()
            response = await index.search(str(qa["question"]), max_results=POOL)
            latencies.append((time.perf_counter() - started) * 1000)
            questions += 1
            evidence_total += len(evidence)
            with_evidence += bool(evidence)
            results = response.results
            budget: list = []
            used = 0
            for r in results:
                if used + len(r.snippet) > BUDGET_CHARS:
                    break
                used += len(r.snippet)
                budget.append(r)
            recalls["within6000"].add([any(f"[{dia}]" in r.snippet for r in budget) for dia in evidence])
            for k in TOP_K:
                top = results[:k]
                recalls[f"unit@{k}"].add([
                    any(r.path == where[dia][0] and r.start_line <= where[dia][1] <= r.end_line for r in top)
                    for dia in evidence
                ])
                recalls[f"visible@{k}"].add([any(f"[{dia}]" in r.snippet for r in top) for dia in evidence])
            for k in TOP_K:
                chars[k].append(sum(len(r.snippet) for r in results[:k]))
        index.close()
        print(f"  {mode}: conversation {ci} done ({done}/{len(samples)})", file=sys.stderr, flush=True)
    figures = recall_figures(recalls, evidence_total, with_evidence)
    report: dict = {
        "loadAverage": round(os.getloadavg()[0], 2),
        "mode": mode,
        "conversations": ",".join(str(ci) for ci, _ in samples),
        "model": model if mode == "hybrid" else None,
        "questions": questions,
        "evidenceTurns": evidence_total,
        "questionsWithEvidence": with_evidence,
        "chunks": chunks,
        "indexSeconds": round(index_s, 2),
        "searchP50Ms": round(percentile(latencies, 0.5), 2),
        "searchP95Ms": round(percentile(latencies, 0.95), 2),
    }
    report.update(figures["perTurn"])  # the goals' definition keeps the top-level keys
    report["perQuestion"] = figures["perQuestion"]
    for k in TOP_K:
        report[f"meanChars@{k}"] = round(statistics.mean(chars[k]), 1) if chars[k] else 0.0
    return report


def verdicts(report: dict) -> list[str]:
    goals = {**GOALS.get(report["mode"], {}), **SHARED_GOALS}
    return [
        f"{report['mode']:>8} {metric:<11} {report[metric]:.3f} goal >= {goal:.2f} "
        f"{'PASS' if report[metric] >= goal else 'FAIL'}"
        for metric, goal in goals.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="keyword,hybrid", help="comma-separated: keyword,hybrid")
    parser.add_argument("--model", default="multilingual-e5-small", help="local embedding model for hybrid")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--only", default="", help="conversation indexes, e.g. 0-4 or 5,7 (after --conversations)")
    parser.add_argument("--questions", type=int, default=None, help="only the first N questions per conversation")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="memory.search override for experiments, e.g. --set chunk_tokens=200")
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args()
    setup_logging("ERROR")
    if not args.data.is_file():
        sys.exit(f"LoCoMo data not found at {args.data} (set --data or LOCOMO_DATA)")
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    samples = select_conversations(json.loads(args.data.read_text(encoding="utf-8"))[: args.conversations], args.only)
    reports = [
        asyncio.run(run_mode(samples, m.strip(), args.model, args.questions, args.cache_dir, overrides))
        for m in args.modes.split(",")
    ]
    print(json.dumps(reports, indent=2))
    for r in reports:
        print("\n".join(recall_lines(r["mode"], {"perTurn": {m: r[m] for m in r["perQuestion"]},
                                                "perQuestion": r["perQuestion"]})))
    lines = [line for r in reports for line in verdicts(r)]
    print("goals (per evidence turn):")
    print("\n".join(lines))
    if args.out:
        args.out.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    sys.exit(0 if all(line.endswith("PASS") for line in lines) else 1)


if __name__ == "__main__":
    main()
