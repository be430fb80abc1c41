"""Memory lifecycle through the real litellm and the fake server: consolidation, flush, /new, privacy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from nanobot.agent.factory import build_runtime
from nanobot.config.schema import Config
from nanobot.config.templates import copy_templates
from nanobot.memory.consolidator import normalise_save_memory_args
from tests.fakes.llm_server import FakeLLMServer, RawArguments
from tests.fakes.memory_llm import MemoryScript

PAD = " ".join(["lorem"] * 120)  # ~120 tokens of filler per user message
# room for a few turns beside the system prompt and tools (token estimates lean ~10% high)
SMALL_WINDOW = {"agents.defaults.contextWindowTokens": 4608, "agents.defaults.maxTokens": 512}


def session_lines(workspace: Path, key: str = "cli_direct") -> list[dict]:
    path = workspace / "sessions" / f"{key}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_metadata(workspace: Path, key: str = "cli_direct") -> dict:
    meta = [x for x in session_lines(workspace, key) if x.get("_type") == "metadata"]
    return meta[-1] if meta else {}


@pytest.fixture
def agent_factory(make_config, script: MemoryScript):  # noqa: ANN001
    agents = []

    def _make(**overrides):  # noqa: ANN003, ANN202
        config, _ = make_config(**{**SMALL_WINDOW, **overrides})
        copy_templates(config.workspace_path)
        runtime = build_runtime(config)
        agents.append(runtime)
        return runtime

    yield _make
    for runtime in agents:
        runtime.agent.sessions.close()


async def chat(agent, turns: int, start: int = 0, key: str = "cli:direct", **kw) -> None:  # noqa: ANN001
    for i in range(start, start + turns):
        await agent.ask(f"turn {i} FACT-{i}: the user likes item {i}. {PAD}", session_key=key, **kw)


async def test_consolidation_trigger_and_user_turn_boundary(agent_factory, script: MemoryScript) -> None:
    agent = agent_factory(**{"memory.flush.enabled": False})
    await chat(agent, 14)
    await agent.agent.drain(30)
    ws = agent.config.workspace_path
    meta = last_metadata(ws)
    messages = [x for x in session_lines(ws) if "role" in x]
    pointer = meta["last_consolidated"]
    assert script.calls["consolidate"] >= 1
    assert 0 < pointer < len(messages)
    assert messages[pointer]["role"] == "user"  # the kept tail starts at a user turn
    memory_md = (ws / "memory" / "MEMORY.md").read_text()
    history = (ws / "memory" / "HISTORY.md").read_text()
    consolidated_facts = [f"FACT-{i}:" for i in range(pointer // 2)]
    assert all(f in memory_md for f in consolidated_facts)
    assert all(f in history for f in consolidated_facts)
    estimate = agent.agent.estimator(agent.agent.sessions.get("cli:direct"), True)
    assert estimate <= agent.agent.lifecycle.budget_tokens


def test_save_memory_argument_forms() -> None:
    as_dict = {"history_entry": "[2026-01-01 10:00] A.", "memory_update": "# M\n- x"}
    assert normalise_save_memory_args(as_dict).memory_update == "# M\n- x"
    assert normalise_save_memory_args(json.dumps(as_dict)).history_entry.startswith("[2026")
    assert normalise_save_memory_args([as_dict]).memory_update == "# M\n- x"
    assert normalise_save_memory_args(["[2026-01-01 10:00] B.", "# N"]).memory_update == "# N"
    assert normalise_save_memory_args({"history_entry": "x", "memory_update": {"a": 1}}).memory_update == '{"a": 1}'
    assert normalise_save_memory_args("not json") is None
    assert normalise_save_memory_args({"memory_update": "only"}) is None


async def test_save_memory_arguments_as_json_string_over_http(agent_factory, fake_llm) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    memory = agent.memory
    fake_llm.responder = None
    fake_llm.push({"content": None, "tool_calls": [{"name": "save_memory", "arguments": json.dumps(
        {"history_entry": "[2026-02-03 04:05] Talked about a JSON string.",
         "memory_update": "# M\n- FACT-9: json string"})}]})
    ok = await agent.agent.lifecycle.consolidator.consolidate([{"role": "user", "content": "FACT-9: json string"}],
                                                        private=True)
    assert ok
    assert "FACT-9: json string" in memory.read_memory()
    forced = fake_llm.requests[-1]["tool_choice"]
    assert forced == {"type": "function", "function": {"name": "save_memory"}}


async def test_save_memory_arguments_as_a_json_list_over_http(agent_factory, fake_llm) -> None:  # noqa: ANN001
    """A server that sends the arguments as a list of one object (contract A5: accepted) had them
    refused: the list reached the decoder as its Python form, so no consolidation ever succeeded."""
    agent = agent_factory(**{"memory.flush.enabled": False})
    fake_llm.responder = None
    entry = "[2026-02-03 04:05] Talked about the shopping list for the weekend market."
    arguments = RawArguments([{"history_entry": entry, "memory_update": "# M\n- FACT-10: a list"}])
    fake_llm.push({"content": None, "tool_calls": [{"name": "save_memory", "arguments": arguments}]})
    ok = await agent.agent.lifecycle.consolidator.consolidate([{"role": "user", "content": "FACT-10: a list"}],
                                                        private=True)
    assert ok
    assert "FACT-10: a list" in agent.memory.read_memory()


async def test_no_tool_call_leaves_pointer_then_raw_archive_after_three_failures(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    script.fail_consolidation = 100
    await chat(agent, 12)
    await agent.agent.drain(30)
    ws = agent.config.workspace_path
    history = (ws / "memory" / "HISTORY.md")
    calls_before = script.calls["consolidate"]
    assert calls_before >= 3
    meta = last_metadata(ws)
    assert meta.get("last_consolidated", 0) > 0  # moved only by the raw archive
    text = history.read_text()
    assert "[raw archive: consolidation failed 3 times" in text
    assert "FACT-0:" in text  # the raw excerpt keeps what the user said
    assert not (ws / "memory" / "MEMORY.md").read_text().count("FACT-")


async def test_single_failure_keeps_pointer(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    session = agent.agent.sessions.get("cli:direct")
    await chat(agent, 2)
    await agent.agent.drain(10)
    script.fail_consolidation = 2  # the answer and its retry: one failed attempt
    ok = await agent.agent.lifecycle._consolidate_range(session, 0, 2, False)
    assert ok is False
    assert session.last_consolidated == 0
    assert last_metadata(agent.config.workspace_path)["consolidation_failures"] == 1


async def test_flush_once_per_cycle_and_no_reply(agent_factory, script, make_config) -> None:  # noqa: ANN001
    agent = agent_factory()
    ws = agent.config.workspace_path
    session = agent.agent.sessions.get("cli:direct")
    for i in range(20):
        await chat(agent, 1, start=i)
        await agent.agent.drain(30)
        if script.calls["flush"]:
            break
    assert script.calls["flush"] == 1
    assert last_metadata(ws)["flushed_at"] == session.last_consolidated
    daily = agent.memory.daily_path().read_text()
    assert "- FACT-0:" in daily
    # the same cycle never flushes twice, not even after a restart
    await agent.agent.lifecycle.maybe_flush(session, True)
    agent.agent.sessions.close()
    again = agent_factory()
    await again.agent.lifecycle.maybe_flush(again.agent.sessions.get("cli:direct"), True)
    assert script.calls["flush"] == 1
    bullets = [line for line in agent.memory.daily_path().read_text().splitlines() if line.startswith("- ")]
    assert len(bullets) == len(set(bullets))  # no duplicate bullets


async def test_flush_no_reply_writes_nothing(agent_factory, fake_llm) -> None:  # noqa: ANN001
    agent = agent_factory()
    fake_llm.responder = None
    fake_llm.push("NO_REPLY")
    ok = await agent.agent.lifecycle.flusher.flush([{"role": "user", "content": "hello"}], private=True)
    assert ok
    assert not agent.memory.daily_path().exists()


async def test_flush_fires_before_consolidation_at_default_window(make_config, script) -> None:  # noqa: ANN001
    config, _ = make_config()
    copy_templates(config.workspace_path)
    agent = build_runtime(config)
    lc = agent.agent.lifecycle
    assert lc.budget_tokens == 65536 - 8192 - 1024
    assert lc.flush_threshold_tokens == lc.budget_tokens - 4000
    session = agent.agent.sessions.get("cli:direct")
    big = " ".join(["memo"] * 2000)  # ~2000 tokens a message
    order: list[str] = []
    original_flush, original_consolidate = lc.flusher.flush, lc.consolidator.consolidate

    async def flush(*a, **k):  # noqa: ANN002, ANN003, ANN202
        order.append("flush")
        return await original_flush(*a, **k)

    async def consolidate(*a, **k):  # noqa: ANN002, ANN003, ANN202
        order.append("consolidate")
        return await original_consolidate(*a, **k)

    lc.flusher.flush, lc.consolidator.consolidate = flush, consolidate
    for i in range(30):
        await agent.ask(f"FACT-{i}: value {i}. {big}")
        await agent.agent.drain(30)
        if "consolidate" in order:
            break
    assert order and order[0] == "flush"
    assert "consolidate" in order
    assert order.index("flush") < order.index("consolidate")
    assert session.last_consolidated > 0
    agent.agent.sessions.close()


async def test_new_session_archives_and_writes_notes(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    ws = agent.config.workspace_path
    await chat(agent, 3)
    reply = await agent.ask("/new")
    assert reply == "New session started."
    await agent.agent.drain(30)
    archived = list((ws / "sessions" / "archive").glob("cli_direct-*.jsonl"))
    assert len(archived) == 1
    assert not list((ws / "sessions" / "archive").glob("*.pending"))
    kept = [json.loads(x) for x in archived[0].read_text().splitlines()]
    assert sum(1 for x in kept if x.get("role") == "user") == 3
    notes = [p for p in (ws / "memory").glob("*-planted-facts.md")]
    assert len(notes) == 1
    note = notes[0].read_text()
    assert all(f"FACT-{i}:" in note for i in range(3)) and "Session: cli:direct" in note
    history = (ws / "memory" / "HISTORY.md").read_text()
    assert all(f"FACT-{i}:" in history for i in range(3))
    assert not (ws / "sessions" / "cli_direct.jsonl").exists() or not [
        x for x in session_lines(ws) if x.get("role")]


async def test_new_session_skips_notes_for_short_sessions(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    await chat(agent, 2)
    await agent.ask("/new")
    await agent.agent.drain(30)
    assert script.calls["notes"] == 0
    assert "FACT-1:" in (agent.config.workspace_path / "memory" / "HISTORY.md").read_text()


async def test_new_with_failing_archive_loses_nothing_and_retries(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False, "memory.archiveRetryBackoffS": 0})
    ws = agent.config.workspace_path
    await chat(agent, 3)
    script.fail_consolidation = 2  # the answer and its retry
    assert await agent.ask("/new") == "New session started."
    await agent.agent.drain(30)
    pending = list((ws / "sessions" / "archive").glob("*.pending"))
    assert len(pending) == 1  # the failure is remembered, the transcript kept
    archived = pending[0].with_name(pending[0].name.removesuffix(".pending"))
    assert "FACT-2:" in archived.read_text()
    assert agent.agent.lifecycle.recover_pending() == 1
    await agent.agent.drain(30)
    assert not list((ws / "sessions" / "archive").glob("*.pending"))
    assert "FACT-2:" in (ws / "memory" / "HISTORY.md").read_text()


async def test_a_crash_right_after_new_moved_the_transcript_leaves_it_pending(  # noqa: ANN001
    agent_factory, script, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/new moved the transcript, then wrote its `.pending` marker: a crash between the two left an
    archive no start ever consolidated, and doctor said every archive was done."""
    import os

    from nanobot.session import store as store_module

    agent = agent_factory(**{"memory.flush.enabled": False})
    ws = agent.config.workspace_path
    await chat(agent, 3)
    real_replace = os.replace

    def crash_after_the_move(src, dst, **kwargs):  # noqa: ANN001, ANN003, ANN202
        real_replace(src, dst, **kwargs)
        if str(dst).endswith(".jsonl") and Path(dst).parent.name == "archive":
            raise SystemExit("killed")  # the process dies right after the move

    monkeypatch.setattr(store_module.os, "replace", crash_after_the_move)
    with pytest.raises(SystemExit):
        await agent.agent.new_session("cli:direct")
    monkeypatch.setattr(store_module.os, "replace", real_replace)
    [marker] = (ws / "sessions" / "archive").glob("*.pending")
    assert agent.agent.lifecycle.recover_pending() == 1  # the next start does its memory work
    await agent.agent.drain(30)
    assert "FACT-2:" in (ws / "memory" / "HISTORY.md").read_text()
    assert not marker.exists()


async def test_session_note_fallback_when_llm_fails(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    script.fail_notes = True
    await chat(agent, 3)
    await agent.ask("/new")
    await agent.agent.drain(30)
    notes = [p for p in (agent.config.workspace_path / "memory").glob("????-??-??-????.md")]
    assert len(notes) == 1
    assert "## Excerpt" in notes[0].read_text() and "FACT-2:" in notes[0].read_text()


async def chat_until_consolidating(agent, script: MemoryScript, fake_llm: FakeLLMServer) -> int:  # noqa: ANN001
    """Chat until a background consolidation runs (its model call takes 0.6 s); the turns it took."""

    def slow_consolidation(body: dict) -> dict:
        decided = script.decide(body)
        names = {t["function"]["name"] for t in body.get("tools") or []}
        return {**decided, "delay_s": 0.6} if "save_memory" in names else decided

    fake_llm.responder = slow_consolidation
    turns = 0
    while not agent.agent.lifecycle.consolidating and turns < 30:
        await chat(agent, 1, start=turns)
        turns += 1
    return turns


async def test_new_during_background_consolidation_waits(agent_factory, script, fake_llm) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    ws = agent.config.workspace_path

    turns = await chat_until_consolidating(agent, script, fake_llm)
    assert agent.agent.lifecycle.consolidating == {"cli:direct"}  # a background consolidation is running
    await asyncio.sleep(0.05)
    assert agent.agent.lifecycle.session_locked("cli:direct")
    reply = await agent.ask("/new")
    assert reply == "New session started."
    assert not agent.agent.lifecycle.consolidating  # /new waited for it (the session lock)
    await agent.agent.drain(30)
    history = (ws / "memory" / "HISTORY.md").read_text()
    assert all(f"FACT-{i}:" in history for i in range(turns))  # everything said reached memory
    archived = list((ws / "sessions" / "archive").glob("cli_direct-*.jsonl"))
    assert len(archived) == 1 and f"FACT-{turns - 1}:" in archived[0].read_text()


@pytest.mark.parametrize("other_says", ["/new", "a question"])
async def test_another_process_waits_for_a_consolidation_of_the_session(  # noqa: ANN001
    agent_factory, script, fake_llm, other_says: str
) -> None:
    """The memory lock held in one process only: a one-shot `nanobot agent -m` beside a running
    agent consolidated the same messages again (HISTORY.md twice), and its /new archived the file
    under the consolidation, whose pointer then landed in the new conversation's file (what was said
    after /new counted as consolidated: out of the prompt, never in memory)."""
    agent = agent_factory(**{"memory.flush.enabled": False})
    other = build_runtime(agent.config)  # a second process on the same workspace
    ws = agent.config.workspace_path

    turns = await chat_until_consolidating(agent, script, fake_llm)
    await asyncio.sleep(0.05)
    assert agent.agent.lifecycle.session_locked("cli:direct")
    try:
        await other.ask(other_says if other_says == "/new" else f"{other_says} {PAD}")
        await other.agent.drain(30)
    finally:
        other.agent.sessions.close()
    await agent.agent.drain(30)
    history = (ws / "memory" / "HISTORY.md").read_text()
    assert all(history.count(f"FACT-{i}:") <= 1 for i in range(turns))
    if other_says == "/new":
        assert "last_consolidated" not in last_metadata(ws)  # the new conversation: nothing consolidated
        await chat(agent, 1, start=100)
        assert agent.agent.sessions.get("cli:direct").last_consolidated == 0
        assert all(f"FACT-{i}:" in history for i in range(turns))  # the archive reached memory


async def test_no_memory_lock_is_kept_for_a_session_once_its_work_is_done(agent_factory, script) -> None:  # noqa: ANN001
    """The lifecycle kept a lock for every session it ever consolidated or archived, for the life
    of the daemon."""
    agent = agent_factory(**{"memory.flush.enabled": False})
    for n in range(5):
        await chat(agent, 3, key=f"telegram:{n}", channel="telegram", chat_id=str(n))
        await agent.agent.new_session(f"telegram:{n}")
    assert await agent.agent.drain(30)
    assert len(agent.agent.lifecycle._locks) == 0
    assert "FACT-2:" in (agent.config.workspace_path / "memory" / "HISTORY.md").read_text()


async def test_memory_protection_against_shrinking_update(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    facts = "\n".join(f"- FACT-{100 + i}: old fact {i}" for i in range(6))
    agent.memory.write_memory(f"# Long-term memory\n{facts}")
    script.shrink_memory = True
    ok = await agent.agent.lifecycle.consolidator.consolidate(
        [{"role": "user", "content": "FACT-200: brand new"}], private=True)
    assert ok
    text = agent.memory.read_memory()
    assert "FACT-200: brand new" in text
    assert all(f"FACT-{100 + i}:" in text for i in range(6))
    assert "Kept from the previous version" in text
    assert agent.memory.backups()  # the previous version kept in memory/.backups/


async def test_explicit_forgetting_is_not_undone(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    facts = [f"- FACT-{300 + i}: fact {i}" for i in range(5)]
    agent.memory.write_memory("# Long-term memory\n" + "\n".join(facts))
    # the agent removes a fact through its file tool, as the user asked
    result = await agent.agent.tools.execute("edit_file", {"path": "memory/MEMORY.md", "old_text": facts[2] + "\n",
                                                     "new_text": ""}, _ctx())
    assert "Replaced" in result
    assert "FACT-302" not in agent.memory.read_memory()
    # a later consolidation of the old conversation (which mentions the fact) must not bring it back
    ok = await agent.agent.lifecycle.consolidator.consolidate(
        [{"role": "user", "content": "FACT-302: fact 2"}, {"role": "user", "content": "FACT-400: new"}],
        private=True)
    assert ok
    text = agent.memory.read_memory()
    assert "FACT-302" not in text and "FACT-400: new" in text


@pytest.mark.parametrize("put_back_by", ["the agent", "hand"])
async def test_a_forgotten_fact_put_back_stays(agent_factory, script, put_back_by: str) -> None:  # noqa: ANN001
    """A tombstone kept deleting its line at every consolidation, even after the user (by hand) or the
    agent (asked to remember it again) had put it back."""
    agent = agent_factory(**{"memory.flush.enabled": False})
    facts = [f"- FACT-{700 + i}: fact {i}" for i in range(5)]
    agent.memory.write_memory("# Long-term memory\n" + "\n".join(facts))
    forget = {"path": "memory/MEMORY.md", "old_text": facts[2] + "\n", "new_text": ""}
    assert "Replaced" in await agent.agent.tools.execute("edit_file", forget, _ctx())
    if put_back_by == "hand":
        agent.memory.memory_path.write_text(agent.memory.read_memory() + "- FACT-702: fact 2\n")
    else:
        back = {"path": "memory/MEMORY.md", "old_text": facts[3], "new_text": "- FACT-702: fact 2\n" + facts[3]}
        assert "Replaced" in await agent.agent.tools.execute("edit_file", back, _ctx())
    ok = await agent.agent.lifecycle.consolidator.consolidate(
        [{"role": "user", "content": "FACT-800: unrelated"}], private=True)
    assert ok
    text = agent.memory.read_memory()
    assert "FACT-702: fact 2" in text and "FACT-800: unrelated" in text


async def test_overwriting_memory_with_one_fact_is_refused(agent_factory, script) -> None:  # noqa: ANN001
    """A model that answers "remember I prefer tea" with write_file instead of edit_file would erase
    every fact (and tombstone each); HISTORY.md is append-only."""
    agent = agent_factory(**{"memory.flush.enabled": False})
    facts = [f"- FACT-{900 + i}: fact {i}" for i in range(5)]
    agent.memory.write_memory("# Long-term memory\n" + "\n".join(facts))
    agent.memory.append_history("[2026-01-01] talked about tea")
    out = await agent.agent.tools.execute(
        "write_file", {"path": "memory/MEMORY.md", "content": "- prefers tea"}, _ctx())
    assert out.startswith("Error: this would remove 5 of the 5 facts in MEMORY.md; use edit_file"), out
    assert all(f in agent.memory.read_memory() for f in facts) and agent.memory.forgotten() == set()
    out = await agent.agent.tools.execute("write_file", {"path": "memory/HISTORY.md", "content": "x"}, _ctx())
    assert out.startswith("Error: HISTORY.md is the append-only log"), out
    assert "talked about tea" in agent.memory.read_history()
    # a whole-file rewrite that keeps the facts (and drops one) still works
    kept = "# Long-term memory\n" + "\n".join(facts[:4]) + "\n- prefers tea\n"
    out = await agent.agent.tools.execute("write_file", {"path": "memory/MEMORY.md", "content": kept}, _ctx())
    assert out.startswith("Wrote") and agent.memory.read_memory() == kept


async def test_group_chat_privacy(agent_factory, script, fake_llm) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    agent.memory.write_memory("# Long-term memory\n- FACT-500: the owner's secret hobby")
    await agent.ask("hello group", session_key="telegram:-100", channel="telegram",
                               chat_id="-100")
    agent.agent.sessions.get("telegram:-100")
    msg = _inbound("hello again", group=True)
    await agent.agent.handle(msg)
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "FACT-500" not in system and "group chat" in system
    private_system = agent.agent.context.system_prompt(memory_private=True)
    assert "FACT-500" in private_system
    # group conversations consolidate into HISTORY.md only
    ok = await agent.agent.lifecycle.consolidator.consolidate(
        [{"role": "user", "content": "FACT-600: said in the group"}], private=False)
    assert ok
    assert "FACT-600" in agent.memory.read_history()
    assert "FACT-600" not in agent.memory.read_memory()
    consolidation_prompt = fake_llm.requests[-1]["messages"][1]["content"]
    assert "FACT-500" not in consolidation_prompt


async def test_stress_twenty_sessions_consolidating_at_once(agent_factory, script) -> None:  # noqa: ANN001
    agent = agent_factory(**{"memory.flush.enabled": False})
    keys = [f"telegram:{n}" for n in range(20)]

    async def one(n: int, key: str) -> None:
        for i in range(10):
            await agent.ask(f"FACT-{n * 100 + i}: session {n} item {i}. {PAD}", session_key=key,
                                       channel="telegram", chat_id=key.split(":")[1])

    await asyncio.gather(*(one(n, k) for n, k in enumerate(keys)))
    await asyncio.gather(*(agent.agent.lifecycle.ensure_fits(agent.agent.sessions.get(k), lambda: 10**9, private=True)
                           for k in keys))
    await agent.agent.drain(60)
    ws = agent.config.workspace_path
    history = (ws / "memory" / "HISTORY.md").read_text()
    memory_md = (ws / "memory" / "MEMORY.md").read_text()
    for n, key in enumerate(keys):
        meta = last_metadata(ws, key.replace(":", "_"))
        assert meta["last_consolidated"] > 0
        for i in range(meta["last_consolidated"] // 2):
            assert f"FACT-{n * 100 + i}:" in history
        for line in session_lines(ws, key.replace(":", "_")):
            assert isinstance(line, dict)
    assert memory_md.count("# Long-term memory") >= 1
    assert memory_md.count("FACT-") >= 20


def _ctx():  # noqa: ANN202
    from nanobot.agent.tools.base import ToolContext

    return ToolContext()


def _inbound(text: str, group: bool):  # noqa: ANN202
    from nanobot.bus.events import InboundMessage

    return InboundMessage(channel="telegram", sender_id="7", chat_id="-100", content=text, is_group=group)


def _with_a_long_memory(make_config) -> tuple[Config, Path]:  # noqa: ANN001
    """A config with 1,024 reply tokens and a MEMORY.md of 70 facts, too long to rewrite within them."""
    config, _ = make_config(**{"agents.defaults.maxTokens": 1024, "agents.defaults.contextWindowTokens": 16384,
                               "memory.flush.enabled": False})
    memory_md = config.workspace_path / "memory" / "MEMORY.md"
    memory_md.parent.mkdir(parents=True, exist_ok=True)
    facts = "".join(f"- Cousin {i} lives in town {i} and likes the colour number {i}.\n" for i in range(70))
    memory_md.write_text("# Long-term memory\n\n## Family\n" + facts, encoding="utf-8")
    return config, memory_md


async def test_a_memory_longer_than_max_tokens_is_still_consolidated(make_config, fake_llm: FakeLLMServer) -> None:
    """save_memory rewrites all of MEMORY.md within maxTokens: with a MEMORY.md longer than that,
    every answer stopped inside its arguments (refused as "broken") and no fact of the chat ever
    reached MEMORY.md. Facts are appended then, and no request asks for more than maxTokens (a
    provider refuses more than its model's output limit). The stand-in stops at max_tokens."""
    from nanobot.memory import small_profile
    from tests.fakes.llm_server import Reply

    asked: list[int] = []

    def responder(body: dict) -> Reply:
        asked.append(body["max_tokens"])
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        question = str(body["messages"][-1]["content"])
        if small_profile.SUMMARY_QUESTION in question:
            return Reply(content="The user said that their dog is named Rex.")
        if small_profile.FACTS_QUESTION in question:
            return Reply(content="- Has a dog named Rex")
        if "save_memory" not in tools:
            return Reply(content="Noted.")
        memory = body["messages"][1]["content"].split("## Current MEMORY.md", 1)[1]
        memory = memory.split("## Conversation chunk", 1)[0].strip()
        arguments = json.dumps({"history_entry": "[2026-01-01 10:00] The user said their dog is named Rex.",
                                "memory_update": memory + "\n- Has a dog named Rex"})
        fits = arguments[: body["max_tokens"] * 3]  # ~3 characters a token: cut where a server stops
        return Reply(content=None, tool_calls=[{"name": "save_memory", "arguments": fits}],
                     finish_reason="length" if len(fits) < len(arguments) else None)

    fake_llm.responder = responder
    config, memory_md = _with_a_long_memory(make_config)
    assert len(memory_md.read_text()) > 1024 * 4
    runtime = build_runtime(config)
    try:
        await runtime.ask("My dog is named Rex.")
        await runtime.ask("/new")
        await runtime.agent.drain(30)
    finally:
        await runtime.aclose()
    assert asked and max(asked) <= 1024
    assert "Rex" in memory_md.read_text() and "Cousin 69" in memory_md.read_text()


async def test_a_fact_restated_in_later_conversations_is_kept_once(make_config, fake_llm: FakeLLMServer) -> None:
    """Appended facts were never compared with the file: a user who said the same thing in three
    conversations had it three times in MEMORY.md (and in every prompt). The same words under
    another person's section are another fact and stay."""
    from nanobot.memory import small_profile
    from nanobot.memory.validation import EchoSources, check_memory_update
    from tests.fakes.llm_server import Reply

    def responder(body: dict) -> Reply:
        question = str(body["messages"][-1]["content"])
        if small_profile.SUMMARY_QUESTION in question:
            return Reply(content="The user said that their dog is named Rex.")
        if small_profile.FACTS_QUESTION in question:
            return Reply(content="- Has a dog named Rex\n- Has a dog named Rex.")
        tools = [t["function"]["name"] for t in body.get("tools") or []]
        if "save_memory" not in tools:
            return Reply(content="Noted.")
        entry = "[2026-01-01 10:00] The user said their dog is named Rex."
        arguments = json.dumps({"history_entry": entry, "memory_update": "x" * 9000})
        # cut at the output limit: the long file cannot be rewritten, so facts are appended
        return Reply(content=None, tool_calls=[{"name": "save_memory", "arguments": arguments}], finish_reason="length")

    fake_llm.responder = responder
    config, memory_md = _with_a_long_memory(make_config)
    runtime = build_runtime(config)
    try:
        for _ in range(3):
            await runtime.ask("My dog is named Rex.")
            await runtime.ask("/new")
            await runtime.agent.drain(30)
    finally:
        await runtime.aclose()
    assert memory_md.read_text().lower().count("has a dog named rex") == 1, memory_md.read_text()[-300:]
    two_people = "# Memory\n## Anna\n- Birthday: 3 March\n## Bob\n- Birthday: 3 March"
    kept = check_memory_update(two_people + "\n- birthday: 3 March.", "# Memory", EchoSources(""), budget_chars=4000)
    assert not isinstance(kept, Exception) and kept[0] == two_people


async def test_a_memory_folder_that_cannot_be_written_loses_no_message(
    agent_factory, script: MemoryScript, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memory/ full (or read-only) while sessions/ had room: the turn that needed consolidation
    failed with "something went wrong: OSError" before the user's message was saved, and the
    platform had confirmed it; HISTORY.md also got the chunk's entry once per failed try."""
    import errno

    from nanobot.memory.store import MemoryStore

    agent = agent_factory(**{"memory.flush.enabled": False})
    ws = agent.config.workspace_path
    history_md = ws / "memory" / "HISTORY.md"
    write_memory = MemoryStore.write_memory
    refused: list[int] = []

    def full_once(self, text: str) -> None:  # noqa: ANN001 - the first write finds the disk full
        if not refused:
            refused.append(len(script.calls))
            raise OSError(errno.ENOSPC, "No space left on device")
        write_memory(self, text)

    monkeypatch.setattr(MemoryStore, "write_memory", full_once)  # HISTORY.md can still be appended to
    i = 0
    while not refused:
        assert i < 30, "no consolidation was asked for"
        reply = await agent.ask(f"turn {i} FACT-{i}: the user likes item {i}. {PAD}")
        assert "went wrong" not in reply
        i += 1
    said = [x["content"] for x in session_lines(ws) if x.get("role") == "user"]
    assert f"turn {i - 1} FACT-{i - 1}" in said[-1]  # the message of the turn that hit the full disk
    assert last_metadata(ws).get("consolidation_failures", 0) == 0  # not counted as the model's

    for j in range(i, i + 4):  # room again: the next turns consolidate, each entry once
        await agent.ask(f"turn {j} FACT-{j}: the user likes item {j}. {PAD}")
    await agent.agent.drain(30)
    history = history_md.read_text()
    assert "FACT-0" in (ws / "memory" / "MEMORY.md").read_text()
    assert len([line for line in history.splitlines() if "FACT-0:" in line]) == 1
