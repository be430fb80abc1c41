"""Native config blocks (`memory.backends.<name>`), validated here with one model per backend.

The root schema keeps `memory.backends` as a free dict so each backend owns its keys; a bad block
raises BackendConfigError naming the key (`memory.backends.honcho.baseUrl: field required`).
Every block shares the scope keys (`runId`, `agentId`) and the budget keys (`contextTokens`,
`maxItems`). LLM and embedder endpoints default to the configured provider (OpenAI-compatible).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import string
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from nanobot.config.schema import Config
from nanobot.config.sections.base import endpoint_url
from nanobot.memory.backends.contract import (
    DEFAULT_CONTEXT_ITEMS,
    DEFAULT_CONTEXT_TOKENS,
    BackendConfigError,
    ContextBudget,
)
from nanobot.providers.registry import openai_endpoint

TEMPLATE_FIELDS = frozenset({"run_id", "persona_id"})
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
DEFAULT_EMBEDDING_DIMS = 1536


class _Block(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @field_validator("*")
    @classmethod
    def _checked(cls, value: Any, info: ValidationInfo) -> Any:
        """URLs and templates checked when the config loads: "not a url" failed only at the first
        turn, and `{user}` in a template failed every turn with a KeyError (`backend check` with a
        traceback)."""
        name = info.field_name or ""
        if name == "base_url" and isinstance(value, str):
            url = endpoint_url(value)
            if not url and cls.model_fields[name].is_required():
                # blank would be "unset" to the SDK, which then talks to its hosted service
                raise ValueError("must be set to the backend's address")
            return url
        if name.endswith("_template") and isinstance(value, str):
            # the field's name: `{run_id[0]}` and `{run_id.upper}` name run_id too
            parsed = string.Formatter().parse(value)
            fields = {re.split(r"[.\[]", f, maxsplit=1)[0] for _, f, _, _ in parsed if f is not None}
            unknown = sorted(fields - TEMPLATE_FIELDS)
            if unknown:
                named = ", ".join("{" + f + "}" for f in unknown)
                raise ValueError(f"{value!r} names {named}; a template may use {{run_id}} and {{persona_id}}")
        return value


class Endpoint(_Block):
    base_url: str = ""
    api_key: str = ""
    model: str = ""



class EmbedderEndpoint(Endpoint):
    dims: int = Field(DEFAULT_EMBEDDING_DIMS, ge=1)


class NativeBlock(_Block):
    run_id: str = Field("nanobot", min_length=1)
    agent_id: str | None = None
    context_tokens: int = Field(DEFAULT_CONTEXT_TOKENS, ge=50)
    max_items: int = Field(DEFAULT_CONTEXT_ITEMS, ge=1, le=100)

    def budget(self) -> ContextBudget:
        return ContextBudget(max_tokens=self.context_tokens, max_items=self.max_items)


class FileBlock(NativeBlock):
    pass


class Mem0Block(NativeBlock):
    path: str = ""  # local Qdrant directory; empty: memory/.backends/mem0 in the workspace
    collection: str = "nanobot"
    infer: bool = True
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    rerank: bool = False
    llm: Endpoint = Endpoint()
    embedder: EmbedderEndpoint = EmbedderEndpoint()


class GraphitiBlock(NativeBlock):
    driver: Literal["kuzu", "neo4j", "falkordb"] = "kuzu"
    path: str = ""  # Kuzu database file; empty: memory/.backends/graphiti/graph.kuzu
    uri: str = ""  # neo4j / falkordb
    user: str = ""
    password: str = ""
    database: str = ""
    group_id_template: str = "{run_id}:{persona_id}"
    llm: Endpoint = Endpoint()
    small_model: str = ""
    embedder: EmbedderEndpoint = EmbedderEndpoint()


class HonchoBlock(NativeBlock):
    base_url: str = Field(min_length=1)  # always explicit: the SDK default is the hosted service
    api_key: str = ""
    workspace_template: str = "{run_id}"
    assistant_peer: str = "assistant"
    summary: bool = True
    search_top_k: int | None = Field(None, ge=1, le=100)
    timeout_s: float = Field(30.0, gt=0)
    ready_poll_s: float = Field(0.2, gt=0)


class MemosBlock(NativeBlock):
    base_url: str = Field(min_length=1)
    api_key: str = ""
    user_template: str = "{persona_id}"
    cube_template: str = "{run_id}__{persona_id}"
    mode: Literal["fast", "fine", "mixture"] = "fast"
    async_mode: Literal["async", "sync"] = "async"
    relativity: float = Field(0.0, ge=0.0)
    include_preference: bool = True
    search_tool_memory: bool = True
    include_skill_memory: bool = True
    timeout_s: float = Field(30.0, gt=0)


BLOCKS: dict[str, type[NativeBlock]] = {
    "file": FileBlock,
    "mem0": Mem0Block,
    "graphiti": GraphitiBlock,
    "honcho": HonchoBlock,
    "memos": MemosBlock,
}
B = TypeVar("B", bound=NativeBlock)


def native_block(config: Config, name: str, model: type[B]) -> B:
    """The validated block `memory.backends.<name>` (missing: all defaults)."""
    raw = config.memory.backends.get(name) or {}
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise BackendConfigError(f"memory.backends.{name}.{key}: {first['msg']}") from None


def config_hash(name: str, block: NativeBlock) -> str:
    """A stable hash of the native config (secrets excluded): logged at start, shown by the check."""
    data = block.model_dump(mode="json", by_alias=True)

    def scrub(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: ("***" if "key" in k.lower() or "password" in k.lower() else scrub(v))
                for k, v in sorted(node.items())
            }
        return node

    text = json.dumps({"backend": name, "config": scrub(data)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _provider_endpoint(config: Config) -> Endpoint:
    """The agent's own chat endpoint, when the provider speaks the OpenAI API directly."""
    found = openai_endpoint(config)
    return Endpoint(base_url=found[0], api_key=found[1], model=found[2]) if found else Endpoint()


def resolve_llm(config: Config, name: str, given: Endpoint) -> Endpoint:
    base = _provider_endpoint(config)
    merged = Endpoint(
        base_url=given.base_url or base.base_url,
        api_key=given.api_key or base.api_key or "no-key",
        model=given.model or base.model,
    )
    if not merged.base_url or not merged.model:
        raise BackendConfigError(
            f"memory.backends.{name}.llm: set baseUrl and model (an OpenAI-compatible endpoint); "
            "they default to the agent's provider when it speaks the OpenAI API directly"
        )
    return merged


def resolve_embedder(config: Config, name: str, given: EmbedderEndpoint, llm: Endpoint) -> EmbedderEndpoint:
    search = config.memory.search
    return EmbedderEndpoint(
        base_url=given.base_url or search.embedding_api_base or llm.base_url,
        api_key=given.api_key or search.embedding_api_key or llm.api_key,
        model=given.model or search.embedding_model or DEFAULT_EMBEDDING_MODEL,
        dims=given.dims,
    )


def require_libraries(*modules: str) -> None:
    """Raise ImportError (naming the module) for the first of `modules` that is not installed: an
    adapter that imports its library only at first use is refused at start, as a config error with
    the install hint, instead of running with every turn's memory failing in the log."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"No module named {module!r}", name=module)
