"""`nanobot status`: config, workspace, model, provider, channels, gateway and memory index state."""

from __future__ import annotations

from pathlib import Path

from nanobot.cli.common import ConfigOption, config_path, load_cli_config, out
from nanobot.config.paths import index_path, index_size_bytes
from nanobot.util.text import one_line


def status(config: ConfigOption = None) -> None:
    """Show where things are and what runs."""
    cfg = load_cli_config(config, missing_ok=True)  # it reports a missing file itself
    path = config_path(config)
    d = cfg.agents.defaults
    ws = cfg.workspace_path
    provider = _provider(cfg, str(path))
    lines = [
        f"Config: {path}{'' if path.exists() else ' (missing: run nanobot onboard)'}",
        f"Workspace: {ws}{'' if ws.exists() else ' (missing)'}",
        f"Model: {d.model or '(provider default)'}",
        f"Provider: {provider if isinstance(provider, str) else f'{provider.name} (model {provider.default_model})'}",
    ]
    for name in ("telegram", "discord"):
        ch = getattr(cfg.channels, name)
        allow = "everyone" if "*" in ch.allow_from else f"{len(ch.allow_from)} allowed sender(s)"
        lines.append(
            f"Channel {name}: {'enabled' if ch.enabled else 'disabled'}"
            + (f", {allow}" if ch.enabled else "")
        )
    lines.append(f"Exec sandbox: {_sandbox_line(cfg)}")
    lines.extend(_gateway_lines(ws, cfg.gateway.watchdog_interval_s, path))
    demo = not isinstance(provider, str) and provider.is_small_local
    lines.append(f"Memory: backend {cfg.memory.condition or cfg.memory.backend}; {_index_line(cfg, demo)}")
    lines.extend(_archive_lines(cfg))
    out("\n".join(lines))


def _provider(cfg, config_path: str):  # noqa: ANN001, ANN202 - an LLMProvider, imported lazily
    """The provider turns would use, or why there is none ("not configured (...)")."""
    from nanobot.providers.registry import ProviderConfigError, resolve_provider

    try:
        return resolve_provider(cfg, config_path)
    except ProviderConfigError as exc:
        return f"not configured ({str(exc).splitlines()[0]})"


def _sandbox_line(cfg) -> str:  # noqa: ANN001
    from nanobot.sandbox import detect

    return detect(cfg.tools.exec.sandbox).describe()


def _gateway_lines(ws, watchdog_interval_s: float, config_path: Path) -> list[str]:  # noqa: ANN001
    from nanobot.service.config_watch import config_changed_note
    from nanobot.service.state import gateway_summary, stale_after_s
    from nanobot.util.fs import unwritable_reason

    summary = gateway_summary(ws)
    if not summary["running"]:
        return ["Gateway: not running"]
    age = summary["watchdog_age_s"]
    if age is not None and age > stale_after_s(summary, watchdog_interval_s):
        # alive but hung (or stopped with SIGSTOP): its channel states below are as old as its last beat
        why = unwritable_reason(ws)  # it may still answer: it cannot write its state file
        return [f"Gateway: not responding (pid {summary['pid']}, last beat {age:.0f} s ago)"
                + (f": {why}" if why else "")]
    uptime = int(summary["uptime_s"] or 0)
    lines = [
        f"Gateway: running (pid {summary['pid']}, up {uptime // 3600}h {uptime % 3600 // 60}m "
        f"{uptime % 60}s, {summary['pending_tasks']} pending task(s))"
    ]
    for name, info in sorted(summary["channels"].items()):
        err_text = f" — {one_line(str(info['error']))}" if info.get("error") else ""  # an older gateway's too
        lines.append(f"  channel {name}: {info.get('state', '?')}{err_text}")
    if note := config_changed_note(summary, config_path):
        lines.append(f"  {note}")
    return lines


def _archive_lines(cfg) -> list[str]:  # noqa: ANN001
    from nanobot.session.markers import status_lines
    from nanobot.session.store import SessionStore

    summary = SessionStore(cfg.workspace_path).archive_markers()
    found = status_lines(summary, cfg.memory.max_archive_retries, cfg.memory.archive_retry_backoff_s)
    return [f"Archived sessions not consolidated: {len(found)}", *found] if found else []


def _index_line(cfg, demo_model: bool) -> str:  # noqa: ANN001
    from nanobot.memory.embeddings import select_embedder

    search = cfg.memory.search
    if not search.enabled:
        return "search off"
    _, selection = select_embedder(search, cfg.providers)  # nothing is loaded or contacted
    index = index_path(cfg.workspace_path)
    size = f"index {index_size_bytes(cfg.workspace_path) // 1024} KiB" if index.exists() else "index not built yet"
    unused = " (the embedded demo model's turns do not search it)" if demo_model else ""
    return f"search {selection}, {size}{unused}"
