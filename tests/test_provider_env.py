"""Provider credentials from the usual environment variables, and which route a config takes.

The CLI tests run `nanobot agent -m` as a subprocess against the local fake LLM; the import check
reads `-X importtime` (PYTHONPROFILEIMPORTTIME), which lists every module the process imported.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from nanobot.config.schema import Config
from nanobot.providers.registry import ProviderConfigError, resolve_provider
from tests.conftest import run_cli
from tests.fakes.llm_server import FakeLLMServer, Reply


def _write(home: Path, data: dict) -> Path:
    path = home / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _imported(stderr: str) -> set[str]:
    """Top-level package names from -X importtime output."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def test_openai_env_vars_reach_the_fake_and_never_import_litellm_or_the_openai_sdk(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.push(Reply(content="hello from the fake"))
    env = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": fake_llm.url, "PYTHONPROFILEIMPORTTIME": "1"}
    result = run_cli("agent", "-m", "hi", home=home, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "hello from the fake"
    assert fake_llm.request_headers[-1]["authorization"] == "Bearer sk-env"
    assert fake_llm.requests[-1]["model"] == "gpt-4o-mini"  # openai's default model
    imported = _imported(result.stderr)
    assert "nanobot" in imported and "h11" in imported  # the check can see imports at all
    assert "litellm" not in imported and "openai" not in imported
    assert "tiktoken" not in imported  # token budgets are estimated without a BPE table
    # what a one-shot turn does not use is not loaded either
    assert not {"telegram", "discord", "mcp", "apscheduler", "sqlite_vec", "numpy", "httpx"} & imported
    assert "embedded demo model" not in result.stderr


def test_via_litellm_takes_the_litellm_route(home: Path, fake_llm: FakeLLMServer) -> None:
    _write(
        home,
        {
            "agents": {"defaults": {"provider": "custom", "model": "fake-model"}},
            "providers": {"custom": {"apiBase": fake_llm.url, "apiKey": "k", "via": "litellm"}},
        },
    )
    fake_llm.push(Reply(content="through litellm"))
    result = run_cli("agent", "-m", "hi", home=home, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "through litellm"
    assert "litellm" in _imported(result.stderr)


def test_config_and_nanobot_env_win_over_the_usual_variables(home: Path, fake_llm: FakeLLMServer) -> None:
    _write(home, {"providers": {"openai": {"apiKey": "sk-config", "apiBase": fake_llm.url}}})
    env = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": _dead_url()}
    assert run_cli("agent", "-m", "hi", home=home, env=env).returncode == 0
    assert fake_llm.request_headers[-1]["authorization"] == "Bearer sk-config"
    env["NANOBOT_PROVIDERS__OPENAI__API_KEY"] = "sk-nanobot"
    assert run_cli("agent", "-m", "hi", home=home, env=env).returncode == 0
    assert fake_llm.request_headers[-1]["authorization"] == "Bearer sk-nanobot"


def test_a_model_whose_provider_has_no_key_exits_2_naming_it(home: Path, fake_llm: FakeLLMServer) -> None:
    _write(home, {"agents": {"defaults": {"model": "claude-sonnet-4-5"}}})
    env = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": fake_llm.url}
    result = run_cli("agent", "-m", "hi", home=home, env=env)
    assert result.returncode == 2
    assert "ANTHROPIC_API_KEY" in result.stderr and "providers.anthropic.apiKey" in result.stderr
    assert "no LLM provider is configured" not in result.stderr
    assert "embedded demo model" not in result.stderr and result.stdout == ""
    assert fake_llm.requests == []


def test_a_model_without_any_credentials_never_falls_back_to_the_demo_model(home: Path) -> None:
    _write(home, {"agents": {"defaults": {"model": "my-model"}}})
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 2 and result.stdout == ""
    assert "OPENAI_API_KEY" in result.stderr and "embedded demo model" not in result.stderr


@pytest.mark.parametrize(
    ("env", "model", "name", "cls", "key"),
    [
        ({"ANTHROPIC_API_KEY": "sk-a"}, "claude-sonnet-4-5", "anthropic", "LiteLLMProvider", "sk-a"),
        ({"GOOGLE_API_KEY": "g"}, "gemini/gemini-2.5-flash", "gemini", "LiteLLMProvider", "g"),
        ({"GEMINI_API_KEY": "g1", "GOOGLE_API_KEY": "g2"}, "", "gemini", "LiteLLMProvider", "g1"),
        (
            {"OPENROUTER_API_KEY": "r"},
            "anthropic/claude-3.5-sonnet",
            "openrouter",
            "OpenAICompatProvider",
            "r",
        ),
        ({"DEEPSEEK_API_KEY": "d"}, "deepseek-chat", "deepseek", "OpenAICompatProvider", "d"),
        ({"GROQ_API_KEY": "q"}, "groq/llama-3.3-70b-versatile", "groq", "OpenAICompatProvider", "q"),
        ({"MISTRAL_API_KEY": "m"}, "mistral/mistral-small-latest", "mistral", "OpenAICompatProvider", "m"),
    ],
)
def test_usual_variables_select_the_provider_and_route(
    monkeypatch: pytest.MonkeyPatch, env: dict, model: str, name: str, cls: str, key: str
) -> None:
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    provider = resolve_provider(Config(agents={"defaults": {"model": model}}))
    assert (provider.name, type(provider).__name__) == (name, cls)
    assert provider.api_key == key  # type: ignore[attr-defined]


def test_direct_route_model_names_and_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", "r")
    p = resolve_provider(Config(agents={"defaults": {"model": "openrouter/openai/gpt-4o-mini"}}))
    assert (p.default_model, p.api_base) == ("openai/gpt-4o-mini", "https://openrouter.ai/api/v1")  # type: ignore[attr-defined]
    p = resolve_provider(
        Config(
            agents={"defaults": {"model": "ollama/llama3.2"}},
            providers={"ollama": {"apiBase": "http://127.0.0.1:11434"}},
        )
    )
    assert (p.name, p.default_model, p.api_base) == ("ollama", "llama3.2", "http://127.0.0.1:11434/v1")  # type: ignore[attr-defined]


def test_unknown_model_with_one_openai_compatible_endpoint_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    p = resolve_provider(Config(agents={"defaults": {"model": "llama3"}}))
    assert (p.name, p.default_model, p.api_base) == ("openai", "llama3", "http://127.0.0.1:9/v1")  # type: ignore[attr-defined]


def test_named_provider_without_credentials_names_its_variable() -> None:
    with pytest.raises(ProviderConfigError, match="GROQ_API_KEY") as info:
        resolve_provider(Config(agents={"defaults": {"provider": "groq"}}))
    assert "NANOBOT_PROVIDERS__GROQ__API_KEY" in str(info.value)


def test_demo_model_only_when_nothing_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    from nanobot.providers.local import local_provider_available

    if not local_provider_available(Config().providers.local):
        pytest.skip("the embedded model is not installed")
    assert resolve_provider(Config()).name == "local"
    with pytest.raises(ProviderConfigError):
        resolve_provider(Config(agents={"defaults": {"model": "claude-sonnet-4-5"}}))
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert resolve_provider(Config()).name == "openai"
    monkeypatch.setenv("MISTRAL_API_KEY", "k")
    assert resolve_provider(Config()).name == "openai"  # several configured: the first, never the demo


def test_openai_base_url_alone_reaches_a_keyless_server(home: Path, fake_llm: FakeLLMServer) -> None:
    """OPENAI_BASE_URL without a key counts as credentials (DESIGN A2): the demo model answered
    instead of the user's own server, and with a model set the command exited 2 ("no credentials")."""
    env = {"OPENAI_BASE_URL": fake_llm.url}
    fake_llm.push(Reply(content="from my own server"))
    result = run_cli("agent", "-m", "hi", home=home, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "from my own server"
    assert "authorization" not in fake_llm.request_headers[-1]
    assert "embedded demo model" not in result.stderr
    fake_llm.push(Reply(content="with the model I chose"))
    chosen = run_cli("agent", "-m", "hi", home=home, env={**env, "NANOBOT_AGENTS__DEFAULTS__MODEL": "my-model"})
    assert chosen.returncode == 0, chosen.stderr[-3000:]
    assert chosen.stdout.strip() == "with the model I chose" and fake_llm.requests[-1]["model"] == "my-model"


def test_an_exported_openai_base_url_does_not_take_over_another_configured_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted as credentials whatever else was set, OPENAI_BASE_URL (often exported for other tools)
    made an ollama config with an unprefixed model exit 2 and took an anthropic config's turns; OpenAI's
    own address without a key counted too."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    ollama = Config(
        agents={"defaults": {"model": "llama3.2"}}, providers={"ollama": {"apiBase": "http://127.0.0.1:11434"}}
    )
    assert resolve_provider(ollama).name == "ollama"
    anthropic = Config(providers={"anthropic": {"apiKey": "sk-ant-x"}})
    assert resolve_provider(anthropic).name == "anthropic"
    assert resolve_provider(Config()).api_base == "http://127.0.0.1:8000/v1"  # type: ignore[attr-defined]
    for openais_own in ("https://api.openai.com", "https://API.openai.com/v1/"):
        monkeypatch.setenv("OPENAI_BASE_URL", openais_own)
        assert resolve_provider(Config()).name == "local"  # no key for OpenAI itself: not configured
