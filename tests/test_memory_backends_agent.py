"""The memory backends inside the agent: registry selection, the seam bridge, the runtime block."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from nanobot.agent.factory import build_runtime
from nanobot.config.loader import load_config
from nanobot.config.schema import Config
from nanobot.errors import ConfigError
from nanobot.memory.backends.bridge import AdapterMemory
from nanobot.memory.backends.contract import BackendConfigError
from nanobot.memory.backends.registry import build_long_term_memory, select
from nanobot.memory.seam import FileMemory
from tests.conftest import config_dict, run_cli
from tests.fakes.llm_server import FakeLLMServer


def make_config(home: Path, url: str, memory: dict[str, Any]) -> tuple[Config, Path]:
    data = config_dict(url)
    data["memory"] = memory
    path = home / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return load_config(path), path


def prompts(fake: FakeLLMServer) -> list[tuple[str, str]]:
    """(system prompt, last user message) of every agent turn (requests offering the agent's tools);
    backend LLM calls (extraction, consolidation) are left out."""
    out = []
    for body in fake.requests:
        msgs = body["messages"]
        names = {t["function"]["name"] for t in body.get("tools") or []}
        if not names or "save_memory" in names:
            continue
        out.append((msgs[0]["content"], msgs[-1]["content"]))
    return out


def test_selection_rules(home: Path, fake_llm: FakeLLMServer) -> None:
    cfg, _ = make_config(home, fake_llm.url, {})
    assert select(cfg).name == "file"
    cfg, _ = make_config(home, fake_llm.url, {"backend": "memos", "condition": "no_memory"})
    sel = select(cfg)
    assert (sel.name, sel.kind) == ("no_memory", "condition")  # the condition replaces the backend
    # an unknown name is refused with the config (doctor and every command), not at the first turn
    with pytest.raises(ConfigError, match="memory.backend: .*unknown backend 'zep'"):
        make_config(home, fake_llm.url, {"backend": "zep"})
    with pytest.raises(ConfigError, match="memory.condition: .*unknown condition 'oracle'"):
        make_config(home, fake_llm.url, {"condition": "oracle"})
    # so is a bad block of the chosen backend (doctor and status said healthy of it before)
    with pytest.raises(ConfigError, match=r"memory\.backends\.honcho\.baseUrl"):
        make_config(home, fake_llm.url, {"backend": "honcho", "backends": {"honcho": {}}})
    with pytest.raises(ConfigError, match=r"memory\.backends\.memos\.mode"):
        make_config(
            home,
            fake_llm.url,
            {"backend": "memos", "backends": {"memos": {"baseUrl": "http://127.0.0.1:1", "mode": "turbo"}}},
        )
    cfg, _ = make_config(home, fake_llm.url, {})
    cfg.memory.backend = "honcho"  # a config built in code is checked where it is used
    with pytest.raises(BackendConfigError, match=r"memory\.backends\.honcho\.baseUrl"):
        select(cfg)


def test_file_backend_keeps_file_memory(home: Path, fake_llm: FakeLLMServer) -> None:
    for memory in ({}, {"condition": "rolling_summary"}):
        cfg, _ = make_config(home, fake_llm.url, memory)
        assert isinstance(build_long_term_memory(cfg, cfg.workspace_path, None), FileMemory)
    cfg, _ = make_config(
        home,
        fake_llm.url,
        {"condition": "full_history", "backends": {"full_history": {"runId": "r7", "contextTokens": 900}}},
    )
    lt = build_long_term_memory(cfg, cfg.workspace_path, None)
    assert isinstance(lt, AdapterMemory) and lt.run_id == "r7" and lt.budget.max_tokens == 900


async def test_static_profile_reaches_runtime_block_system_prompt_stable(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    cfg, _ = make_config(home, fake_llm.url, {"condition": "static_profile"})
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    (cfg.workspace_path / "PROFILE.md").write_text("The user is a night-shift nurse.\n", encoding="utf-8")
    agent = build_runtime(cfg)
    try:
        assert await agent.ask("hello") == "ok"
        assert await agent.ask("and again") == "ok"
    finally:
        await agent.aclose()
    (sys1, user1), (sys2, user2) = prompts(fake_llm)
    assert sys1 == sys2 and "night-shift" not in sys1
    for user in (user1, user2):
        assert '<memory-context backend="static_profile" scope="nanobot:user">' in user
        assert "night-shift nurse" in user


async def test_with_a_backend_the_prompt_does_not_claim_memory_md_is_in_it(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    """After a switch from the file memory, MEMORY.md's facts left the prompt while the prompt and the
    memory skill still said it was "kept in this prompt": the model had no reason to look there."""
    cfg, _ = make_config(home, fake_llm.url, {})
    agent = build_runtime(cfg)
    (cfg.workspace_path / "memory" / "MEMORY.md").write_text("# Memory\n\n- The user's daughter is Mia.\n")
    try:
        await agent.ask("What is my daughter's name?")
    finally:
        await agent.aclose()
    cfg, _ = make_config(home, fake_llm.url, {"condition": "static_profile"})
    agent = build_runtime(cfg)
    try:
        await agent.ask("What is my daughter's name?")
    finally:
        await agent.aclose()
    (on_file, _), (on_backend, _) = prompts(fake_llm)
    assert "Mia" in on_file and "MEMORY.md (facts about the user and their world; kept in this prompt)" in on_file
    assert "Mia" not in on_backend and "kept in this prompt" not in on_backend
    assert "memory/MEMORY.md is not in this prompt" in on_backend and "read it when" in on_backend
    assert "unless a memory backend is configured" in on_backend  # the memory skill says so too


async def test_full_history_brings_prior_transcript_after_new(home: Path, fake_llm: FakeLLMServer) -> None:
    cfg, _ = make_config(home, fake_llm.url, {"condition": "full_history"})
    agent = build_runtime(cfg)
    try:
        await agent.ask("my locker code is 4711")
        await agent.agent.drain(5)
        await agent.ask("/new")
        await agent.ask("what was my locker code?")
        await agent.ask("hi", session_key="telegram:99", channel="telegram", chat_id="99")
    finally:
        await agent.aclose()
    turns = prompts(fake_llm)
    assert "4711" not in turns[0][1].split("\n\n")[0]
    assert "USER: my locker code is 4711" in turns[1][1]
    assert "4711" not in turns[2][1]  # another chat never sees this chat's transcripts


async def test_group_chats_get_no_backend_memory_by_default(home: Path, fake_llm: FakeLLMServer) -> None:
    cfg, _ = make_config(home, fake_llm.url, {"condition": "static_profile"})
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    (cfg.workspace_path / "PROFILE.md").write_text("secret profile\n", encoding="utf-8")
    lt = build_long_term_memory(cfg, cfg.workspace_path, None)
    assert await lt.context_for("hi", "telegram:-5", "42", is_group=True) == ""
    assert "secret profile" in await lt.context_for("hi", "telegram:42", "42", is_group=False)
    cfg.memory.share_in_groups = True
    lt = build_long_term_memory(cfg, cfg.workspace_path, None)
    assert "secret profile" in await lt.context_for("hi", "telegram:-5", "42", is_group=True)


async def test_a_guest_gets_no_backend_memory_even_when_groups_do(home: Path, fake_llm: FakeLLMServer) -> None:
    """With memory.shareInGroups on, a stranger let in by dmPolicy "open" got the owner's profile
    (the backend saw "a group or not"), and their turns were recorded into the owner's memory."""
    from nanobot.bus.events import InboundMessage

    cfg, _ = make_config(home, fake_llm.url, {"condition": "static_profile", "shareInGroups": True})
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    (cfg.workspace_path / "PROFILE.md").write_text("OWNER SECRET: bank PIN 9931\n", encoding="utf-8")
    runtime = build_runtime(cfg)
    recorded: list[str] = []
    real_record = runtime.agent.long_term.record_turn

    async def record(turn):  # noqa: ANN001, ANN202
        recorded.append(turn.sender_id)
        await real_record(turn)

    runtime.agent.long_term.record_turn = record  # type: ignore[method-assign]
    try:
        runtime.loop.start()
        guest = InboundMessage(channel="telegram", sender_id="777", chat_id="777", content="hi", guest=True)
        await runtime.bus.request(guest)
        await runtime.ask("hi there", session_key="telegram:42", sender_id="42")
        await runtime.agent.drain(5)
    finally:
        await runtime.aclose()
    (_, guest_user), (_, owner_user) = prompts(fake_llm)
    assert "9931" not in guest_user and "9931" in owner_user
    assert recorded == ["42"]


async def test_a_hung_backend_costs_one_turn_its_wait_not_every_turn(
    home: Path, fake_llm: FakeLLMServer, monkeypatch
) -> None:  # noqa: ANN001
    """Scope set-up and retrieval each waited 20 s, on every turn: a hung backend made every reply
    20-40 s late. One deadline for both now, and a backend that failed is skipped for a while."""
    import asyncio
    import time

    from nanobot.memory.backends import bridge

    monkeypatch.setattr(bridge, "CONTEXT_TIMEOUT_S", 0.3)
    cfg, _ = make_config(home, fake_llm.url, {"condition": "static_profile"})
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    (cfg.workspace_path / "PROFILE.md").write_text("The user is a night-shift nurse.\n", encoding="utf-8")
    lt = build_long_term_memory(cfg, cfg.workspace_path, None)
    real_retrieve, calls = lt.adapter.retrieve, []

    async def hang(request):  # noqa: ANN001, ANN202
        calls.append(request)
        await asyncio.sleep(60)

    lt.adapter.retrieve = hang
    started = time.monotonic()
    assert await lt.context_for("hi", "telegram:42", "42", is_group=False) == ""
    assert time.monotonic() - started < 2
    started = time.monotonic()
    assert await lt.context_for("hi", "telegram:42", "42", is_group=False) == ""
    assert time.monotonic() - started < 0.1 and len(calls) == 1  # skipped, not waited for again
    lt.adapter.retrieve = real_retrieve
    lt._skip_until = 0.0  # the back-off is over
    assert "night-shift" in await lt.context_for("hi", "telegram:42", "42", is_group=False)
    await lt.aclose()


async def test_failing_backend_degrades_to_empty_context(home: Path, fake_llm: FakeLLMServer) -> None:
    cfg, _ = make_config(
        home,
        fake_llm.url,
        {"backend": "memos", "backends": {"memos": {"baseUrl": "http://127.0.0.1:9", "timeoutS": 2}}},
    )
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    agent = build_runtime(cfg)
    try:
        assert await agent.ask("hello") == "ok"
        await agent.agent.drain(5)
    finally:
        await agent.aclose()
        logger.remove(sink)
    assert "<memory-context" not in prompts(fake_llm)[0][1]
    assert any("memory backend memos: no context" in w for w in warnings)
    assert any("memory backend memos: turn not recorded" in w for w in warnings)


@pytest.mark.parametrize(
    ("block", "key"),
    [
        ({"backend": "honcho"}, "memory.backends.honcho.baseUrl"),
        # found at the first turn before (every turn then lost with a KeyError), or never
        ({"backend": "memos", "backends": {"memos": {"baseUrl": "not a url"}}}, "memory.backends.memos.baseUrl"),
        # blank is "unset" to the SDK, which then sends the memories to its hosted service
        ({"backend": "honcho", "backends": {"honcho": {"baseUrl": "   "}}}, "memory.backends.honcho.baseUrl"),
        ({"backend": "memos", "backends": {"memos": {"baseUrl": "http://127.0.0.1:9", "cubeTemplate": "{user}"}}},
         "memory.backends.memos.cubeTemplate"),
    ],
)
def test_cli_bad_backend_config_exits_2(home: Path, fake_llm: FakeLLMServer, block: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):  # refused where the config is loaded
        make_config(home, fake_llm.url, block)
    for args in (("agent", "-m", "hi"), ("memory", "backend", "check")):
        proc = run_cli(*args, home=home)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert key in proc.stderr, proc.stderr
    # doctor and status said healthy of it, and the gateway then refused to start
    doctor = run_cli("doctor", home=home)
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr + doctor.stdout
    assert any(line.startswith("FAIL  config") for line in doctor.stdout.splitlines()), doctor.stdout
    assert key in doctor.stdout, doctor.stdout
    status = run_cli("status", home=home)
    assert status.returncode == 2 and key in status.stderr, status.stderr


def test_backend_check_with_a_profile_outside_the_workspace_is_one_line(home: Path, fake_llm: FakeLLMServer) -> None:
    make_config(home, fake_llm.url, {"condition": "static_profile",
                                     "backends": {"static_profile": {"path": "../../config.json"}}})
    proc = run_cli("memory", "backend", "check", home=home)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr  # a config error
    assert "leaves the workspace" in proc.stderr


@pytest.mark.parametrize("name", ["memos", "honcho", "mem0", "graphiti"])
async def test_backend_context_reaches_next_turn(name: str, tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    from tests.fakes.memory_backend_cases import BACKEND_ENVS

    env = BACKEND_ENVS[name](tmp_path, fake_llm)
    env.start()
    try:
        agent = build_runtime(env.config())
        try:
            await agent.ask("Please remember FACT-1: my favourite tea is genmaicha.")
            await agent.agent.drain(10)
            lt = agent.agent.long_term
            assert isinstance(lt, AdapterMemory)
            await env.settle(lt.adapter, lt.scope_for("user"))
            await agent.ask("Which tea do I like? genmaicha")
        finally:
            await agent.aclose()
    finally:
        env.stop()
    (sys1, user1), (sys2, user2) = prompts(fake_llm)[-2:]
    assert sys1 == sys2  # the system prompt stays byte-identical: memory goes to the runtime block
    assert "<memory-context" not in user1
    assert f'<memory-context backend="{name}" scope="nanobot:user">' in user2 and "genmaicha" in user2


def test_cli_agent_with_memos_remembers_across_processes(home: Path, fake_llm: FakeLLMServer) -> None:
    from tests.fakes.memory_backend_cases import MemosEnv

    env = MemosEnv(home, fake_llm)
    env.start()
    try:
        env.config()
        first = run_cli("agent", "-m", "Please remember FACT-1: my bike is a green Brompton.", home=home)
        assert first.returncode == 0, first.stderr
        second = run_cli("agent", "-m", "What bike do I ride? Brompton", home=home)
        assert second.returncode == 0, second.stderr
    finally:
        env.stop()
    assert second.stdout.strip() == "ok"
    last_user = prompts(fake_llm)[-1][1]
    assert '<memory-context backend="memos"' in last_user and "green Brompton" in last_user


def test_evaluation_package_is_loaded_only_when_a_condition_is_selected(home: Path, fake_llm: FakeLLMServer) -> None:
    """The product path (file memory, a real backend) never imports the evaluation harness."""
    script = (
        "import json, sys\n"
        "from nanobot.config.loader import load_config\n"
        "from nanobot.memory.backends.registry import build_long_term_memory\n"
        "from pathlib import Path\n"
        "cfg = load_config(Path(sys.argv[1]))\n"
        "build_long_term_memory(cfg, cfg.workspace_path, None)\n"
        "print(json.dumps(sorted(m for m in sys.modules if '.evaluation' in m)))\n"
    )
    memos = {"backend": "memos", "backends": {"memos": {"baseUrl": "http://127.0.0.1:9"}}}
    for memory, loaded in (({}, False), (memos, False), ({"condition": "no_memory"}, True)):
        _, path = make_config(home, fake_llm.url, memory)
        out = subprocess.run(
            [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60, check=True
        )
        modules = json.loads(out.stdout.strip().splitlines()[-1])
        assert bool(modules) == loaded, (memory, modules)


def test_a_template_may_index_its_fields() -> None:
    """`{run_id[0]}` worked before templates were checked at load: it names run_id, and is kept."""
    from nanobot.memory.backends.config import MemosBlock

    block = MemosBlock(base_url="http://127.0.0.1:9", cube_template="{run_id[0]}_{persona_id}")
    assert block.cube_template == "{run_id[0]}_{persona_id}"


@pytest.mark.parametrize(("name", "module"), [("mem0", "mem0"), ("graphiti", "graphiti_core"), ("graphiti", "kuzu")])
def test_a_backend_whose_library_is_missing_is_refused_at_start(
    name: str, module: str, home: Path, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mem0 and graphiti import their library at first use: without it the agent ran with every
    turn's memory failing in the log (exit 0), where honcho and memos are refused with the hint."""
    import importlib.util

    from tests.fakes.memory_backend_cases import BACKEND_ENVS

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda mod, *a: None if mod == module else real(mod, *a))
    config = BACKEND_ENVS[name](home, fake_llm).config()
    refused = rf"memory\.backend {name}: its library is not installed \({module}\); install it"
    with pytest.raises(BackendConfigError, match=refused):
        build_long_term_memory(config, config.workspace_path, memory_store=None)
