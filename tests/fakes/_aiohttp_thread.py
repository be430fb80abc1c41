"""Runs an aiohttp application on 127.0.0.1 in its own thread and event loop.

Fakes built on it work from async tests, sync tests and subprocess tests alike: the client under
test never shares the server's event loop, as with a real remote service.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")
WAIT_POLL_S = 0.002
SHUTDOWN_TIMEOUT_S = 0.2


@dataclass
class Call:
    """One request received by a fake: method name, decoded parameters, arrival time."""

    method: str
    params: dict[str, Any]
    at: float = field(default_factory=time.perf_counter)


class ThreadedAiohttpServer:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def build_app(self) -> web.Application:  # overridden
        raise NotImplementedError

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> ThreadedAiohttpServer:
        self._thread.start()
        self.run(self._start())
        return self

    async def _start(self) -> None:
        # Long polls still open when the test ends must not hold shutdown for their full timeout.
        self._runner = web.AppRunner(self.build_app(), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def stop(self) -> None:
        if self._runner is not None:
            self.run(self._shutdown())
            self._runner = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def _shutdown(self) -> None:
        assert self._runner is not None
        self.closing()
        await self._runner.cleanup()

    def closing(self) -> None:
        """Hook: release long-running handlers before shutdown (overridden)."""

    def run(self, coro: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the server's loop from any other thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    # ---------------------------------------------------------------- recording
    def record(self, method: str, params: dict[str, Any]) -> Call:
        call = Call(method, params)
        with self._lock:
            self.calls.append(call)
        return call

    def calls_to(self, method: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.method == method]

    async def wait_for(self, method: str, count: int = 1, timeout: float = 5.0) -> list[Call]:
        """Wait (in the caller's loop) until `method` was called at least `count` times."""
        deadline = time.monotonic() + timeout
        while True:
            calls = self.calls_to(method)
            if len(calls) >= count:
                return calls
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: {len(calls)} of {count} calls after {timeout}s")
            await asyncio.sleep(WAIT_POLL_S)
