"""The configuration reference: every key described, generated files current, the JSON Schema served
by `nanobot config schema`, and bad values ending in exit 2 with the key path (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from nanobot.config.schema import Config
from tests.conftest import REPO, run_cli


def _config_docs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "config_docs.py"), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_every_field_has_a_description_and_generated_files_are_current() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import config_docs
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert config_docs.missing_descriptions() == []
    leaves = config_docs.rows()
    assert len(leaves) > 100 and all(r.field.description for r in leaves)
    result = _config_docs("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    reference = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key in ("memory.condition", "gateway.fsync", "logging.level"):
        line = next(x for x in readme.splitlines() if x.startswith(f"| `{key}` |"))
        assert len(line.split("|")[4].strip()) > 20, line  # a real description, not an empty cell
        assert f"| `{key}` |" in reference


def test_config_schema_command_validates_the_example_and_catches_typos(home: Path) -> None:
    result = run_cli("config", "schema", home=home)
    assert result.returncode == 0, result.stderr
    after = run_cli("config", "schema", "-c", str(home / "config.json"), home=home)  # -c after it, too
    assert after.returncode == 0 and after.stdout == result.stdout, after.stderr
    schema = json.loads(result.stdout)
    assert schema == json.loads((REPO / "docs" / "config.schema.json").read_text(encoding="utf-8"))
    fsync = schema["$defs"]["GatewayConfig"]["properties"]["fsync"]
    assert fsync["enum"] == ["always", "everysec", "never"] and "power cut" in fsync["description"]
    example = json.loads((REPO / "config.example.json").read_text(encoding="utf-8"))
    jsonschema.validate(example, schema)  # the example (with its "$schema" hint) is valid
    example["agents"]["defaults"]["maxTokenz"] = 5
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(example, schema)
    # the closed lists the loader checks are closed in the schema too (an editor offers them)
    memory = schema["$defs"]["MemoryConfig"]["properties"]
    assert memory["backend"]["enum"] == ["file", "mem0", "graphiti", "honcho", "memos"]
    assert "" in memory["condition"]["enum"] and "no_memory" in memory["condition"]["enum"]
    embedding = schema["$defs"]["MemorySearchConfig"]["properties"]["embeddingProvider"]
    assert embedding["enum"] == ["auto", "local", "litellm", "none"]


def test_example_config_with_schema_hint_loads(home: Path) -> None:
    """config.example.json carries "$schema"; nanobot ignores that key, so the example works as is."""
    path = home / "config.json"
    path.write_text((REPO / "config.example.json").read_text(encoding="utf-8"), encoding="utf-8")
    result = run_cli("status", "-c", str(path), home=home)
    assert result.returncode == 0, result.stderr
    assert Config.model_fields["logging"].description


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"logging": {"level": "verbose"}}, "logging.level"),
        ({"gateway": {"fsync": "sometimes"}}, "gateway.fsync"),
        ({"agents": {"defaults": {"maxTokenz": 5}}}, "agents.defaults.maxTokenz: unknown key"),
        ({"channels": {"telegram": {"allowFrom": "123"}}}, "channels.telegram.allowFrom"),
        # a proxy without a scheme broke doctor with a traceback and the Telegram channel at start
        ({"channels": {"telegram": {"proxy": "127.0.0.1:3128"}}}, "channels.telegram.proxy"),
        # an unknown provider left every voice message untranscribed, with a log warning only
        ({"channels": {"transcription": {"provider": "whisper"}}}, "channels.transcription.provider"),
    ],
)
def test_bad_values_exit_2_with_the_key_path(home: Path, data: dict, key: str) -> None:
    path = home / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    for args in (("status",), ("gateway",), ("memory", "status", "-c", str(path))):
        result = run_cli(*args, home=home, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert key in result.stderr and "Traceback" not in result.stderr, result.stderr
