"""AdapterMemory: a MemoryAdapter behind the agent's LongTermMemory seam.

Scope mapping: persona = the chat's user (sender_id), session = the session key, run id
from the backend's config block. Each finished turn becomes a MemoryEvent; the retrieved context
goes to the runtime block. A failing backend degrades to an empty context with a logged warning,
never a failed turn: a reply waits CONTEXT_TIMEOUT_S at most, and a backend that failed is skipped
for a while. Group chats get no long-term memory unless `memory.shareInGroups` is true; guests never
(the agent asks only where memory_private allows).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime

from loguru import logger

from nanobot.memory.backends.contract import (
    AdapterError,
    ContextBudget,
    MemoryAdapter,
    MemoryEvent,
    MemoryScope,
    RetrieveRequest,
    SupportsSessionBoundary,
)
from nanobot.memory.seam import TurnRecord
from nanobot.timeutil import parse_iso_or_none

# A reply waits this long at most for a backend's context (scope set-up and retrieval together);
# a backend that failed or timed out is then skipped for a while (doubling, up to the cap), so a
# hung one costs one turn its wait, not every turn 20-40 s.
CONTEXT_TIMEOUT_S = 5.0
SKIP_AFTER_FAILURE_S = 30.0
SKIP_MAX_S = 600.0
RECORD_TIMEOUT_S = 30.0  # recording runs after the reply; bounded so an exit does not wait on it for ever


class AdapterMemory:
    """LongTermMemory over any MemoryAdapter (backend or control)."""

    owns_memory_file = False  # context comes from the backend per prompt, never from MEMORY.md

    def __init__(
        self,
        adapter: MemoryAdapter,
        *,
        run_id: str,
        agent_id: str | None = None,
        budget: ContextBudget | None = None,
        share_in_groups: bool = False,
    ) -> None:
        self.adapter = adapter
        self.name = adapter.backend_name
        self.run_id = run_id
        self.agent_id = agent_id
        self.budget = budget or ContextBudget()
        self.share_in_groups = share_in_groups
        self._ready_scopes: set[MemoryScope] = set()
        self._failures = 0
        self._skip_until = 0.0  # monotonic time before which context is not asked for

    def scope_for(self, sender_id: str) -> MemoryScope:
        return MemoryScope(run_id=self.run_id, persona_id=sender_id or "user", agent_id=self.agent_id)

    async def _ensure_scope(self, scope: MemoryScope) -> None:
        if scope not in self._ready_scopes:
            await self.adapter.setup_scope(scope)
            self._ready_scopes.add(scope)

    async def context_for(self, query: str, session_key: str, sender_id: str, is_group: bool) -> str:
        if is_group and not self.share_in_groups:
            return ""
        if time.monotonic() < self._skip_until:
            return ""
        scope = self.scope_for(sender_id)
        try:
            async with asyncio.timeout(CONTEXT_TIMEOUT_S):
                await self._ensure_scope(scope)
                request = RetrieveRequest(query=query, scope=scope, session_id=session_key, budget=self.budget)
                result = await self.adapter.retrieve(request)
            self._failures = 0
            return self.adapter.format_context(result)
        except AdapterError as exc:
            self._failed(f"{exc} (raw: {str(exc.raw)[:300]})")
        except TimeoutError:
            self._failed(f"no answer within {CONTEXT_TIMEOUT_S:g} s")
        except Exception as exc:  # noqa: BLE001 - any backend failure degrades to no context
            self._failed(repr(exc))
        return ""

    def _failed(self, why: str) -> None:
        skip = min(SKIP_MAX_S, SKIP_AFTER_FAILURE_S * 2**self._failures)
        self._failures += 1
        self._skip_until = time.monotonic() + skip
        logger.warning("memory backend {}: no context this turn: {}; not asked again for {:g} s", self.name, why, skip)

    async def record_turn(self, turn: TurnRecord) -> None:
        if turn.is_group and not self.share_in_groups:
            return
        scope = self.scope_for(turn.sender_id)
        when = parse_iso_or_none(turn.timestamp) or datetime.now().astimezone()
        event = MemoryEvent(
            event_id=uuid.uuid4().hex,
            scope=scope,
            session_id=turn.session_key,
            turn_id=f"{turn.session_key}@{turn.timestamp}",
            timestamp=when,
            messages=[
                {"role": "user", "content": turn.user_text, "name": turn.sender_id or "user"},
                {"role": "assistant", "content": turn.reply},
            ],
            metadata={"is_group": turn.is_group},
        )
        try:
            async with asyncio.timeout(RECORD_TIMEOUT_S):
                await self._ensure_scope(scope)
                receipt = await self.adapter.record_event(event)
            logger.debug(
                "memory backend {}: turn recorded ({}, {} ms)", self.name, receipt.status, receipt.latency_ms
            )
        except AdapterError as exc:
            logger.warning(
                "memory backend {}: turn not recorded: {} (raw: {})", self.name, exc, str(exc.raw)[:300]
            )
        except TimeoutError:
            logger.warning("memory backend {}: turn not recorded: no answer within {:g} s", self.name, RECORD_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - record_turn must never raise
            logger.warning("memory backend {}: turn not recorded: {!r}", self.name, exc)

    async def on_new_session(self, session_key: str) -> None:
        if not isinstance(self.adapter, SupportsSessionBoundary):
            return
        try:
            await self.adapter.end_session(session_key)
        except Exception as exc:  # noqa: BLE001
            logger.warning("memory backend {}: session boundary not recorded: {!r}", self.name, exc)

    async def aclose(self) -> None:
        await self.adapter.aclose()
