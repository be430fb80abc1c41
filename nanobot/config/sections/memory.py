"""`memory`: long-term memory, consolidation of old messages, and the memory search index."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from nanobot.config.sections.base import Credential, Section, endpoint_url

# The names memory.backend, memory.condition and memory.search.embeddingProvider accept (any case):
# checked with the config, so a typo fails `doctor` and every command, not the first turn.
MEMORY_BACKENDS = ("file", "mem0", "graphiti", "honcho", "memos")
MEMORY_CONDITIONS = ("no_memory", "rolling_summary", "full_history", "static_profile")
EMBEDDING_PROVIDERS = ("auto", "local", "litellm", "none")


def _ENUM(names: tuple[str, ...]) -> dict[str, list[str]]:  # noqa: N802 - reads as a constant
    """The closed list an editor offers for a key the loader checks (any case, spaces trimmed)."""
    return {"enum": list(names)}
LOCAL_EMBEDDING_MODELS = ("multilingual-e5-small", "wordllama")  # what `local` can load offline


def _one_of(key: str, value: str, names: tuple[str, ...], empty: str) -> str:
    name = value.strip().lower() or empty
    if name and name not in names:
        raise ValueError(f"unknown {key} {value!r}; choose one of {', '.join(names)}")
    return name


class MemoryFlushConfig(Section):
    enabled: bool = Field(True, description="Before old messages are consolidated, a silent turn lets the "
                          "model save durable facts to today's note.")
    soft_threshold_tokens: int = Field(4000, ge=0, description="The flush runs this many tokens before the "
                                       "consolidation threshold.")


class MemorySearchConfig(Section):
    enabled: bool = Field(True, description="Offer the memory_search and memory_get tools and keep the "
                          "index.")
    embedding_provider: str = Field("auto", description="`auto` (the local multilingual model when "
                                    "installed, else the embedding endpoint of a configured provider that "
                                    "has one: OpenAI, Gemini, Mistral; else keyword search only), `local` "
                                    "(an offline model), `litellm` (a hosted embedding model) or `none` "
                                    "(keyword search only). `nanobot memory status` shows which is used.",
                                    json_schema_extra=_ENUM(EMBEDDING_PROVIDERS))
    embedding_model: str = Field("", description="Embedding model name (e.g. `text-embedding-3-small`).")
    embedding_api_base: str = Field("", description="Endpoint of the embedding model; empty: the "
                                    "provider's.")
    embedding_api_key: Credential = Field("", description="API key of the embedding endpoint.")
    max_results: int = Field(6, ge=1, le=50, description="Results one search returns.")
    min_score: float = Field(0.35, ge=0.0, le=1.0, description="Results scoring below this (0–1) are "
                             "dropped; when none passes, the keyword matches are kept (a word that is in "
                             "memory is always found).")
    vector_weight: float = Field(0.7, ge=0.0, le=1.0, description="Weight of vector similarity in a hybrid "
                                 "score.")
    text_weight: float = Field(0.3, ge=0.0, le=1.0, description="Weight of the keyword score in a hybrid "
                               "score.")
    fusion: Literal["weighted", "rrf"] = Field("weighted", description="How a hybrid search merges "
                                               "keyword and vector results: `weighted` (the weighted sum "
                                               "of both scores) or `rrf` (reciprocal-rank fusion of both "
                                               "orders, weighted the same way).")
    rrf_k: int = Field(10, ge=1, description="Rank offset of reciprocal-rank fusion: larger flattens the "
                       "difference between the first places.")
    candidate_multiplier: int = Field(4, ge=1, description="Candidates ranked per result wanted.")
    snippet_chars: int = Field(1000, ge=100, le=4000, description="Most characters of a result's "
                               "snippet (the matching lines of its chunk); the default result count "
                               "then returns about 6,000 characters.")
    chunk_tokens: int = Field(400, ge=50, description="Size of an indexed chunk, in tokens.")
    chunk_overlap_tokens: int = Field(80, ge=0, description="Tokens shared by neighbouring chunks.")
    vector_backend: Literal["numpy", "sqlite-vec"] = Field("numpy", description="Where vector similarity "
                                                           "is computed.")
    temporal_decay: bool = Field(False, description="Rank dated notes lower as they age.")
    half_life_days: float = Field(30.0, gt=0, description="Age at which temporal decay halves a score.")
    mmr: bool = Field(False, description="Re-rank for diversity (maximal marginal relevance).")
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0, description="MMR trade-off: 1 relevance only, 0 "
                              "diversity only.")
    include_sessions: bool = Field(True, description="Index the session transcripts (sessions/*.jsonl and "
                                   "sessions/archive/*.jsonl) beside the memory files, so whatever was said "
                                   "stays findable when consolidation dropped it.")
    qmd: bool = Field(False, description="Search through the external `qmd` tool when it is installed "
                      "(falls back to the built-in index).")
    qmd_timeout_s: float = Field(5.0, gt=0, description="Seconds a qmd search may take.")

    @field_validator("embedding_api_base")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)

    @field_validator("embedding_provider")
    @classmethod
    def _known_embedder(cls, value: str) -> str:  # a typo fell back to keyword search, told once in a log
        return _one_of("embedding provider", value, EMBEDDING_PROVIDERS, "auto")

    @model_validator(mode="after")
    def _local_model_known(self) -> MemorySearchConfig:
        """`local` with a hosted model's name (text-embedding-3-small) failed every search, and
        `status` with a traceback."""
        if self.embedding_provider == "local" and self.embedding_model not in ("", *LOCAL_EMBEDDING_MODELS):
            raise ValueError(
                f"embeddingModel {self.embedding_model!r} is not a local model: with embeddingProvider "
                f"'local' use one of {', '.join(LOCAL_EMBEDDING_MODELS)} (or empty), or embeddingProvider "
                "'litellm' for a hosted one"
            )
        return self


class MemoryConfig(Section):
    share_in_groups: bool = Field(False, description="Group chats may see and search the owner's long-term "
                                  "memory.")
    backend: str = Field("file", description="Long-term memory: `file` (Markdown files), `mem0`, "
                         "`graphiti`, `honcho` or `memos` (see docs/memory-backends.md).",
                         json_schema_extra=_ENUM(MEMORY_BACKENDS))
    condition: str = Field("", description="A control condition replacing `backend` for experiments: "
                           "`no_memory`, `rolling_summary`, `full_history` or `static_profile`; empty: "
                           "none.", json_schema_extra=_ENUM(("", *MEMORY_CONDITIONS)))
    safety_buffer_tokens: int = Field(1024, ge=0, description="Tokens kept free below the context window "
                                      "when deciding to consolidate.")
    max_consolidation_rounds: int = Field(3, ge=1, description="Consolidation passes one turn may trigger.")
    max_consolidation_failures: int = Field(3, ge=1, description="Failed consolidations in a row before "
                                            "the raw messages are archived instead.")
    max_archive_retries: int = Field(5, ge=1, description="Failed attempts to consolidate a session archived "
                                     "by /new (one at /new, then one per start-up) before the retries stop: "
                                     "its messages are raw-archived into HISTORY.md and `nanobot status` "
                                     "reports it.")
    archive_retry_backoff_s: float = Field(300.0, ge=0, description="Seconds after a failed archive "
                                           "consolidation before a start-up retries it; doubles with each "
                                           "failure.")
    backups_kept: int = Field(5, ge=0, description="Earlier versions of MEMORY.md (and of each note a "
                              "tool rewrites) kept in memory/.backups/, plus the fullest one.")
    flush: MemoryFlushConfig = Field(MemoryFlushConfig(), description="The pre-consolidation memory flush.")
    search: MemorySearchConfig = Field(MemorySearchConfig(), description="The memory search index.")
    backends: dict[str, dict[str, Any]] = Field({}, description="Native config block of each memory "
                                                "backend, by backend name.")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        return _one_of("backend", value, MEMORY_BACKENDS, "file")

    @field_validator("condition")
    @classmethod
    def _known_condition(cls, value: str) -> str:
        return _one_of("condition", value, MEMORY_CONDITIONS, "")
