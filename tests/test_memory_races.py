"""A forget, or the owner's own edit of MEMORY.md, made while a memory write is in flight (a
consolidation, a flush, a /new session note) is not undone by that write when it lands: the
consolidation's rewording of a removed line, and a note's bullet saying a forgotten fact, stay out.
Real runtime, fake LLM on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from nanobot.memory.memory_merge import three_way_merge
from nanobot.memory.store import MemoryStore
from tests.agent_helpers import make_runtime
from tests.fakes.llm_server import FakeLLMServer, Reply

PIN = "- Bank card PIN is 4821"
BASE = "# Facts\n" + PIN + "\n- Lives in Lyon\n- Has a cat named Tom\n- Works as a nurse\n- Likes jazz\n"


def test_a_removed_line_reworded_by_a_concurrent_consolidation_stays_removed() -> None:
    ours = BASE.replace(PIN, "- Bank card PIN: 4821").replace("- Lives in Lyon", "- Lives in Lyon, France")
    theirs = BASE.replace(PIN + "\n", "").replace("- Lives in Lyon", "- Lives in Paris")  # the owner's edit
    merged = three_way_merge(BASE, ours + "- Likes green tea\n", theirs)
    assert "4821" not in merged and "Lyon" not in merged
    assert "- Lives in Paris" in merged and "- Likes green tea" in merged and "- Has a cat named Tom" in merged
    # a new fact that only shares a word or two with a removed one is no rewording of it
    kept = three_way_merge(BASE, ours + "- Sister Ann visits Lyon every May\n", theirs)
    assert "- Sister Ann visits Lyon every May" in kept
    # nor is one beside the line it shares words with, kept as it was (a review catch)
    mother = three_way_merge(BASE, BASE + "- Mother lives in Lyon\n", theirs)
    assert "- Mother lives in Lyon" in mother and "- Lives in Paris" in mother


def test_notes_written_after_a_forget_leave_the_forgotten_fact_out(tmp_path: Path) -> None:
    memory = MemoryStore(tmp_path)
    memory.write_memory(BASE)
    before = memory.forget_count
    memory.add_forgotten([PIN])  # forgotten while the note's model call ran
    memory.append_daily("- User's bank card PIN is 4821\n- Booked the dentist", forgotten_since=before)
    note = memory.write_session_note("bank", "# Bank\n\n- The bank card PIN is 4821\n- New card ordered", None, before)
    daily = memory.read(memory.daily_path().name)
    assert "4821" not in daily and "Booked the dentist" in daily
    assert "4821" not in note.read_text() and "New card ordered" in note.read_text()
    # told again after the forget: the note the next model call writes keeps it
    memory.append_daily("- User's bank card PIN is 4821 again", forgotten_since=memory.forget_count)
    assert "4821 again" in memory.read(memory.daily_path().name)


@pytest.mark.parametrize("how", ["asked", "by hand"])
async def test_a_forget_during_a_consolidation_is_not_undone_by_its_rewording(
    make_config, fake_llm: FakeLLMServer, how: str  # noqa: ANN001
) -> None:
    """The owner asked to forget their PIN (edit_file removed it), or deleted it from MEMORY.md
    themselves, while another chat's consolidation, whose answer still held it reworded ("- Bank
    card PIN: 4821"), ran: the PIN came back into MEMORY.md, and so into every private chat's
    prompt (by hand also once the validation had put the original line back word for word)."""
    model_memory = BASE.replace(PIN, "- Bank card PIN: 4821") + "- Likes green tea\n"

    def respond(body: dict[str, Any]) -> Reply:
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        if "save_memory" in tools:
            time.sleep(2.0)  # the forget lands meanwhile
            entry = "[2026-11-29 11:00] The user said they like green tea and sent a long list of words."
            return Reply(content=None, tool_calls=[
                {"name": "save_memory", "arguments": {"history_entry": entry, "memory_update": model_memory}}])
        if "forget my bank card PIN" in json.dumps(body["messages"][-1]):
            edit = {"path": "memory/MEMORY.md", "old_text": PIN + "\n", "new_text": ""}
            return Reply(content=None, tool_calls=[{"name": "edit_file", "arguments": edit}])
        return Reply(content="ok")

    fake_llm.responder = respond
    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 6144, "agents.defaults.maxTokens": 1024,
                               "memory.flush.enabled": False})
    memory_md = config.workspace_path / "memory" / "MEMORY.md"
    memory_md.parent.mkdir(parents=True, exist_ok=True)
    memory_md.write_text(BASE)
    runtime = make_runtime(config)
    try:
        await runtime.ask("I like green tea. " + " ".join(f"word{i}" for i in range(900)), session_key="telegram:555")
        assert runtime.agent.lifecycle.pending()  # its consolidation runs in the background
        if how == "asked":
            await runtime.ask("Please forget my bank card PIN", session_key="cli:direct")
        else:
            await asyncio.sleep(0.5)
            memory_md.write_text(BASE.replace(PIN + "\n", ""))
        assert "4821" not in memory_md.read_text()
        await runtime.settle(20)
    finally:
        await runtime.aclose()
    assert "4821" not in memory_md.read_text() and "- Likes green tea" in memory_md.read_text()


async def test_a_forget_while_new_is_consolidated_stays_out_of_the_session_note(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """/new consolidates first, then writes the session note: a forget that landed during the
    consolidation cleaned the notes there were, and the note written next held the PIN (a review
    catch: the count was taken when the note's own call began)."""

    def respond(body: dict[str, Any]) -> Reply:
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        if "save_memory" in tools:
            entry = "[2026-11-29 11:00] The user talked about their bank card and ordered a new card."
            return Reply(content=None, tool_calls=[
                {"name": "save_memory", "arguments": {"history_entry": entry, "memory_update": BASE}}], delay_s=2.0)
        if "save_session_note" in tools:
            note = {"slug": "bank", "title": "Bank", "summary": "- The bank card PIN is 4821\n- New card ordered"}
            return Reply(content=None, tool_calls=[{"name": "save_session_note", "arguments": note}])
        if "forget my bank card PIN" in json.dumps(body["messages"][-1]):
            edit = {"path": "memory/MEMORY.md", "old_text": PIN + "\n", "new_text": ""}
            return Reply(content=None, tool_calls=[{"name": "edit_file", "arguments": edit}])
        return Reply(content="ok")

    fake_llm.responder = respond
    config, _ = make_config(**{"memory.flush.enabled": False})
    memory_dir = config.workspace_path / "memory"
    memory_dir.mkdir(parents=True, exist_ok=True)
    (memory_dir / "MEMORY.md").write_text(BASE)
    runtime = make_runtime(config)
    try:
        for text in ("My bank card PIN is 4821", "I ordered a new card", "Thanks"):
            await runtime.ask(text, session_key="telegram:555")
        await runtime.ask("/new", session_key="telegram:555")
        await asyncio.sleep(0.5)
        await runtime.ask("Please forget my bank card PIN", session_key="cli:direct")
        await runtime.settle(20)
    finally:
        await runtime.aclose()
    notes = "".join(path.read_text() for path in sorted(memory_dir.glob("2*.md")))
    assert "New card ordered" in notes and "4821" not in notes
    assert "4821" not in (memory_dir / "MEMORY.md").read_text()
