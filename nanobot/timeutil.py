"""Time zones (`agents.defaults.timezone`, or the system's when unset) and ages of saved times."""

from __future__ import annotations

import os
from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loguru import logger

CLOCK_SLACK_S = 60.0  # a saved time at most this far ahead of the clock counts as "just now"


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
    except Exception:  # noqa: BLE001 - no tzlocal or an unreadable /etc/localtime (a POSIX TZ rule)
        local = datetime.now().astimezone().tzinfo
        assert local is not None
        if not _fixed_offset_warned:
            _fixed_offset_warned.append(True)
            logger.warning(
                "the system's time zone is not a named zone (TZ={!r}): using the fixed offset {} with no "
                "daylight-saving changes; set agents.defaults.timezone (e.g. Europe/Berlin)",
                os.environ.get("TZ", ""),
                local,
            )
        return local


_fixed_offset_warned: list[bool] = []  # said once per process


def now(tz: tzinfo | None = None) -> datetime:
    """An aware datetime: ISO-8601 output carries the UTC offset."""
    return datetime.now(tz or resolve_tz())


def parse_iso(text: str, tz: tzinfo | None = None) -> datetime:
    """Parse ISO-8601 (a trailing `Z` included); a value without an offset is wall time in `tz`
    (the system's zone when None). ValueError when malformed."""
    moment = datetime.fromisoformat(str(text).strip())
    if moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=tz) if tz is not None else moment.astimezone()


def parse_iso_or_none(value: object, tz: tzinfo | None = None) -> datetime | None:
    """`parse_iso` for values read from files or other systems: None when absent or malformed."""
    if not value:
        return None
    try:
        return parse_iso(str(value), tz)
    except ValueError:
        return None


def seconds_since(saved_ts: float, now_ts: float) -> float | None:
    """Seconds from a saved Unix time to `now_ts`; None (unknown) for one ahead of the clock by more
    than CLOCK_SLACK_S — a box booted without a real-time clock runs behind until NTP sets it, and
    something saved weeks ago must not pass for something just saved."""
    age = now_ts - saved_ts
    return None if age < -CLOCK_SLACK_S else max(0.0, age)
