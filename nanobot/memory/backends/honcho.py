"""Honcho through its Python SDK (honcho-ai 2.7, async views): peers, sessions, session context.

Scope mapping: one workspace per run (`workspaceTemplate`), the persona as the user peer and the
assistant as a separate peer, one Honcho session per (persona, chat). Writes are
`session.add_messages`; the runtime read is `session.context(tokens=budget, search_query=query,
peer_target=user)` (Honcho picks what fits natively); readiness is the deriver queue status.
`base_url` is always explicit: the SDK's default is the hosted service.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from nanobot.memory.backends.config import HonchoBlock
from nanobot.memory.backends.contract import (
    AdapterError,
    HealthReport,
    MemoryAdapter,
    MemoryEvent,
    MemoryItem,
    MemoryScope,
    Readiness,
    ResetReceipt,
    RetrieveRequest,
    RetrieveResult,
    WriteReceipt,
    elapsed_ms,
)
from nanobot.util.text import safe_id

MAX_ID_CHARS = 100


def honcho_id(value: str) -> str:
    """Honcho ids allow [A-Za-z0-9_-]; other characters are replaced and a hash keeps ids distinct."""
    return safe_id(value, max_chars=MAX_ID_CHARS)


class HonchoAdapter(MemoryAdapter):
    backend_name = "honcho"
    consistency_model = "async_derived"

    def __init__(self, block: HonchoBlock) -> None:
        super().__init__()
        from honcho import Honcho  # the SDK is imported only when this backend is selected

        self._honcho_cls = Honcho
        self.block = block
        self._clients: dict[str, Any] = {}

    # ------------------------------------------------------------------ ids
    def workspace_id(self, scope: MemoryScope) -> str:
        return honcho_id(
            self.block.workspace_template.format(run_id=scope.run_id, persona_id=scope.persona_id)
        )

    def user_peer(self, scope: MemoryScope) -> str:
        return honcho_id(scope.persona_id)

    def session_id(self, scope: MemoryScope, session_key: str) -> str:
        # per persona: two users of one chat never read each other's session context
        return honcho_id(f"{scope.persona_id}--{session_key}")

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        return {
            "workspace": self.workspace_id(scope),
            "user_peer": self.user_peer(scope),
            "assistant_peer": self.block.assistant_peer,
            "session": self.session_id(scope, "<session key>"),
        }

    def client(self, scope: MemoryScope) -> Any:
        ws = self.workspace_id(scope)
        if ws not in self._clients:
            self._clients[ws] = self._honcho_cls(
                base_url=self.block.base_url,
                api_key=self.block.api_key or None,
                workspace_id=ws,
                timeout=self.block.timeout_s,
                max_retries=0,
            )
        return self._clients[ws]

    async def _native(self, operation: str, call: Any) -> Any:
        """Honcho's own errors keep their HTTP status and body; anything else but I/O passes through."""
        from honcho.http.exceptions import HonchoError

        try:
            return await call
        except HonchoError as exc:
            raw = {
                "error": type(exc).__name__,
                "message": str(exc),
                "body": getattr(exc, "body", None),
                "status": getattr(exc, "status_code", None),
            }
            raise AdapterError.native(self.backend_name, operation, exc, raw) from exc
        except (OSError, ValueError) as exc:
            raise AdapterError.native(self.backend_name, operation, exc) from exc

    # ------------------------------------------------------------------ contract
    async def setup_scope(self, scope: MemoryScope) -> None:
        honcho = self.client(scope)
        await self._native("setup_scope", honcho.aio.peer(self.user_peer(scope), metadata={"role": "user"}))
        await self._native(
            "setup_scope", honcho.aio.peer(self.block.assistant_peer, metadata={"role": "assistant"})
        )

    async def _session(self, scope: MemoryScope, session_key: str) -> Any:
        honcho = self.client(scope)
        return await self._native(
            "session",
            honcho.aio.session(
                self.session_id(scope, session_key),
                metadata={"session_key": session_key},
                peers=[self.user_peer(scope), self.block.assistant_peer],
            ),
        )

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        return (await self.record_events([event]))[0]

    async def record_events(self, events: list[MemoryEvent]) -> list[WriteReceipt]:
        """Bulk ingest through the same native write (one add_messages per session)."""
        receipts: list[WriteReceipt] = []
        for event in events:
            if self.read_only:
                receipts.append(await self.record_event(event))
                continue
            started = time.perf_counter()
            honcho = self.client(event.scope)
            user = await self._native("record_event", honcho.aio.peer(self.user_peer(event.scope)))
            assistant = await self._native("record_event", honcho.aio.peer(self.block.assistant_peer))
            session = await self._session(event.scope, event.session_id)
            meta = {"event_id": event.event_id, "turn_id": event.turn_id, **event.tags}
            messages = [
                (user if m.get("role") == "user" else assistant).message(
                    str(m.get("content") or ""), metadata=meta, created_at=event.timestamp
                )
                for m in event.messages
                if m.get("role") in ("user", "assistant")
            ]
            created = await self._native("record_event", session.aio.add_messages(messages))
            ids = [m.id for m in created]
            trace = self.trace(event.scope, "session.add_messages")
            trace.native_ids, trace.consistency = ids, "queued"
            receipt = WriteReceipt("queued", ids, elapsed_ms(started), trace)  # the deriver runs later
            receipts.append(receipt)
        return receipts

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        session = await self._session(request.scope, request.session_id)
        query = " ".join([request.query, *request.tags.values()])  # tags: semantic only
        context = await self._native(
            "retrieve",
            session.aio.context(
                summary=self.block.summary,
                tokens=request.budget.max_tokens,
                peer_target=self.user_peer(request.scope),
                search_query=query,
                search_top_k=self.block.search_top_k or request.budget.max_items,
            ),
        )
        prose_parts: list[str] = []
        if context.peer_representation:
            prose_parts.append(
                f"[representation of {self.user_peer(request.scope)}]\n{context.peer_representation}"
            )
        if context.peer_card:
            prose_parts.append("[peer card]\n" + "\n".join(f"- {c}" for c in context.peer_card))
        if context.summary is not None:
            prose_parts.append(f"[session summary]\n{context.summary.content}")
        items = [
            MemoryItem(
                text=f"{m.peer_id}: {m.content}",
                native_id=m.id,
                timestamp=m.created_at,
                group="recent messages",
                raw={
                    "id": m.id,
                    "peer_id": m.peer_id,
                    "content": m.content,
                    "created_at": m.created_at.isoformat(),
                    "metadata": m.metadata,
                },
            )
            for m in context.messages
        ]
        trace = self.trace(request.scope, "session.context")
        trace.native_ids = [i.native_id for i in items if i.native_id]
        trace.filtering = "semantic" if request.tags else "none"
        if context.summary is not None:
            trace.representation_version = context.summary.message_id
        raw = {
            "session_id": context.session_id,
            "peer_representation": context.peer_representation,
            "peer_card": context.peer_card,
            "summary": context.summary.content if context.summary else None,
            "messages": [i.raw for i in items],
        }
        result = RetrieveResult(request, items, raw, trace, prose="\n\n".join(prose_parts) or None)
        result.trace.retrieved_count = len(items) + len(context.peer_card or [])
        return result

    async def readiness(self, scope: MemoryScope) -> Readiness:
        status = await self._native(
            "readiness", self.client(scope).aio.queue_status(sender=self.user_peer(scope))
        )
        pending = status.pending_work_units + status.in_progress_work_units
        return Readiness(ready=pending == 0, pending=pending, detail="deriver queue")

    async def wait_until_ready(self, scope: MemoryScope, timeout_s: float) -> Readiness:
        deadline = time.monotonic() + timeout_s
        state = await self.readiness(scope)
        while not state.ready and time.monotonic() < deadline:
            await asyncio.sleep(self.block.ready_poll_s)
            state = await self.readiness(scope)
        return state

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        """Delete this persona's sessions and the conclusions about it; other peers stay."""
        started = time.perf_counter()
        honcho = self.client(scope)
        user = await self._native("reset_scope", honcho.aio.peer(self.user_peer(scope)))
        removed = 0
        sessions = [s async for s in await self._native("reset_scope", user.aio.sessions())]
        for s in sessions:
            await self._native("reset_scope", s.aio.delete())
            removed += 1
        page = await self._native(
            "reset_scope", honcho.aio.conclusions.list(filters={"observed_id": self.user_peer(scope)})
        )
        for c in [c async for c in page]:
            observer = await self._native("reset_scope", honcho.aio.peer(c.observer_id))
            await self._native("reset_scope", observer.conclusions_of(c.observed_id).aio.delete(c.id))
            removed += 1
        return ResetReceipt(scope=scope, removed=removed, latency_ms=elapsed_ms(started))

    async def health(self) -> HealthReport:
        probe = MemoryScope(run_id=self.block.run_id, persona_id="health")  # the run's own workspace
        return await self._health(
            self._native("health", self.client(probe).aio.queue_status()),
            native_ingest_modes=["session messages (user and assistant peers)"],
        )
