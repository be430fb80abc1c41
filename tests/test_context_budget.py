"""Bootstrap budget: per-file and total caps, head/tail truncation, MEMORY.md's own budget, warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
from loguru import logger

from nanobot.agent.context import Budget, ContextBuilder, fit_to_budget
from nanobot.agent.factory import build_runtime
from nanobot.memory.store import MemoryStore
from nanobot.skills.loader import SkillsLoader
from nanobot.timeutil import resolve_tz
from tests.fakes.llm_server import FakeLLMServer, Reply


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "memory").mkdir()
    return tmp_path


def builder(ws: Path, budget: Budget | None = None, skills=None) -> ContextBuilder:  # noqa: ANN001
    return ContextBuilder(
        ws, MemoryStore(ws, "UTC"), resolve_tz("UTC"), budget=budget or Budget(), skills=skills
    )


def test_fit_to_budget_keeps_head_and_tail_with_marker() -> None:
    text = "H" * 5000 + "M" * 20000 + "T" * 5000
    out = fit_to_budget("AGENTS.md", text, 10_000)
    assert out.startswith("H" * 5000) and out.endswith("T" * 2000)
    assert len(out) < 10_000 + 200
    assert "AGENTS.md is 30000 characters" in out and 'read_file("AGENTS.md")' in out
    head = out.split("\n\n[...")[0]
    assert len(head) == 7000  # 70 %
    assert len(out.rsplit("...]\n\n", 1)[1]) == 2000  # 20 %


def test_per_file_and_total_caps(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("a" * 30_000)
    (workspace / "SOUL.md").write_text("s" * 8_000)
    (workspace / "USER.md").write_text("u" * 8_000)
    prompt = builder(workspace).system_prompt()
    agents_part = prompt.split("## AGENTS.md\n\n")[1].split("\n\n---")[0]
    assert len(agents_part) <= 20_000 + 200  # per-file cap 20,000
    assert "AGENTS.md is 30000 characters" in agents_part
    bootstrap = sum(prompt.count(c) for c in "asu") - prompt.count("a") + agents_part.count("a")
    assert bootstrap <= 24_000 + 600  # total cap 24,000 (plus markers)
    soul_part = prompt.split("## SOUL.md\n\n")[1].split("\n\n---")[0]
    assert "SOUL.md is 8000 characters" in soul_part  # squeezed by the total budget
    assert "USER.md" in prompt  # named, with how to read it, when left out


def test_a_huge_steering_file_is_read_only_as_far_as_its_start(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGENTS.md was read and decoded whole on every prompt build (a file a command kept appending
    to: 650 MB of memory for 300 MB), though the prompt keeps some 20,000 characters of it."""
    import nanobot.agent.context as context

    monkeypatch.setattr(context, "MAX_BOOTSTRAP_READ_BYTES", 40_000)  # 1 MiB in use
    (workspace / "AGENTS.md").write_text(("a" * 99 + "\n") * 1_000 + "END-OF-THE-FILE\n", encoding="utf-8")
    prompt = builder(workspace).system_prompt()
    assert "aaaa" in prompt and "END-OF-THE-FILE" not in prompt


def test_memory_has_its_own_budget(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("a" * 50_000)
    (workspace / "SOUL.md").write_text("s" * 50_000)
    MemoryStore(workspace, "UTC").write_memory("# Memory\n" + "- fact\n" * 100)
    prompt = builder(workspace, Budget(20_000, 24_000, 5_000)).system_prompt()
    assert prompt.count("- fact") == 100  # bootstrap files cannot starve MEMORY.md
    MemoryStore(workspace, "UTC").write_memory("# Memory\n" + "- fact\n" * 2000)
    prompt = builder(workspace, Budget(20_000, 24_000, 5_000)).system_prompt()
    assert "memory/MEMORY.md is" in prompt and prompt.count("- fact") < 2000


def test_the_fresh_memory_template_is_no_memory_to_show(workspace: Path) -> None:
    """The template's heading and comment went into the prompt as if they were memory, and the
    demo model answered a user with them."""
    from nanobot.config.templates import copy_templates

    copy_templates(workspace)
    template = MemoryStore(workspace, "UTC").read_memory()
    assert "<!--" in template  # the template as onboard writes it
    for compact in (False, True):
        ctx = ContextBuilder(workspace, MemoryStore(workspace, "UTC"), resolve_tz("UTC"), compact=compact)
        assert "Durable facts about the user" not in ctx.system_prompt()
    MemoryStore(workspace, "UTC").write_memory(template + "\n## Allergies: peanuts\n")
    for compact in (False, True):
        ctx = ContextBuilder(workspace, MemoryStore(workspace, "UTC"), resolve_tz("UTC"), compact=compact)
        assert "Allergies: peanuts" in ctx.system_prompt()  # a heading the user wrote is kept


def test_one_warning_per_file_change(workspace: Path) -> None:
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        (workspace / "AGENTS.md").write_text("a" * 30_000)
        ctx = builder(workspace)
        for _ in range(5):
            ctx._cache.clear()  # even when rebuilt, the same file version warns once
            ctx.system_prompt()
        assert sum("AGENTS.md" in m for m in messages) == 1
        (workspace / "AGENTS.md").write_text("b" * 31_000)
        ctx.system_prompt()
        assert sum("AGENTS.md" in m for m in messages) == 2
    finally:
        logger.remove(sink)


def test_system_prompt_byte_stable_and_group_variant(workspace: Path) -> None:
    (workspace / "AGENTS.md").write_text("Be kind.")
    MemoryStore(workspace, "UTC").write_memory("- the owner's cat is Miso")
    ctx = builder(workspace, skills=SkillsLoader(workspace))
    first = ctx.system_prompt()
    assert (
        ctx.system_prompt() == first
        and builder(workspace, skills=SkillsLoader(workspace)).system_prompt() == first
    )
    assert "Miso" in first and "Miso" not in ctx.system_prompt(memory_private=False)
    runtime = ctx.runtime_block("telegram", "42", "7")
    assert "telegram" in runtime and "Time:" in runtime and "telegram" not in first
    assert "# Memory" in first and "how nanobot's memory works" not in first.lower() or "memory" in first


def test_always_on_memory_skill_is_inlined(workspace: Path) -> None:
    prompt = builder(workspace, skills=SkillsLoader(workspace)).system_prompt()
    assert "memory/MEMORY.md" in prompt and "forget" in prompt  # the built-in memory skill, always on


# ---------------------------------------------------------------------- MEMORY.md over its budget
class _KeepingModel:
    """Turns answer "ok"; consolidation keeps every fact of MEMORY.md and adds one (a real summary)."""

    def __init__(self) -> None:
        self.consolidations = 0

    def __call__(self, body: dict) -> Reply:  # type: ignore[type-arg]
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if "save_memory" in tools:
            self.consolidations += 1
            prompt = str(body["messages"][1]["content"])
            current = prompt.split("## Current MEMORY.md\n\n", 1)[1].split("\n\n## Conversation chunk", 1)[0]
            args = {
                "history_entry": f"[2026-01-01 10:00] The user chatted about item {self.consolidations}.",
                "memory_update": f"{current.strip()}\n- The user mentioned item {self.consolidations}.\n",
            }
            return Reply(content=None, tool_calls=[{"name": "save_memory", "arguments": args}])
        if "write_daily_note" in tools:
            note = {"content": "- The user chatted about items."}
            return Reply(content=None, tool_calls=[{"name": "write_daily_note", "arguments": note}])
        last = str(body["messages"][-1]["content"])
        if "one-sentence summary" in last:  # a MEMORY.md too large to rewrite is added to instead
            self.consolidations += 1
            return Reply(content=f"The user chatted about item {self.consolidations}.")
        if "List the facts" in last:
            return Reply(content=f"- The user mentioned item {self.consolidations}.")
        return Reply(content="ok")


async def test_memory_over_its_budget_does_not_make_every_turn_consolidate(
    make_config, fake_llm: FakeLLMServer, logs: list[str]  # noqa: ANN001
) -> None:
    """A small window (the whole prompt budget ~2,600 tokens, ~1,400 of them tool schemas as estimated) and a
    MEMORY.md well over its prompt share: the prompt must still leave room for the conversation, so
    consolidation runs now and then (not before every turn) and never ends over the budget; every
    fact stays in the file."""
    model = _KeepingModel()
    fake_llm.responder = model
    # 3,584 rather than 3,328: token estimates lean ~7% high, and at 3,328 the system prompt and the
    # tool schemas alone came to the whole budget
    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 3584, "agents.defaults.maxTokens": 512})
    facts = [f"- Fact {i}: the user's item number {i} is kept in box {i * 7}." for i in range(120)]
    memory_md = config.workspace_path / "memory" / "MEMORY.md"
    memory_md.parent.mkdir(parents=True, exist_ok=True)
    memory_md.write_text("# Memory\n\n" + "\n".join(facts) + "\n", encoding="utf-8")
    runtime = build_runtime(config)
    try:
        budget = runtime.agent.lifecycle.budget_tokens
        turns = 16
        for i in range(turns):
            # long enough that the history outgrows the room the core tools leave (a window this
            # small is offered those only, beside the system prompt)
            text = f"message {i} about the weather " + "and the clouds over the hills " * 12
            assert await runtime.ask(text, session_key="telegram:1") == "ok"
            assert runtime.agent.stats.last_prompt_tokens <= budget
            await runtime.agent.lifecycle.drain(10.0)
        assert not [line for line in logs if "still ~" in line and "after consolidation" in line]
        assert 1 <= model.consolidations <= turns // 4
        kept = memory_md.read_text(encoding="utf-8")
        assert all(fact in kept for fact in facts)
    finally:
        await runtime.aclose()


def test_a_window_too_small_for_tools_and_system_prompt_is_reported_at_start(
    make_config, logs: list[str]  # noqa: ANN001
) -> None:
    for window, cramped in ((2048, True), (65536, False)):
        logs.clear()
        config, _ = make_config(**{"agents.defaults.contextWindowTokens": window, "agents.defaults.maxTokens": 512})
        runtime = build_runtime(config)
        runtime.agent.sessions.close()
        said = [line for line in logs if "for the conversation beside the tool schemas" in line]
        assert bool(said) == cramped, (window, said)


async def test_consolidation_does_not_repeat_when_the_message_alone_is_over_the_budget(
    make_config, monkeypatch: pytest.MonkeyPatch, logs: list[str]  # noqa: ANN001
) -> None:
    """A message that alone overflows the budget: consolidating a short history cannot help, so it
    is not done before every turn (it is, once the history is substantial), and it is said once."""
    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 3840, "agents.defaults.maxTokens": 512})
    runtime = build_runtime(config)
    lifecycle = runtime.agent.lifecycle
    calls: list[int] = []

    async def consolidate(messages: list, *, private: bool, origin: str = "") -> bool:  # type: ignore[type-arg]
        calls.append(len(messages))
        return True

    monkeypatch.setattr(lifecycle.consolidator, "consolidate", consolidate)
    session = runtime.agent.sessions.get("telegram:1")
    runtime.agent.sessions.append(session, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"})
    huge = lifecycle.budget_tokens + 500  # the system prompt, tools and a pasted document
    try:
        for _ in range(3):
            await lifecycle.ensure_fits(session, lambda: huge, private=True)
        assert calls == []
        assert len([line for line in logs if "alone take" in line]) == 1
        long_reply = " ".join(["word"] * lifecycle.budget_tokens)
        runtime.agent.sessions.append(
            session, {"role": "user", "content": "and this"}, {"role": "assistant", "content": long_reply}
        )
        await lifecycle.ensure_fits(session, lambda: huge + lifecycle.budget_tokens, private=True)
        assert calls  # a substantial history is consolidated
    finally:
        runtime.agent.sessions.close()


def _skills(ws: Path, count: int) -> None:
    for i in range(count):
        folder = ws / "skills" / f"skill-{i:03d}"
        folder.mkdir(parents=True)
        description = f"Skill number {i}: " + "helps with one narrow kind of task, described at length. " * 3
        (folder / "SKILL.md").write_text(f"---\ndescription: '{description}'\n---\n\nBody {i}.\n", encoding="utf-8")


async def test_many_skills_do_not_push_the_conversation_out_of_the_prompt(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """80 skills on an 8k window: the list had no cap, took ~5,000 tokens, and the history was left
    out of every request (the bot forgot the previous message); 300 skills made every request larger
    than the window. The list shares the bootstrap budget: whole lines, then names, then a count."""
    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 8192, "agents.defaults.maxTokens": 1024})
    _skills(config.workspace_path, 300)
    fake_llm.push(Reply(content="Nice to meet you."), Reply(content="You are Zed."))
    runtime = build_runtime(config)
    try:
        await runtime.ask("my name is Zed", session_key="telegram:1")
        await runtime.ask("what is my name?", session_key="telegram:1")
        assert runtime.agent.stats.last_prompt_tokens <= runtime.agent.lifecycle.budget_tokens
    finally:
        await runtime.aclose()
    second = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    system = second[0]["content"]
    assert "skill-000: Skill number 0" in system  # the first ones with their description
    assert "list_dir(\"skills\") shows them" in system  # the rest counted, with where to find them
    assert len(system) < 12_000


def test_the_skills_list_names_what_its_budget_leaves_out(tmp_path: Path) -> None:
    _skills(tmp_path, 40)
    loader = SkillsLoader(tmp_path, tmp_path / "no-builtins")
    whole = loader.summary()
    assert whole.count("\n") == 39 and loader.summary(len(whole)) == whole
    cut = loader.summary(2_000)
    assert len(cut) <= 2_000
    lines = cut.splitlines()
    assert lines[0].startswith("- skill-000: Skill number 0")
    assert lines[-1].startswith("More skills (read skills/<name>/SKILL.md): skill-")
    described = len(lines) - 1
    named = lines[-1].split(": ", 1)[1].split(" and ")[0].split(", ")
    assert named[0] == f"skill-{described:03d}"
    left = int(lines[-1].rsplit(" and ", 1)[1].split()[0])
    assert described + len(named) + left == 40


async def test_status_counts_the_tools_a_turn_is_offered_in_a_small_window(
    make_config, fake_llm: FakeLLMServer  # noqa: ANN001
) -> None:
    """/status said "Tools: 11" where the prompt budget left room for the core file tools only."""
    fake_llm.responder = lambda body: Reply(content="ok")
    config, _ = make_config(**{"agents.defaults.contextWindowTokens": 3584, "agents.defaults.maxTokens": 512})
    runtime = build_runtime(config)
    try:
        assert await runtime.ask("hello", session_key="telegram:1") == "ok"
        sent = len(fake_llm.requests[-1].get("tools") or [])
        assert 0 < sent < len(runtime.agent.tools)  # the window cut the tool list
        status = await runtime.ask("/status", session_key="telegram:1")
        assert f"Tools: {sent};" in status, status
    finally:
        await runtime.aclose()
