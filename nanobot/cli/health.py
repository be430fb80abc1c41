"""`nanobot health`: exit 0 when a gateway runs on this workspace, its watchdog is fresh and not every
enabled channel has failed; else 1.

Used by Docker's HEALTHCHECK and by people; it only reads the workspace's lock and state files, so
it is cheap and never talks to the gateway.
"""

from __future__ import annotations

import typer

from nanobot.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    ConfigOption,
    config_path,
    err,
    fail,
    require_named_config,
)
from nanobot.config.loader import ConfigError, load_config
from nanobot.service.state import WATCHDOG_STALE_FACTOR, is_healthy


def health(config: ConfigOption = None) -> None:
    """Exit 0 when a gateway runs, its watchdog is fresh and a channel works (if any is enabled), else 1."""
    try:
        require_named_config(config)  # a mistyped -c checked the default workspace and said healthy
        cfg = load_config(config_path(config))
    except ConfigError as exc:
        # Not the usual exit 2: Docker reserves 2 in health checks, and a bad config is unhealthy.
        fail("unhealthy: " + " ".join(line.strip() for line in str(exc).splitlines()), EXIT_FAILURE)
    max_age_s = cfg.gateway.watchdog_interval_s * WATCHDOG_STALE_FACTOR
    healthy, reason = is_healthy(cfg.workspace_path, max_age_s)
    err(reason)
    raise typer.Exit(EXIT_OK if healthy else EXIT_FAILURE)
