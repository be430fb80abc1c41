"""`nanobot gateway`: run channels, cron and heartbeat until SIGINT/SIGTERM."""

from __future__ import annotations

from nanobot.cli.common import ConfigOption, config_path, load_cli_config, log_level_override


def gateway(config: ConfigOption = None) -> None:
    """Run the gateway (enabled channels, cron, heartbeat) until SIGINT/SIGTERM; exit 0 when stopped."""
    from nanobot.cli.early_signals import remember, remembered

    remember()  # the console script did already; called in process too (tests, `nanobot.cli.app`)
    from nanobot.logs import setup_logging
    from nanobot.secrets import register_config_secrets
    from nanobot.service.config_watch import config_digest

    # of the bytes about to be read: taken after the slow start, an edit made meanwhile went unseen
    # (`status` showed the new model as in use, with no "changed since" note)
    digest = config_digest(config_path(config).expanduser())
    cfg = load_cli_config(config)
    register_config_secrets(cfg)
    # -v/-q and NANOBOT_LOG_LEVEL win over logging.level
    level = log_level_override() or cfg.logging.level
    log_file = str(cfg.log_file_path or "")
    setup_logging(level, log_file, cfg.logging.rotation, cfg.logging.retention)
    from nanobot.gateway.process import exit_now, serve

    # A second gateway (GatewayAlreadyRunning) or a provider config error propagate as user errors.
    code = serve(cfg, str(config_path(config)), digest, remembered)
    exit_now(code)  # shut down already: skip the slow interpreter teardown and worker threads
