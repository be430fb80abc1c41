"""`gateway` and `logging`: how the daemon runs, stops, persists and logs."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator, Field, field_validator

from nanobot.config.sections.base import Section

LogLevelName = Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevelName)
# `info` is accepted too: the level is upper-cased before it is checked.
LogLevel = Annotated[LogLevelName, BeforeValidator(lambda v: v.strip().upper() if isinstance(v, str) else v)]
# longer ended the heartbeat's task at its first sleep (asyncio cannot wait 10**400 seconds)
MAX_HEARTBEAT_INTERVAL_S = 366 * 24 * 3600


class HeartbeatConfig(Section):
    enabled: bool = Field(True, description="Periodically read HEARTBEAT.md and let the agent do the tasks "
                          "listed there.")
    interval_s: int = Field(1800, ge=1, le=MAX_HEARTBEAT_INTERVAL_S, description="Seconds between heartbeats "
                            "(at most a year).")
    target: str = Field("", description="Where heartbeat replies go, as `channel:chat_id`; empty: the most "
                        "recently active private chat.")

    @field_validator("target")
    @classmethod
    def _a_chat(cls, value: str) -> str:
        """Checked with the config: a malformed target was told only in a log line at each beat."""
        channel, sep, chat_id = value.strip().partition(":")
        if value.strip() and not (sep and channel.strip() and chat_id.strip()):
            raise ValueError(
                f"{value!r} is not channel:chat_id (e.g. telegram:123456789); empty: the most recently "
                "active private chat"
            )
        return value.strip()


class GatewayConfig(Section):
    shutdown_grace_s: float = Field(5.0, ge=0, description="On SIGTERM, seconds running turns may take to "
                                    "finish.")
    drain_timeout_s: float = Field(3.0, ge=0, description="On SIGTERM, seconds background memory work may "
                                   "take to finish.")
    watchdog_interval_s: float = Field(10.0, gt=0, description="Seconds between liveness updates; "
                                       "`nanobot health` fails when they stop.")
    fsync: Literal["always", "everysec", "never"] = Field(
        "everysec", description="When session files are forced to disk: every message, once a second, or "
        "left to the OS. Bounds what a power cut can take; a process crash loses nothing either way.")
    answer_missed_within_s: float = Field(600.0, ge=0, description="At start, a user message saved but "
                                          "never answered (the gateway died first) is answered if it is "
                                          "younger than this many seconds (and a saved reply that may not "
                                          "have gone out is sent again); older ones are only logged. 0: never.")
    heartbeat: HeartbeatConfig = Field(HeartbeatConfig(), description="The periodic heartbeat task.")


class LoggingConfig(Section):
    level: LogLevel = Field("INFO", description="Log level of the gateway (stderr and file): TRACE, DEBUG, "
                       "INFO, SUCCESS, WARNING, ERROR or CRITICAL. `-v` and NANOBOT_LOG_LEVEL override it.")
    file: str = Field("", description="Log file path (rotated; a relative one lies in NANOBOT_HOME); empty: "
                      "stderr only.")
    rotation: str = Field("10 MB", description="When the log file is rotated: a size (`10 MB`) or a time "
                          "(`1 day`, `00:00`).")
    retention: int = Field(5, ge=1, description="Rotated log files kept.")
    prompts: bool = Field(False, description="Log prompts and completions at debug level (masked). Off: no "
                          "prompt, memory or chat text reaches the log, whatever the level.")

    @field_validator("rotation")
    @classmethod
    def _rotation_loguru_reads(cls, value: str) -> str:
        """Checked with the config, by loguru's own parser: otherwise a typo surfaced only when a
        gateway with `logging.file` started, and `doctor` called the config valid."""
        try:
            from loguru._file_sink import FileSink  # private: when it moves, the gateway still checks
        except ImportError:
            return value
        try:
            FileSink._make_rotation_function(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{exc} (a size like '10 MB' or a time like '1 day' or '00:00')") from None
        return value

