"""Time zones: `agents.defaults.timezone`, or the system's when unset."""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loguru import logger


def resolve_tz(name: str = "") -> tzinfo:
    """The named IANA zone; empty or unknown names give the system's local zone."""
    if name.strip():
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError):
            logger.warning("unknown timezone '{}'; using the system's", name)
    try:
        from tzlocal import get_localzone

        return get_localzone()  # a real zone: cron stays right across daylight-saving changes
    except Exception:  # noqa: BLE001 - no tzlocal or an unreadable /etc/localtime
        local = datetime.now().astimezone().tzinfo
        assert local is not None
        return local


def now(tz: tzinfo | None = None) -> datetime:
    """An aware datetime: ISO-8601 output carries the UTC offset."""
    return datetime.now(tz or resolve_tz())


def iso_now(tz: tzinfo | None = None) -> str:
    return now(tz).isoformat(timespec="seconds")
