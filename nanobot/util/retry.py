"""Retry delays: exponential backoff with a ceiling, and the server's Retry-After when it gives one.

`backoff_s(attempt, base_s, max_s)` is `base_s * 2**attempt` capped at `max_s` (attempt 0 is the first
retry). `parse_retry_after(value)` reads a Retry-After value: seconds (int, float, `timedelta` or a
numeric string) or an HTTP date; None when absent or unreadable. `retry_delay_s` prefers the server's
value (capped) and otherwise backs off; `jitter` spreads callers that failed together.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any


def backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    return min(max_s, base_s * (2 ** max(attempt, 0)))


def parse_retry_after(value: Any) -> float | None:
    """Seconds to wait from a Retry-After value (seconds, timedelta or HTTP date); None if unusable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, timedelta):
        return max(0.0, value.total_seconds())
    if isinstance(value, (int, float)):
        return max(0.0, float(value)) if math.isfinite(value) else None
    text = str(value).strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:  # "1e999" and "nan" are no wait a server can mean ("wait inf days")
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def retry_after_from_headers(headers: Any) -> float | None:
    """The Retry-After of a response's headers (any mapping with `.get`), if present and readable."""
    if headers is None or not hasattr(headers, "get"):
        return None
    return parse_retry_after(headers.get("retry-after") or headers.get("Retry-After"))


def retry_delay_s(
    attempt: int,
    base_s: float,
    max_s: float,
    *,
    retry_after_s: float | None = None,
    max_retry_after_s: float | None = None,
    jitter: float = 0.0,
) -> float:
    """The wait before retry `attempt`: the server's value when given (capped), else backoff; plus jitter."""
    if retry_after_s is not None:
        delay = retry_after_s if max_retry_after_s is None else min(retry_after_s, max_retry_after_s)
    else:
        delay = backoff_s(attempt, base_s, max_s)
    return delay * (1 + random.random() * jitter) if jitter else delay
