"""Memory retention: does a long conversation keep every planted fact while prompts stay in the window?

A scripted conversation of N user turns (default 320) plants one fact every few turns
(`FACT-<n>: ...`, default 40 facts) between filler turns, with a /new every 100 turns. A
deterministic fake LLM (tests/fakes/memory_llm.py, in-process) extracts facts through `save_memory`
(consolidation), the pre-compaction flush and session notes. Reported per window size:
- retention: share of planted facts found afterwards in MEMORY.md + daily notes + HISTORY.md (must be 100%)
- peak prompt: the largest prompt sent for a turn, as a share of the context window (must be <= 100%)
- memory LLM calls per 100 user turns (consolidation + flush + notes + compaction summaries)

Run: python benchmarks/memory_retention.py [--turns 320] [--facts 40] [--windows 8192,16384,65536]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.cli.onboard import copy_templates  # noqa: E402
from nanobot.config.schema import Config  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.providers.tokens import count_messages, count_tools  # noqa: E402
from tests.fakes.memory_llm import MemoryScript, MemoryScriptProvider  # noqa: E402

FILLER_WORDS = ("weather", "lunch", "meeting", "project", "music", "train", "coffee", "book", "garden", "code")
NEW_SESSION_EVERY = 100


class MeasuringProvider(MemoryScriptProvider):
    """Records the size of every chat-turn prompt (not the memory calls)."""

    def __init__(self, script: MemoryScript) -> None:
        super().__init__(script)
        self.peak_prompt_tokens = 0

    async def chat(self, messages, tools=None, **kw):  # noqa: ANN001, ANN003, ANN201
        names = {t["function"]["name"] for t in tools or []}
        if not names & {"save_memory", "write_daily_note", "save_session_note"} and tools:
            self.peak_prompt_tokens = max(self.peak_prompt_tokens, count_messages(messages) + count_tools(tools))
        return await super().chat(messages, tools, **kw)


def script_turns(turns: int, facts: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    fact_turns = set(rng.sample(range(turns), facts))
    lines, n = [], 0
    for t in range(turns):
        filler = " ".join(rng.choice(FILLER_WORDS) for _ in range(rng.randint(40, 160)))
        if t in fact_turns:
            lines.append(f"By the way, FACT-{n}: my preference number {n} is {rng.choice(FILLER_WORDS)}-{n}. {filler}")
            n += 1
        else:
            lines.append(f"Let's chat about {filler}")
    return lines


async def run(window: int, turns: int, facts: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(**{"agents": {"defaults": {"workspace": tmp, "contextWindowTokens": window,
                                                "maxTokens": min(8192, window // 8)}}})
        copy_templates(cfg.workspace_path)
        script = MemoryScript(reply_text="Noted. " + " ".join(["sure"] * 30))
        provider = MeasuringProvider(script)
        runtime = build_runtime(cfg, provider=provider)
        for t, text in enumerate(script_turns(turns, facts)):
            await runtime.ask(text)
            if (t + 1) % NEW_SESSION_EVERY == 0:
                await runtime.ask("/new")
        await runtime.aclose(drain_timeout_s=120)
        mem = Path(tmp) / "memory"
        corpus = "\n".join(p.read_text() for p in mem.glob("*.md"))
        kept = sum(1 for n in range(facts) if f"FACT-{n}:" in corpus)
        memory_calls = sum(v for k, v in script.calls.items() if k != "chat")
        return {
            "window": window,
            "retention": kept / facts,
            "peak_share": provider.peak_prompt_tokens / window,
            "memory_calls_per_100": memory_calls * 100 / turns,
            "consolidations": script.calls["consolidate"],
            "flushes": script.calls["flush"],
            "notes": script.calls["notes"],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=320)
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--windows", default="8192,16384,65536")
    args = parser.parse_args()
    setup_logging("ERROR")
    print(f"memory retention: {args.turns} user turns, {args.facts} planted facts, /new every {NEW_SESSION_EVERY}")
    print(f"{'window':>8} {'retention':>10} {'peak prompt':>12} {'mem calls/100':>14} {'consol.':>8} "
          f"{'flush':>6} {'notes':>6}")
    ok = True
    for window in (int(w) for w in args.windows.split(",")):
        r = asyncio.run(run(window, args.turns, args.facts))
        ok = ok and r["retention"] == 1.0 and r["peak_share"] <= 1.0
        print(f"{r['window']:>8} {r['retention']:>10.1%} {r['peak_share']:>12.1%} {r['memory_calls_per_100']:>14.1f} "
              f"{r['consolidations']:>8} {r['flushes']:>6} {r['notes']:>6}")
    print("PASS" if ok else "FAIL: a fact was lost or a prompt overflowed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
