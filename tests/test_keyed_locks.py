"""KeyedLocks: one lock per key while it is held or awaited, served in arrival order."""

from __future__ import annotations

import asyncio

from nanobot.util.keyed_locks import KeyedLocks


async def test_holders_of_one_key_take_turns_in_order_and_nothing_is_kept_after() -> None:
    locks = KeyedLocks()
    order: list[str] = []

    async def holder(key: str, name: str, hold_s: float) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            await asyncio.sleep(hold_s)
            order.append(f"{name}-")

    first = asyncio.create_task(holder("a", "a1", 0.05))
    await asyncio.sleep(0)
    assert locks.locked("a") and not locks.locked("b")
    rest = [asyncio.create_task(holder("a", f"a{i}", 0.01)) for i in (2, 3)]
    other = asyncio.create_task(holder("b", "b1", 0.0))
    await asyncio.gather(first, *rest, other)
    a_events = [e for e in order if e.startswith("a")]
    assert a_events == ["a1+", "a1-", "a2+", "a2-", "a3+", "a3-"]  # one at a time, in arrival order
    assert order.index("b1+") < order.index("a1-")  # another key does not wait
    assert len(locks) == 0 and not locks.locked("a")


async def test_a_holder_that_fails_or_is_cancelled_releases_its_key() -> None:
    locks = KeyedLocks()

    async def fails() -> None:
        async with locks.hold("k"):
            raise RuntimeError("boom")

    try:
        await fails()
    except RuntimeError:
        pass
    waiter_started = asyncio.Event()

    async def waits_for_ever() -> None:
        async with locks.hold("k"):
            waiter_started.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(waits_for_ever())
    await waiter_started.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert len(locks) == 0
    async with locks.hold("k"):
        assert locks.locked("k")
