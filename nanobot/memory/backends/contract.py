"""The memory-backend adapter contract (docs/memory-backends.md): async-first, event-centred.

The agent never sees these types: it talks to the LongTermMemory seam, and `bridge.py` turns a
MemoryAdapter into that seam. Adapters only map ids, build native requests, format results and
manage lifecycles; extraction, ranking and summarising stay inside the backend.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from nanobot.providers.registry import ProviderConfigError

T = TypeVar("T")

WriteStatus = Literal["committed", "queued", "pending", "skipped_read_only", "discarded"]
Consistency = Literal["immediate", "eventual", "async_derived"]
HealthStatus = Literal["ok", "degraded", "unavailable"]

DEFAULT_CONTEXT_TOKENS = 1_500
DEFAULT_CONTEXT_ITEMS = 8


@dataclass(frozen=True)
class MemoryScope:
    """Who the memory belongs to: a namespace (the block's `runId`, "nanobot" by default) and one
    persona (the chat's user)."""

    run_id: str
    persona_id: str
    agent_id: str | None = None
    backend_namespace: str | None = None

    @property
    def label(self) -> str:
        return f"{self.run_id}:{self.persona_id}"


@dataclass(frozen=True)
class MemoryEvent:
    """One finished turn (or any other runtime event) as the agent saw it."""

    event_id: str
    scope: MemoryScope
    session_id: str
    turn_id: str
    timestamp: datetime  # aware
    messages: list[dict[str, Any]]  # {role, content, name?, tool_call_id?}
    tags: dict[str, str] = field(default_factory=dict)  # labels stored natively (tags, metadata)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ContextBudget:
    """How much memory context the prompt can take; passed into native retrieval."""

    max_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_items: int = DEFAULT_CONTEXT_ITEMS
    min_tokens: int = 0


@dataclass(frozen=True)
class RetrieveRequest:
    query: str
    scope: MemoryScope
    session_id: str
    budget: ContextBudget = field(default_factory=ContextBudget)
    tags: dict[str, str] = field(default_factory=dict)  # labels to match (a hard filter where native)
    filters: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    """What happened natively (ids, latency, what was retrieved); for logs and diagnostics, never for
    the prompt."""

    backend_name: str
    scope: MemoryScope
    native_operation: str
    native_ids: list[str] = field(default_factory=list)
    latency_ms: float = 0.0
    consistency: Literal["committed", "queued", "pending"] = "committed"
    token_count: int | None = None
    retrieved_count: int | None = None
    top_score: float | None = None
    oldest_retrieved_at: datetime | None = None
    newest_retrieved_at: datetime | None = None
    representation_version: str | None = None
    last_derived_at: datetime | None = None
    filtering: Literal["hard", "semantic", "none"] = "none"
    warnings: list[str] = field(default_factory=list)


@dataclass
class WriteReceipt:
    status: WriteStatus
    native_ids: list[str]
    latency_ms: float
    trace: Trace


@dataclass
class MemoryItem:
    """One native result, normalised only as far as formatting needs; `raw` keeps the rest."""

    text: str
    native_id: str | None = None
    score: float | None = None
    timestamp: datetime | None = None
    group: str | None = None  # a native grouping label (MemOS memory type, Graphiti edge/node, ...)
    label: str | None = None  # extra provenance shown in the prompt (valid_at/invalid_at, source)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class RetrieveResult:
    request: RetrieveRequest
    items: list[MemoryItem]
    raw: Any  # the native response, untouched
    trace: Trace
    prose: str | None = None  # backends that answer in prose (Honcho context, file summary)


@dataclass(frozen=True)
class AdapterMode:
    read_only: bool
    reason: str = ""


@dataclass(frozen=True)
class ModeReceipt:
    read_only: bool
    reason: str
    previous_read_only: bool


@dataclass(frozen=True)
class ResetReceipt:
    scope: MemoryScope
    removed: int | None  # None: the backend does not say how many
    latency_ms: float
    warnings: list[str] = field(default_factory=list)


@dataclass
class HealthReport:
    status: HealthStatus
    backend_name: str
    latency_ms: float
    consistency_model: Consistency
    native_memory_types: list[str] | None = None
    native_ingest_modes: list[str] | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    pending: int | None
    detail: str = ""


class AdapterError(Exception):
    """A backend failure, normalised; `raw` keeps the native diagnostics (status, body, exception)."""

    def __init__(self, backend: str, operation: str, message: str, raw: Any = None) -> None:
        super().__init__(f"{backend} {operation}: {message}")
        self.backend = backend
        self.operation = operation
        self.raw = raw

    @classmethod
    def native(cls, backend: str, operation: str, exc: BaseException, raw: Any = None) -> AdapterError:
        """The failure `exc` of a backend's own library, named by its type; `raw` defaults to `exc`."""
        return cls(backend, operation, f"{type(exc).__name__}: {exc}", raw=exc if raw is None else raw)


class BackendConfigError(ProviderConfigError):
    """A memory config key is invalid or its backend library is missing; the message names the key.
    A ProviderConfigError, so every command that builds the agent prints it and exits 2."""


# ---------------------------------------------------------------------- optional capabilities
# The agent uses one: the session boundary. The others (readiness, bulk ingest, native mutation,
# feedback, ...) are discovered by the check in evaluation/capabilities.py.
@runtime_checkable
class SupportsSessionBoundary(Protocol):
    """A /new in the chat (whoever spoke in it): controls that pack prior transcripts need to know
    where one ends."""

    async def end_session(self, session_id: str) -> None: ...


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


# ---------------------------------------------------------------------- the adapter
class MemoryAdapter(ABC):
    """Base of every backend (and of the evaluation's controls). The read-only gate lives here, so it
    is the same for all."""

    backend_name: str = "abstract"
    consistency_model: Consistency = "immediate"

    def __init__(self) -> None:
        self._read_only = False
        self._read_only_reason = ""

    async def _health(self, probe: Awaitable[Any], *, notes: list[str] | None = None, **native: Any) -> HealthReport:
        """The report of one probe of the native store: "ok", or "unavailable" with the probe's error
        as the first warning; `notes` are further warnings, `native` the report's native_* fields."""
        started = time.perf_counter()
        status, warnings = "ok", []
        try:
            await probe
        except AdapterError as exc:
            status, warnings = "unavailable", [str(exc)]
        return HealthReport(
            status,
            self.backend_name,
            elapsed_ms(started),
            self.consistency_model,
            warnings=[*warnings, *(notes or [])],
            **native,
        )

    async def _native(self, operation: str, call: Awaitable[T]) -> T:
        """Await a call into the backend's library: its failures become AdapterErrors for `operation`
        that keep the original; a missing library (ImportError) passes through as itself."""
        try:
            return await call
        except (AdapterError, ImportError):
            raise
        except Exception as exc:  # noqa: BLE001 - libraries raise many kinds; all keep their original
            raise AdapterError.native(self.backend_name, operation, exc) from exc

    @property
    def read_only(self) -> bool:
        return self._read_only

    async def set_mode(self, mode: AdapterMode) -> ModeReceipt:
        previous = self._read_only
        self._read_only, self._read_only_reason = mode.read_only, mode.reason
        return ModeReceipt(read_only=mode.read_only, reason=mode.reason, previous_read_only=previous)

    async def record_event(self, event: MemoryEvent) -> WriteReceipt:
        """Write one event natively; while read-only nothing is stored (a skipped receipt)."""
        if self._read_only:
            trace = self.trace(event.scope, "record_event(skipped)")
            trace.warnings.append(f"read-only: {self._read_only_reason or 'test session'}")
            return WriteReceipt("skipped_read_only", [], 0.0, trace)
        started = time.perf_counter()
        receipt = await self._record(event)
        receipt.latency_ms = receipt.trace.latency_ms = elapsed_ms(started)
        return receipt

    async def retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        started = time.perf_counter()
        result = await self._retrieve(request)
        result.trace.latency_ms = elapsed_ms(started)
        result.trace.retrieved_count = (
            len(result.items) if result.prose is None else result.trace.retrieved_count
        )
        scores = [i.score for i in result.items if i.score is not None]
        result.trace.top_score = max(scores) if scores else None
        stamps = [i.timestamp for i in result.items if i.timestamp is not None]
        if stamps:
            result.trace.oldest_retrieved_at, result.trace.newest_retrieved_at = min(stamps), max(stamps)
        return result

    def trace(self, scope: MemoryScope, operation: str) -> Trace:
        return Trace(
            backend_name=self.backend_name,
            scope=scope,
            native_operation=operation,
        )

    def format_context(self, result: RetrieveResult) -> str:
        from nanobot.memory.backends.formatting import format_result

        return format_result(self.backend_name, result)

    @abstractmethod
    async def setup_scope(self, scope: MemoryScope) -> None:
        """Create or check the backend's native isolation resources for `scope`."""

    @abstractmethod
    async def _record(self, event: MemoryEvent) -> WriteReceipt: ...

    @abstractmethod
    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult: ...

    @abstractmethod
    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        """Remove what this adapter stored for `scope`, and nothing else."""

    @abstractmethod
    async def health(self) -> HealthReport: ...

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        """How `scope` maps to native ids (for the swap-flow manifest)."""
        return {"run_id": scope.run_id, "persona_id": scope.persona_id}

    def reset_target(self, scope: MemoryScope) -> str:
        """What `reset_scope(scope)` deletes, by its native name: two scopes with one target share
        their memory, so resetting one empties the other (the check refuses such a test scope)."""
        return " ".join(f"{k}={v}" for k, v in sorted(self.scope_mapping(scope).items()))

    async def aclose(self) -> None:
        return None
