"""Consolidation by a real model: how often the demo model's memory output is accepted, refused (by
rule) or retried, whether anything refused reached the memory files, and whether a planted fact
became unrecallable.

The demo model (SmolLM2-135M) runs behind `python -m llama_cpp.server` (tests/fakes/llama_server.py)
as `providers.custom`. Each run is a fresh workspace: a session of two planted facts (user sentences
and short assistant replies), `/new`, the background consolidation, then `memory search` (keyword
mode) for each fact. Goals: no refused text in MEMORY.md/HISTORY.md, every HISTORY.md entry stamped,
every planted fact recallable.

    python benchmarks/consolidation_quality.py [--runs 20] [--profile tools|small|both]
                                              [--collect tests/data/consolidation_outputs.jsonl]

`--collect` appends the model's raw answers (with the rule that refused each one, or null) to the
corpus the validation unit tests replay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")

from nanobot.memory import small_profile  # noqa: E402
from nanobot.memory.consolidator import (  # noqa: E402
    CONSOLIDATION_SYSTEM,
    SAVE_MEMORY_TOOL,
    echo_sources,
    normalise_save_memory_args,
)
from nanobot.memory.transcript import render_transcript  # noqa: E402
from nanobot.memory.validation import (  # noqa: E402
    Refusal,
    check_history_entry,
    check_memory_update,
    copied_words,
    schema_text,
)

FACTS = [
    ("Please remember that my favourite colour is teal.", "favourite colour", "teal"),
    ("My sister Ana lives in Lisbon.", "sister Ana", "lisbon"),
    ("I work as a nurse at the Porto hospital.", "work nurse hospital", "porto"),
    ("My dog is called Biscuit.", "dog called", "biscuit"),
    ("I am allergic to peanuts.", "allergic", "peanuts"),
    ("My birthday is on 12 March.", "birthday", "march"),
    ("I drive a blue Volvo.", "drive car", "volvo"),
    ("My son Tomas plays the violin.", "son Tomas plays", "violin"),
    ("I am learning Japanese on Tuesdays.", "learning Tuesdays", "japanese"),
    ("My favourite food is lasagne.", "favourite food", "lasagne"),
]
REPLIES = ["Noted!", "Got it, I will remember that.", "Thanks for telling me."]
FORBIDDEN = "\n".join((schema_text(SAVE_MEMORY_TOOL), CONSOLIDATION_SYSTEM, small_profile.INSTRUCTIONS))
STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")


def _rule(result: object) -> str | None:
    return result.rule if isinstance(result, Refusal) else None


def corpus_records(profile: str, chunk: list[dict[str, Any]], previous: str, calls: list[tuple[Any, Any]],
                   start: str) -> list[dict[str, Any]]:
    """The raw memory answers of one run, each with the rule our validation refuses it by."""
    rendered = render_transcript(chunk)
    transcript = rendered + "\n" + (small_profile.quoted_user_text(chunk) if profile == "small" else rendered)
    sources = echo_sources(transcript, small_model=profile == "small")
    from datetime import datetime

    when = datetime.fromisoformat(start)
    out = []
    for messages, response in calls:
        base = {"profile": profile, "transcript": transcript, "previous_memory": previous, "chunk_start": start}
        asked = str(messages[-1].get("content") or "")
        if profile == "small":
            text = response.content or ""
            if small_profile.SUMMARY_QUESTION in asked:
                summary = small_profile.parse_summary(text)
                verdict = summary if isinstance(summary, Refusal) else check_history_entry(summary, sources, when)
                out.append({**base, "field": "small_summary", "text": text, "expected": _rule(verdict)})
            elif small_profile.FACTS_QUESTION in asked:
                facts = small_profile.parse_facts(text)
                verdict = check_memory_update((previous + "\n" + "\n".join(facts)).strip(), previous, sources,
                                              budget_chars=12_000) if facts else None
                out.append({**base, "field": "small_facts", "text": text, "expected": _rule(verdict)})
            continue
        call = next((c for c in response.tool_calls if c.name == "save_memory"), None)
        if call is None:
            continue
        raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
        args = normalise_save_memory_args(call.arguments)
        if args is None:
            out.append({**base, "field": "save_memory_arguments", "text": raw, "expected": "broken"})
            continue
        out.append({**base, "field": "history_entry", "text": args.history_entry,
                    "expected": _rule(check_history_entry(args.history_entry, sources, when))})
        if args.memory_update is not None:
            verdict = check_memory_update(args.memory_update, previous, sources, budget_chars=12_000)
            out.append({**base, "field": "memory_update", "text": args.memory_update, "expected": _rule(verdict)})
    return out


async def one_run(api_base: str, profile: str, seed: int, home: Path) -> dict[str, Any]:
    from nanobot.agent.factory import build_runtime
    from nanobot.config.loader import load_config
    from nanobot.config.templates import copy_templates
    from nanobot.memory.index import build_index

    rng = random.Random(seed)
    facts = rng.sample(FACTS, 2)
    config_data = {
        "agents": {"defaults": {"workspace": str(home / "workspace"), "provider": "custom", "model": "smollm2",
                                "temperature": 0, "maxTokens": 256, "contextWindowTokens": 4096,
                                "smallModel": profile == "small", "llmMaxRetries": 0}},
        "providers": {"custom": {"apiBase": api_base, "apiKey": "none"}},
        "memory": {"flush": {"enabled": False}, "search": {"embeddingProvider": "none"}},
        "gateway": {"heartbeat": {"enabled": False}},
    }
    (home / "config.json").write_text(json.dumps(config_data), encoding="utf-8")
    config = load_config(home / "config.json")
    copy_templates(config.workspace_path)
    runtime = build_runtime(config)
    agent = runtime.agent
    calls: list[tuple[Any, Any]] = []
    chat = agent.provider.chat

    async def recording(messages, tools=None, **kw):  # noqa: ANN001, ANN003, ANN202
        response = await chat(messages, tools, **kw)
        calls.append((messages, response))
        return response

    agent.provider.chat = recording  # type: ignore[method-assign]
    session = agent.sessions.get("cli:direct")
    now = runtime.memory.now() - timedelta(minutes=10)
    chunk = []
    for i, (said, _query, _key) in enumerate(facts):
        chunk.append({"role": "user", "content": said, "timestamp": (now + timedelta(minutes=2 * i)).isoformat()})
        chunk.append({"role": "assistant", "content": rng.choice(REPLIES),
                      "timestamp": (now + timedelta(minutes=2 * i, seconds=5)).isoformat()})
    agent.sessions.append(session, *chunk)
    previous = runtime.memory.read_memory()
    await runtime.ask("/new")
    await runtime.aclose(drain_timeout_s=600)
    outcomes = Counter(agent.lifecycle.consolidator.outcomes)
    memory_dir = config.workspace_path / "memory"
    texts = {n: (memory_dir / n).read_text(encoding="utf-8") if (memory_dir / n).exists() else ""
             for n in ("MEMORY.md", "HISTORY.md")}
    before = set(previous.splitlines())  # the onboarding template is not the model's output
    leaked = {n: copied_words("\n".join(x for x in t.splitlines() if x not in before), FORBIDDEN, 4)[0]
              for n, t in texts.items()}
    entries = [p for p in re.split(r"\n\s*\n(?=\[)", texts["HISTORY.md"]) if p.strip()]
    unstamped = sum(1 for e in entries if not STAMP.match(e.strip()))
    index = build_index(config)
    lost = []
    try:
        for said, query, key in facts:
            found = await index.search(query, wait_for_vectors=True)
            blob = json.dumps(found.to_json(), ensure_ascii=False).lower()
            in_files = key in (texts["MEMORY.md"] + texts["HISTORY.md"]).lower()
            if key not in blob:
                lost.append(said)
            outcomes["fact_in_memory_files" if in_files else "fact_only_in_archive"] += 1
    finally:
        index.close()
    return {"outcomes": outcomes, "leaked": leaked, "unstamped": unstamped, "lost": lost,
            "corpus": corpus_records(profile, chunk, previous, calls, chunk[0]["timestamp"])}


def report(profile: str, results: list[dict[str, Any]], elapsed_s: float) -> bool:
    total: Counter[str] = Counter()
    for r in results:
        total.update(r["outcomes"])
    runs = len(results)
    accepted, failed = total["accepted"], total["failed"]
    refused = {k.split(":", 1)[1]: v for k, v in sorted(total.items()) if k.startswith("refused:")}
    leaked = sum(1 for r in results if any(r["leaked"].values()))
    unstamped = sum(r["unstamped"] for r in results)
    lost = [f for r in results for f in r["lost"]]
    print(f"\n== profile {profile}: {runs} consolidations by the demo model ({elapsed_s:.0f} s)")
    print(f"accepted {accepted}, failed after retry {failed}, retried {total['retried']}")
    print(f"refused answers by rule: {refused or 'none'}")
    print(f"planted facts in MEMORY.md/HISTORY.md: {total['fact_in_memory_files']}, only in the archived "
          f"transcript: {total['fact_only_in_archive']}")
    ok = True
    for goal, value in (("runs with schema/prompt text in MEMORY.md or HISTORY.md", leaked),
                        ("HISTORY.md entries without a stamp", unstamped),
                        ("planted facts unrecallable by memory search", len(lost))):
        verdict = "PASS" if value == 0 else "FAIL"
        ok &= value == 0
        print(f"goal: 0 {goal}: {value} -> {verdict}")
    for fact in lost:
        print(f"  unrecallable: {fact}")
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--profile", choices=["tools", "small", "both"], default="both")
    parser.add_argument("--collect", type=Path, default=None)
    args = parser.parse_args()
    from tests.fakes.llama_server import LlamaServer

    profiles = ["tools", "small"] if args.profile == "both" else [args.profile]
    ok = True
    with tempfile.TemporaryDirectory() as tmp, LlamaServer(log_path=Path(tmp) / "server.log") as server:
        for profile in profiles:
            started = time.monotonic()
            results = []
            for seed in range(args.runs):
                home = Path(tmp) / f"{profile}-{seed}"
                home.mkdir()
                os.environ["NANOBOT_HOME"] = str(home)
                results.append(await one_run(server.api_base, profile, seed, home))
                print(f"  run {seed}: {dict(results[-1]['outcomes'])}", flush=True)
            ok &= report(profile, results, time.monotonic() - started)
            if args.collect:
                with args.collect.open("a", encoding="utf-8") as fh:
                    for r in results:
                        for record in r["corpus"]:
                            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
