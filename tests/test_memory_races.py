"""A forget, or the owner's own edit of MEMORY.md, made while a memory write is in flight (a
consolidation, a flush, a /new session note) is not undone by that write when it lands: the
consolidation's rewording of a removed line, and a note's bullet saying a forgotten fact, stay out.
Real runtime, fake LLM on 127.0.0.1."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

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


async def test_a_forget_during_a_consolidation_is_not_undone_by_its_rewording(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """The owner asked to forget their PIN (edit_file removed it) while another chat's consolidation,
    whose answer still held it reworded ("- Bank card PIN: 4821"), ran: the PIN came back into
    MEMORY.md, and so into every private chat's prompt."""
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
        await runtime.ask("Please forget my bank card PIN", session_key="cli:direct")
        assert "4821" not in memory_md.read_text()
        await runtime.settle(20)
    finally:
        await runtime.aclose()
    assert "4821" not in memory_md.read_text() and "- Likes green tea" in memory_md.read_text()
