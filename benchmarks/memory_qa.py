"""Bilingual memory QA: does `memory_search` find what the user said, by kind of question?

The set (`benchmarks/data/memory_qa/`, our own invented data, CC0) is a workspace after four
months of use — MEMORY.md, HISTORY.md, dated daily notes (English and Chinese), live and archived
Telegram transcripts — and 120 questions in five categories (paraphrase, temporal, multi-hop,
cross-lingual, identifier), 40 to tune on and 40 held out, and 40 "fresh" ones written later by
another developer, measured once blind and tuned on since. Each question names the lines that
answer it by an exact fragment; the checker below insists each fragment is on exactly one line.

Every question runs as one search of the default configuration, with the clock set to the day it
is asked (temporal questions are relative to it), in two modes: `keyword` (no embeddings) and
`default` (the out-of-the-box selection, `embeddingProvider: auto`: the local model when installed).
Reported per category and overall, at k results (default 10):

- unit recall: an evidence line lies in a result's line range (what memory_get reaches from it);
- visible recall: the evidence fragment is in a returned snippet (what the agent reads at once);
- complete: every evidence line of the question is a unit hit (the question is answerable);

each counted per evidence line (lines) and per question (complete). The goal, for the default mode:
complete recall@10 >= 0.90 over the held-out questions (printed with PASS/FAIL). Held-out figures are
for measuring only; tune on `--set tune` and `--set fresh`.

    python benchmarks/memory_qa.py [--set tune|holdout|fresh|all] [--modes keyword,default] [-k 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nanobot.config.schema import MemorySearchConfig  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.memory.index import MemoryIndex  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "memory_qa"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nanobot-bench" / "memory_qa"
CATEGORIES = ("paraphrase", "temporal", "multi_hop", "cross_lingual", "identifier")
GOAL = 0.90  # complete recall@10, default mode, held-out questions


def flat(text: str) -> str:
    return " ".join(text.split())


def workspace_lines(workspace: Path) -> list[tuple[str, int, str]]:
    """(workspace-relative path, 1-based line number, line) of every note and transcript line."""
    return [
        (path.relative_to(workspace).as_posix(), number, line)
        for path in sorted(workspace.rglob("*"))
        if path.is_file() and path.suffix in (".md", ".jsonl")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
    ]


def locate(lines: list[tuple[str, int, str]], fragment: str) -> tuple[str, int]:
    """(path, line) of the one line holding the fragment; SystemExit when it is on none or several."""
    found = [(rel, number) for rel, number, line in lines if fragment in line]
    if len(found) != 1:
        sys.exit(f"evidence {fragment!r} is on {len(found)} lines of the workspace (must be exactly one)")
    return found[0]


def prepare_workspace(cache: Path) -> Path:
    """A copy of the set's workspace under the cache (the index, with its vectors, is kept there)."""
    target = cache / "workspace"
    source = DATA / "workspace"
    wanted = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    for rel in wanted:
        dest = target / rel
        if not dest.exists() or dest.read_bytes() != (source / rel).read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, dest)
    for path in target.rglob("*"):
        if path.is_file() and path.suffix in (".md", ".jsonl") and path.relative_to(target) not in wanted:
            path.unlink()  # a file the set no longer has
    return target


class Tally:
    """Hits of one group of questions."""

    def __init__(self) -> None:
        self.questions = self.complete = self.lines = self.unit = self.visible = 0

    def add(self, unit: list[bool], visible: list[bool]) -> None:
        self.questions += 1
        self.complete += all(unit)
        self.lines += len(unit)
        self.unit += sum(unit)
        self.visible += sum(visible)

    def figures(self) -> dict[str, float | int]:
        return {
            "questions": self.questions,
            "complete": round(self.complete / (self.questions or 1), 3),
            "unitLines": round(self.unit / (self.lines or 1), 3),
            "visibleLines": round(self.visible / (self.lines or 1), 3),
        }


async def run_mode(mode: str, questions: list[dict], k: int, cache: Path) -> dict:
    workspace = prepare_workspace(cache)
    asked = {"day": date.today()}
    config = MemorySearchConfig(embedding_provider="none") if mode == "keyword" else MemorySearchConfig()
    index = MemoryIndex(workspace, config, today=lambda: asked["day"])
    await index.sync()
    lines = workspace_lines(workspace)
    tallies: dict[str, Tally] = defaultdict(Tally)
    misses: list[str] = []
    for qa in questions:
        asked["day"] = date.fromisoformat(qa["asked_on"])
        where = [locate(lines, fragment) for fragment in qa["evidence"]]
        results = (await index.search(qa["question"], max_results=k)).results
        unit = [any(r.path == p and r.start_line <= line <= r.end_line for r in results) for p, line in where]
        visible = [any(flat(fragment) in flat(r.snippet) for r in results) for fragment in qa["evidence"]]
        for group in (qa["category"], f"lang:{qa['lang']}", "all"):
            tallies[group].add(unit, visible)
        if not all(unit):
            misses.append(qa["id"])
    report = {
        "mode": mode,
        "selection": index.selection,
        "chunks": index.status()["chunks"],
        "k": k,
        "groups": {g: tallies[g].figures() for g in (*CATEGORIES, "lang:en", "lang:zh", "all") if g in tallies},
        "incomplete": misses,
    }
    index.close()
    return report


def print_report(report: dict, which: str) -> None:
    print(f"\n{report['mode']} — {report['selection']}, {report['chunks']} chunks, {which} questions, @{report['k']}")
    print(f"  {'group':<14} {'questions':>9} {'complete':>9} {'unit (lines)':>13} {'visible (lines)':>16}")
    for group, f in report["groups"].items():
        print(f"  {group:<14} {f['questions']:>9} {f['complete']:>9.3f} {f['unitLines']:>13.3f} "
              f"{f['visibleLines']:>16.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="which", choices=("tune", "holdout", "fresh", "all"), default="holdout")
    parser.add_argument("--modes", default="keyword,default", help="comma-separated: keyword,default")
    parser.add_argument("-k", type=int, default=10, help="results per search")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=None, help="also write the reports as JSON here")
    args = parser.parse_args()
    setup_logging("ERROR")
    questions = json.loads((DATA / "questions.json").read_text(encoding="utf-8"))
    chosen = [q for q in questions if args.which in ("all", q["set"])]
    reports = [asyncio.run(run_mode(m.strip(), chosen, args.k, args.cache_dir)) for m in args.modes.split(",")]
    for report in reports:
        print_report(report, args.which)
    if args.out:
        args.out.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    default = next((r for r in reports if r["mode"] == "default"), None)
    if default is None or args.which != "holdout" or args.k != 10:
        print("\ngoal: complete recall@10 >= 0.90, default mode, held-out questions (not measured by this run)")
        return
    complete = default["groups"]["all"]["complete"]
    verdict = "PASS" if complete >= GOAL else "FAIL"
    print(f"\ngoal: default mode, held-out, complete recall@10 {complete:.3f} >= {GOAL:.2f} {verdict}")
    sys.exit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
