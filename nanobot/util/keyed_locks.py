"""KeyedLocks: one asyncio lock per key (a chat, a session), kept only while it is held or awaited.

A daemon that sees thousands of chats over months would otherwise keep a lock for every chat it
ever saw. Waiters of a key are served in the order they came (asyncio locks are fair), and the lock
is dropped when its last holder leaves, so the next one for that key starts with a fresh one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holding or waiting


class KeyedLocks:
    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        """Hold `key`'s lock for the block (waiting for earlier holders of the same key)."""
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]

    def locked(self, key: Hashable) -> bool:
        """Whether someone holds `key`'s lock now."""
        entry = self._entries.get(key)
        return entry is not None and entry.lock.locked()

    def __len__(self) -> int:
        """Keys held or awaited now."""
        return len(self._entries)
