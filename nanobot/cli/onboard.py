"""`nanobot onboard`: create config.json (mode 0600) and the workspace from the bundled templates."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from nanobot.cli.common import ConfigOption, config_path, err, load_cli_config
from nanobot.config.loader import save_config
from nanobot.config.paths import ensure_workspace
from nanobot.config.schema import Config
from nanobot.util.fs import atomic_write, ensure_private_dir


def templates_dir() -> Path:
    return Path(str(files("nanobot") / "templates"))


def copy_templates(workspace: Path) -> list[Path]:
    """Copy template files that do not exist yet; never overwrite. Returns the files created."""
    created: list[Path] = []
    ensure_private_dir(workspace)  # 0700 before anything lands in it
    source = templates_dir()
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.suffix not in (".md",):
            continue
        target = workspace / path.relative_to(source)
        if target.exists():
            continue
        atomic_write(target, path.read_bytes())
        created.append(target)
    ensure_workspace(workspace)
    return created


def onboard(config: ConfigOption = None) -> None:
    """Create config and workspace (idempotent; existing files are never overwritten)."""
    path = config_path(config)
    if path.exists():
        cfg = load_cli_config(path)
        err(f"Config exists: {path} (left as it is)")
    else:
        # Defaults only: Config() would read NANOBOT_ variables (API keys, tokens) into the file.
        save_config(Config.model_construct(), path)
        cfg = load_cli_config(path)
        err(f"Created config: {path}")
    workspace = cfg.workspace_path
    created = copy_templates(workspace)
    err(f"Workspace: {workspace} ({len(created)} file(s) created)")
    if not any(
        getattr(cfg.providers, n).api_key or getattr(cfg.providers, n).api_base
        for n in type(cfg.providers).model_fields
        if n != "local"
    ):
        err("Next: add an API key to the config, e.g. providers.openai.apiKey, then run: nanobot agent")
