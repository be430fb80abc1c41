"""MemOS over its product REST API (plain httpx; MemoryOS itself never lives in this environment).

Requests follow MemOS's APIADDRequest / APISearchRequest models. Scope mapping: user_id from
`userTemplate` (persona), one MemCube per scope from `cubeTemplate` (run + persona) used as the
writable and the readable cube. async_mode stays native (default async): writes come back
`queued`, and readiness is the scheduler's idle state for the cube. Memory-type groups
(text / preference / tool / skill and their native memory_type labels) stay apart in the context.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from nanobot.memory.backends.config import MemosBlock
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
from nanobot.timeutil import parse_iso_or_none

ADD_PATH = "/product/add"
SEARCH_PATH = "/product/search"
GET_PATH = "/product/get_memory"
DELETE_PATH = "/product/delete_memory"
FEEDBACK_PATH = "/product/feedback"
STATUS_PATH = "/product/scheduler/status"
WAIT_PATH = "/product/scheduler/wait"
BUCKETS = ("text_mem", "pref_mem", "tool_mem", "skill_mem")  # kept apart, in this order
NATIVE_TYPES = [
    "text_mem",
    "pref_mem",
    "tool_mem",
    "skill_mem",
    "WorkingMemory",
    "LongTermMemory",
    "UserMemory",
    "PreferenceMemory",
    "ToolSchemaMemory",
    "ToolTrajectoryMemory",
    "SkillMemory",
]


class MemosAdapter(MemoryAdapter):
    backend_name = "memos"

    def __init__(self, block: MemosBlock) -> None:
        super().__init__()
        self.block = block
        self.consistency_model = "eventual" if block.async_mode == "async" else "immediate"
        headers = {"Authorization": f"Bearer {block.api_key}"} if block.api_key else {}
        self.client = httpx.AsyncClient(
            base_url=block.base_url.rstrip("/"), headers=headers, timeout=block.timeout_s, trust_env=False
        )

    # ------------------------------------------------------------------ ids
    def user_id(self, scope: MemoryScope) -> str:
        return self.block.user_template.format(run_id=scope.run_id, persona_id=scope.persona_id)

    def cube_id(self, scope: MemoryScope) -> str:
        return self.block.cube_template.format(run_id=scope.run_id, persona_id=scope.persona_id)

    def reset_target(self, scope: MemoryScope) -> str:
        return f"MemCube {self.cube_id(scope)}"  # a reset deletes every memory of the cube, whoever's

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        cube = self.cube_id(scope)
        return {"user_id": self.user_id(scope), "writable_cube_ids": cube, "readable_cube_ids": cube}

    def _data(self, body: dict[str, Any], operation: str) -> dict[str, Any]:
        """The answer's `data` object; any other shape is the backend's failure, not a crash here."""
        data = body.get("data") or {}
        if not isinstance(data, dict):
            raise AdapterError(self.backend_name, operation, f"answer's data is a {type(data).__name__}", raw=body)
        return data

    async def _call(self, operation: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            response = await self.client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise AdapterError.native(self.backend_name, operation, exc) from exc
        try:
            body = response.json()
        except ValueError:
            body = {"text": response.text[:2000]}
        code = body.get("code", response.status_code) if isinstance(body, dict) else response.status_code
        if response.status_code >= 400 or (isinstance(code, int) and code >= 400):
            raw = {"status": response.status_code, "body": body}
            raise AdapterError(self.backend_name, operation, f"HTTP {response.status_code}", raw=raw)
        return body if isinstance(body, dict) else {"data": body}

    # ------------------------------------------------------------------ contract
    async def setup_scope(self, scope: MemoryScope) -> None:
        # MemOS creates a cube on its first write; checking the scheduler proves the server answers.
        await self._call("setup_scope", "GET", STATUS_PATH, params={"user_name": self.cube_id(scope)})

    def _add_body(self, event: MemoryEvent) -> dict[str, Any]:
        stamp = event.timestamp.isoformat()
        body: dict[str, Any] = {
            "user_id": self.user_id(event.scope),
            "session_id": event.session_id,
            "writable_cube_ids": [self.cube_id(event.scope)],
            "messages": [{**m, "chat_time": stamp} for m in event.messages],
            "async_mode": self.block.async_mode,
            "custom_tags": [f"{k}:{v}" for k, v in event.tags.items()] or None,
            "info": {
                "event_id": event.event_id,
                "turn_id": event.turn_id,
                "run_id": event.scope.run_id,
                "timestamp": stamp,
                **({"agent_id": event.scope.agent_id} if event.scope.agent_id else {}),
                **event.tags,
                **{k: v for k, v in event.metadata.items() if isinstance(v, str)},
            },
        }
        if self.block.async_mode == "sync":
            body["mode"] = "fine" if self.block.mode == "fine" else "fast"
        return body

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        body = await self._call("record_event", "POST", ADD_PATH, json=self._add_body(event))
        data = body.get("data") or []
        ids = [str(d.get("memory_id") or d.get("id")) for d in data if isinstance(d, dict)]
        trace = self.trace(event.scope, "product/add")
        trace.native_ids = ids
        status = "queued" if self.block.async_mode == "async" else "committed"
        trace.consistency = "queued" if status == "queued" else "committed"
        return WriteReceipt(status, ids, 0.0, trace)

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        k = request.budget.max_items
        tags = request.tags
        body = {
            "query": request.query,
            "user_id": self.user_id(request.scope),
            "readable_cube_ids": [self.cube_id(request.scope)],
            "session_id": request.session_id,
            "mode": self.block.mode,
            "top_k": k,
            "relativity": self.block.relativity,
            "include_preference": self.block.include_preference,
            "pref_top_k": k,
            "search_tool_memory": self.block.search_tool_memory,
            "tool_mem_top_k": k,
            "include_skill_memory": self.block.include_skill_memory,
            "skill_mem_top_k": k,
            # tags are info keys on write; MemOS filters on info keys natively.
            "filter": {"and": [{key: value} for key, value in tags.items()]} if tags else None,
            **({"filter": request.filters} if request.filters else {}),
        }
        response = await self._call("retrieve", "POST", SEARCH_PATH, json=body)
        data = self._data(response, "retrieve")
        items: list[MemoryItem] = []
        for bucket, mem in _memories(data):
            meta = mem.get("metadata") if isinstance(mem.get("metadata"), dict) else {}
            native_type = meta.get("memory_type") or meta.get("preference_type") or ""
            score = meta.get("relativity", mem.get("relativity"))
            items.append(
                MemoryItem(
                    text=str(mem.get("memory") or ""),
                    native_id=str(mem.get("id") or meta.get("id") or "") or None,
                    score=float(score) if isinstance(score, int | float) else None,
                    timestamp=parse_iso_or_none(meta.get("updated_at") or meta.get("created_at")),
                    group=f"{bucket} · {native_type}" if native_type else bucket,
                    raw=mem,
                )
            )
        trace = self.trace(request.scope, "product/search")
        trace.native_ids = [i.native_id for i in items if i.native_id]
        trace.filtering = "hard" if tags else "none"
        result = RetrieveResult(request, items, response, trace)
        note = data.get("pref_note")
        if isinstance(note, str) and note.strip():
            result.prose = f"[pref_note] {note.strip()}"
            result.trace.retrieved_count = len(items)
        return result

    async def readiness(self, scope: MemoryScope) -> Readiness:
        body = await self._call("readiness", "GET", STATUS_PATH, params={"user_name": self.cube_id(scope)})
        running = _count(self._data(body, "readiness").get("running_tasks"))
        return Readiness(ready=running == 0, pending=running, detail="scheduler")

    async def wait_until_ready(self, scope: MemoryScope, timeout_s: float) -> Readiness:
        params = {"user_name": self.cube_id(scope), "timeout_seconds": timeout_s}
        body = await self._call(
            "readiness", "POST", WAIT_PATH, params=params, timeout=timeout_s + self.block.timeout_s
        )
        data = self._data(body, "readiness")
        running = _count(data.get("running_tasks"))
        return Readiness(
            ready=not data.get("timed_out") and running == 0,
            pending=running,
            detail=str(body.get("message", "")),
        )

    async def apply_feedback(self, scope: MemoryScope, session_id: str, feedback: str) -> WriteReceipt:
        """MemOS's native feedback path (a separately labelled experiment group, never the agent loop)."""
        started = time.perf_counter()
        body = {
            "user_id": self.user_id(scope),
            "session_id": session_id,
            "history": [],
            "feedback_content": feedback,
            "writable_cube_ids": [self.cube_id(scope)],
            "async_mode": self.block.async_mode,
        }
        await self._call("feedback", "POST", FEEDBACK_PATH, json=body)
        trace = self.trace(scope, "product/feedback")
        status = "queued" if self.block.async_mode == "async" else "committed"
        return WriteReceipt(status, [], elapsed_ms(started), trace)

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        """Delete exactly this scope's cube memories: listed by cube, deleted by id."""
        started = time.perf_counter()
        cube = self.cube_id(scope)
        listed = await self._call(
            "reset_scope",
            "POST",
            GET_PATH,
            json={
                "mem_cube_id": cube,
                "user_id": self.user_id(scope),
                "include_preference": True,
                "include_tool_memory": True,
                "include_skill_memory": True,
            },
        )
        ids = [str(m["id"]) for _bucket, m in _memories(self._data(listed, "reset_scope")) if m.get("id")]
        if ids:
            await self._call(
                "reset_scope", "POST", DELETE_PATH, json={"writable_cube_ids": [cube], "memory_ids": ids}
            )
        return ResetReceipt(scope=scope, removed=len(ids), latency_ms=elapsed_ms(started))

    async def health(self) -> HealthReport:
        return await self._health(
            self._call("health", "GET", STATUS_PATH),
            native_memory_types=list(NATIVE_TYPES),
            native_ingest_modes=[f"async_mode={self.block.async_mode}", f"mode={self.block.mode}"],
        )

    async def aclose(self) -> None:
        await self.client.aclose()


def _memories(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(bucket, memory) of an answer's buckets in order; entries of another shape are skipped, so one
    odd entry does not cost the others."""
    for bucket in BUCKETS:
        groups = data.get(bucket)
        for group in groups if isinstance(groups, list) else []:
            memories = group.get("memories") if isinstance(group, dict) else None
            for mem in memories if isinstance(memories, list) else []:
                if isinstance(mem, dict):
                    yield bucket, mem


def _count(value: Any) -> int:
    """A count the scheduler reported; anything but a whole number counts as one task still running."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 0 if value in (None, "") else 1
