"""`nanobot gateway`: run channels, cron and heartbeat until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio

import typer

from nanobot.cli.common import EXIT_FAILURE, EXIT_USAGE, ConfigOption, err, load_cli_config


def gateway(config: ConfigOption = None) -> None:
    """Run the gateway (enabled channels, cron, heartbeat) until SIGINT/SIGTERM; exit 0 when stopped."""
    from nanobot.logs import current_level, setup_logging
    from nanobot.providers.registry import ProviderConfigError
    from nanobot.secrets import register_config_secrets
    from nanobot.service.state import GatewayAlreadyRunning

    cfg = load_cli_config(config)
    register_config_secrets(cfg)
    level = current_level() if current_level() == "DEBUG" else cfg.logging.level
    setup_logging(level, cfg.logging.file, cfg.logging.rotation, cfg.logging.retention)
    from nanobot.gateway.runtime import exit_now, run_gateway

    try:
        code = asyncio.run(run_gateway(cfg, str(config or "config.json")))
    except GatewayAlreadyRunning as exc:
        err(f"Error: {exc}")
        raise typer.Exit(EXIT_FAILURE) from None
    except ProviderConfigError as exc:
        err(str(exc) if str(exc).startswith("nanobot:") else f"Error: {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    exit_now(code)  # shut down already: skip the slow interpreter teardown
