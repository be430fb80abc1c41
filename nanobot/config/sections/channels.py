"""`channels`: Telegram, Discord, what is sent besides replies, and voice transcription."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from nanobot.config.sections.base import Credential, Section, endpoint_url
from nanobot.config.sections.providers import ProvidersConfig

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
GroupPolicy = Literal["mention", "open"]
DmPolicy = Literal["pairing", "allowlist", "open"]

_ALLOW = ("Who may talk to the bot: `[\"*\"]` everyone, empty no one (said loudly at start-up). ")
_DM = ("A private-chat sender not on `allowFrom`: `pairing` sends them one pairing code to give the owner "
       "(`nanobot pairing approve CODE` admits them, no restart); `allowlist` ignores them silently; `open` "
       "admits anyone as a guest (a group's trust: no owner memory, read-only files, no cron, no messages "
       "to other chats). A refused message never reaches the model; groups never get a pairing reply.")
_GROUP = "In groups: `mention` answers only when mentioned or replied to; `open` answers every message."


class TelegramConfig(Section):
    enabled: bool = Field(False, description="Run the Telegram bot in the gateway.")
    token: Credential = Field("", description="Bot token from @BotFather (`123456:ABC…`).")
    allow_from: list[str] = Field([], description=_ALLOW + "Entries: numeric user ids or usernames "
                                  "(with or without @; all-digit entries match ids only).")
    base_url: str = Field("https://api.telegram.org/bot", description="Bot API base the token is appended "
                          "to (a local Bot API server, or a test fake).")
    base_file_url: str = Field("https://api.telegram.org/file/bot", description="Bot API file download "
                               "base the token is appended to. Attachments are always fetched from it, "
                               "never read from disk: a local Bot API server's `--local` mode (getFile "
                               "answers with paths on its disk) is not supported.")
    dm_policy: DmPolicy = Field("pairing", description=_DM)
    group_policy: GroupPolicy = Field("mention", description=_GROUP)
    proxy: str = Field("", description="Proxy URL for Bot API requests (`http://…` or `socks5://…`); "
                       "empty: none.")
    streaming: bool = Field(False, description="Show streamed replies by editing the message as it grows "
                            "(needs `agents.defaults.stream`).")
    poll_timeout_s: int = Field(30, ge=0, description="Long-poll timeout of getUpdates, in seconds.")

    @field_validator("base_url", "base_file_url")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, value: str) -> str:
        # `127.0.0.1:3128` without a scheme loaded, then broke doctor with a traceback and the
        # Telegram channel at start, the gateway running on silent
        return endpoint_url(value, PROXY_SCHEMES)


class DiscordConfig(Section):
    enabled: bool = Field(False, description="Run the Discord bot in the gateway.")
    token: Credential = Field("", description="Bot token from the Discord developer portal (Bot → Reset Token).")
    allow_from: list[str] = Field([], description=_ALLOW + "Entries: Discord user ids.")
    api_base: str = Field("https://discord.com/api/v10", description="Discord REST API base (for "
                          "Discord-compatible servers and tests).")
    gateway_url: str = Field("wss://gateway.discord.gg", description="Discord websocket gateway URL (for "
                             "Discord-compatible servers and tests).")
    dm_policy: DmPolicy = Field("pairing", description=_DM)
    group_policy: GroupPolicy = Field("mention", description=_GROUP)

    @field_validator("api_base")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)

    @field_validator("gateway_url")
    @classmethod
    def _gateway(cls, value: str) -> str:
        return endpoint_url(value, ("wss", "ws"))


class TranscriptionConfig(Section):
    provider: str = Field("", description="Voice messages are transcribed by this provider's Whisper "
                          "endpoint: `openai`, `groq` or `custom`; empty: off (the audio is only saved).")
    model: str = Field("whisper-1", description="Transcription model name.")

    @field_validator("provider")
    @classmethod
    def _provider(cls, value: str) -> str:
        # an unknown name ("OpenAI", "whisper") loaded, and every voice message then went
        # untranscribed with a warning in the log only
        name = value.strip().lower()
        if name and name not in ProvidersConfig.model_fields:
            raise ValueError(f"{value!r} is no provider; use one of {', '.join(ProvidersConfig.model_fields)}")
        return name


class ChannelsConfig(Section):
    send_progress: bool = Field(True, description="Send the model's interim text while a turn still runs "
                                "tools (a channel that streams keeps it anyway: the user watched it arrive).")
    send_tool_hints: bool = Field(False, description="Send a short note naming each tool call "
                                  "(`exec(\"ls\")`).")
    send_max_retries: int = Field(4, ge=0, description="Retries of a failed send (network error, rate "
                                  "limit) with backoff before the reply is given up.")
    telegram: TelegramConfig = Field(TelegramConfig(), description="The Telegram bot.")
    discord: DiscordConfig = Field(DiscordConfig(), description="The Discord bot.")
    transcription: TranscriptionConfig = Field(TranscriptionConfig(), description="Voice message "
                                               "transcription.")
