"""Configuration models: camelCase in config.json, snake_case accepted, NANOBOT_ env overrides.

The sections live in `nanobot.config.sections` (one module per top-level key) and are re-exported
here. Every field has a description; `scripts/config_docs.py` turns them into config.example.json,
the README table and docs/configuration.md, and `nanobot config schema` prints the JSON Schema.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from nanobot.config.sections.agents import AgentDefaults, AgentsConfig
from nanobot.config.sections.channels import (
    ChannelsConfig,
    DiscordConfig,
    GroupPolicy,
    TelegramConfig,
    TranscriptionConfig,
)
from nanobot.config.sections.memory import MemoryConfig, MemoryFlushConfig, MemorySearchConfig
from nanobot.config.sections.providers import LocalProviderConfig, ProviderConfig, ProvidersConfig
from nanobot.config.sections.runtime import LOG_LEVELS, GatewayConfig, HeartbeatConfig, LoggingConfig
from nanobot.config.sections.tools import (
    ExecToolConfig,
    MCPServerConfig,
    ToolsConfig,
    WebSearchConfig,
    WebToolConfig,
)

__all__ = [
    "LOG_LEVELS", "AgentDefaults", "AgentsConfig", "ChannelsConfig", "Config", "DiscordConfig",
    "ExecToolConfig", "GatewayConfig", "GroupPolicy", "HeartbeatConfig", "LocalProviderConfig",
    "LoggingConfig", "MCPServerConfig", "MemoryConfig", "MemoryFlushConfig", "MemorySearchConfig",
    "ProviderConfig", "ProvidersConfig", "TelegramConfig", "ToolsConfig", "TranscriptionConfig",
    "WebSearchConfig", "WebToolConfig",
]

SCHEMA_KEY = "$schema"  # an editor hint in config.json; ignored on load


class Config(BaseSettings):
    """The whole nanobot configuration."""

    model_config = SettingsConfigDict(
        env_prefix="NANOBOT_",
        env_nested_delimiter="__",
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        title="nanobot configuration",
    )

    agents: AgentsConfig = Field(AgentsConfig(), description="The agent: model, provider and turn budgets.")
    providers: ProvidersConfig = Field(ProvidersConfig(), description="LLM providers: keys and endpoints.")
    channels: ChannelsConfig = Field(ChannelsConfig(), description="Chat channels (Telegram, Discord).")
    tools: ToolsConfig = Field(ToolsConfig(), description="The agent's tools and MCP servers.")
    memory: MemoryConfig = Field(MemoryConfig(), description="Long-term memory and memory search.")
    gateway: GatewayConfig = Field(GatewayConfig(), description="The gateway daemon.")
    logging: LoggingConfig = Field(LoggingConfig(), description="Logging.")

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

    @property
    def log_file_path(self) -> Path | None:
        """logging.file resolved like the workspace (a relative path lies in $NANOBOT_HOME: from the
        service's folder, /, it was /nanobot.log); None: stderr only."""
        from nanobot.config.paths import resolve_in_home

        return resolve_in_home(self.logging.file, "logging.file") if self.logging.file.strip() else None


def json_schema() -> dict:
    """The JSON Schema of config.json (camelCase keys), for editors and `nanobot config schema`."""
    schema = Config.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    # config.json may name its schema; it is the one key outside the models.
    schema.setdefault("properties", {})[SCHEMA_KEY] = {"type": "string", "description": "JSON Schema URL "
                                                       "or path, for editors; ignored by nanobot."}
    return schema
