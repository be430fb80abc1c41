"""Bounded waits for asyncio tasks at shutdown.

`finish_or_cancel(tasks, timeout_s, unwind_s=...)` waits up to `timeout_s` for the tasks to finish,
cancels those still running, and then gives the cancelled ones `unwind_s` seconds to run their
cleanup (None: until they have; 0: not at all). It returns the tasks it cancelled, so the caller can
say how many were cut short. Tasks are cancelled in the order given, and asyncio wakes them in that
order: a caller whose tasks' cleanups must run in order (messages saved at a shutdown) passes them
so. Nothing it waits for can hold a shutdown longer than
`timeout_s + unwind_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def finish_or_cancel(
    tasks: Iterable[asyncio.Future[Any]], timeout_s: float, *, unwind_s: float | None = 0
) -> set[asyncio.Future[Any]]:
    ordered = list(dict.fromkeys(tasks))
    if not ordered:
        return set()
    _, late = await asyncio.wait(ordered, timeout=timeout_s)
    for task in ordered:
        if task in late:
            task.cancel()
    if late and unwind_s != 0:
        await asyncio.wait(late, timeout=unwind_s)
    return late
