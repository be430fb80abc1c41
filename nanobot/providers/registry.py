"""Provider resolution: which LLMProvider serves the configured model, over which route.

Credentials come from `providers.<name>` in config.json (or `NANOBOT_PROVIDERS__<NAME>__…`) and,
when those are empty, from each provider's usual environment variables (`OPENAI_API_KEY`, …,
`OPENAI_BASE_URL` / `OPENAI_API_BASE` for OpenAI's address).

`agents.defaults.provider: auto` picks, in order:
1. a provider with credentials whose model prefix matches the model (`claude…` → anthropic);
2. the only configured provider, when it is a gateway that routes any model (openrouter, ollama);
3. when the model names a provider that has no credentials: exit 2 naming the variable to set;
4. for a model name no prefix knows: the only configured provider (a self-hosted server behind
   `OPENAI_BASE_URL`), else `custom` when its apiBase is set;
5. with no model at all: the first configured provider's default model, else the embedded `local`
   demo model when it is installed, else a how-to-configure text (exit 2).

Routes: OpenAI-compatible providers (openai, custom, openrouter, deepseek, groq, mistral, ollama) go
through our own JSON client directly; the others (anthropic, gemini) and any provider with
`via: "litellm"` go through litellm, which is then imported on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from nanobot.config.schema import Config, ProviderConfig, ProvidersConfig
from nanobot.config.sections.base import credential, endpoint_url
from nanobot.errors import ConfigError
from nanobot.providers.base import LLMProvider
from nanobot.util.extras import install_hint


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    prefixes: tuple[str, ...]  # model-name prefixes this provider serves
    default_model: str
    env_keys: tuple[str, ...] = ()  # the provider's usual API-key variables, first found wins
    #: the OpenAI-compatible endpoint of the direct route; empty: litellm translates for this provider
    base_url: str = ""
    needs_key: bool = True  # ollama works with only an apiBase
    gateway: bool = False  # routes any model: its name is prefixed onto the model


SPECS: dict[str, ProviderSpec] = {
    s.name: s
    for s in (
        ProviderSpec(
            "openai",
            ("openai/", "gpt-", "o1", "o3", "o4", "chatgpt-"),
            "gpt-4o-mini",
            ("OPENAI_API_KEY",),
            "https://api.openai.com/v1",
        ),
        ProviderSpec(
            "anthropic", ("anthropic/", "claude"), "anthropic/claude-sonnet-4-5", ("ANTHROPIC_API_KEY",)
        ),
        ProviderSpec(
            "openrouter",
            ("openrouter/",),
            "openrouter/openai/gpt-4o-mini",
            ("OPENROUTER_API_KEY",),
            "https://openrouter.ai/api/v1",
            gateway=True,
        ),
        ProviderSpec("gemini", ("gemini/",), "gemini/gemini-2.5-flash", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
        ProviderSpec(
            "groq",
            ("groq/",),
            "groq/llama-3.3-70b-versatile",
            ("GROQ_API_KEY",),
            "https://api.groq.com/openai/v1",
        ),
        ProviderSpec(
            "deepseek",
            ("deepseek/", "deepseek-"),
            "deepseek/deepseek-chat",
            ("DEEPSEEK_API_KEY",),
            "https://api.deepseek.com/v1",
        ),
        ProviderSpec(
            "mistral",
            ("mistral/",),
            "mistral/mistral-small-latest",
            ("MISTRAL_API_KEY",),
            "https://api.mistral.ai/v1",
        ),
        ProviderSpec(
            "ollama",
            ("ollama/", "ollama_chat/"),
            "ollama_chat/llama3.2",
            base_url="http://127.0.0.1:11434/v1",
            needs_key=False,
            gateway=True,
        ),
    )
}
OPENAI_BASE_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
OPENAI_HOST = "api.openai.com"

HOW_TO_CONFIGURE = """nanobot: no LLM provider is configured.
Set a provider's usual environment variable (OPENAI_API_KEY, ANTHROPIC_API_KEY, OPENROUTER_API_KEY,
GEMINI_API_KEY, DEEPSEEK_API_KEY, GROQ_API_KEY, MISTRAL_API_KEY; OPENAI_BASE_URL for an
OpenAI-compatible server), or configure one in {config_path}, for example:
  {{"providers": {{"openai": {{"apiKey": "sk-..."}}}},
   "agents": {{"defaults": {{"model": "gpt-4o-mini"}}}}}}
or any OpenAI-compatible server:
  {{"providers": {{"custom": {{"apiBase": "http://127.0.0.1:8000/v1"}}}},
   "agents": {{"defaults": {{"provider": "custom", "model": "my-model"}}}}}}
Environment example: NANOBOT_PROVIDERS__OPENAI__API_KEY=sk-...
Or install the embedded demo model {local_hint}"""


class ProviderConfigError(ConfigError):
    """The provider cannot be built from the config; the CLI prints this and exits 2."""


def settings_from_environment() -> dict[str, str]:
    """The environment variables of this process that change what nanobot does: every NANOBOT_
    setting but NANOBOT_HOME, and the providers' usual key and base variables. A service does not
    inherit the shell that installed it; `service install` hands it these."""
    usual = {name for spec in SPECS.values() for name in spec.env_keys} | set(OPENAI_BASE_ENV)
    return {
        name: value
        for name, value in os.environ.items()
        if value and ((name.startswith("NANOBOT_") and name != "NANOBOT_HOME") or name in usual)
    }


def _first_env(names: tuple[str, ...]) -> str:
    return next((os.environ[n] for n in names if os.environ.get(n)), "")


def credentials(name: str, cfg: ProviderConfig) -> tuple[str, str]:
    """(api key, api base) of a provider: the config's values, else its usual environment variables."""
    spec = SPECS.get(name)
    key = cfg.api_key
    if not key and spec is not None and (variable := next((n for n in spec.env_keys if os.environ.get(n)), None)):
        try:  # the config's key is checked when it is loaded; the environment's here
            key = credential(os.environ[variable])
        except ValueError as exc:
            raise ProviderConfigError(f"{variable}: {exc}") from None
    base = cfg.api_base or (_first_env(OPENAI_BASE_ENV) if name == "openai" else "")
    if base and not cfg.api_base:
        try:  # the config's value is checked when it is loaded; the environment's here
            endpoint_url(base)
        except ValueError as exc:
            raise ProviderConfigError(f"{' or '.join(OPENAI_BASE_ENV)}: {exc}") from None
    return key, base


def has_credentials(name: str, cfg: ProviderConfig) -> bool:
    """Whether `name` can answer: its key (an address for the providers that need none), or, for
    openai, the address of a server of one's own (`own_openai_server`)."""
    key, base = credentials(name, cfg)
    spec = SPECS.get(name)
    if spec is not None and not spec.needs_key:
        return bool(base or key)
    return bool(key) or (name == "openai" and own_openai_server(base))


def own_openai_server(base: str) -> bool:
    """An OpenAI-compatible address that is not OpenAI's (a vLLM or llama.cpp server named by
    OPENAI_BASE_URL often takes no key: the address counts, DESIGN A2; no Authorization is sent)."""
    return bool(base) and (urlsplit(base).hostname or "").lower() != OPENAI_HOST


def configured_providers(providers: ProvidersConfig) -> list[str]:
    """The providers `auto` chooses among. openai with an address but no key is one only when no
    other provider has credentials: an OPENAI_BASE_URL exported for other tools must not take turns
    from the provider config.json names."""
    found = [n for n in SPECS if has_credentials(n, getattr(providers, n))]
    if len(found) > 1 and "openai" in found and not credentials("openai", providers.openai)[0]:
        found.remove("openai")
    return found


def missing_credentials_hint(name: str) -> str:
    """What to set so `name` has credentials, naming the variables a user would reach for."""
    spec = SPECS[name]
    if not spec.needs_key:
        return f"set providers.{name}.apiBase (env NANOBOT_PROVIDERS__{name.upper()}__API_BASE)"
    usual = " or ".join(spec.env_keys)
    return (
        f"set {usual}, or providers.{name}.apiKey in the config "
        f"(env NANOBOT_PROVIDERS__{name.upper()}__API_KEY)"
    )


def credentials_gap(name: str, providers: ProvidersConfig) -> str | None:
    """What the selected provider `name` still needs before it can answer, as a hint; None when
    nothing (or when `name` needs no credentials: auto, local)."""
    if name == "custom":
        return None if providers.custom.api_base else "set providers.custom.apiBase (the server's http://…/v1)"
    if name in SPECS and not has_credentials(name, getattr(providers, name)):
        return missing_credentials_hint(name)
    return None


def _litellm_model(spec: ProviderSpec, model: str) -> str:
    """The model name as litellm routes it (gateways need their own prefix in front)."""
    if not model:
        return spec.default_model
    if spec.gateway and not any(model.startswith(p) for p in spec.prefixes):
        return f"{spec.name}/{model}"
    return model


def _wire_model(name: str, model: str) -> str:
    """The model name an OpenAI-compatible endpoint expects: without our routing prefix."""
    spec = SPECS.get(name)
    model = model or (spec.default_model if spec else "")
    for prefix in (spec.prefixes if spec else ()) + (f"{name}/",):
        if prefix.endswith("/") and model.startswith(prefix):
            return model[len(prefix) :]
    return model


def _ollama_base(base: str) -> str:
    """Ollama's OpenAI-compatible API lives under /v1 of the address its native API uses."""
    base = base.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


def _build_remote(config: Config, name: str, model: str) -> LLMProvider:
    d = config.agents.defaults
    pcfg: ProviderConfig = getattr(config.providers, name)
    key, base = credentials(name, pcfg)
    common = {
        "extra_headers": pcfg.extra_headers,
        "timeout_s": d.llm_timeout_s,
        "max_retries": d.llm_max_retries,
        "provider_name": name,
    }
    spec = SPECS.get(name)
    if pcfg.via != "litellm" and (spec is None or spec.base_url):
        from nanobot.providers.openai_compat import OpenAICompatProvider

        if name == "ollama":
            base = _ollama_base(base or spec.base_url)  # type: ignore[union-attr]
        endpoint = base or (spec.base_url if spec else "")
        return OpenAICompatProvider(_wire_model(name, model), api_key=key, api_base=endpoint, **common)
    from nanobot.providers.litellm import LiteLLMProvider

    if spec is None:  # custom: litellm's OpenAI route to the configured endpoint
        return LiteLLMProvider(f"openai/{model}", api_key=key or "no-key", api_base=base, **common)
    return LiteLLMProvider(_litellm_model(spec, model), api_key=key, api_base=base, **common)


def _build_custom(config: Config) -> LLMProvider:
    if not config.providers.custom.api_base:
        raise ProviderConfigError(
            "provider 'custom' needs providers.custom.apiBase (env NANOBOT_PROVIDERS__CUSTOM__API_BASE)"
        )
    model = config.agents.defaults.model.strip().removeprefix("custom/")
    if not model:
        raise ProviderConfigError(
            "provider 'custom' needs agents.defaults.model (the model name the endpoint serves)"
        )
    return _build_remote(config, "custom", model)


def _build_local(config: Config) -> LLMProvider:
    from nanobot.providers.local import LocalProvider, llama_cpp_available, resolve_model_path

    if not llama_cpp_available():
        raise ProviderConfigError(f"provider 'local' needs the local extra, {install_hint('local')}")
    if resolve_model_path(config.providers.local) is None:
        if config.providers.local.model_path:
            raise ProviderConfigError(
                f"providers.local.modelPath: {config.providers.local.model_path} is not a file"
            )
        raise ProviderConfigError(
            f"provider 'local' has no model: install it {install_hint('local')}, "
            "or set providers.local.modelPath"
        )
    return LocalProvider(config.providers.local)


def _matches(name: str, model: str) -> bool:
    lowered = model.lower()
    return any(lowered.startswith(p) for p in SPECS[name].prefixes)


def _resolve_auto(config: Config, model: str, config_path: str) -> LLMProvider:
    configured = configured_providers(config.providers)
    custom_set = bool(config.providers.custom.api_base)
    if not model:
        if configured:
            return _build_remote(config, configured[0], "")
        if custom_set:
            return _build_custom(config)  # explains that a model name is needed
        from nanobot.providers.local import local_provider_available

        if local_provider_available(config.providers.local):
            return _build_local(config)
        how = HOW_TO_CONFIGURE.format(config_path=config_path, local_hint=install_hint("local"))
        if config.providers.local.model_path:  # set, but wrong: named, not only "no provider"
            how = f"providers.local.modelPath: {config.providers.local.model_path} is not a file.\n{how}"
        raise ProviderConfigError(how)
    for name in configured:
        if _matches(name, model):
            return _build_remote(config, name, model)
    gateways = [n for n in configured if SPECS[n].gateway]
    if len(configured) == 1 and gateways:
        return _build_remote(config, gateways[0], model)
    wanted = next((n for n in SPECS if _matches(n, model)), None)
    if wanted is not None:
        raise ProviderConfigError(
            f"model '{model}' is served by provider '{wanted}', which has no credentials: "
            f"{missing_credentials_hint(wanted)}"
        )
    if len(configured) == 1:
        return _build_remote(config, configured[0], model)
    if not configured and custom_set:
        return _build_custom(config)
    if configured:
        raise ProviderConfigError(
            f"model '{model}' matches none of the configured providers ({', '.join(configured)}); "
            "set agents.defaults.provider to the one that serves it"
        )
    raise ProviderConfigError(
        f"model '{model}' is configured but no provider has credentials: set the API key of the "
        "provider that serves it (e.g. OPENAI_API_KEY), or providers.custom.apiBase for an "
        f"OpenAI-compatible server (see {config_path})"
    )


def uses_demo_model(config: Config) -> bool:
    """Whether turns would be answered by the embedded demo model (memory search is off with it)."""
    try:
        return resolve_provider(config).is_small_local
    except ProviderConfigError:
        return False


def resolve_provider(config: Config, config_path: str = "config.json") -> LLMProvider:
    """Build the provider for the config, or raise ProviderConfigError (the CLI exits 2)."""
    d = config.agents.defaults
    name = d.provider.strip().lower() or "auto"
    model = d.model.strip()
    if name == "custom" or (name == "auto" and model.startswith("custom/")):
        return _build_custom(config)
    if name == "local":
        return _build_local(config)
    if name == "auto":
        return _resolve_auto(config, model, config_path)
    if name not in SPECS:
        choices = ", ".join(["auto", "custom", "local", *SPECS])
        raise ProviderConfigError(
            f"unknown provider '{d.provider}' in agents.defaults.provider; choose one of: {choices}"
        )
    if not has_credentials(name, getattr(config.providers, name)):
        raise ProviderConfigError(
            f"provider '{name}' is selected but has no credentials: {missing_credentials_hint(name)}"
        )
    return _build_remote(config, name, model)


def openai_endpoint(config: Config) -> tuple[str, str, str] | None:
    """(base URL, API key, model) of the configured chat provider when it answers the OpenAI API
    directly (custom, openai and the other direct routes), else None. Memory backends that make their
    own LLM calls use it, so they reach the same endpoint the agent does."""
    d = config.agents.defaults
    name, model = d.provider.strip().lower() or "auto", d.model.strip()
    if name == "custom" or (name == "auto" and model.startswith("custom/")):
        key, base = credentials("custom", config.providers.custom)
        return (base, key or "no-key", model.removeprefix("custom/")) if base else None
    if name == "auto":
        configured = configured_providers(config.providers)
        name = next((n for n in configured if not model or _matches(n, model)), "")
    spec, pcfg = SPECS.get(name), getattr(config.providers, name, None)
    if spec is None or pcfg is None or not spec.base_url or pcfg.via == "litellm":
        return None
    if not has_credentials(name, pcfg):
        return None
    key, base = credentials(name, pcfg)
    base = _ollama_base(base or spec.base_url) if name == "ollama" else base or spec.base_url
    return base, key or "no-key", _wire_model(name, model)
