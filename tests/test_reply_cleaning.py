"""Replies are cleaned before they are stored or sent: runtime-block echoes, chat-template tokens,
empty answers (unit rules, then through a real turn against the fake LLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanobot.agent.context import RUNTIME_HEADER
from nanobot.agent.reply import clean_reply
from nanobot.bus.events import NO_ANSWER_REPLY
from nanobot.scheduler.heartbeat import is_heartbeat_ok
from tests.conftest import run_cli

ECHO = (
    f"{RUNTIME_HEADER}\nTime: 2026-11-26 09:00 (Thursday), UTC (UTC+00:00)\n"
    "Channel: cli | Chat: direct | Sender: user\n\nTeal is a lovely colour."
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (ECHO, "Teal is a lovely colour."),
        # garbled header and date, as the demo model produced it
        (
            "[Runtime context: metadata for this, not instructions\nTime: 2062-13-45 99:00\n"
            "Channel: cli | Chat: direct\nHello!",
            "Hello!",
        ),
        # header-less echo: the Channel | Chat line gives it away
        ("Time: 2026-11-26 09:00\nChannel: telegram | Chat: 42\n\nSure.", "Sure."),
        # wrapped in brackets, as the demo model behind llama_cpp.server echoed it in cron runs
        (
            "[Time: 2026-11-27 23:59 (Thursday), Europe/Berlin (UTC+01:00)\n"
            "Channel: telegram | Chat: 555 | Sender: user]\n\nHello!",
            "Hello!",
        ),
        ("[Time: 2026-11-27 23:59\nChannel: telegram | Chat: 555 | Sender: 42]", ""),
        # a tool call written out as text by a small model (the function-calling template's markup)
        ('functions.list_dir:\n{"path": "file.txt"}', ""),
        ('functions.read_file:\n{"path": "a"}\nThe file says hi.', "The file says hi."),
        ("Use functions.x: carefully", "Use functions.x: carefully"),
        # the whole reply is the echo
        (f"{RUNTIME_HEADER}\nTime: 2026-11-26 09:00\nChannel: cli | Chat: direct", ""),
        ("<|im_start|>assistant\nHi there<|im_end|>", "Hi there"),
        ("<|start_header_id|>assistant<|end_header_id|>\nHi<|eot_id|>", "Hi"),
        ("[INST] ok [/INST] Done.</s>", "ok  Done."),
        ("<|im_end|>", ""),
        (None, ""),
        # ordinary answers that merely look a bit like metadata stay untouched
        ("Date: Monday\nTime: 10:00\nRoom 4", "Date: Monday\nTime: 10:00\nRoom 4"),
        ("The runtime of the film is 2 hours.", "The runtime of the film is 2 hours."),
    ],
)
def test_clean_reply_rules(raw: str | None, expected: str) -> None:
    assert clean_reply(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # the demo model's habit: the block's Time line alone, bracketed, whole or cut short
        ("[Time: 2026-11-26 09:00 (Thursday), UTC (UTC+00:00)]\n\nThe chat was about a chatbot.",
         "The chat was about a chatbot."),
        ("[Time: 2026-11-26 09:00]\nTeal.", "Teal."),
        # asked for the time, the line is the answer: kept when nothing follows it
        ("Time: 2026-11-26 09:00 (Thursday), UTC (UTC+00:00)", "Time: 2026-11-26 09:00 (Thursday), UTC (UTC+00:00)"),
        # a time of its own, or too short a start to be a copy, is the answer's
        ("Time: 10:00\nRoom 4", "Time: 10:00\nRoom 4"),
        ("Time: 2026\nhi", "Time: 2026\nhi"),
    ],
)
def test_a_copied_time_line_of_the_prompt_is_an_echo(raw: str, expected: str) -> None:
    """4 of the demo model's first 6 replies began with the prompt's Time line, which reached the
    user and the session file (later prompts then repeated it)."""
    assert clean_reply(raw, ECHO) == expected


def test_no_answer_is_silence_for_the_heartbeat() -> None:
    assert is_heartbeat_ok(NO_ANSWER_REPLY)
    assert not is_heartbeat_ok("Your backup failed.")


def _session_lines(home: Path) -> list[dict]:
    path = home / "workspace" / "sessions" / "cli_direct.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_echoed_runtime_block_never_reaches_user_or_session(home: Path, fake_llm, make_config) -> None:
    make_config()
    fake_llm.push(ECHO, f"{RUNTIME_HEADER}\nTime: 2026-11-26\nChannel: cli | Chat: direct")
    first = run_cli("agent", "-m", "What colour do I like?", home=home)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Teal is a lovely colour.\n"
    second = run_cli("agent", "-m", "And now?", home=home)
    assert second.returncode == 0, second.stderr
    assert second.stdout == NO_ANSWER_REPLY + "\n"
    assert "answer was empty after cleaning" in second.stderr
    stored = [m["content"] for m in _session_lines(home) if m.get("role") == "assistant"]
    assert stored == ["Teal is a lovely colour.", NO_ANSWER_REPLY]
    # the second prompt's history holds the cleaned reply, no echo
    history = json.dumps(fake_llm.requests[-1]["messages"][1:-1])
    assert "Teal is a lovely colour." in history
    assert "Runtime context" not in history


def test_echoed_memory_facts_of_the_runtime_block_are_cleaned_too(home: Path, fake_llm, make_config) -> None:
    """The demo model echoed the whole runtime block, with the MEMORY.md facts it carries for a long
    file ("Relevant facts from memory/MEMORY.md (not shown above):" and the facts): the header and
    metadata went, the facts reached the user and the session."""
    make_config(**{"agents.defaults.memoryMaxChars": 600})
    memory = home / "workspace" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    facts = [
        f"- Filler fact number {i}: the user once mentioned item {i} of their postcards." for i in range(60)
    ]
    facts[30] = "- The user's sister Ana lives in Lisbon and collects postcards."
    (memory / "MEMORY.md").write_text("# Memory\n\n" + "\n".join(facts) + "\n", encoding="utf-8")

    def echo_then_answer(body: dict) -> str:
        runtime = str(body["messages"][-1]["content"]).split("\n\n")[0]
        assert "Relevant facts from memory/MEMORY.md" in runtime  # the block carries facts here
        return runtime.replace("- The user's", "The user's") + "\nAna lives in Lisbon."

    fake_llm.responder = echo_then_answer
    result = run_cli("agent", "-m", "Where does my sister Ana live, the one with the postcards?", home=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Ana lives in Lisbon.\n"
    stored = [m["content"] for m in _session_lines(home) if m.get("role") == "assistant"]
    assert stored == ["Ana lives in Lisbon."]


def test_a_reworded_memory_label_after_an_echoed_block_goes_with_the_facts() -> None:
    """The demo model changed the label ("…from my memory/MEMORY.md…"): cleaning stopped there."""
    sent = (
        f"{RUNTIME_HEADER}\nTime: 2026-11-27 06:00 (Friday), UTC (UTC+00:00)\nChannel: cli | Chat: direct\n"
        "Relevant facts from memory/MEMORY.md (not shown above):\n- Filler fact number 9: postcards.\n\n"
        "What do I collect?"
    )
    raw = (
        f"{RUNTIME_HEADER}\nChannel: cli | Chat: direct\nRelevant facts from my memory/MEMORY.md (not shown above):\n"
        "Filler fact number 9: postcards.\nYou collect postcards."
    )
    assert clean_reply(raw, sent) == "You collect postcards."
