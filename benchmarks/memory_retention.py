"""Memory retention: where does each fact the user said end up after a long conversation?

For every seed and context window, a scripted user talks with the agent (real agent, real memory
lifecycle: consolidation, pre-compaction flush, session notes on /new, compaction) while a lossy
stand-in model (benchmarks/lossy_model.py) answers the memory calls the way real models do:
paraphrasing, merging, dropping a detail with probability --p-drop, sometimes returning no tool
call or malformed arguments. Facts are planted between filler turns, a /new comes every
--new-every turns, and the last facts come after the last /new (still in the live transcript).

Each planted fact then ends in one of three places:
- in prompt: its detail is in MEMORY.md (what every private-chat prompt carries);
- findable: not in MEMORY.md, but memory_search with the user's later question (top
  memory.search.maxResults results) shows the detail in a snippet (notes, HISTORY.md, archived
  or live transcripts);
- lost: neither.
Goals: lost = 0 on every seed and window, and no prompt over its window (PASS/FAIL). The in-prompt
share is reported as min and median over seeds (how much the model kept), never a best seed.

    python benchmarks/memory_retention.py [--seeds 20] [--windows 8192,16384,65536] [--search keyword|auto]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lossy_model import Fact, LossyModel  # noqa: E402

from nanobot.agent.factory import build_runtime  # noqa: E402
from nanobot.config.schema import Config  # noqa: E402
from nanobot.config.templates import copy_templates  # noqa: E402
from nanobot.logs import setup_logging  # noqa: E402
from nanobot.memory.index import build_index  # noqa: E402

NAMES = ("Okafor", "Lindqvist", "Moreau", "Takahashi", "Brennan", "Castillo", "Novak", "Haddad", "Ferreira",
         "Kowalski", "Adeyemi", "Sorensen", "Ivanova", "Delacroix", "Nakamura", "Oyelaran", "Petrov")
CITIES = ("Porto", "Tallinn", "Ljubljana", "Valencia", "Krakow", "Bergen", "Trieste", "Ghent", "Bologna",
          "Aarhus", "Cork", "Graz")
FOODS = ("sesame", "shellfish", "kiwi fruit", "buckwheat", "mustard seeds", "lupin flour")
TEAS = ("genmaicha", "rooibos", "darjeeling", "lapsang souchong", "hojicha", "yerba mate")
PLACES = ("blue flower pot", "doormat by the shed", "loose brick left of the gate", "garden gnome")
FILLER = (
    "The weather was grey again today, so I stayed in and read for a while.",
    "Work was busy, lots of meetings about the quarterly planning.",
    "I tried a new recipe for lentil soup and it turned out fine.",
    "The train was crowded this morning and I had to stand the whole way.",
    "I watched a documentary about deep sea creatures last night.",
    "My neighbour is renovating the kitchen and it is loud all day.",
    "I went for a long walk along the river after lunch.",
    "Thinking about whether to repaint the living room this spring.",
    "The team shipped the new release and everyone was relieved.",
    "I need to remember to water the plants more often.",
    "Had a long call with an old friend, we talked for hours.",
    "The coffee machine at the office broke down again.",
)


def _code(rng: random.Random) -> str:
    return f"{rng.choice('BCDFGHJKLMNPQRSTVWXZ')}{rng.randint(10, 99)}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"


def make_facts(rng: random.Random) -> list[Fact]:
    names = rng.sample(NAMES, 4)
    cities = rng.sample(CITIES, 2)
    codes = [_code(rng) for _ in range(4)]
    nums = rng.sample(range(1000, 9999), 3)
    food, tea, place = rng.choice(FOODS), rng.choice(TEAS), rng.choice(PLACES)
    return [
        Fact(f"My dentist is Dr. {names[0]}.", "Who is my dentist?", names[0],
             f"Dentist: Dr. {names[0]}", "Has a regular dentist"),
        Fact(f"I parked the car on level 3, spot {codes[0]}.", "Where did I park the car?", codes[0],
             f"Car parked on level 3 at spot {codes[0]}", "Parked the car in the multi-storey garage"),
        Fact(f"My sister {names[1]} lives in {cities[0]}.", "Where does my sister live?", cities[0],
             f"Sister {names[1]} lives in {cities[0]}", "Has a sister who lives abroad"),
        Fact(f"The wifi password at the cabin is {codes[1]}.", "What is the wifi password at the cabin?",
             codes[1], f"Cabin wifi password: {codes[1]}", "The cabin has wifi"),
        Fact(f"My bike lock combination is {nums[0]}.", "What is my bike lock combination?", str(nums[0]),
             f"Bike lock code {nums[0]}", "Uses a combination lock for the bike"),
        Fact(f"I found out I am allergic to {food}.", "What am I allergic to?", food,
             f"Allergic to {food}", "Has a food allergy"),
        Fact(f"My manager is called {names[2]}.", "What is my manager called?", names[2],
             f"Manager: {names[2]}", "Has a new manager at work"),
        Fact(f"My favourite tea is {tea}.", "Which tea is my favourite?", tea,
             f"Favourite tea: {tea}", "Likes tea"),
        Fact(f"I keep the spare house key under the {place}.", "Where is the spare house key?", place,
             f"Spare house key is under the {place}", "Keeps a spare house key outside"),
        Fact(f"My gym locker is number {nums[1]}.", "What number is my gym locker?", str(nums[1]),
             f"Gym locker #{nums[1]}", "Has a locker at the gym"),
        Fact(f"My flight to {cities[1]} is {codes[2]}.", f"What is my flight number to {cities[1]}?", codes[2],
             f"Flight to {cities[1]}: {codes[2]}", f"Flying to {cities[1]} soon"),
        Fact(f"My daughter's piano teacher is Ms. {names[3]}.", "Who is my daughter's piano teacher?",
             names[3], f"Daughter's piano teacher: Ms. {names[3]}", "Daughter takes piano lessons"),
        Fact(f"My library card number is {nums[2]}.", "What is my library card number?", str(nums[2]),
             f"Library card no. {nums[2]}", "Has a library card"),
        Fact(f"The storage unit door code is {codes[3]}.", "What is the storage unit door code?", codes[3],
             f"Storage unit code {codes[3]}", "Rents a storage unit"),
    ]


def script(rng: random.Random, facts: list[Fact], turns: int) -> list[str]:
    """User turns: facts spread over the whole conversation (the last ones after the last /new)."""
    slots = sorted(rng.sample(range(turns), len(facts)))
    by_turn = dict(zip(slots, rng.sample(facts, len(facts)), strict=True))
    out = []
    for t in range(turns):
        filler = " ".join(rng.sample(FILLER, rng.randint(2, 5)))
        out.append(f"{filler} By the way, {by_turn[t].said}" if t in by_turn else filler)
    return out


async def run(seed: int, window: int, turns: int, new_every: int, search: str, p_drop: float) -> dict:
    rng = random.Random(seed * 1000 + window)
    facts = make_facts(rng)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(**{
            "agents": {"defaults": {"workspace": tmp, "contextWindowTokens": window,
                                    "maxTokens": min(8192, window // 8)}},
            "memory": {"search": {"embeddingProvider": "none" if search == "keyword" else "auto"}},
        })
        copy_templates(cfg.workspace_path)
        model = LossyModel(facts, seed, p_drop=p_drop)
        runtime = build_runtime(cfg, provider=model)
        for t, text in enumerate(script(rng, facts, turns)):
            await runtime.ask(text)
            if (t + 1) % new_every == 0 and t + 1 < turns:
                await runtime.ask("/new")
        await runtime.aclose(drain_timeout_s=120)
        memory_md = (Path(tmp) / "memory" / "MEMORY.md")
        in_prompt_text = memory_md.read_text(encoding="utf-8") if memory_md.exists() else ""
        index = build_index(cfg)
        places = {"prompt": 0, "findable": 0, "lost": 0}
        lost: list[str] = []
        for fact in facts:
            if fact.answer in in_prompt_text:
                places["prompt"] += 1
                continue
            response = await index.search(fact.question, wait_for_vectors=True)
            if any(fact.answer in r.snippet for r in response.results):
                places["findable"] += 1
            else:
                places["lost"] += 1
                lost.append(fact.question)
        index.close()
    return {"seed": seed, "window": window, **places, "facts": len(facts), "lost_questions": lost,
            "peak_share": model.peak_prompt_tokens / window, "calls": dict(model.calls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--windows", default="8192,16384,65536")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--new-every", type=int, default=25)
    parser.add_argument("--p-drop", type=float, default=0.2, help="chance the model drops a fact's detail")
    parser.add_argument("--search", choices=("keyword", "auto"), default="keyword",
                        help="memory search mode for the findability check (auto: hybrid when installed)")
    parser.add_argument("--in-prompt-goal", type=float, default=0.5, help="goal for the median in-prompt share")
    args = parser.parse_args()
    setup_logging("ERROR")
    started = time.perf_counter()
    print(f"memory retention: {args.seeds} seeds x windows {args.windows}; {args.turns} user turns, "
          f"14 planted facts, /new every {args.new_every}; lossy model p_drop={args.p_drop}, "
          f"no tool call 10%, malformed 10%; search {args.search}")
    print(f"{'window':>7} {'in prompt min/median':>21} {'findable median':>16} {'lost (sum, max/seed)':>21} "
          f"{'peak prompt max':>16} {'no-tool/malformed calls':>24}")
    ok = True
    for window in (int(w) for w in args.windows.split(",")):
        rows = [asyncio.run(run(s, window, args.turns, args.new_every, args.search, args.p_drop))
                for s in range(1, args.seeds + 1)]
        share = [r["prompt"] / r["facts"] for r in rows]
        findable = [r["findable"] / r["facts"] for r in rows]
        lost = [r["lost"] for r in rows]
        peak = max(r["peak_share"] for r in rows)
        bad = sum(v for r in rows for k, v in r["calls"].items() if k.endswith((":no_tool", ":malformed")))
        total = sum(v for r in rows for k, v in r["calls"].items() if ":" not in k and k != "chat")
        window_ok = max(lost) == 0 and peak <= 1.0
        ok = ok and window_ok and statistics.median(share) >= args.in_prompt_goal
        print(f"{window:>7} {min(share):>10.0%} / {statistics.median(share):<8.0%} "
              f"{statistics.median(findable):>16.0%} {sum(lost):>12} / {max(lost):<6} {peak:>16.0%} "
              f"{bad:>12} of {total:<9}")
        for r in rows:
            for question in r["lost_questions"]:
                print(f"        lost (seed {r['seed']}): {question}")
    print(f"goals: lost = 0 on every seed, peak prompt <= 100%, median in-prompt share >= "
          f"{args.in_prompt_goal:.0%}  ->  {'PASS' if ok else 'FAIL'}   ({time.perf_counter() - started:.0f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
