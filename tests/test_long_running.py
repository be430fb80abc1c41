"""What months of running meet: a nearly full disk, a damaged pairing file, clocks stepped back and
forward, long transcripts, failed downloads, stopped streams. Each test failed on the code before its
fix; none asserts a duration (waits are bounded polls for the expected state)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO
from zoneinfo import ZoneInfo

import pytest

from nanobot.channels.pairing import PairingError, PairingStore
from nanobot.config.sections.memory import MemorySearchConfig
from nanobot.memory import transcript_tail
from nanobot.memory.index import MemoryIndex
from nanobot.memory.store import MemoryStore


# ------------------------------------------------------------------ disk full: HISTORY.md
def test_history_append_on_a_nearly_full_disk_leaves_no_half_entry(tmp_path: Path, monkeypatch) -> None:
    """A short write (the disk fills up mid-entry) must not leave half a HISTORY.md paragraph behind
    while the consolidation counts as done; the error must reach the caller."""
    store = MemoryStore(tmp_path, "UTC")
    store.append_history("[2026-01-01 10:00] First entry.")
    before = store.read_history()
    real_write = os.write
    calls = {"n": 0}

    def nearly_full(fd: int, data) -> int:  # what write(2) does on a disk with 100 bytes left
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:100]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", nearly_full)
    with pytest.raises(OSError):
        store.append_history("[2026-01-02 11:00] " + "The user planned a long trip to Berlin. " * 50)
    monkeypatch.setattr(os, "write", real_write)
    assert store.read_history() == before


# ------------------------------------------------------------------ corrupt file: pairing.json
def test_a_damaged_pairing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "pairing.json"
    data = {
        "format": 1,
        "pending": [],
        "approved": [{"channel": "telegram", "sender_id": "111", "username": "alice", "at": 1.0}],
        "denied": [{"channel": "telegram", "sender_id": "666", "username": "spam", "at": 2.0}],
    }
    damaged = json.dumps(data, indent=2)[:-3]  # cut short by a crash or a hand edit
    path.write_text(damaged)
    store = PairingStore(path)
    try:
        outcome = store.request("telegram", "999", "stranger", "999")
    except PairingError:
        outcome = None
    assert outcome is None or outcome[0] != "issued"
    assert path.read_text() == damaged  # the approved and denied senders are still there to repair


# ------------------------------------------------------------------ clock: MEMORY.md backups
def test_memory_backups_keep_the_newest_versions_when_the_clock_goes_back(tmp_path: Path) -> None:
    utc = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    tokyo, new_york = ZoneInfo("Asia/Tokyo"), ZoneInfo("America/New_York")
    store = MemoryStore(tmp_path, tokyo)
    for i in range(7):
        store.now = lambda i=i: (utc + timedelta(minutes=30 * i)).astimezone(tokyo)  # type: ignore[method-assign]
        store.write_memory(f"- fact version {i}\n")
    # agents.defaults.timezone changed (or the clock was stepped back): wall time is now 13 h earlier
    store = MemoryStore(tmp_path, new_york)
    for i in range(7, 10):
        store.now = lambda i=i: (utc + timedelta(minutes=30 * i)).astimezone(new_york)  # type: ignore[method-assign]
        store.write_memory(f"- fact version {i}\n")
    kept = sorted(int(p.read_text().split()[-1]) for p in store.backups())
    assert kept == [4, 5, 6, 7, 8]


# ------------------------------------------------------------------ long transcripts: the search index
def test_index_sync_chunks_off_the_event_loop(tmp_path: Path, monkeypatch) -> None:
    """Chunking a months-long transcript takes seconds; on the event loop it stalls every chat."""
    (tmp_path / "memory").mkdir()
    (tmp_path / "sessions").mkdir()
    line = {"role": "user", "content": "hiking in the alps", "timestamp": "2026-01-01T00:00:00+00:00"}
    (tmp_path / "sessions" / "telegram_1.jsonl").write_text(json.dumps(line) + "\n")
    threads: list[int] = []
    real = transcript_tail.chunk_transcript_from

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(transcript_tail, "chunk_transcript_from", spy)

    async def run() -> int:
        idx = MemoryIndex(tmp_path, MemorySearchConfig(embedding_provider="none"), embedder=None)
        try:
            await idx.sync()
        finally:
            idx.close()
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert threads and loop_thread not in threads


# ------------------------------------------------------------------ disk full: media downloads
def test_a_failed_download_leaves_no_partial_file_in_media(tmp_path: Path) -> None:
    from nanobot.bus.queue import MessageBus
    from nanobot.channels.base import Channel
    from nanobot.channels.media import MediaItem

    class Probe(Channel):
        name = "probe"

        async def start(self) -> None: ...
        async def stop(self) -> None: ...
        async def _send_text(self, msg) -> None: ...
        async def _send_typing(self, chat_id: str) -> None: ...
        def _retry_delay(self, exc, attempt):
            return None

    async def fetch(item: MediaItem, out: BinaryIO) -> None:  # what a write does on a full disk
        out.write(b"x" * 1000)
        out.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    channel = Probe(type("Cfg", (), {"allow_from": ["*"]})(), MessageBus(), tmp_path)
    got = asyncio.run(
        channel._download_media(
            1, 2, [MediaItem("report.pdf", "application/pdf", 1000, False, None)], fetch, (OSError,)
        )
    )
    assert got.paths == [] and "download failed" in got.notes[0]
    assert list((tmp_path / "media").iterdir()) == []


# ------------------------------------------------------------------ long-running: /stop of a streamed reply
def test_stopping_a_streamed_reply_leaves_no_stream_state_in_telegram(tmp_path: Path) -> None:
    from nanobot.agent.factory import build_runtime
    from nanobot.bus.queue import MessageBus
    from nanobot.channels.manager import ChannelManager
    from nanobot.config.schema import Config
    from nanobot.providers.base import LLMProvider, LLMResponse
    from tests.fakes.telegram_server import FakeTelegramServer

    class SlowStream(LLMProvider):
        name = "fake"

        @property
        def default_model(self) -> str:
            return "fake"

        async def _chat(self, call):
            if call.on_delta:
                await call.on_delta("Let me think about that in detail... ")
            await asyncio.sleep(30)
            return LLMResponse(content="done")

    async def until(condition, limit_s: float = 20.0) -> None:  # a hang guard, not a timing
        for _ in range(int(limit_s / 0.02)):
            if condition():
                return
            await asyncio.sleep(0.02)

    async def run() -> int:
        server = FakeTelegramServer().start()
        token = "123456789:AAFakeTokenForTests_abcdefghijklmnop"
        cfg = Config.model_validate({
            "agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "fake", "stream": True}},
            "memory": {"search": {"enabled": False}},
            "channels": {"telegram": {"enabled": True, "token": token, "allowFrom": ["*"], "streaming": True,
                                      "baseUrl": server.base_url, "baseFileUrl": server.base_file_url,
                                      "pollTimeoutS": 1}},
        })
        bus = MessageBus()
        runtime = build_runtime(cfg, bus, provider=SlowStream())
        runtime.loop.start()
        manager = ChannelManager(cfg, bus, tmp_path / "ws")
        await manager.start_all()
        channel = manager.channels["telegram"]
        try:
            for chat in (555, 556, 557):
                server.push_message("question", chat_id=chat, user_id=chat)
                await until(lambda: len(channel.previews.streams) >= 1)  # the preview is up
                server.push_message("/stop", chat_id=chat, user_id=chat)
                await until(lambda: not runtime.loop.in_flight())
            await until(lambda: not channel.previews.streams)
            return len(channel.previews.streams)
        finally:
            await manager.stop_all()
            server.stop()

    assert asyncio.run(run()) == 0
