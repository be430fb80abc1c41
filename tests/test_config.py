"""Config loading: camelCase file + snake_case env overrides, error paths, saving."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from nanobot.config.loader import ConfigError, display_path, env_name, load_config, write_config_dict
from nanobot.config.schema import Config


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_defaults_without_a_file(home: Path) -> None:
    cfg = load_config(home / "missing.json")
    d = cfg.agents.defaults
    assert (d.provider, d.max_tokens, d.temperature) == ("auto", 8192, 0.1)
    assert (d.context_window_tokens, d.max_tool_iterations) == (65536, 40)
    assert cfg.tools.restrict_to_workspace is True and cfg.tools.web.allow_hosts == []
    assert cfg.memory.share_in_groups is False
    assert cfg.channels.telegram.base_url == "https://api.telegram.org/bot"
    assert cfg.workspace_path == (home / "workspace").resolve()


def test_camel_and_snake_keys_are_both_accepted(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "c.json", {"agents": {"defaults": {"maxTokens": 100, "context_window_tokens": 4096}}}
    )
    d = load_config(path).agents.defaults
    assert (d.max_tokens, d.context_window_tokens) == (100, 4096)


def test_env_overrides_a_camel_case_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file spells keys in camelCase and env in snake_case: env must win, not clash."""
    path = _write(
        tmp_path / "c.json",
        {
            "agents": {"defaults": {"maxTokens": 100, "model": "gpt-4o"}},
            "providers": {"openai": {"apiKey": "from-file", "extraHeaders": {"X-Api-Key": "h"}}},
            "tools": {"mcpServers": {"myServer": {"command": "srv", "toolTimeout": 3}}},
        },
    )
    monkeypatch.setenv("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "555")
    monkeypatch.setenv("NANOBOT_PROVIDERS__OPENAI__API_KEY", "from-env")
    cfg = load_config(path)
    assert cfg.agents.defaults.max_tokens == 555
    assert cfg.agents.defaults.model == "gpt-4o"  # untouched file values stay
    assert cfg.providers.openai.api_key == "from-env"
    assert cfg.providers.openai.extra_headers == {"X-Api-Key": "h"}  # user keys are not renamed
    assert cfg.tools.mcp_servers["myServer"].tool_timeout == 3


def test_a_saved_full_config_still_takes_env_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.json"
    write_config_dict(path, Config.model_construct().model_dump(by_alias=True, mode="json"))  # every key, camelCase
    monkeypatch.setenv("NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS", "1234")
    monkeypatch.setenv("NANOBOT_CHANNELS__TELEGRAM__ALLOW_FROM", '["42"]')
    cfg = load_config(path)
    assert cfg.agents.defaults.max_tokens == 1234
    assert cfg.channels.telegram.allow_from == ["42"]


def test_error_paths_are_camel_case_and_name_env_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(
        tmp_path / "c.json",
        {"tools": {"mcpServers": {"my_srv": {"toolTimeout": 0, "bogus": 1}}}, "agents": {"defaults": {}}},
    )
    monkeypatch.setenv("NANOBOT_AGENTS__DEFAULTS__TEMPERATURE", "9")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "tools.mcpServers.my_srv.toolTimeout: Input should be greater than 0" in text
    assert "tools.mcpServers.my_srv.bogus: unknown key" in text
    assert "agents.defaults.temperature" in text
    assert "set by environment variable NANOBOT_AGENTS__DEFAULTS__TEMPERATURE" in text


def test_display_path_and_env_name() -> None:
    assert display_path(("agents", "defaults", "max_tokens")) == "agents.defaults.maxTokens"
    assert display_path(("tools", "mcp_servers", "a_b", "tool_timeout")) == "tools.mcpServers.a_b.toolTimeout"
    assert display_path(("nonsense", "deeper")) == "nonsense.deeper"
    assert env_name(("agents", "defaults", "maxTokens")) == "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS"


def test_the_config_writer_is_private(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "config.json"
    write_config_dict(path, Config.model_construct().model_dump(by_alias=True, mode="json"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["agents"]["defaults"]["maxTokens"] == 8192
    assert "contextWindowTokens" in data["agents"]["defaults"]
