"""`agents.defaults`: which model answers, how much it may write, and the budgets of one turn."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from nanobot.config.sections.base import Section


class AgentDefaults(Section):
    workspace: str = Field("", description="Workspace folder (memory, sessions, skills); empty: "
                           "$NANOBOT_HOME/workspace. `~` is expanded; a relative path lies in $NANOBOT_HOME.")
    model: str = Field("", description="Model name as litellm spells it (`gpt-4o-mini`, "
                       "`anthropic/claude-sonnet-4-5`, `custom/my-model`); empty: the provider's default.")
    provider: str = Field("auto", description="`auto` picks the configured provider matching the model; or a "
                          "name under `providers` (`openai`, `custom`, `local`, …).")
    max_tokens: int = Field(
        8192,
        ge=16,
        description="Most tokens the model may write in one reply (half of contextWindowTokens or more is "
        "cut to a quarter of it, so the prompt still fits).",
    )
    temperature: float = Field(0.1, ge=0.0, le=2.0, description="Sampling temperature sent to the model.")
    context_window_tokens: int = Field(65536, ge=1024, description="The model's context window; memory "
                                       "consolidation starts before a prompt would outgrow it.")
    max_tool_iterations: int = Field(40, ge=1, description="Most model ↔ tool rounds in one turn before "
                                     "the turn stops with a notice.")
    timezone: str = Field("", description="IANA zone (`Europe/Berlin`) for memory timestamps, dated note "
                          "names and cron; empty: the system's.")
    # 16: a turn mostly waits on the model (the client costs a few ms of CPU per call), so a
    # household's or a group's simultaneous chats should not queue behind each other; the gate
    # still bounds how many tool runs (sandboxed exec, web fetches) and model requests one gateway
    # fires at once on a small host. See the README's performance section for the measurements.
    max_concurrent_turns: int = Field(16, ge=1, description="Turns of different chats that may run at "
                                      "once; one chat's messages are always answered in order. Each "
                                      "turn mostly waits on the model, so 16 keeps simultaneous chats "
                                      "from queueing while bounding parallel tool runs and model "
                                      "requests; lower it for strict provider rate limits or a tiny host.")
    max_user_message_chars: int = Field(32_000, ge=1000, description="A longer user message is cut to "
                                        "this many characters before it reaches the model.")
    max_tool_result_chars: int = Field(16_000, ge=500, description="A longer tool result is cut to this "
                                       "many characters before it reaches the model.")
    llm_timeout_s: float = Field(120.0, gt=0, description="Seconds one model request may take; a streamed "
                                 "reply may go on longer while it keeps coming, and fails after this long "
                                 "without a chunk.")
    llm_max_retries: int = Field(3, ge=0, description="Retries of a model request after a transient "
                                 "error (rate limit, 5xx, timeout), with backoff.")
    stream: bool = Field(False, description="Ask the model for a streamed reply (channels that stream show "
                         "it as it is written).")
    bootstrap_max_chars: int = Field(20_000, ge=500, description="Most characters of one bootstrap file "
                                     "(AGENTS.md, SOUL.md, USER.md, TOOLS.md) in the system prompt.")
    bootstrap_total_max_chars: int = Field(24_000, ge=1000, description="Most characters of all bootstrap "
                                           "files together in the system prompt.")
    memory_max_chars: int = Field(12_000, ge=500, description="Most characters of MEMORY.md in the system "
                                  "prompt (private chats only).")
    small_model: bool = Field(False, description="The model is a small local one (e.g. a 1-8B model on "
                              "Ollama, llama.cpp or LM Studio): memory consolidation, the pre-compaction "
                              "flush and session notes ask for plain labelled text instead of tool calls. "
                              "Always on for the embedded `local` provider.")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        # a typo used to fall back to the system's zone with a log line: cron ran at the wrong hour
        if value.strip():
            try:
                ZoneInfo(value.strip())
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Berlin)") from None
        return value


class AgentsConfig(Section):
    defaults: AgentDefaults = Field(AgentDefaults(), description="Settings of the agent.")
