"""The connection skeleton every channel shares: send retries and the reconnect loop.

`Connection` is mixed into `Channel`. Platforms supply `_retry_delay(exc, attempt)` (seconds, or None
for "do not retry") and, for the receive side, one step of their connection (`_keep_connected`):

- a step that returns normally was healthy: the channel is "running" and the backoff starts over;
- a step that raises `PermanentChannelError` ends the channel in "failed" with that message
  (a rejected token: retrying cannot help);
- any other error sets "retrying" and the step runs again after the platform's retry-after
  (`_reconnect_delay`) or an exponential backoff up to `reconnect_max_delay_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from loguru import logger

from nanobot.util.retry import backoff_s

T = TypeVar("T")

RETRY_BASE_DELAY_S = 0.5
RETRY_MAX_DELAY_S = 30.0
RETRY_AFTER_MAX_S = 300.0  # never sleep longer than this on a platform's retry_after
RECONNECT_MAX_DELAY_S = 60.0


class PermanentChannelError(Exception):
    """A failure retrying cannot fix (rejected token, missing permission): the channel fails."""


class Connection:
    """Send retries and the reconnect loop (mixed into Channel, which supplies name, state, config)."""

    name: str
    channels_config: Any
    retry_base_delay_s: float = RETRY_BASE_DELAY_S
    reconnect_max_delay_s: float = RECONNECT_MAX_DELAY_S

    def _retry_delay(self, exc: BaseException, attempt: int) -> float | None:
        raise NotImplementedError

    def _set_state(self, state: Any, error: str | None = None) -> None:
        raise NotImplementedError

    def _backoff(self, attempt: int) -> float:
        return backoff_s(attempt, self.retry_base_delay_s, RETRY_MAX_DELAY_S)

    async def _with_retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Run one platform API call, retrying on rate limits and transient failures."""
        max_retries = self.channels_config.send_max_retries
        attempt = 0
        while True:
            try:
                return await call()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None or attempt >= max_retries:
                    raise
                delay = min(max(delay, 0.0), RETRY_AFTER_MAX_S)
                logger.warning(
                    "{}: {} failed ({}: {}); retry {}/{} in {:.1f}s",
                    self.name,
                    what,
                    type(exc).__name__,
                    exc,
                    attempt + 1,
                    max_retries,
                    delay,
                )
                attempt += 1
                await asyncio.sleep(delay)

    def _reconnect_delay(self, exc: BaseException, failures: int) -> tuple[float, str]:
        """(seconds to wait, state message) after a failed step; platforms refine it (retry-after)."""
        return (
            backoff_s(failures, self.retry_base_delay_s, self.reconnect_max_delay_s),
            f"{type(exc).__name__}: {exc}",
        )

    async def _keep_connected(
        self, step: Callable[[], Awaitable[None]], stopping: Callable[[], bool]
    ) -> None:
        """Run `step` until `stopping()`; see the module docstring for how outcomes are handled."""
        failures = 0
        while not stopping():
            try:
                await step()
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except PermanentChannelError as exc:
                self._set_state("failed", str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - a dropped connection or a bug in one update
                if stopping():
                    return
                delay, problem = self._reconnect_delay(exc, failures)
                self._set_state("retrying", problem)
            failures += 1
            await asyncio.sleep(delay)
