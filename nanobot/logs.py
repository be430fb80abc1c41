"""Logging: loguru to stderr (journald/Docker friendly), optional rotating file, stdlib routed in,
every record passed through the secret masker."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from loguru import logger

from nanobot.secrets import mask
from nanobot.util.fs import PRIVATE_FILE_MODE, ensure_private_dir, repair_private

_STDERR_FORMAT = "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> <cyan>{name}</cyan> {message}"
_FILE_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS ZZ} {level: <7} {name}:{line} {message}"
_NOISY_LIBRARIES = ("httpx", "httpcore", "LiteLLM", "litellm", "telegram", "discord", "apscheduler", "mcp")

_state = {"level": "WARNING", "file_sink": None}


def _patch(record: dict) -> None:
    record["message"] = mask(record["message"])
    if record["exception"] is not None:
        exc = record["exception"]
        if exc.value is not None:
            try:
                exc.value.args = tuple(mask(str(a)) if isinstance(a, str) else a for a in exc.value.args)
            except Exception:  # noqa: BLE001 - some exceptions have read-only args
                pass


class _InterceptHandler(logging.Handler):
    """Send stdlib `logging` records (httpx, telegram, discord…) through loguru and the masker."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            message = str(record.msg)
        logger.opt(depth=6, exception=record.exc_info).bind(lib=record.name).log(level, "{}", message)


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, PRIVATE_FILE_MODE)


def setup_logging(
    level: str | None = None, file: str = "", rotation: str = "10 MB", retention: int = 5
) -> None:
    """(Re)configure logging. `level` None keeps the current level (default WARNING for the CLI;
    NANOBOT_LOG_LEVEL overrides)."""
    level = (level or os.environ.get("NANOBOT_LOG_LEVEL") or _state["level"]).upper()
    _state["level"] = level
    logger.remove()
    logger.configure(patcher=_patch)
    logger.add(sys.stderr, level=level, format=_STDERR_FORMAT, colorize=None, backtrace=False, diagnose=False)
    if file:
        log_path = Path(file).expanduser().absolute()
        ensure_private_dir(log_path.parent)
        repair_private(log_path)  # a log written before files were private
        logger.add(
            file,
            opener=_private_opener,  # passed to open(): new and rotated log files are 0600
            level=level,
            format=_FILE_FORMAT,
            rotation=rotation,
            retention=retention,
            enqueue=True,
            backtrace=False,
            diagnose=False,
        )
    logging.basicConfig(handlers=[_InterceptHandler()], level=0, force=True)
    lib_level = logging.DEBUG if level == "DEBUG" else logging.WARNING
    for name in _NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(lib_level)


def current_level() -> str:
    return str(_state["level"])
