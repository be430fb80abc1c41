"""How close the table-free token estimate (nanobot.providers.tokens) comes to cl100k, by kind of text.

Texts: English prose (README.md and docs/*.md by paragraph groups, and LoCoMo dialogue turns when
/work/shared/data/locomo10.json is present), Python code (nanobot/ in ~1,500-character pieces),
JSON tool schemas (each of the agent's built-in tools, and the whole list as sent), and
Chinese/Japanese/Korean (tests/data/cjk_paragraphs.txt). For each kind it prints the ratio
estimate / cl100k per text (min, 5th percentile, median, max), over all texts together, and how
many texts come out below cl100k; then the cost of the estimate and of tiktoken per 1,000 texts.

    python benchmarks/token_estimate.py

Goal: no kind below 1.0 over all its texts together (budgeting never trusts an under-count), and
every kind's total within 1.4 (the window is not wasted).
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cold_start import machine  # noqa: E402
from nanobot.providers.tokens import configure_offline_tokenizer, estimate_tokens  # noqa: E402

LOCOMO = Path("/work/shared/data/locomo10.json")
GOAL_MIN_TOTAL = 1.0
GOAL_MAX_TOTAL = 1.4


def pieces(text: str, size: int = 1500) -> list[str]:
    out, current = [], ""
    for para in re.split(r"\n\s*\n", text):
        if current and len(current) + len(para) > size:
            out.append(current)
            current = ""
        current += para + "\n\n"
    return out + ([current] if current.strip() else [])


def english() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    text += "".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "docs").glob("*.md")))
    texts = pieces(text)
    if LOCOMO.exists():
        conversation = json.loads(LOCOMO.read_text(encoding="utf-8"))[0]["conversation"]
        turns = [
            f"{turn['speaker']}: {turn['text']}"
            for key, value in conversation.items()
            if key.startswith("session_") and isinstance(value, list)
            for turn in value
        ]
        texts += pieces("\n\n".join(turns), 800)
    return texts


def code() -> list[str]:
    files = sorted((REPO / "nanobot").rglob("*.py"))
    return pieces("".join(f.read_text(encoding="utf-8") for f in files))


async def _schemas() -> list[dict]:
    from nanobot.agent.factory import build_runtime
    from nanobot.bus.queue import MessageBus
    from nanobot.config.schema import Config

    with tempfile.TemporaryDirectory() as tmp:
        config = Config(
            agents={"defaults": {"workspace": tmp, "provider": "custom", "model": "m"}},
            providers={"custom": {"apiBase": "http://127.0.0.1:9/v1"}},
        )
        runtime = build_runtime(config, MessageBus())
        try:
            return runtime.agent.tools.schemas()
        finally:
            await runtime.aclose(0.1)


def schemas() -> list[str]:
    listed = asyncio.run(_schemas())
    dump = [json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in listed]
    return [*dump, json.dumps(listed, ensure_ascii=False, separators=(",", ":"))]


def cjk() -> list[str]:
    text = (REPO / "tests" / "data" / "cjk_paragraphs.txt").read_text(encoding="utf-8")
    return [p for p in text.split("\n\n") if p.strip()]


def main() -> int:
    from nanobot.logs import setup_logging

    setup_logging("WARNING")
    configure_offline_tokenizer()  # tiktoken reads the BPE file bundled with litellm, offline
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base")
    print(f"machine: {machine()}")
    kinds = {"English": english(), "code": code(), "tool schemas": schemas(), "CJK": cjk()}
    checks = []
    for kind, texts in kinds.items():
        exact = [len(encoding.encode(t, disallowed_special=())) for t in texts]
        guess = [estimate_tokens(t) for t in texts]
        ratios = sorted(g / max(e, 1) for g, e in zip(guess, exact, strict=True))
        total = sum(guess) / sum(exact)
        under = sum(r < 1 for r in ratios)
        print(
            f"{kind:12} {len(texts):4} texts, {sum(exact):7} tokens: ratio min {ratios[0]:.2f}, "
            f"p5 {ratios[len(ratios) // 20]:.2f}, median {statistics.median(ratios):.2f}, "
            f"max {ratios[-1]:.2f}; all together {total:.2f}; below cl100k: {under}"
        )
        checks.append(
            (
                f"{kind}: all together {total:.2f} in [{GOAL_MIN_TOTAL}, {GOAL_MAX_TOTAL}]",
                GOAL_MIN_TOTAL <= total <= GOAL_MAX_TOTAL,
            )
        )
    sample = [t for texts in kinds.values() for t in texts][:1000]
    start = time.process_time()
    for text in sample:
        estimate_tokens(text)
    ours = time.process_time() - start
    start = time.process_time()
    for text in sample:
        encoding.encode(text, disallowed_special=())
    theirs = time.process_time() - start
    print(f"CPU for {len(sample)} texts: estimate {ours * 1000:.0f} ms, tiktoken {theirs * 1000:.0f} ms")
    for text, ok in checks:
        print(f"goal: {text}: {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
