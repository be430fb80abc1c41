"""Control conditions (docs/memory-backends.md): not memory architectures, but the same contract and read-only gate.

- no_memory: nothing is stored, the context is always empty.
- rolling_summary (= the `file` backend): nanobot's consolidation folds each event into a
  per-scope MEMORY.md (the LLM rewrites the summary); retrieval returns that summary.
- full_history: the same chat's prior transcripts (before its last /new), newest that fit the
  budget, in chronological order; never another chat's or another scope's.
- static_profile: fixed profile text from a file; no accumulation writes.
The check's manifest labels them `condition_kind: control` (conditions.condition_kind).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

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
)
from nanobot.memory.relevant import relevant_first
from nanobot.providers.tokens import count_text
from nanobot.timeutil import parse_iso_or_none
from nanobot.util.fs import append_locked, ensure_private_dir
from nanobot.util.text import safe_id

FULL_HISTORY_MARGIN = 0.9  # share of the budget the transcript may use (the section header needs room)


def safe_name(value: str) -> str:
    """A file-system-safe name for an id (distinct ids stay distinct through the hash suffix)."""
    return safe_id(value, allowed="A-Za-z0-9._-")


@contextmanager
def _native_io(backend: str, operation: str) -> Iterator[None]:
    """File errors of a control become AdapterErrors that keep the OS error."""
    try:
        yield
    except OSError as exc:
        raise AdapterError.native(backend, operation, exc) from exc


class ControlCondition(MemoryAdapter):
    """Base of the control conditions: a folder per scope under `root`."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def scope_dir(self, scope: MemoryScope) -> Path:
        return self.root / safe_name(scope.run_id) / safe_name(scope.persona_id)

    async def setup_scope(self, scope: MemoryScope) -> None:
        return None

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        path = self.scope_dir(scope)
        removed = sum(1 for p in path.rglob("*") if p.is_file()) if path.exists() else 0
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):  # the check's run folder, once its last scope is gone
            path.parent.rmdir()
        return ResetReceipt(scope=scope, removed=removed, latency_ms=0.0)

    async def health(self) -> HealthReport:
        return HealthReport("ok", self.backend_name, 0.0, self.consistency_model)

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        return {"run_id": scope.run_id, "persona_id": scope.persona_id, "store": str(self.scope_dir(scope))}

    def _empty(self, request: RetrieveRequest, operation: str) -> RetrieveResult:
        return RetrieveResult(request, [], None, self.trace(request.scope, operation))


class NoMemoryControl(ControlCondition):
    backend_name = "no_memory"

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        return WriteReceipt("discarded", [], 0.0, self.trace(event.scope, "record_event(no_memory)"))

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        return self._empty(request, "retrieve(no_memory)")


class StaticProfileControl(ControlCondition):
    """Profile text from `path` (workspace-relative; `{run_id}`/`{persona_id}` pick a per-persona file)."""

    backend_name = "static_profile"

    def __init__(self, workspace: Path, path_template: str) -> None:
        super().__init__(workspace)
        self.workspace = workspace
        self.path_template = path_template

    def profile_path(self, scope: MemoryScope) -> Path:
        rel = self.path_template.format(
            run_id=safe_name(scope.run_id), persona_id=safe_name(scope.persona_id)
        )
        path = (self.workspace / rel).resolve()
        if not path.is_relative_to(self.workspace.resolve()):
            raise AdapterError(
                self.backend_name, "profile", f"profile path {rel!r} leaves the workspace", {"path": rel}
            )
        return path

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        return WriteReceipt("discarded", [], 0.0, self.trace(event.scope, "record_event(static_profile)"))

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        path = self.profile_path(request.scope)
        result = self._empty(request, "read_profile")
        result.raw = {"path": str(path), "exists": path.is_file()}
        if path.is_file():
            with _native_io(self.backend_name, "retrieve"):
                result.prose = path.read_text(encoding="utf-8", errors="replace")
            result.trace.native_ids = [path.name]
        else:
            result.trace.warnings.append(f"no profile file {path.name}")
        return result

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        # The profile is an input, not accumulated memory: nothing to reset.
        return ResetReceipt(scope=scope, removed=0, latency_ms=0.0)

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        return {
            "run_id": scope.run_id,
            "persona_id": scope.persona_id,
            "profile": str(self.profile_path(scope)),
        }


class RollingSummaryControl(ControlCondition):
    """The Markdown file memory as a controlled baseline: each event is consolidated into MEMORY.md."""

    backend_name = "rolling_summary"

    def __init__(
        self,
        root: Path,
        provider: Any,
        *,
        name: str = "rolling_summary",
        timezone: Any = "",
        max_tokens: int = 8192,
        small_model: bool = False,
    ) -> None:
        super().__init__(root)
        self.backend_name = name
        self.provider = provider
        self.timezone = timezone
        # the product's own consolidation settings: a small model gets the plain-text form, and no
        # call asks for more than agents.defaults.maxTokens
        self.max_tokens = max_tokens
        self.small_model = small_model

    def _store(self, scope: MemoryScope):  # noqa: ANN202 - MemoryStore, imported lazily
        from nanobot.memory.store import MemoryStore

        return MemoryStore(self.scope_dir(scope), self.timezone)

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        from nanobot.memory.consolidator import Consolidator

        store = self._store(event.scope)
        ensure_private_dir(store.dir)  # the owner's memory, as everything under NANOBOT_HOME
        stamp = event.timestamp.isoformat()
        messages = [{**m, "timestamp": m.get("timestamp", stamp)} for m in event.messages]
        consolidator = Consolidator(
            self.provider, store, max_tokens=self.max_tokens, small_model=self.small_model
        )
        ok = await consolidator.consolidate(messages, private=True)
        if not ok:
            raw = {"consolidated": False, "detail": consolidator.last_failure or "the model call failed"}
            raise AdapterError(
                self.backend_name, "record_event", "consolidation failed; summary unchanged", raw
            )
        trace = self.trace(event.scope, "consolidate")
        trace.native_ids = ["MEMORY.md"]
        return WriteReceipt("committed", ["MEMORY.md"], 0.0, trace)

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        result = self._empty(request, "read_summary")
        store = self._store(request.scope)
        with _native_io(self.backend_name, "retrieve"):
            summary = store.read_memory().strip()
        result.raw = {"path": str(store.memory_path), "chars": len(summary)}
        if summary:
            # Facts relevant to the request first: the budget cut then drops the unrelated ones.
            result.prose = relevant_first(summary, request.query)
            result.trace.native_ids = ["MEMORY.md"]
        return result


class FullHistoryControl(ControlCondition):
    """Prior transcripts of the same chat, packed chronologically into the budget."""

    backend_name = "full_history"

    def _log(self, scope: MemoryScope) -> Path:
        return self.scope_dir(scope) / "transcripts.jsonl"

    def _append(self, scope: MemoryScope, obj: dict[str, Any]) -> None:
        # locked: a one-shot CLI beside the gateway never interleaves lines
        append_locked(self._log(scope), json.dumps(obj, ensure_ascii=False) + "\n", fsync=False)

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        stamp = event.timestamp.isoformat()
        # recorded_at (wall clock) orders events against /new; the event's own time may be synthetic
        line = {
            "event_id": event.event_id,
            "session_id": event.session_id,
            "timestamp": stamp,
            "recorded_at": _wall_clock(),
            "messages": event.messages,
        }
        with _native_io(self.backend_name, "record_event"):
            self._append(event.scope, line)
        trace = self.trace(event.scope, "append_transcript")
        trace.native_ids = [event.event_id]
        return WriteReceipt("committed", [event.event_id], 0.0, trace)

    async def end_session(self, session_id: str) -> None:
        """The chat's /new: everything recorded for it so far becomes a prior transcript."""
        line = {"session_id": session_id, "recorded_at": _wall_clock()}
        with _native_io(self.backend_name, "end_session"):
            append_locked(self.root / "boundaries.jsonl", json.dumps(line) + "\n", fsync=False)

    def _last_boundary(self, session_id: str) -> datetime | None:
        path = self.root / "boundaries.jsonl"
        last: datetime | None = None
        if path.exists():
            for obj in _json_lines(path):
                if obj.get("session_id") == session_id:
                    last = parse_iso_or_none(obj.get("recorded_at"))
        return last

    def _prior_messages(
        self, scope: MemoryScope, session_id: str
    ) -> list[tuple[datetime | None, dict[str, Any]]]:
        boundary = self._last_boundary(session_id)
        path = self._log(scope)
        if boundary is None or not path.exists():
            return []
        prior: list[tuple[datetime | None, dict[str, Any]]] = []
        for obj in _json_lines(path):
            recorded = parse_iso_or_none(obj.get("recorded_at"))
            if obj.get("session_id") == session_id and recorded is not None and recorded <= boundary:
                prior.extend((parse_iso_or_none(obj.get("timestamp")), m) for m in obj.get("messages") or [])
        return prior

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        result = self._empty(request, "pack_transcripts")
        with _native_io(self.backend_name, "retrieve"):
            prior = self._prior_messages(request.scope, request.session_id)
        allowance = int(request.budget.max_tokens * FULL_HISTORY_MARGIN)
        picked: list[MemoryItem] = []
        used = 0
        for when, msg in reversed(prior):  # newest first, then restored to chronological order
            text = f"{str(msg.get('role', '?')).upper()}: {msg.get('content') or ''}"
            cost = count_text(text) + 8
            if used + cost > allowance:
                result.trace.warnings.append(f"{len(prior) - len(picked)} older message(s) beyond the budget")
                break
            used += cost
            picked.append(MemoryItem(text=text, timestamp=when, raw=msg))
        result.items = list(reversed(picked))
        result.raw = {"messages": len(prior)}
        return result


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a truncated last line after a crash
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _wall_clock() -> str:
    return datetime.now().astimezone().isoformat()
