"""The adapter contract, parametrized over every backend and control condition.

Every adapter is built from config through the registry and driven through its real library
against local fakes on 127.0.0.1 (scripted OpenAI-compatible LLM, Honcho and MemOS REST fakes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nanobot.memory.backends.contract import (
    AdapterError,
    AdapterMode,
    ContextBudget,
    MemoryAdapter,
    MemoryScope,
    RetrieveRequest,
)
from nanobot.memory.backends.evaluation.conditions import condition_kind
from tests.fakes import memory_backend_cases as cases
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.memory_backend_cases import Env, make_event

ENVS: dict[str, type[Env]] = {
    "file": cases.RollingSummaryEnv,
    "no_memory": cases.NoMemoryEnv,
    "rolling_summary": cases.RollingSummaryConditionEnv,
    "full_history": cases.FullHistoryEnv,
    "static_profile": cases.StaticProfileEnv,
    **cases.BACKEND_ENVS,
}
STORING = [n for n, e in ENVS.items() if e.stores]
NATIVE = [n for n, e in ENVS.items() if e.native_layer]
ALICE = MemoryScope(run_id="run-1", persona_id="alice")
BOB = MemoryScope(run_id="run-1", persona_id="bob")
FACT = "Please remember FACT-1: my favourite tea is genmaicha."
QUERY = "What is my favourite tea?"


@pytest.fixture
async def env(request: pytest.FixtureRequest, tmp_path: Path, fake_llm: FakeLLMServer) -> AsyncIterator[Env]:
    e = ENVS[request.param](tmp_path, fake_llm)
    e.start()
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture
async def adapter(env: Env) -> AsyncIterator[MemoryAdapter]:
    a = env.build()
    await a.setup_scope(ALICE)
    await a.setup_scope(BOB)
    try:
        yield a
    finally:
        await a.aclose()


def request_for(scope: MemoryScope, query: str = QUERY, **kw: object) -> RetrieveRequest:
    return RetrieveRequest(query=query, scope=scope, session_id="cli:direct", **kw)  # type: ignore[arg-type]


async def context(adapter: MemoryAdapter, scope: MemoryScope, query: str = QUERY) -> str:
    return adapter.format_context(await adapter.retrieve(request_for(scope, query)))


# 1 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", list(ENVS), indirect=True)
async def test_record_returns_receipt(env: Env, adapter: MemoryAdapter) -> None:
    receipt = await adapter.record_event(make_event(ALICE, FACT))
    if env.stores:
        assert receipt.status in ("committed", "queued", "pending")
    else:
        assert receipt.status == "discarded"
    assert receipt.latency_ms >= 0 and receipt.trace.backend_name == adapter.backend_name
    assert condition_kind(adapter) == ("control" if env.condition or env.name == "file" else "architecture")


# 2 + 3 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("env", list(ENVS), indirect=True)
async def test_same_scope_finds_it_other_scope_does_not(env: Env, adapter: MemoryAdapter) -> None:
    await adapter.record_event(make_event(ALICE, FACT))
    await env.settle(adapter, ALICE)
    mine, theirs = await context(adapter, ALICE), await context(adapter, BOB)
    if env.stores:
        assert "genmaicha" in mine
    elif env.name == "static_profile":
        assert "Alice drinks genmaicha" in mine and "FACT-1" not in mine
    else:
        assert mine == ""
    assert "FACT-1" not in theirs and "favourite tea is genmaicha" not in theirs
    if env.name == "static_profile":
        assert "Bob prefers espresso" in theirs and "genmaicha" not in theirs


# 4 + 10 + 11 -----------------------------------------------------------------------------
@pytest.mark.parametrize("env", list(ENVS), indirect=True)
async def test_read_only_test_session_writes_nothing(env: Env, adapter: MemoryAdapter) -> None:
    await adapter.record_event(make_event(ALICE, FACT))
    mode = await adapter.set_mode(AdapterMode(read_only=True, reason="test_session"))
    assert mode.read_only and not mode.previous_read_only
    probe = make_event(ALICE, "Please remember FACT-2: my car is a red tractor.", n=2)
    receipt = await adapter.record_event(probe)
    assert receipt.status == "skipped_read_only" and receipt.native_ids == []
    await adapter.set_mode(AdapterMode(read_only=False, reason="accumulation"))
    await env.settle(adapter, ALICE)
    text = await context(adapter, ALICE, "What car do I drive? tractor")
    assert "tractor" not in text
    if env.stores:  # the test session did not reset the accumulated memory
        assert "genmaicha" in await context(adapter, ALICE)


# 5 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", list(ENVS), indirect=True)
async def test_budget_reaches_backend_and_section_is_labelled(env: Env, adapter: MemoryAdapter) -> None:
    for n in range(1, 4):
        await adapter.record_event(
            make_event(ALICE, f"Please remember FACT-{n}: tea number {n} is nice.", n=n)
        )
    await env.settle(adapter, ALICE)
    budget = ContextBudget(max_tokens=400, max_items=2)
    result = await adapter.retrieve(request_for(ALICE, "which tea is nice", budget=budget))
    native = env.native_budget()
    if native is not None:
        assert native["max_items"] == 2 or native.get("max_tokens") == 400, native
    if env.top_k:
        assert len(result.items) <= 2
    text = adapter.format_context(result)
    if text:
        assert text.startswith(f'<memory-context backend="{adapter.backend_name}" scope="run-1:alice">')
        assert text.endswith("</memory-context>")
        from nanobot.providers.tokens import count_text

        assert count_text(text) <= budget.max_tokens + 8


# 6 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", STORING, indirect=True)
async def test_reset_clears_only_its_scope(env: Env, adapter: MemoryAdapter) -> None:
    await adapter.record_event(make_event(ALICE, FACT))
    await adapter.record_event(make_event(BOB, "Please remember FACT-1: my favourite tea is sencha."))
    await env.settle(adapter, ALICE)
    await env.settle(adapter, BOB)
    receipt = await adapter.reset_scope(ALICE)
    assert receipt.scope == ALICE
    await env.settle(adapter, ALICE)
    assert "genmaicha" not in await context(adapter, ALICE)
    assert "sencha" in await context(adapter, BOB)


# 7 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", NATIVE, indirect=True)
async def test_native_errors_become_adapter_errors(env: Env, adapter: MemoryAdapter) -> None:
    await env.break_native(adapter)
    with pytest.raises(AdapterError) as info:
        await adapter.record_event(make_event(ALICE, FACT))
        await env.settle(adapter, ALICE)
        await adapter.retrieve(request_for(ALICE))
    assert info.value.backend == adapter.backend_name
    assert info.value.raw is not None  # the native diagnostics are kept


# 8 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", STORING, indirect=True)
async def test_raw_results_keep_native_provenance(env: Env, adapter: MemoryAdapter) -> None:
    await adapter.record_event(make_event(ALICE, FACT))
    await env.settle(adapter, ALICE)
    result = await adapter.retrieve(request_for(ALICE))
    assert result.raw is not None
    for field in env.provenance:
        assert result.items and all(getattr(i, field) is not None for i in result.items), field
    if "score" in env.provenance:
        assert result.trace.top_score is not None
    if "timestamp" in env.provenance:
        assert result.trace.newest_retrieved_at is not None


# 9 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("env", STORING, indirect=True)
async def test_tags_travel_with_events_and_requests(env: Env, adapter: MemoryAdapter) -> None:
    tagged = make_event(ALICE, FACT, scenario="travel", context="personal", attribute="drinks")
    await adapter.record_event(tagged)
    await env.settle(adapter, ALICE)
    req = request_for(ALICE, tags={"scenario": "travel", "context": "personal", "attribute": "drinks"})
    result = await adapter.retrieve(req)
    assert result.trace.filtering in ("hard", "semantic", "none")
    assert "genmaicha" in adapter.format_context(result)
    env_check = getattr(env, "check_tags", None)
    if env_check is not None:
        env_check(tagged)


async def test_health_reports_for_every_adapter(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    for name, cls in ENVS.items():
        e = cls(tmp_path / name, fake_llm)
        e.start()
        try:
            a = e.build()
            report = await a.health()
            assert report.status == "ok", (name, report)
            assert report.backend_name == a.backend_name
            assert report.consistency_model in ("immediate", "eventual", "async_derived")
            await a.aclose()
        finally:
            e.stop()
