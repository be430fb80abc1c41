"""A local fake of MemOS's product REST API, built from its APIADDRequest / APISearchRequest models.

Adds are processed like MemOS's mem reader: the conversation goes to the (fake) LLM with an
extraction prompt answered in MemOS's format (`{"memory list": [{"key", "memory_type", "value",
"tags"}], "summary"}`); the memories land in the request's writable cubes, typed
(UserMemory/LongTermMemory in text_mem, PreferenceMemory in pref_mem, tool messages as
ToolTrajectoryMemory in tool_mem). `async_mode="async"` queues the add for a background worker;
/product/scheduler/status and /product/scheduler/wait report it. Search ranks by cosine of the
fake's hashed embeddings (`relativity`), filtered by cube and by `filter` on info keys.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakes.llm_server import hashed_embedding

EXTRACTION_MARKER = "MemOS memory extraction"
BUCKET_OF = {"PreferenceMemory": "pref_mem", "ToolTrajectoryMemory": "tool_mem", "SkillMemory": "skill_mem"}


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class FakeMemosServer:
    def __init__(self, llm_url: str, process_delay_s: float = 0.05) -> None:
        self.llm_url = llm_url
        self.process_delay_s = process_delay_s
        self.memories: list[dict[str, Any]] = []  # each: id, cube, user_id, memory, metadata, info, bucket
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.fail_status: int | None = None
        # a search answer's `data` as a server with other shapes would send it (None: as computed)
        self.reshape_search: Callable[[dict[str, Any]], Any] | None = None
        self.errors: list[str] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._running = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._server.serve_forever, daemon=True),
            threading.Thread(target=self._worker, daemon=True),
        ]

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeMemosServer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._queue.put(None)
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ MemOS behaviour
    def _extract(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        conversation = "\n".join(
            f"{m.get('role')}: [{m.get('chat_time', '')}] {m.get('content')}" for m in messages
        )
        prompt = f'{EXTRACTION_MARKER}. Return JSON {{"memory list": [...], "summary": ...}}.\n{conversation}'
        body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": prompt}]}).encode()
        req = urllib.request.Request(
            f"{self.llm_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1 only
            content = json.loads(resp.read())["choices"][0]["message"]["content"]
        return list(json.loads(content).get("memory list") or [])

    def _process(self, add: dict[str, Any]) -> list[dict[str, Any]]:
        created = []
        messages = add.get("messages") or []
        extracted = self._extract([m for m in messages if m.get("role") != "tool"])
        for m in messages:
            if m.get("role") == "tool":
                extracted.append(
                    {
                        "key": "tool",
                        "memory_type": "ToolTrajectoryMemory",
                        "value": str(m.get("content")),
                        "tags": ["tool"],
                    }
                )
        stamp = datetime.now(UTC).isoformat()
        for cube in add.get("writable_cube_ids") or []:
            for mem in extracted:
                entry = {
                    "id": str(uuid.uuid4()),
                    "cube": cube,
                    "user_id": add.get("user_id"),
                    "memory": mem["value"],
                    "info": add.get("info") or {},
                    "bucket": BUCKET_OF.get(mem["memory_type"], "text_mem"),
                    "metadata": {
                        "memory_type": mem["memory_type"],
                        "key": mem.get("key"),
                        "tags": list(mem.get("tags") or []) + list(add.get("custom_tags") or []),
                        "session_id": add.get("session_id"),
                        "created_at": stamp,
                        "updated_at": stamp,
                    },
                }
                with self._lock:
                    self.memories.append(entry)
                created.append(entry)
        return created

    def _worker(self) -> None:
        while True:
            add = self._queue.get()
            if add is None:  # stop()
                return
            time.sleep(self.process_delay_s)
            try:
                self._process(add)
            except Exception as exc:  # noqa: BLE001 - a failed extraction is a failed task, as in MemOS
                self.errors.append(repr(exc))
            finally:
                with self._lock:
                    self._running -= 1

    def _search(self, req: dict[str, Any]) -> dict[str, Any]:
        cubes = set(req.get("readable_cube_ids") or [])
        conditions = (req.get("filter") or {}).get("and") or []
        qvec = hashed_embedding(req["query"])
        scored = []
        with self._lock:
            pool = [m for m in self.memories if m["cube"] in cubes]
        for m in pool:
            if any(m["info"].get(k) != v for cond in conditions for k, v in cond.items()):
                continue
            score = round(_cos(qvec, hashed_embedding(m["memory"])), 4)
            if score >= float(req.get("relativity", 0.0)):
                scored.append((score, m))
        scored.sort(key=lambda x: -x[0])
        data: dict[str, Any] = {b: [] for b in ("text_mem", "pref_mem", "tool_mem", "skill_mem")}
        data.update(act_mem=[], para_mem=[], pref_note="")
        limits = {
            "text_mem": req.get("top_k", 10),
            "pref_mem": req.get("pref_top_k", 6),
            "tool_mem": req.get("tool_mem_top_k", 6),
            "skill_mem": req.get("skill_mem_top_k", 3),
        }
        for bucket, limit in limits.items():
            hits = [(s, m) for s, m in scored if m["bucket"] == bucket][:limit]
            if hits:
                data[bucket].append(
                    {
                        "cube_id": hits[0][1]["cube"],
                        "total_nodes": len(hits),
                        "memories": [
                            {
                                "id": m["id"],
                                "memory": m["memory"],
                                "metadata": {**m["metadata"], "relativity": s},
                            }
                            for s, m in hits
                        ],
                    }
                )
        return {"code": 200, "message": "Search completed successfully", "data": data}

    def running(self) -> int:
        with self._lock:
            return self._running

    # ------------------------------------------------------------------ HTTP
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between headers and body

            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, method: str) -> None:
                parsed = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                server.requests.append((parsed.path, body or query))
                if server.fail_status:
                    self._send(server.fail_status, {"detail": "scripted failure", "code": server.fail_status})
                    return
                self._send(200, server._dispatch(method, parsed.path, body, query))

            def do_GET(self) -> None:  # noqa: N802
                self._route("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._route("POST")

        return Handler

    def _dispatch(
        self, method: str, path: str, body: dict[str, Any], query: dict[str, str]
    ) -> dict[str, Any]:
        if path == "/product/add":
            if body.get("async_mode", "async") == "async":
                with self._lock:
                    self._running += 1
                self._queue.put(body)
                return {"code": 200, "message": "Memory added successfully", "data": []}
            created = self._process(body)
            return {
                "code": 200,
                "message": "Memory added successfully",
                "data": [
                    {"memory": m["memory"], "memory_id": m["id"], "memory_type": m["metadata"]["memory_type"]}
                    for m in created
                ],
            }
        if path == "/product/search":
            answer = self._search(body)
            if self.reshape_search is not None:
                answer["data"] = self.reshape_search(answer["data"])
            return answer
        if path == "/product/scheduler/status":
            return {"message": "ok", "data": {"running_tasks": self.running()}}
        if path == "/product/scheduler/wait":
            deadline = time.monotonic() + float(query.get("timeout_seconds", 120))
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.01)
            running = self.running()
            return {
                "message": "idle" if not running else "timeout",
                "data": {"running_tasks": running, "timed_out": bool(running)},
            }
        if path == "/product/get_memory":
            with self._lock:
                mine = [m for m in self.memories if m["cube"] == body.get("mem_cube_id")]
            data: dict[str, Any] = {b: [] for b in ("text_mem", "pref_mem", "tool_mem", "skill_mem")}
            for bucket in data:
                mems = [
                    {"id": m["id"], "memory": m["memory"], "metadata": m["metadata"]}
                    for m in mine
                    if m["bucket"] == bucket
                ]
                if mems:
                    data[bucket].append({"cube_id": body.get("mem_cube_id"), "memories": mems})
            return {"code": 200, "message": "Memories retrieved successfully", "data": data}
        if path == "/product/delete_memory":
            ids = set(body.get("memory_ids") or [])
            cubes = set(body.get("writable_cube_ids") or [])
            with self._lock:
                self.memories = [m for m in self.memories if not (m["id"] in ids and m["cube"] in cubes)]
            return {"code": 200, "message": "Memories deleted successfully", "data": {"status": "success"}}
        if path == "/product/feedback":
            return {"code": 200, "message": "Feedback processed", "data": []}
        return {"code": 404, "message": f"unknown path {path}"}
