"""A local fake of Honcho's v3 REST API, enough for the real honcho-ai SDK (2.7).

Workspaces, peers and sessions are get-or-create; messages are stored per session; a background
"deriver" turns each user-peer message into an explicit conclusion about that peer after
`derive_delay_s` (queue status reports the pending work units meanwhile). Session context
returns the latest messages that fit `tokens`, the session's peer representation of
`peer_target` (conclusions ranked by the fake embeddings against `search_query`, top
`search_top_k`) and a peer card. Conclusions can be listed and deleted; sessions deleted.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.fakes._http_thread import ThreadedHTTPFake
from tests.fakes.llm_server import hashed_embedding

ROUTE = re.compile(r"^/v3/workspaces(?:/(?P<ws>[^/]+)(?P<rest>/.*)?)?$")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def _page(items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    page, size = int(query.get("page", 1)), int(query.get("size", 50))
    chunk = items[(page - 1) * size : page * size]
    return {
        "items": chunk,
        "total": len(items),
        "page": page,
        "size": size,
        "pages": max(1, math.ceil(len(items) / size)),
    }


class FakeHonchoServer(ThreadedHTTPFake):
    def __init__(self, derive_delay_s: float = 0.05) -> None:
        self.derive_delay_s = derive_delay_s
        self.workspaces: dict[str, dict[str, Any]] = {}
        self.peers: dict[tuple[str, str], dict[str, Any]] = {}
        self.sessions: dict[tuple[str, str], dict[str, Any]] = {}
        self.messages: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.conclusions: dict[str, dict[str, Any]] = {}
        self.pending: dict[tuple[str, str], int] = {}  # (workspace, sender) -> work units
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.fail_status: int | None = None
        self._lock = threading.RLock()
        self._serve(self._handler())

    @property
    def url(self) -> str:
        return self.origin

    # ------------------------------------------------------------------ deriver
    def _derive_later(self, ws: str, msg: dict[str, Any]) -> None:
        def run() -> None:
            time.sleep(self.derive_delay_s)
            with self._lock:
                cid = uuid.uuid4().hex
                self.conclusions[cid] = {
                    "id": cid,
                    "workspace": ws,
                    "content": msg["content"],
                    "observer_id": msg["peer_id"],
                    "observed_id": msg["peer_id"],
                    "session_id": msg["session_id"],
                    "level": "explicit",
                    "created_at": _now(),
                }
                self.pending[(ws, msg["peer_id"])] -= 1

        with self._lock:
            self.pending[(ws, msg["peer_id"])] = self.pending.get((ws, msg["peer_id"]), 0) + 1
        threading.Thread(target=run, daemon=True).start()

    # ------------------------------------------------------------------ routes
    def _dispatch(
        self, method: str, path: str, body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        m = ROUTE.match(path)
        if not m:
            return 404, {"detail": f"unknown path {path}"}
        ws, rest = m.group("ws"), m.group("rest") or ""
        with self._lock:
            if ws is None and method == "POST":
                wid = body["id"]
                self.workspaces.setdefault(
                    wid, {"id": wid, "metadata": {}, "configuration": {}, "created_at": _now()}
                )
                return 200, self.workspaces[wid]
            if ws not in self.workspaces:
                return 404, {"detail": f"workspace {ws} not found"}
            return self._workspace_route(method, ws, rest, body, query)

    def _workspace_route(
        self, method: str, ws: str, rest: str, body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        parts = [p for p in rest.split("/") if p]
        if parts == ["peers"] and method == "POST":
            pid = body["id"]
            self.peers.setdefault(
                (ws, pid),
                {
                    "id": pid,
                    "workspace_id": ws,
                    "created_at": _now(),
                    "metadata": body.get("metadata") or {},
                    "configuration": {},
                },
            )
            return 200, self.peers[(ws, pid)]
        if len(parts) == 3 and parts[0] == "peers" and parts[2] == "sessions":
            mine = [s for (w, _), s in self.sessions.items() if w == ws and parts[1] in s["_peers"]]
            return 200, _page([self._session_out(s) for s in mine], query)
        if parts == ["sessions"] and method == "POST":
            sid = body["id"]
            session = self.sessions.setdefault(
                (ws, sid),
                {
                    "id": sid,
                    "is_active": True,
                    "workspace_id": ws,
                    "metadata": body.get("metadata") or {},
                    "configuration": {},
                    "created_at": _now(),
                    "_peers": set(),
                },
            )
            session["_peers"].update((body.get("peers") or {}).keys())
            return 200, self._session_out(session)
        if len(parts) >= 2 and parts[0] == "sessions":
            return self._session_route(method, ws, parts[1], parts[2:], body, query)
        if parts == ["queue", "status"]:
            sender = query.get("sender_id")
            pending = sum(
                n for (w, s), n in self.pending.items() if w == ws and (sender is None or s == sender)
            )
            return 200, {
                "total_work_units": pending,
                "completed_work_units": 0,
                "in_progress_work_units": 0,
                "pending_work_units": pending,
            }
        if parts == ["conclusions", "list"]:
            filters = body.get("filters") or {}
            found = [
                {k: v for k, v in c.items() if k != "workspace"}
                for c in self.conclusions.values()
                if c["workspace"] == ws and all(c.get(k) == v for k, v in filters.items())
            ]
            return 200, _page(found, query)
        if len(parts) == 2 and parts[0] == "conclusions" and method == "DELETE":
            self.conclusions.pop(parts[1], None)
            return 200, None
        return 404, {"detail": f"unknown route {method} {rest}"}

    @staticmethod
    def _session_out(s: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in s.items() if not k.startswith("_")}

    def _session_route(
        self, method: str, ws: str, sid: str, tail: list[str], body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        if (ws, sid) not in self.sessions:
            return 404, {"detail": f"session {sid} not found"}
        if not tail and method == "DELETE":
            self.sessions.pop((ws, sid))
            self.messages.pop((ws, sid), None)  # conclusions outlive their session, as in Honcho
            return 200, None
        if tail == ["messages"] and method == "POST":
            out = []
            for msg in body["messages"]:
                stored = {
                    "id": uuid.uuid4().hex,
                    "content": msg["content"],
                    "peer_id": msg["peer_id"],
                    "session_id": sid,
                    "metadata": msg.get("metadata") or {},
                    "created_at": msg.get("created_at") or _now(),
                    "workspace_id": ws,
                    "token_count": len(msg["content"]) // 4 + 1,
                }
                self.messages.setdefault((ws, sid), []).append(stored)
                peer = self.peers.get((ws, msg["peer_id"]), {})
                if peer.get("metadata", {}).get("role") != "assistant":
                    self._derive_later(ws, stored)
                out.append(stored)
            return 200, out
        if tail == ["context"]:
            return 200, self._context(ws, sid, query)
        return 404, {"detail": f"unknown session route {tail}"}

    def _context(self, ws: str, sid: str, query: dict[str, str]) -> dict[str, Any]:
        budget = int(query.get("tokens", 100_000))
        picked, used = [], 0
        for msg in reversed(self.messages.get((ws, sid), [])):
            if used + msg["token_count"] > budget // 2:  # half the budget for messages, half for the peer
                break
            used += msg["token_count"]
            picked.append(msg)
        target = query.get("peer_target")
        representation, card = None, None
        if target:
            about = [
                c for c in self.conclusions.values() if c["workspace"] == ws and c["observed_id"] == target
            ]
            if query.get("search_query"):
                qv = hashed_embedding(query["search_query"])
                about.sort(key=lambda c: -_cos(qv, hashed_embedding(c["content"])))
            about = about[: int(query.get("search_top_k", 10))]
            if about:
                representation = "\n".join(f"- {c['content']}" for c in about)
                card = [f"peer {target}", f"{len(about)} conclusion(s)"]
        return {
            "id": sid,
            "messages": list(reversed(picked)),
            "summary": None,
            "peer_representation": representation,
            "peer_card": card,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between headers and body

            def log_message(self, *args: Any) -> None:
                return

            def _route(self, method: str) -> None:
                parsed = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                server.requests.append((method, parsed.path, {**query, **(body or {})}))
                if server.fail_status:
                    status, payload = server.fail_status, {"detail": "scripted failure"}
                else:
                    status, payload = server._dispatch(method, parsed.path, body or {}, query)
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._route("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._route("POST")

            def do_DELETE(self) -> None:  # noqa: N802
                self._route("DELETE")

            def do_PUT(self) -> None:  # noqa: N802
                self._route("PUT")

        return Handler
