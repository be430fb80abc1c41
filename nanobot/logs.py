"""Logging: loguru to stderr (journald/Docker friendly), optional rotating file, stdlib routed in,
every record passed through the secret masker.

Contract: nothing is ever logged to stdout (it carries only a command's result, e.g. the reply of
`nanobot agent -m`). Every library's stdlib logger loses the handlers it installed for itself and
propagates into our one sink, at the level we set. Libraries that log whole request or update bodies
(litellm, the openai SDK, python-telegram-bot) are held at INFO even with `-v` unless
`logging.prompts` is true, so prompts, memory and chat text reach the log only when asked for, and
then masked like everything else.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loguru import logger

from nanobot.errors import ConfigError, UserError
from nanobot.secrets import mask
from nanobot.util.fs import PRIVATE_FILE_MODE, ensure_private_dir, repair_private
from nanobot.util.text import printable

# A read-only remount (an SD card after errors) or a full disk passes: systemd should try again, so
# these are not config errors (exit 2 is in RestartPreventExitStatus).
_STORAGE_STATE_ERRNOS = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EIO})

_STDERR_FORMAT = "<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> <cyan>{name}</cyan> {message}"
# without journald (which stamps each line itself: JOURNAL_STREAM) the date and the offset too:
# `docker compose logs` shows no time of its own, and a bare 19:57:54 names neither day nor zone
_STDERR_DATED_FORMAT = _STDERR_FORMAT.replace("{time:HH:mm:ss}", "{time:YYYY-MM-DD HH:mm:ss ZZ}")
CONTINUATION = "\n    "  # how a log entry's further lines begin
_FILE_FORMAT = "{time:YYYY-MM-DD HH:mm:ss.SSS ZZ} {level: <7} {name}:{line} {message}"
_NOISY_LIBRARIES = (
    "httpx", "httpx2", "httpcore", "openai", "LiteLLM", "litellm", "telegram", "discord", "apscheduler", "mcp",
    "aiohttp", "asyncio", "websockets", "urllib3", "llama_cpp",
)
#: libraries whose error records say it in one line (an MCP server's stray stdout line each)
_ONE_LINE_ERRORS = ("mcp.",)
#: libraries whose debug records carry prompts, completions or chat text
_CONTENT_LIBRARIES = ("openai", "LiteLLM", "litellm", "telegram", "discord")

_state: dict[str, object] = {"level": "WARNING", "prompts": False}


def _patch(record: dict) -> None:
    # printable: a server's error text (or a chat message) quoted in a log line may carry escape
    # sequences that clear the operator's terminal, set its title or write its clipboard
    # continuation lines are indented: a server's "…\n00:00:00 INFO nanobot FORGED" quoted in a
    # message cannot pass for an entry of its own
    record["message"] = printable(mask(record["message"])).replace("\n", CONTINUATION)
    exc = record["exception"]
    if exc is not None and exc.type is not None:
        # The traceback is formatted here and masked whole: an exception's text can carry a secret
        # where its args do not (pydantic builds it from the input; a chained cause, a note).
        text = "".join(traceback.format_exception(exc.type, exc.value, exc.traceback)).rstrip("\n")
        record["message"] += CONTINUATION + printable(mask(text)).replace("\n", CONTINUATION)
        record["exception"] = None


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
        exc_info = record.exc_info
        if exc_info and exc_info[1] is not None and record.name.startswith(_ONE_LINE_ERRORS):
            # a server printing logs on stdout is one record per line: a traceback each was 10 lines,
            # and a chatty one would fill the log for months: a few a minute, then a count
            message += f" ({exc_info[0].__name__ if exc_info[0] else 'error'}: "
            message += f"{str(exc_info[1]).splitlines()[0] if str(exc_info[1]) else ''})"
            exc_info = None
            message = _THROTTLE.admit(record.name, message)
            if message is None:
                return
        logger.opt(depth=6, exception=exc_info).bind(lib=record.name).log(level, "{}", message)


class _Throttle:
    """At most `per_window` records per logger name and window; the first one after says how many
    were left out."""

    def __init__(self, per_window: int = 5, window_s: float = 60.0) -> None:
        self.per_window, self.window_s = per_window, window_s
        self._seen: dict[str, tuple[float, int, int]] = {}  # name -> (window start, shown, left out)

    def reset(self) -> None:
        self._seen.clear()

    def admit(self, name: str, message: str) -> str | None:
        now = time.monotonic()
        start, shown, left_out = self._seen.get(name, (now, 0, 0))
        if now - start >= self.window_s:
            start, shown = now, 0
        if shown >= self.per_window:
            self._seen[name] = (start, shown, left_out + 1)
            return None
        self._seen[name] = (start, shown + 1, 0)
        return message + (f" ({left_out} more like it left out of the log)" if left_out else "")


_THROTTLE = _Throttle()


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, PRIVATE_FILE_MODE)


def setup_logging(
    level: str | None = None,
    file: str = "",
    rotation: str = "10 MB",
    retention: int = 5,
    prompts: bool | None = None,
) -> None:
    """(Re)configure logging. `level` None keeps the current level (default WARNING for the CLI;
    NANOBOT_LOG_LEVEL overrides); `prompts` None keeps the current choice (default off)."""
    level = (level or os.environ.get("NANOBOT_LOG_LEVEL") or str(_state["level"])).upper()
    _state["level"] = level
    if prompts is not None:
        _state["prompts"] = prompts
    logger.remove()
    _THROTTLE.reset()
    logger.configure(patcher=_patch)
    stamp = _STDERR_FORMAT if os.environ.get("JOURNAL_STREAM") else _STDERR_DATED_FORMAT
    logger.add(sys.stderr, level=level, format=stamp, colorize=None, backtrace=False, diagnose=False)
    if file:
        log_path = Path(file).expanduser().absolute()
        try:
            ensure_private_dir(log_path.parent)
            repair_private(log_path)  # a log written before files were private
            logger.add(
                str(log_path),  # `~` expanded: as given, loguru wrote into a folder named "~"
                opener=_private_opener,  # passed to open(): new and rotated log files are 0600
                level=level,
                format=_FILE_FORMAT,
                rotation=rotation,
                retention=retention,
                enqueue=True,
                backtrace=False,
                diagnose=False,
            )
        except OSError as exc:
            message = f"logging.file: cannot write {log_path}: {exc.strerror or exc}"
            if exc.errno in _STORAGE_STATE_ERRNOS:  # the disk, not the config: exit 1, retried later
                raise UserError(message) from None
            raise ConfigError(message) from None  # a config problem (exit 2), not a crash to restart
        except ValueError as exc:  # loguru could not read logging.rotation: a config error, exit 2
            raise ConfigError(f"logging.rotation: {exc} (a size like '10 MB' or a time like '1 day')") from None
    logging.basicConfig(handlers=[_InterceptHandler()], level=0, force=True)
    route_library_logging()


@contextmanager
def library_import_guard(*logger_names: str) -> Iterator[None]:
    """Hold `logger_names` at WARNING while a library that installs its own handlers is imported (its
    import-time debug records would go through those handlers, some to stdout), then route it."""
    loggers = [logging.getLogger(name) for name in logger_names]
    for lib in loggers:
        lib.setLevel(logging.WARNING)
    try:
        yield
    finally:
        route_library_logging()


def set_prompt_logging(enabled: bool) -> None:
    """Whether prompts and completions may appear in debug logs (`logging.prompts`)."""
    _state["prompts"] = enabled
    route_library_logging()


def prompts_logged() -> bool:
    """True when debug logging is on and `logging.prompts` allows prompt and completion text."""
    return bool(_state["prompts"]) and _state["level"] == "DEBUG"


def route_library_logging() -> None:
    """Send every library logger through our sink: drop the stream handlers libraries install for
    themselves (litellm writes its own debug lines otherwise), let records propagate, set levels.
    Call again after importing a library that configures logging at import time."""
    for logger_obj in list(logging.Logger.manager.loggerDict.values()):
        if not isinstance(logger_obj, logging.Logger):
            continue
        for handler in list(logger_obj.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                logger_obj.removeHandler(handler)
        logger_obj.propagate = True
    debug = _state["level"] == "DEBUG"
    for name in _NOISY_LIBRARIES:
        if not debug:
            lib_level = logging.WARNING
        elif name in _CONTENT_LIBRARIES and not _state["prompts"]:
            lib_level = logging.INFO
        else:
            lib_level = logging.DEBUG
        logging.getLogger(name).setLevel(lib_level)

