"""Graphiti (graphiti-core 0.31) as a temporal knowledge graph, on embedded Kuzu by default.

Each turn is an `add_episode` (EpisodeType.message) with its reference_time, in the group
`groupIdTemplate` (run + persona; Graphiti allows only [A-Za-z0-9_-], so other characters are
replaced and a short hash keeps ids distinct). Retrieval is Graphiti's own hybrid edge search
(`search_`, BM25 + cosine, RRF) limited to the group and to budget.max_items; facts keep
valid_at / invalid_at, their source episodes and the reranker score.
Known 0.31.2 + Kuzu issues handled here: the driver's database attribute is set before any
grouped call; the Kuzu full-text indices are created through the driver once per database;
`?` and `*` are stripped from queries (Kuzu FTS wildcards). OpenAIGenericClient (chat
completions with json_schema) talks to the OpenAI-compatible provider. Telemetry is off.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

from nanobot.config.schema import Config
from nanobot.memory.backends.config import (
    EmbedderEndpoint,
    Endpoint,
    GraphitiBlock,
    require_libraries,
    resolve_embedder,
    resolve_llm,
)
from nanobot.memory.backends.contract import (
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
from nanobot.memory.backends.honcho import honcho_id as safe_group_part
from nanobot.memory.store import backend_dir

KUZU_WILDCARDS = re.compile(r"[?*]")
KUZU_DATABASE = "kuzu"  # any name: Graphiti 0.31.2 compares it with the group id before cloning the driver


def build_graphiti(config: Config, workspace: Path, block: Any) -> GraphitiAdapter:
    assert isinstance(block, GraphitiBlock)
    # imported at first use: a missing one left every turn's memory failing in the log
    require_libraries("graphiti_core", *(["kuzu"] if block.driver == "kuzu" else []))
    llm = resolve_llm(config, "graphiti", block.llm)
    embedder = resolve_embedder(config, "graphiti", block.embedder, llm)
    path = Path(block.path) if block.path else backend_dir(workspace, "graphiti") / "graph.kuzu"
    return GraphitiAdapter(block, llm, embedder, path)


class GraphitiAdapter(MemoryAdapter):
    backend_name = "graphiti"
    consistency_model = "immediate"  # add_episode returns after the graph is updated

    def __init__(self, block: GraphitiBlock, llm: Endpoint, embedder: EmbedderEndpoint, path: Path) -> None:
        super().__init__()
        self.block, self.llm, self.embedder, self.path = block, llm, embedder, path
        self._graphiti: Any = None
        self._lock = asyncio.Lock()

    def group_id(self, scope: MemoryScope) -> str:
        raw = self.block.group_id_template.format(run_id=scope.run_id, persona_id=scope.persona_id)
        return safe_group_part(raw)

    def reset_target(self, scope: MemoryScope) -> str:
        return f"group {self.group_id(scope)}"  # a reset clears the group's whole partition

    def scope_mapping(self, scope: MemoryScope) -> dict[str, str]:
        return {
            "group_id": self.group_id(scope),
            "driver": self.block.driver,
            "database": str(self.path) if self.block.driver == "kuzu" else self.block.uri,
        }

    # ------------------------------------------------------------------ native client
    async def graphiti(self) -> Any:
        async with self._lock:
            if self._graphiti is None:
                os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
                self._graphiti = await self._native("open", self._open())
            return self._graphiti

    async def _open(self) -> Any:
        from graphiti_core import Graphiti
        from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient
        from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

        driver = await asyncio.to_thread(self._driver)
        config = LLMConfig(
            api_key=self.llm.api_key,
            model=self.llm.model,
            base_url=self.llm.base_url,
            small_model=self.block.small_model or self.llm.model,
            temperature=0.0,
        )
        graphiti = Graphiti(
            graph_driver=driver,
            llm_client=OpenAIGenericClient(config=config),
            embedder=OpenAIEmbedder(
                OpenAIEmbedderConfig(
                    embedding_model=self.embedder.model,
                    api_key=self.embedder.api_key,
                    base_url=self.embedder.base_url,
                    embedding_dim=self.embedder.dims,
                )
            ),
            cross_encoder=OpenAIRerankerClient(config=config),
        )
        await graphiti.build_indices_and_constraints()
        if self.block.driver == "kuzu":
            await self._kuzu_fulltext_indices(driver)
        return graphiti

    def _driver(self) -> Any:
        if self.block.driver == "neo4j":
            from graphiti_core.driver.neo4j_driver import Neo4jDriver

            return Neo4jDriver(
                self.block.uri, self.block.user, self.block.password, database=self.block.database or "neo4j"
            )
        if self.block.driver == "falkordb":
            from graphiti_core.driver.falkordb_driver import FalkorDriver

            return FalkorDriver(
                uri=self.block.uri,
                username=self.block.user or None,
                password=self.block.password or None,
                database=self.block.database or "default_db",
            )
        import warnings

        from graphiti_core.driver.kuzu_driver import KuzuDriver

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():  # Kuzu is unmaintained upstream: the choice is config (`driver`)
            warnings.simplefilter("ignore", DeprecationWarning)
            driver = KuzuDriver(db=str(self.path))
        driver._database = KUZU_DATABASE
        return driver

    @staticmethod
    async def _kuzu_fulltext_indices(driver: Any) -> None:
        """build_indices_and_constraints skips Kuzu's FTS indices: create them once per database."""
        from graphiti_core.driver.driver import GraphProvider
        from graphiti_core.graph_queries import get_fulltext_indices

        for query in get_fulltext_indices(GraphProvider.KUZU):
            try:
                await driver.execute_query(query)
            except Exception as exc:  # noqa: BLE001 - "already exists" on every later open
                if "already exists" not in str(exc):
                    raise

    # ------------------------------------------------------------------ contract
    async def setup_scope(self, scope: MemoryScope) -> None:
        await self.graphiti()  # the group is a partition key: nothing to create

    async def _record(self, event: MemoryEvent) -> WriteReceipt:
        from graphiti_core.nodes import EpisodeType

        graphiti = await self.graphiti()
        body = "\n".join(
            f"{m.get('name') or m.get('role')}: {m.get('content') or ''}" for m in event.messages
        )
        tags = "; ".join(f"{k}={v}" for k, v in event.tags.items())
        result = await self._native(
            "record_event",
            graphiti.add_episode(
                name=f"{event.session_id}#{event.turn_id}",
                episode_body=body,
                source_description=f"nanobot chat {event.session_id}" + (f" ({tags})" if tags else ""),
                reference_time=event.timestamp,
                source=EpisodeType.message,
                group_id=self.group_id(event.scope),
            ),
        )
        ids = [result.episode.uuid, *(e.uuid for e in result.edges)]
        trace = self.trace(event.scope, "add_episode")
        trace.native_ids = ids
        return WriteReceipt("committed", ids, 0.0, trace)

    async def _retrieve(self, request: RetrieveRequest) -> RetrieveResult:
        from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF

        graphiti = await self.graphiti()
        query = " ".join([request.query, *request.tags.values()])  # tags: semantic only
        query = " ".join(KUZU_WILDCARDS.sub(" ", query).split()) if self.block.driver == "kuzu" else query
        config = EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True)
        config.limit = request.budget.max_items
        results = await self._native(
            "retrieve", graphiti.search_(query, config=config, group_ids=[self.group_id(request.scope)])
        )
        items = []
        for edge, score in zip(
            results.edges, results.edge_reranker_scores or [None] * len(results.edges), strict=False
        ):
            valid = edge.valid_at.strftime("%Y-%m-%d %H:%M") if edge.valid_at else "?"
            invalid = edge.invalid_at.strftime("%Y-%m-%d %H:%M") if edge.invalid_at else "now"
            raw = edge.model_dump(mode="json", exclude={"fact_embedding"})
            items.append(
                MemoryItem(
                    text=edge.fact,
                    native_id=edge.uuid,
                    score=score,
                    timestamp=edge.valid_at or edge.created_at,
                    label=f"valid {valid} → {invalid}; {len(edge.episodes)} episode(s)",
                    raw=raw,
                )
            )
        trace = self.trace(request.scope, "search_(EDGE_HYBRID_SEARCH_RRF)")
        trace.native_ids = [i.native_id for i in items if i.native_id]
        trace.filtering = "semantic" if request.tags else "none"
        return RetrieveResult(request, items, {"edges": [i.raw for i in items]}, trace)

    async def reset_scope(self, scope: MemoryScope) -> ResetReceipt:
        """Graphiti has no high-level delete-by-group: clear the group's partition through the driver."""
        from graphiti_core.utils.maintenance.graph_data_operations import clear_data

        started = time.perf_counter()
        graphiti = await self.graphiti()
        await self._native("reset_scope", clear_data(graphiti.driver, group_ids=[self.group_id(scope)]))
        return ResetReceipt(scope=scope, removed=None, latency_ms=elapsed_ms(started))

    async def health(self) -> HealthReport:
        notes = []
        if self.block.driver == "kuzu":
            notes.append("Kuzu is unmaintained upstream; set driver to neo4j or falkordb for long-lived use")
        return await self._health(
            self.graphiti(),
            notes=notes,
            native_ingest_modes=[
                "message episodes (default)",
                "text",
                "json",
                "fact_triple (explicit config only)",
                "custom entity/edge types (explicit config only)",
            ],
        )

    async def aclose(self) -> None:
        graphiti, self._graphiti = self._graphiti, None
        if graphiti is not None:
            try:
                await graphiti.close()
            except Exception:  # noqa: BLE001 - closing an embedded database is best effort
                pass
