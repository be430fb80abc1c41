"""Optional adapter capabilities the check discovers and reports (`nanobot memory backend check`).

Adapters implement these methods structurally (no import needed); only the evaluation asks for them.
The one capability the agent itself uses, the session boundary, stays in the contract.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from nanobot.memory.backends.contract import (
    MemoryEvent,
    MemoryScope,
    Readiness,
    SupportsSessionBoundary,
    WriteReceipt,
)


@runtime_checkable
class SupportsReadiness(Protocol):
    async def readiness(self, scope: MemoryScope) -> Readiness: ...

    async def wait_until_ready(self, scope: MemoryScope, timeout_s: float) -> Readiness: ...


@runtime_checkable
class SupportsBulkIngest(Protocol):
    async def record_events(self, events: list[MemoryEvent]) -> list[WriteReceipt]: ...


@runtime_checkable
class SupportsNativeMutation(Protocol):
    async def native_mutation(self, scope: MemoryScope, operation: str, **kwargs: Any) -> dict[str, Any]: ...


@runtime_checkable
class SupportsProvenance(Protocol):
    async def provenance(self, scope: MemoryScope, native_id: str) -> dict[str, Any]: ...


@runtime_checkable
class SupportsNativeQuery(Protocol):
    async def native_query(self, scope: MemoryScope, query: str) -> dict[str, Any]: ...


@runtime_checkable
class SupportsFeedback(Protocol):
    async def apply_feedback(self, scope: MemoryScope, session_id: str, feedback: str) -> WriteReceipt: ...


CAPABILITIES: dict[str, type] = {
    "readiness": SupportsReadiness,
    "bulk_ingest": SupportsBulkIngest,
    "native_mutation": SupportsNativeMutation,
    "provenance": SupportsProvenance,
    "native_query": SupportsNativeQuery,
    "feedback": SupportsFeedback,
    "session_boundary": SupportsSessionBoundary,
}


def capabilities(adapter: object) -> dict[str, bool]:
    return {name: isinstance(adapter, proto) for name, proto in CAPABILITIES.items()}
