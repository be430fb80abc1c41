"""The gateway as a process: its workspace lock, its own event loop, and its fast exit.

`run_gateway` takes the lock (one gateway per workspace) and remembers a signal that comes while
the agent is being built; `serve` runs it in a new event loop that does not join worker threads at
the end; `exit_now` leaves without the interpreter's teardown. `nanobot gateway` calls the last two.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import NoReturn

from loguru import logger

from nanobot.config.schema import Config
from nanobot.gateway.runtime import Gateway, handled_signals
from nanobot.service.state import GatewayLock

#: after the gateway stopped: how long tasks still left in the event loop may take to unwind
LEFTOVER_TASKS_WAIT_S = 1.0


async def run_gateway(
    config: Config, config_path: str = "config.json", config_digest: str | None = None, early: list[int] | None = None
) -> int:
    """Run until a signal; returns the exit code. Raises GatewayAlreadyRunning for a second gateway."""
    lock = GatewayLock(config.workspace_path)
    lock.acquire()
    # Building the agent and importing the channel libraries takes a while: a signal meanwhile is
    # remembered and honoured as soon as the gateway can shut down cleanly.
    early = early if early is not None else []  # those the command line remembered, and the next
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: early.append(signum)) for sig in handled_signals()
    }
    try:
        try:
            gateway = Gateway(config, config_path, config_digest=config_digest)
        finally:
            Gateway._restore_signals(previous)  # type: ignore[arg-type]
        return await gateway.run(early_signals=early, lock=lock)
    finally:
        lock.release()


def serve(
    config: Config, config_path: str = "config.json", config_digest: str | None = None, early: list[int] | None = None
) -> int:
    """Run the gateway in a new event loop until it stops; its exit code.

    Unlike `asyncio.run`, this does not wait for the default executor's worker threads at the end:
    a thread still embedding a batch or loading a model would hold the process past the stop
    budget (the gateway is stopped by then; what such work had not written is redone later).
    Tasks still left in the loop get LEFTOVER_TASKS_WAIT_S to unwind after their cancellation.
    Call `exit_now` next: the abandoned threads must not be joined at interpreter exit.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        code = loop.run_until_complete(run_gateway(config, config_path, config_digest, early))
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_TASKS_WAIT_S))
        return code
    finally:
        asyncio.set_event_loop(None)
        loop.close()  # shuts the executor down without waiting for its threads


def exit_now(code: int) -> NoReturn:
    """Exit after a finished shutdown without the interpreter's teardown.

    Everything is already stopped, flushed and released; the teardown would only garbage-collect
    the imported modules (litellm's alone take seconds on a small host), eating into the stop budget
    that systemd and Docker grant before they SIGKILL.
    """
    logger.remove()  # closes and flushes every sink (enqueued file sinks included)
    from nanobot.sandbox.bwrap import remove_empty_file

    remove_empty_file()  # what atexit would have removed
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
