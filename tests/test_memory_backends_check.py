"""`nanobot memory backend check`: the swap flow against the fakes, in-process and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanobot.memory.backends.contract import AdapterError, ContextBudget, MemoryScope, RetrieveRequest
from nanobot.memory.backends.evaluation.check import run_check
from nanobot.memory.backends.registry import select
from tests.conftest import run_cli
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.memory_backend_cases import make_event
from tests.test_memory_backends_contract import ENVS


@pytest.mark.parametrize("name", list(ENVS))
async def test_check_passes_for_every_adapter(name: str, tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    env = ENVS[name](tmp_path, fake_llm)
    env.start()
    try:
        report = await run_check(env.config(), ready_timeout_s=10)
    finally:
        env.stop()
    assert report.ok and report.status == "passed", report.to_json()
    m = report.manifest
    assert m["name"] == name and len(m["config_hash"]) == 16
    assert m["scope_mapping"]["persona"] == "the chat's user (sender id)"
    assert {"readiness", "bulk_ingest", "native_mutation", "feedback"} <= set(m["capabilities"])
    names = [s.name for s in report.steps]
    assert names[:3] == ["health", "setup_scope", "write (scope A)"]
    assert "isolation (read scope B)" in names and "write/read (read scope A)" in names
    assert all(s.ok for s in report.steps), report.steps


async def test_check_reports_pending_instead_of_a_false_green(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    env = ENVS["memos"](tmp_path, fake_llm)
    env.start()
    env.server.process_delay_s = 3.0  # type: ignore[attr-defined]
    try:
        report = await run_check(env.config(), ready_timeout_s=0.3)
    finally:
        env.stop()
    assert not report.ok and report.status == "pending"
    readiness = next(s for s in report.steps if s.name == "readiness")
    assert not readiness.ok and readiness.detail == "timed out"


def test_cli_check_prints_manifest(home: Path, fake_llm: FakeLLMServer) -> None:
    env = ENVS["honcho"](home, fake_llm)
    env.workspace = home / "workspace"
    env.start()
    try:
        env.config()
        proc = run_cli("memory", "backend", "check", home=home)
    finally:
        env.stop()
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads(proc.stdout)
    assert manifest["backend"] == "honcho" and manifest["capabilities"]["readiness"] is True
    assert manifest["scope_mapping"]["native"]["workspace"] == "nanobot"
    assert "memory backend honcho: passed" in proc.stderr


def test_cli_check_fails_when_backend_is_down(home: Path, fake_llm: FakeLLMServer) -> None:
    config = {
        "agents": {"defaults": {"provider": "custom", "model": "m"}},
        "providers": {"custom": {"apiBase": fake_llm.url}},
        "memory": {
            "backend": "memos",
            "backends": {"memos": {"baseUrl": "http://127.0.0.1:9", "timeoutS": 2}},
        },
    }
    (home / "config.json").write_text(json.dumps(config), encoding="utf-8")
    proc = run_cli("memory", "backend", "check", "--json", home=home)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["status"] == "failed" and report["steps"][0]["name"] == "health"
    # one failed health step: it read "health: ok" and then "health: FAILED"
    assert [s["ok"] for s in report["steps"] if s["name"] == "health"] == [False], report["steps"]
    (home / "config.json").write_text(
        json.dumps({**config, "memory": {"backend": "graphiti-x"}}), encoding="utf-8"
    )
    assert run_cli("memory", "backend", "check", home=home).returncode == 2


def test_the_file_backend_check_consolidates_as_the_product_does_and_leaves_nothing_open(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    """The check asked a small model for a save_memory tool call with 8,192 tokens, where `/new`
    with the same config asks in plain text within maxTokens (a real 135M model ran for minutes and
    failed); and it left world-readable empty folders, so `doctor` failed its files check."""
    import os
    import stat

    from tests.conftest import config_dict

    config = config_dict(fake_llm.url, **{"agents.defaults.smallModel": True, "agents.defaults.maxTokens": 200})
    (home / "config.json").write_text(json.dumps(config))
    old_umask = os.umask(0o022)  # a service's usual umask
    try:
        run_cli("memory", "backend", "check", home=home)
    finally:
        os.umask(old_umask)
    bodies = fake_llm.requests
    assert bodies, "the check asked the model nothing"
    assert all(not body.get("tools") for body in bodies), [b.get("tools") for b in bodies]
    assert all(body.get("max_tokens", 0) <= 200 for body in bodies if "max_tokens" in body)
    backends = home / "workspace" / "memory" / ".backends"
    for path in [backends, *backends.rglob("*")] if backends.exists() else []:
        if path.is_dir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert not list((backends / "rolling_summary").glob("*/")) if (backends / "rolling_summary").exists() else True


@pytest.mark.parametrize(("name", "template"), [("memos", "cubeTemplate"), ("graphiti", "groupIdTemplate")])
async def test_check_refuses_test_scopes_that_are_the_users_own_store(
    name: str, template: str, tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """A fixed scope template (`cubeTemplate: "alice_cube"`) maps the check's test scopes onto the
    store the user's memory lives in; the check's cleanup reset it and deleted every memory there."""
    env = ENVS[name](tmp_path, fake_llm)
    env.start()
    try:
        config = env.config(**{template: "home"})
        block = select(config).block
        real = MemoryScope(run_id=block.run_id, persona_id="12345", agent_id=block.agent_id)
        adapter = env.build(**{template: "home"})
        await adapter.setup_scope(real)
        await adapter.record_event(make_event(real, "Please remember FACT-1: my favourite tea is genmaicha."))
        await env.settle(adapter, real)
        await adapter.aclose()  # one opener at a time (an embedded graph store is locked by its opener)
        report = await run_check(config, ready_timeout_s=10)
        adapter = env.build(**{template: "home"})
        request = RetrieveRequest("What is my favourite tea?", real, "cli:direct", budget=block.budget())
        kept = adapter.format_context(await adapter.retrieve(request))
        await adapter.aclose()
    finally:
        env.stop()
    assert not report.ok and report.status == "failed"
    assert [s.name for s in report.steps] == ["scope"], report.to_json()
    assert "where the real memory is kept" in report.steps[0].detail and "home" in report.steps[0].detail
    assert "genmaicha" in kept


async def test_odd_shaped_memos_answers_keep_the_good_items_and_fail_the_check_step(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    env = ENVS["memos"](tmp_path, fake_llm)
    env.start()
    server = env.server  # type: ignore[attr-defined]
    scope = MemoryScope(run_id="run-1", persona_id="alice")
    try:
        adapter = env.build()
        await adapter.record_event(make_event(scope, "Please remember FACT-1: my favourite tea is genmaicha."))
        await env.settle(adapter, scope)

        def odd(data: dict) -> dict:
            group = data["text_mem"][0]
            group["memories"] += [{"id": "m2", "memory": "x", "metadata": "n/a"}, "not a memory", None]
            return {**data, "pref_mem": "none", "tool_mem": [7], "pref_note": 5}

        server.reshape_search = odd
        request = RetrieveRequest("What is my favourite tea?", scope, "cli:direct", budget=ContextBudget())
        result = await adapter.retrieve(request)
        assert "genmaicha" in adapter.format_context(result) and len(result.items) == 2
        server.reshape_search = lambda _data: ["not", "a", "dict"]
        with pytest.raises(AdapterError, match="data is a list"):
            await adapter.retrieve(request)
        await adapter.aclose()
        report = await run_check(env.config(), ready_timeout_s=10)
    finally:
        env.stop()
    assert not report.ok and report.status == "failed"
    failed = [s for s in report.steps if not s.ok]
    assert failed[0].name == "isolation (read scope B)" and "data is a list" in failed[0].detail
