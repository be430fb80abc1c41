"""Load and save config.json; turn validation errors into one readable message per key."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from nanobot.config.paths import default_config_path
from nanobot.config.schema import SCHEMA_KEY, Config
from nanobot.errors import ConfigError
from nanobot.util.fs import atomic_write

ENV_PREFIX = "NANOBOT_"
__all__ = ["ConfigError", "load_config", "read_config_dict", "write_config_dict"]


def env_name(loc: tuple[Any, ...]) -> str:
    """The NANOBOT_ variable that sets a key path, e.g. agents.defaults.maxTokens ->
    NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS."""
    snake = (re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(part)).upper() for part in loc)
    return f"{ENV_PREFIX}{'__'.join(snake)}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _dict_value_model(annotation: Any) -> type[BaseModel] | None:
    """The model of the values of a `dict[str, Model]` field (user-named entries such as MCP servers)."""
    if get_origin(annotation) is dict:
        args = get_args(annotation)
        return _model_of(args[1]) if len(args) == 2 else None
    return None


def to_field_names(model: type[BaseModel], data: Any) -> Any:
    """`data` with every known key spelled as its snake_case field name.

    config.json uses camelCase and the environment snake_case; pydantic-settings deep-merges the two
    as they are, so `apiKey` from the file and `api_key` from NANOBOT_..._API_KEY would both reach
    the model (and the second would count as an unknown key). User-chosen keys (headers, server
    names) are left alone; unknown keys are kept so validation still reports them.
    """
    if not isinstance(data, dict):
        return data
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        names[name] = name
        if info.alias:
            names[info.alias] = name
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = names.get(key)
        if name is None:
            out[key] = value
            continue
        annotation = model.model_fields[name].annotation
        sub, entries = _model_of(annotation), _dict_value_model(annotation)
        if sub is not None:
            value = to_field_names(sub, value)
        elif entries is not None and isinstance(value, dict):
            value = {k: to_field_names(entries, v) for k, v in value.items()}
        out[name] = value
    return out


def display_path(loc: tuple[Any, ...]) -> str:
    """A validation error's location as the camelCase key path config.json uses."""
    parts: list[str] = []
    model: type[BaseModel] | None = Config
    entries = False  # the next part is a user-chosen key of a dict field
    for part in loc:
        key = str(part)
        if entries or model is None or key not in model.model_fields:
            parts.append(key)
            model, entries = (model if entries else None), False
            continue
        info = model.model_fields[key]
        parts.append(info.alias or key)
        sub, value_model = _model_of(info.annotation), _dict_value_model(info.annotation)
        model, entries = (value_model, True) if value_model is not None else (sub, False)
    return ".".join(parts) or "(root)"


def _format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source} (or its {ENV_PREFIX} environment overrides):"]
    for item in err.errors():
        loc = tuple(item.get("loc", ()))
        path = display_path(loc)
        msg = item.get("msg", "invalid value")
        if item.get("type") == "extra_forbidden":
            msg = "unknown key"
        var = env_name(loc) if loc else ""
        origin = f" (set by environment variable {var})" if var in os.environ else ""
        lines.append(f"  {path}: {msg}{origin}")
    return "\n".join(lines)


MAX_CONFIG_BYTES = 10 * 1024 * 1024


def emptied_config(path: Path) -> bool:
    """A config file holding nothing, or only blank lines: what a save on a full disk, or `> config.json`
    / `echo > config.json`, leaves (read_config_dict refuses it; onboard makes it again)."""
    try:
        return path.is_file() and path.stat().st_size < 4096 and not path.read_bytes().strip()
    except OSError:
        return False


def read_config_dict(path: Path) -> dict[str, Any]:
    """The raw JSON object of a config file; {} when the file does not exist."""
    try:
        mode = path.stat()
        if stat.S_ISDIR(mode.st_mode):
            raise ConfigError(f"{path}: a folder, not a config file")
        if not stat.S_ISREG(mode.st_mode):  # /dev/zero was read until memory ran out; a FIFO blocked
            raise ConfigError(f"{path}: not a regular file")
        if mode.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: {mode.st_size} bytes, too large to be a config file")
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            # what a save on a full disk, or `> config.json`, leaves: read as "no config", the bots
            # went silent and the demo model answered while doctor said healthy
            raise ConfigError(f"{path}: the file is empty; restore it from a copy, or run `nanobot onboard`")
        data = json.loads(text)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8"
        ) from None
    except OSError as exc:  # also when a folder above it cannot be entered (exists() raised that)
        raise ConfigError(f"{path}: cannot read ({exc.strerror}; owned by another user?)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object")
    return data


def load_config(path: Path | None = None) -> Config:
    """Config from `path` (default $NANOBOT_HOME/config.json) with NANOBOT_ env overrides."""
    path = path or default_config_path()
    data = read_config_dict(path)
    data.pop(SCHEMA_KEY, None)
    try:
        config = Config(**to_field_names(Config, data))
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err, str(path))) from None
    except SettingsError:
        raise ConfigError(_format_env_json_error()) from None
    _check_memory_backend(config, path)
    # the paths are resolved here once, so a path no file can have is a config error for every
    # command (doctor said "config valid" of a log file the gateway then failed on)
    _ = (config.workspace_path, config.log_file_path)
    return config


def _check_memory_backend(config: Config, path: Path) -> None:
    """The chosen memory backend's block (`memory.backends.<name>`) is checked with the rest: doctor
    and status said healthy of a config the gateway then refused (a honcho block without baseUrl).
    The default file memory with no block imports nothing more."""
    memory = config.memory
    if not (memory.condition.strip() or memory.backend.strip().lower() not in ("", "file") or memory.backends):
        return
    from nanobot.memory.backends.contract import BackendConfigError
    from nanobot.memory.backends.registry import select

    try:
        select(config)
    except BackendConfigError as exc:
        raise ConfigError(f"invalid configuration in {path}:\n  {exc}") from None


def _structured(annotation: Any) -> bool:
    """Whether pydantic-settings reads this field's variable as JSON (a list, a mapping, a model)."""
    origins = {get_origin(a) for a in (annotation, *get_args(annotation))} | {annotation}
    return bool(origins & {list, dict, set, tuple}) or _model_of(annotation) is not None


def _env_field(name: str) -> Any:
    """The annotation of the field a NANOBOT_ variable sets, None when it names no field."""
    model: type[BaseModel] | None = Config
    annotation: Any = None
    for part in name.removeprefix(ENV_PREFIX).lower().split("__"):
        if model is None or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = _model_of(annotation)
    return annotation


def _format_env_json_error() -> str:
    """Which variables hold a list or object value that is not JSON (pydantic-settings names only
    the top-level section)."""
    bad = []
    for name, value in sorted(os.environ.items()):
        if not name.upper().startswith(ENV_PREFIX) or not _structured(_env_field(name.upper())):
            continue
        try:
            json.loads(value)
        except ValueError:
            bad.append(name)
    shown = ", ".join(bad) or f"a {ENV_PREFIX} variable"
    return (
        f"{shown}: a list or an object is written as JSON in an environment variable, "
        """e.g. NANOBOT_TOOLS__WEB__ALLOW_HOSTS='["localhost"]'"""
    )


def write_config_dict(path: Path, data: dict[str, Any]) -> None:
    """The one writer of config.json: atomically, mode 0600 (it holds secrets). A config.json linked
    to a dotfiles copy stays a link: the copy is what gets written. Callers write only what differs
    from the defaults (a file holding every default would keep this release's values for good)."""
    atomic_write(path.resolve(), json.dumps(data, indent=2, ensure_ascii=False) + "\n")
