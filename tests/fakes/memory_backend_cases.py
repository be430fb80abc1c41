"""One environment per memory adapter (backends and controls) for the parametrized contract tests.

An env builds its adapter through the registry (config → adapter, as the agent does) against
local fakes only, and exposes what the tests observe natively: the budget the backend received,
a way to make the backend fail, and the backend's own consistency step after a write.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanobot.config.loader import load_config
from nanobot.config.schema import Config
from nanobot.memory.backends.contract import (
    MemoryAdapter,
    MemoryEvent,
    MemoryScope,
    SupportsSessionBoundary,
)
from nanobot.memory.backends.evaluation.capabilities import SupportsReadiness
from nanobot.memory.backends.registry import build_adapter
from tests.fakes.llm_server import FakeLLMServer

READY_TIMEOUT_S = 10.0


def make_event(
    scope: MemoryScope,
    user: str,
    reply: str = "Noted.",
    *,
    session: str = "cli:direct",
    n: int = 1,
    **tags: Any,
) -> MemoryEvent:
    return MemoryEvent(
        event_id=f"ev-{scope.persona_id}-{n}-{abs(hash((user, session))) % 10**8}",
        scope=scope,
        session_id=session,
        turn_id=f"{session}#{n}",
        timestamp=datetime(2026, 3, 1, 9, n % 60, tzinfo=UTC),
        messages=[{"role": "user", "content": user}, {"role": "assistant", "content": reply}],
        metadata={"source": "contract-test"},
        tags=tags,
    )


class Env:
    name = ""
    condition = False
    stores = True  # recorded events become retrievable
    native_layer = True  # a native layer exists that can fail
    provenance: tuple[str, ...] = ()  # item fields the backend really provides
    top_k = False  # retrieval returns at most budget.max_items items

    def __init__(self, home: Path, llm: FakeLLMServer) -> None:
        self.home = home
        self.llm = llm
        self.workspace = home / "workspace"
        self._embedding_dim = llm.embedding_dim  # the LLM fake is shared: undo what break_native changes

    def start(self) -> None:
        return None

    def stop(self) -> None:
        self.llm.embedding_dim = self._embedding_dim

    def block(self) -> dict[str, Any]:
        return {}

    def config(self, **extra: Any) -> Config:
        data: dict[str, Any] = {
            "agents": {
                "defaults": {
                    "provider": "custom",
                    "model": "fake-model",
                    "llmMaxRetries": 0,
                    "workspace": str(self.workspace),
                }
            },
            "providers": {"custom": {"apiBase": self.llm.url, "apiKey": "test-key"}},
            "memory": {
                "condition" if self.condition else "backend": self.name,
                "backends": {self.name: {**self.block(), **extra}},
            },
        }
        path = self.home / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data), encoding="utf-8")
        return load_config(path)

    def build(self, **extra: Any) -> MemoryAdapter:
        cfg = self.config(**extra)
        return build_adapter(cfg, cfg.workspace_path)

    async def settle(self, adapter: MemoryAdapter, scope: MemoryScope, session: str = "cli:direct") -> None:
        """The backend's own consistency step after writes (readiness wait, or the chat's /new)."""
        if isinstance(adapter, SupportsReadiness):
            state = await adapter.wait_until_ready(scope, READY_TIMEOUT_S)
            assert state.ready, state
        if isinstance(adapter, SupportsSessionBoundary):
            await adapter.end_session(session)

    def native_budget(self) -> dict[str, Any] | None:
        """The budget parameters the backend's native retrieval received last (None: not observable)."""
        return None

    async def break_native(self, adapter: MemoryAdapter) -> None:
        raise NotImplementedError


class NoMemoryEnv(Env):
    name, condition, stores, native_layer = "no_memory", True, False, False


class StaticProfileEnv(Env):
    name, condition, stores = "static_profile", True, False

    def block(self) -> dict[str, Any]:
        return {"path": "profiles/{persona_id}.md"}

    def start(self) -> None:
        (self.workspace / "profiles").mkdir(parents=True, exist_ok=True)
        (self.workspace / "profiles" / "alice.md").write_text(
            "Alice drinks genmaicha tea.\n", encoding="utf-8"
        )
        (self.workspace / "profiles" / "bob.md").write_text("Bob prefers espresso.\n", encoding="utf-8")

    async def break_native(self, adapter: MemoryAdapter) -> None:
        adapter.path_template = "../outside/{persona_id}.md"  # type: ignore[attr-defined]


class FullHistoryEnv(Env):
    name, condition = "full_history", True
    provenance = ("timestamp",)

    async def break_native(self, adapter: MemoryAdapter) -> None:
        adapter.root.mkdir(parents=True, exist_ok=True)  # type: ignore[attr-defined]
        (adapter.root / "boundaries.jsonl").mkdir(exist_ok=True)  # type: ignore[attr-defined]


class RollingSummaryEnv(Env):
    """The `file` backend: nanobot's consolidation through the real litellm path."""

    name = "file"

    def start(self) -> None:
        from tests.fakes.memory_llm import MemoryScript

        self.script = MemoryScript()
        self.llm.responder = self.script.responder

    async def break_native(self, adapter: MemoryAdapter) -> None:
        self.llm.responder = lambda body: {"status": 500, "error_message": "model down"}


class RollingSummaryConditionEnv(RollingSummaryEnv):
    name, condition = "rolling_summary", True


class MemosEnv(Env):
    name = "memos"
    provenance = ("native_id", "score", "timestamp")
    top_k = True

    def start(self) -> None:
        from tests.fakes.memory_backend_llm import BackendScript
        from tests.fakes.memos_server import FakeMemosServer

        self.script = BackendScript()
        self.llm.responder = self.script.responder
        self.server = FakeMemosServer(self.llm.url).start()

    def stop(self) -> None:
        super().stop()
        self.server.stop()

    def block(self) -> dict[str, Any]:
        return {"baseUrl": self.server.url, "timeoutS": 10}

    def native_budget(self) -> dict[str, Any] | None:
        searches = [b for path, b in self.server.requests if path == "/product/search"]
        return {"max_items": searches[-1]["top_k"]} if searches else None

    async def break_native(self, adapter: MemoryAdapter) -> None:
        self.server.fail_status = 503

    def check_tags(self, event: MemoryEvent) -> None:
        adds = [b for path, b in self.server.requests if path == "/product/add"]
        assert adds[-1]["custom_tags"] == ["scenario:travel", "context:personal", "attribute:drinks"]
        search = [b for path, b in self.server.requests if path == "/product/search"][-1]
        assert search["filter"] == {
            "and": [{"scenario": "travel"}, {"context": "personal"}, {"attribute": "drinks"}]
        }


class HonchoEnv(Env):
    name = "honcho"
    provenance = ("native_id", "timestamp")

    def start(self) -> None:
        from tests.fakes.honcho_server import FakeHonchoServer

        self.server = FakeHonchoServer().start()

    def stop(self) -> None:
        super().stop()
        self.server.stop()

    def block(self) -> dict[str, Any]:
        return {"baseUrl": self.server.url, "timeoutS": 10, "readyPollS": 0.02}

    def native_budget(self) -> dict[str, Any] | None:
        ctx = [q for method, path, q in self.server.requests if path.endswith("/context")]
        return (
            {"max_tokens": int(ctx[-1]["tokens"]), "max_items": int(ctx[-1]["search_top_k"])} if ctx else None
        )

    async def break_native(self, adapter: MemoryAdapter) -> None:
        self.server.fail_status = 500


class Mem0Env(Env):
    name = "mem0"
    provenance = ("native_id", "score", "timestamp")
    top_k = True

    def start(self) -> None:
        from tests.fakes import mem0_script
        from tests.fakes.memory_backend_llm import BackendScript

        self.script = BackendScript()
        self.script.answerers["mem0"] = mem0_script.answer
        self.llm.responder = self.script.responder

    def block(self) -> dict[str, Any]:
        return {"embedder": {"model": "fake-embed", "dims": self.llm.embedding_dim}}

    def native_budget(self) -> dict[str, Any] | None:
        return None  # top_k goes into Memory.search in-process; asserted through result size

    async def break_native(self, adapter: MemoryAdapter) -> None:
        self.llm.responder = lambda body: {"status": 400, "error_message": "model refuses"}
        self.llm.embedding_dim = 3  # and the embedder answers with vectors of the wrong size


class GraphitiEnv(Mem0Env):
    name = "graphiti"
    provenance = ("native_id", "score", "timestamp")

    def start(self) -> None:
        from tests.fakes import graphiti_script
        from tests.fakes.memory_backend_llm import BackendScript

        self.script = BackendScript()
        self.script.answerers["graphiti"] = graphiti_script.answer
        self.llm.responder = self.script.responder


BACKEND_ENVS: dict[str, type[Env]] = {
    "memos": MemosEnv,
    "honcho": HonchoEnv,
    "mem0": Mem0Env,
    "graphiti": GraphitiEnv,
}
