"""The backend swap flow (docs/memory-backends.md) as a runnable check.

health → setup scope → capability discovery → isolation smoke test (written under scope A, not
retrievable under scope B) → write/read smoke test after the backend's readiness wait → manifest.
The check writes only to two fresh synthetic scopes (`check-<id>` run) and resets them at the end,
so the user's real memory is never touched: a scope template that names neither the run nor the
persona (`cubeTemplate: "alice_cube"`) maps the test scopes onto the user's own store, and the
check then refuses to run rather than write into it and reset it. A readiness timeout is reported
as `pending`, not as a pass.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanobot.config.schema import Config
from nanobot.memory.backends.contract import (
    AdapterError,
    MemoryAdapter,
    MemoryEvent,
    MemoryScope,
    RetrieveRequest,
    SupportsSessionBoundary,
    elapsed_ms,
)
from nanobot.memory.backends.evaluation.capabilities import SupportsReadiness, capabilities
from nanobot.memory.backends.evaluation.conditions import condition_kind
from nanobot.memory.backends.registry import build_adapter, select

READY_TIMEOUT_S = 60.0


@dataclass
class Step:
    name: str
    ok: bool
    latency_ms: float
    detail: str = ""


@dataclass
class CheckReport:
    ok: bool
    status: str  # passed | failed | pending
    manifest: dict[str, Any]
    steps: list[Step] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "status": self.status,
            "manifest": self.manifest,
            "steps": [asdict(s) for s in self.steps],
        }


def _event(scope: MemoryScope, session: str, token: str) -> MemoryEvent:
    return MemoryEvent(
        event_id=f"check-{uuid.uuid4().hex[:12]}",
        scope=scope,
        session_id=session,
        turn_id=f"{session}#1",
        timestamp=datetime.now(UTC),
        messages=[
            {"role": "user", "content": f"Please remember FACT-1: my check token is {token}."},
            {"role": "assistant", "content": "Noted."},
        ],
        metadata={"source": "nanobot memory backend check"},
    )


async def _settle(adapter: MemoryAdapter, scope: MemoryScope, session: str, timeout_s: float) -> bool:
    """The backend's consistency step; False when readiness timed out."""
    if isinstance(adapter, SupportsReadiness):
        state = await adapter.wait_until_ready(scope, timeout_s)
        if not state.ready:
            return False
    if isinstance(adapter, SupportsSessionBoundary):
        await adapter.end_session(session)
    return True


async def run_check(
    config: Config,
    workspace: Path | None = None,
    *,
    provider: Any = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    progress: Callable[[str], None] = lambda _m: None,
) -> CheckReport:
    sel = select(config)
    adapter = build_adapter(config, workspace, provider=provider, selection=sel)
    run = f"check-{uuid.uuid4().hex[:8]}"
    scope_a = MemoryScope(run_id=run, persona_id="check-a", agent_id=sel.block.agent_id)
    scope_b = MemoryScope(run_id=run, persona_id="check-b", agent_id=sel.block.agent_id)
    session = f"check:{run}"
    token = f"tok{uuid.uuid4().hex[:10]}"
    stores = adapter.backend_name not in ("no_memory", "static_profile")
    manifest: dict[str, Any] = {
        "backend": adapter.backend_name,
        "selected_by": f"memory.{sel.kind}",
        "name": sel.name,
        "condition_kind": condition_kind(adapter),
        "config_hash": sel.config_hash,
        "run_id": sel.block.run_id,
        "agent_id": sel.block.agent_id,
        "scope_mapping": {
            "persona": "the chat's user (sender id)",
            "session": "the session key",
            "run": f"memory.backends.{sel.name}.runId = {sel.block.run_id}",
            "native": adapter.scope_mapping(MemoryScope(sel.block.run_id, "<sender id>", sel.block.agent_id)),
        },
        "context_budget": {"max_tokens": sel.block.context_tokens, "max_items": sel.block.max_items},
    }
    report = CheckReport(ok=False, status="failed", manifest=manifest)
    real = MemoryScope(sel.block.run_id, "<sender id>", sel.block.agent_id)
    shared = _shared_with_real(adapter, (scope_a, scope_b), real)
    if stores and shared:
        report.steps.append(Step("scope", False, 0.0, shared))
        await adapter.aclose()
        return report

    async def step(name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        progress(f"{name} …")
        try:
            value = await fn()
        except AdapterError as exc:
            report.steps.append(Step(name, False, elapsed_ms(started), f"{exc} (raw: {str(exc.raw)[:300]})"))
            raise
        except Exception as exc:  # noqa: BLE001 - an answer the adapter did not expect is a failed step
            report.steps.append(Step(name, False, elapsed_ms(started), f"{type(exc).__name__}: {exc}"))
            raise AdapterError.native(adapter.backend_name, name, exc) from exc
        report.steps.append(Step(name, True, elapsed_ms(started)))
        return value

    def fail(name: str, detail: str) -> CheckReport:
        report.steps.append(Step(name, False, 0.0, detail))
        return report

    try:
        health = await step("health", adapter.health)
        manifest["health"] = {
            "status": health.status,
            "consistency_model": health.consistency_model,
            "native_memory_types": health.native_memory_types,
            "native_ingest_modes": health.native_ingest_modes,
            "warnings": health.warnings,
        }
        if health.status != "ok":  # the step itself answered: it is that step that failed, not a second one
            checked = report.steps.pop()
            report.steps.append(
                Step("health", False, checked.latency_ms, f"backend is {health.status}: {'; '.join(health.warnings)}")
            )
            return report
        await step("setup_scope", lambda: _setup(adapter, scope_a, scope_b))
        manifest["capabilities"] = capabilities(adapter)
        receipt = await step("write (scope A)", lambda: adapter.record_event(_event(scope_a, session, token)))
        manifest["write"] = {"status": receipt.status, "native_ids": receipt.native_ids[:5]}
        started = time.perf_counter()
        ready = await _settle(adapter, scope_a, session, ready_timeout_s)
        report.steps.append(Step("readiness", ready, elapsed_ms(started), "" if ready else "timed out"))
        if not ready:
            report.status = "pending"  # never a false green: the write is not readable yet
            return report
        query = "What is my check token?"
        other = await step(
            "isolation (read scope B)",
            lambda: adapter.retrieve(RetrieveRequest(query, scope_b, session, budget=sel.block.budget())),
        )
        if token in adapter.format_context(other) or token in str(other.raw):
            return fail("isolation", "scope B retrieved what was written under scope A")
        mine = await step(
            "write/read (read scope A)",
            lambda: adapter.retrieve(RetrieveRequest(query, scope_a, session, budget=sel.block.budget())),
        )
        found = token in adapter.format_context(mine)
        if stores and not found:
            return fail("write/read", "what was written under scope A is not retrievable under scope A")
        if not stores and found:
            return fail("write/read", "a control that stores nothing returned the written event")
        manifest["retrieve"] = {
            "items": len(mine.items),
            "filtering": mine.trace.filtering,
            "latency_ms": mine.trace.latency_ms,
        }
        report.ok, report.status = True, "passed"
        return report
    except AdapterError:
        return report
    finally:
        for scope in (scope_a, scope_b):
            try:
                await adapter.reset_scope(scope)
            except Exception as exc:  # noqa: BLE001 - cleanup is best effort, and said so
                report.steps.append(Step(f"cleanup {scope.persona_id}", False, 0.0, repr(exc)))
        await adapter.aclose()


def _shared_with_real(adapter: MemoryAdapter, tests: tuple[MemoryScope, ...], real: MemoryScope) -> str:
    """Why the test scopes cannot be used ("" when they can): one maps to the store a real user's
    memory lives in, and resetting it at the end would delete that memory."""
    target = adapter.reset_target(real)
    if any(adapter.reset_target(scope) == target for scope in tests):
        return (
            f"the check's test scopes map to {target}, where the real memory is kept (the scope "
            "template names neither {run_id} nor {persona_id}): not run, so nothing of yours is "
            "written or deleted"
        )
    return ""


async def _setup(adapter: MemoryAdapter, *scopes: MemoryScope) -> None:
    for scope in scopes:
        await adapter.setup_scope(scope)
