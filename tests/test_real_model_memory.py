"""Memory with a real model, no fakes: the demo model (SmolLM2-135M) behind `python -m llama_cpp.server`
configured as `providers.custom`, driven through the CLI as a user would.

Planted facts in a few turns, `/new`, then: MEMORY.md and HISTORY.md hold no tool-schema or prompt
text, every HISTORY.md entry starts with a `[YYYY-MM-DD HH:MM]` stamp, and every planted fact is found
by `nanobot memory search`. Once with the default tool-call consolidation (the model's answers there
are refused: the facts stay recallable through the archived transcript) and once with the small-model
profile (plain questions). Slow-ish (a real model on the CPU); CI runs them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nanobot.memory import small_profile
from nanobot.memory.consolidator import CONSOLIDATION_SYSTEM, GROUP_NOTE, RETRY_NOTE, SAVE_MEMORY_TOOL
from nanobot.memory.validation import copied_words, schema_text
from tests.conftest import run_cli

FACTS = {
    "Please remember that my favourite colour is teal.": "favourite colour teal",
    "My sister Ana lives in Lisbon.": "sister Ana Lisbon",
}
STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")
FORBIDDEN = "\n".join(
    (schema_text(SAVE_MEMORY_TOOL), CONSOLIDATION_SYSTEM, GROUP_NOTE, RETRY_NOTE, small_profile.INSTRUCTIONS)
)


def _configure(home: Path, api_base: str, *, small: bool) -> None:
    config = {
        "agents": {"defaults": {
            "provider": "custom", "model": "smollm2", "temperature": 0, "maxTokens": 48,
            "contextWindowTokens": 4096, "smallModel": small, "llmMaxRetries": 0,
        }},
        "providers": {"custom": {"apiBase": api_base, "apiKey": "none"}},
        "memory": {"flush": {"enabled": False}, "search": {"embeddingProvider": "none"}},
        "gateway": {"heartbeat": {"enabled": False}},
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")


def _history_entries(text: str) -> list[str]:
    """HISTORY.md paragraphs: an entry starts at a line opening with '[' after a blank line."""
    return [p.strip() for p in re.split(r"\n\s*\n(?=\[)", text) if p.strip()]


def _run_session(home: Path, api_base: str, *, small: bool) -> Path:
    _configure(home, api_base, small=small)
    turns = "\n".join([*FACTS, "/new"]) + "\n"
    result = run_cli("agent", home=home, input_text=turns, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return home / "workspace"


def _check_memory_files(workspace: Path) -> None:
    memory_dir = workspace / "memory"
    for name in ("MEMORY.md", "HISTORY.md"):
        path = memory_dir / name
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        copied, total = copied_words(text, FORBIDDEN, 4)
        assert copied <= 3, f"{name} repeats schema or prompt text ({copied} of {total} words):\n{text}"
        for token in ("<|im_start|>", "<|im_end|>", "<tool_call>", "history_entry", "memory_update"):
            assert token not in text, f"{name} holds {token!r}:\n{text}"
    history = (memory_dir / "HISTORY.md")
    for entry in _history_entries(history.read_text(encoding="utf-8") if history.exists() else ""):
        assert STAMP.match(entry), f"a HISTORY.md entry without a stamp: {entry[:200]!r}"


def _check_recall(home: Path) -> None:
    for fact, query in FACTS.items():
        result = run_cli("memory", "search", query, "--json", home=home, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        found = json.loads(result.stdout)
        blob = json.dumps(found["results"], ensure_ascii=False).lower()
        key = query.split()[-1].lower()  # teal / lisbon
        assert key in blob, f"{fact!r} not recallable with `memory search {query}`: {result.stdout[:1500]}"


@pytest.mark.timeout(600)
def test_tool_call_consolidation_with_the_demo_model(home: Path, llama_server) -> None:
    workspace = _run_session(home, llama_server.api_base, small=False)
    _check_memory_files(workspace)
    _check_recall(home)


@pytest.mark.timeout(600)
def test_small_model_profile_with_the_demo_model(home: Path, llama_server) -> None:
    workspace = _run_session(home, llama_server.api_base, small=True)
    _check_memory_files(workspace)
    history = (workspace / "memory" / "HISTORY.md")
    assert history.exists() and _history_entries(history.read_text(encoding="utf-8")), (
        "the small-model profile wrote no history entry")
    _check_recall(home)
