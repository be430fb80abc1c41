"""mem0 (mem0ai 2.2) through `AsyncMemory`: native extraction on add, native hybrid search.

Storage is a local Qdrant directory inside the workspace (memory/.backends/mem0) with mem0's
history database beside it; LLM and embedder go through the configured OpenAI-compatible
provider. Scope mapping: user_id = persona, run_id = run, agent_id when configured; search takes
them inside `filters` (with the tags as hard metadata filters). `infer=True` by default; 2.2
only adds (dedup by hash) — updates and deletes are explicit native mutations.
Telemetry is off (MEM0_TELEMETRY=False) and MEM0_DIR points into the workspace before import.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from nanobot.config.schema import Config
from nanobot.memory.backends.config import Mem0Block, require_libraries, resolve_embedder, resolve_llm
from nanobot.memory.backends.contract import (
    AdapterError,
    HealthReport,
    MemoryAdapter,
    MemoryEvent,
    MemoryItem,
    MemoryScope,
    ResetReceipt,
    RetrieveRequest,
    RetrieveResult,
    WriteReceipt,
    elapsed_ms,
)
from nanobot.memory.store import backend_dir
from nanobot.timeutil import parse_iso_or_none

DEFAULT_THRESHOLD = 0.1  # mem0's own default for search


def build_mem0(config: Config, workspace: Path, block: Any) -> Mem0Adapter:
    assert isinstance(block, Mem0Block)
    require_libraries("mem0")  # imported at first use: a missing one left every turn's memory failing
    llm = resolve_llm(config, "mem0", block.llm)
    embedder = resolve_embedder(config, "mem0", block.embedder, llm)
    root = Path(block.path) if block.path else backend_dir(workspace, "mem0")
    native = {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": block.collection,
                "path": str(root / "qdrant"),
                "embedding_model_dims": embedder.dims,
                "on_disk": True,
            },
        },
        "llm": {
            "provider": "openai",
            "config": {
                "model": llm.model,
                "api_key": llm.api_key,
                "openai_base_url": llm.base_url,
                "temperature": 0.0,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": embedder.model,
                "api_key": embedder.api_key,
                "openai_base_url": embedder.base_url,
                "embedding_dims": embedder.dims,
            },
        },
        "history_db_path": str(root / "history.db"),
    }
    return Mem0Adapter(block, native, root)


class Mem0Adapter(MemoryAdapter):
    backend_name = "mem0"
    consistency_model = "immediate"

    def __init__(self, block: Mem0Block, native_config: dict[str, Any], root: Path) -> None:
        super().__init__()
        self.block = block
        self.native_config = native_config
        self.root = root
        self._memory: Any = None
        self._lock = asyncio.Lock()

    async def memory(self) -> Any:
        """AsyncMemory, built on first use: the local Qdrant directory is locked by its opener."""
        async with self._lock:
            if self._memory is None:
                self.root.mkdir(parents=True, exist_ok=True)
                os.environ.setdefault("MEM0_TELEMETRY", "False")
                os.environ.setdefault("MEM0_DIR", str(self.root))
                self._memory = await self._native("open", self._open())
            return self._memory

    async def _open(self) -> Any:
        from mem0 import AsyncMemory

        return await asyncio.to_thread(AsyncMemory.from_config, self.native_config)

    def _ids(self, scope: MemoryScope) -> dict[str, str]:
        ids = {"user_id": scope.persona_id, "run_id": scope.run_id}
        if scope.agent_id:
            ids["agent_id"] = scope.agent_id
        return ids

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        return {**self._ids(scope), "collection": self.block.collection, "path": str(self.root)}

    async def setup_scope(self, scope: MemoryScope) -> None:
        await self.memory()  # mem0 scopes by filters: nothing to create beyond the store itself

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        memory = await self.memory()
        metadata = {
            "event_id": event.event_id,
            "turn_id": event.turn_id,
            "session_id": event.session_id,
            "timestamp": event.timestamp.isoformat(),
            **event.tags,
        }
        messages = [{k: v for k, v in m.items() if k in ("role", "content", "name")} for m in event.messages]
        result = await self._native(
            "record_event",
            memory.add(messages, **self._ids(event.scope), metadata=metadata, infer=self.block.infer),
        )
        ids = [str(r["id"]) for r in (result or {}).get("results", []) if r.get("id")]
        trace = self.trace(event.scope, f"Memory.add(infer={self.block.infer})")
        trace.native_ids = ids
        if not ids:
            trace.warnings.append("mem0 extracted nothing new (or only duplicates)")
        return WriteReceipt("committed", ids, 0.0, trace)

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        memory = await self.memory()
        filters: dict[str, Any] = {**self._ids(request.scope), **request.tags, **request.filters}
        threshold = self.block.threshold if self.block.threshold is not None else DEFAULT_THRESHOLD
        response = await self._native(
            "retrieve",
            memory.search(
                request.query,
                top_k=request.budget.max_items,
                filters=filters,
                threshold=threshold,
                rerank=self.block.rerank,
            ),
        )
        items = [
            MemoryItem(
                text=str(r.get("memory") or ""),
                native_id=str(r.get("id")),
                score=float(r["score"]) if isinstance(r.get("score"), int | float) else None,
                timestamp=parse_iso_or_none(r.get("updated_at") or r.get("created_at")),
                raw=r,
            )
            for r in (response or {}).get("results", [])
        ]
        trace = self.trace(request.scope, "Memory.search")
        trace.native_ids = [i.native_id for i in items if i.native_id]
        trace.filtering = "hard" if request.tags else "none"
        return RetrieveResult(request, items, response, trace)

    async def native_mutation(self, scope: MemoryScope, operation: str, **kwargs: Any) -> dict[str, Any]:
        """mem0's explicit mutations: `update` (memory_id, data), `delete` (memory_id), `history` (memory_id)."""
        memory = await self.memory()
        calls = {
            "update": lambda: memory.update(kwargs["memory_id"], kwargs["data"]),
            "delete": lambda: memory.delete(kwargs["memory_id"]),
            "history": lambda: memory.history(kwargs["memory_id"]),
        }
        if operation not in calls:
            raise AdapterError(
                self.backend_name,
                "native_mutation",
                f"unknown operation {operation!r}",
                raw={"supported": sorted(calls)},
            )
        result = await self._native(operation, calls[operation]())
        return result if isinstance(result, dict) else {"result": result}

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        started = time.perf_counter()
        memory = await self.memory()
        await self._native("reset_scope", memory.delete_all(**self._ids(scope)))
        return ResetReceipt(scope=scope, removed=None, latency_ms=elapsed_ms(started))

    async def health(self) -> HealthReport:
        notes = []
        try:
            import spacy  # noqa: F401
        except ImportError:
            notes.append("spaCy not installed (mem0[nlp]): BM25 lemmatization and entity linking are off")
        return await self._health(
            self.memory(), notes=notes, native_ingest_modes=[f"messages (infer={self.block.infer})"]
        )

    async def aclose(self) -> None:
        memory, self._memory = self._memory, None
        if memory is None:
            return
        store = getattr(memory, "vector_store", None)
        client = getattr(store, "client", None)
        close = getattr(client, "close", None)
        if callable(close):
            await asyncio.to_thread(close)  # releases the local Qdrant lock for the next opener
        db = getattr(memory, "db", None)
        if db is not None and callable(getattr(db, "close", None)):
            await asyncio.to_thread(db.close)
