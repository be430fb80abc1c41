"""The local embedding engine runs one call at a time; a search's query must not wait for the
background embedding of a whole batch, only for the slice running when it comes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from nanobot.memory.embeddings import LOCAL_SLICE, LocalEmbedder


class RecordingEngine:
    """Stands in for the native model: records each call; the first call waits at a gate."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.in_first_call = threading.Event()
        self.gate = threading.Event()
        self.running = 0
        self.most_at_once = 0

    def encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        self.calls.append(("query" if is_query else "documents", len(texts)))
        if len(self.calls) == 1:
            self.in_first_call.set()
            assert self.gate.wait(10)
        self.running -= 1
        return np.ones((len(texts), 8), dtype=np.float32)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.005)


async def test_a_query_goes_before_the_rest_of_a_document_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nanobot.memory.embeddings.axes", lambda model: None)
    embedder = LocalEmbedder("multilingual-e5-small")
    engine = embedder._impl = RecordingEngine()
    lines = [f"line {n}" for n in range(3 * LOCAL_SLICE)]
    batch = asyncio.ensure_future(embedder.embed_documents(lines))
    await asyncio.to_thread(engine.in_first_call.wait, 10)
    query = asyncio.ensure_future(embedder.embed_query("when is the dentist?"))
    await asyncio.to_thread(wait_until, lambda: embedder._turns._queries_waiting == 1)
    engine.gate.set()
    vectors, vector = await asyncio.gather(batch, query)
    assert engine.calls == [("documents", LOCAL_SLICE), ("query", 1), *[("documents", LOCAL_SLICE)] * 2]
    assert vectors.shape == (len(lines), 8) and vector.shape == (8,)
    assert engine.most_at_once == 1  # the engine is not re-entrant: never two calls at once
