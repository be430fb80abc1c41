"""Load and save config.json; turn validation errors into one readable message per key."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nanobot.config.paths import default_config_path
from nanobot.config.schema import Config


class ConfigError(Exception):
    """A config problem the user must fix; the CLI prints it and exits 2."""


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for item in err.errors():
        path = ".".join(str(part) for part in item.get("loc", ())) or "(root)"
        msg = item.get("msg", "invalid value")
        if item.get("type") == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"  {path}: {msg}")
    return "\n".join(lines)


def read_config_dict(path: Path) -> dict[str, Any]:
    """The raw JSON object of a config file; {} when the file does not exist."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return data


def load_config(path: Path | None = None) -> Config:
    """Config from `path` (default $NANOBOT_HOME/config.json) with NANOBOT_ env overrides."""
    path = path or default_config_path()
    data = read_config_dict(path)
    try:
        return Config(**data)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, str(path))) from None


def save_config(config: Config, path: Path) -> None:
    """Write config.json atomically with mode 0600 (it holds secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config.model_dump(by_alias=True, mode="json"), indent=2, ensure_ascii=False) + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
