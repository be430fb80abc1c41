"""Consolidated messages are not held in RAM: a session keeps dicts only from a little before its
consolidation pointer, and reads older messages back from its file on demand, identical to what a
full load gives (corrupt, blank and metadata lines in between, a truncated last line), also after
/new moved the file, after the pointer advanced during a run, and after another process appended."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nanobot.gateway.missed import undelivered_replies
from nanobot.session.history import history_indices, history_tokens
from nanobot.session.message_log import COLD_MARGIN, ColdReadError, MessageLog
from nanobot.session.session import valid_metadata
from nanobot.session.store import Session, SessionStore

KEY = "telegram:42"


def stamp(i: int) -> str:
    return f"2026-01-{1 + i // 1000:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00+00:00"


def message(i: int) -> dict[str, Any]:
    """A realistic mix: user turns, tool calls and their results, replies (some non-ASCII)."""
    kind = i % 4
    if kind == 0:
        return {"role": "user", "content": f"question {i}: wie spät ist es? 🙂", "timestamp": stamp(i)}
    if kind == 1:
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": "exec", "arguments": '{"cmd": "date"}'}}]
        return {"role": "assistant", "content": None, "tool_calls": calls, "timestamp": stamp(i)}
    if kind == 2:
        return {"role": "tool", "tool_call_id": f"c{i - 1}", "name": "exec", "content": "x" * (i % 97),
                "timestamp": stamp(i)}
    return {"role": "assistant", "content": f"reply {i} mentions \"_type\": \"metadata\"", "timestamp": stamp(i)}


def reference_load(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The transcript as the loader read it before: every line parsed, every message kept."""
    messages: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for lineno, raw in enumerate(path.read_bytes().split(b"\n"), 1):
        line = raw.decode("utf-8", errors="replace")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if "_type" in obj:
            if obj.get("_type") == "metadata":
                meta = valid_metadata(KEY, lineno, obj, meta)
        elif "role" in obj:
            messages.append(obj)
    if int(meta.get("last_consolidated", 0)) > len(messages):
        meta["last_consolidated"] = len(messages)
    return messages, meta


def meta_line(**fields: Any) -> bytes:
    # as set_metadata writes it
    return (json.dumps({"_type": "metadata", "format": 1, **fields}, ensure_ascii=False) + "\n").encode()


def write_messy_transcript(path: Path, count: int, pointer: int) -> None:
    """`count` messages with every kind of line the loader must skip in between, ending in a
    half-written line (a crash mid-append)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = [meta_line(is_group=False, last_consolidated=0)]
    for i in range(count):
        out.append((json.dumps(message(i), ensure_ascii=False) + "\n").encode())
        if i % 97 == 5:
            out.append(b'{"role": "assistant", "content": "cut short\n')  # corrupt
        if i % 131 == 7:
            out.append(b"\n   \n[1, 2]\n\"text\"\n")  # blank lines, JSON that is not a message
        if i % 173 == 9:
            out.append(b'{"role": "user", "content": "bad bytes \xff\xfe here", "timestamp": "t"}\n')
        if i % 211 == 11:
            out.append(b'{"_type": "marker", "role": "user"}\n{"role": "user", "x": {"_type": 1}}\n')
        if i == count // 2:
            out.append(meta_line(is_group=False, last_consolidated=count // 3))
        if i == count // 2 + 1:
            # an invalid pointer keeps the previous line's value; written by hand, not by json.dumps
            out.append(b'{"format": 1, "_type": "metadata", "last_consolidated": -5, "is_group": false}\n')
    out.append(meta_line(is_group=False, last_consolidated=pointer, delivered_through=10))
    out.append(b'{"role": "user", "content": "the crash came h')
    path.write_bytes(b"".join(out))


def fds_on(path: Path) -> int:
    """Descriptors of this process open on the file now at `path`."""
    target = str(path.resolve())
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == target
        except OSError:
            continue
    return count


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")


def test_only_the_unconsolidated_tail_is_held_yet_every_message_reads_back(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    write_messy_transcript(store.path_for(KEY), count=3000, pointer=2900)
    expected, meta = reference_load(store.path_for(KEY))
    pointer = meta["last_consolidated"]
    assert len(expected) > 3000 and pointer == 2900  # the bad-bytes lines are messages too

    session = store.get(KEY)
    log = session.messages
    assert session.metadata == meta
    assert len(log) == len(expected)
    assert log.cold_count == pointer - COLD_MARGIN
    assert log.held == len(expected) - pointer + COLD_MARGIN  # dicts only from the margin on
    for i in (0, 1, 5, 6, 7, 8, 9, 10, pointer - COLD_MARGIN - 1, pointer - COLD_MARGIN, len(expected) - 1):
        assert log[i] == expected[i]
        assert log[i - len(expected)] == expected[i]  # negative indices
    assert list(log) == expected
    assert log[:] == expected
    assert log[100:pointer] == expected[100:pointer]  # a slice across the cold/hot boundary
    assert log[-40:] == expected[-40:] and log[5:3000:7] == expected[5:3000:7]
    assert log == expected and bool(log)
    assert list(log.iter_from(pointer - 100)) == expected[pointer - 100 :]
    with pytest.raises(IndexError):
        log[len(expected)]
    assert log[3] is not log[3]  # cold: a fresh dict per read, the file is the truth
    # what reads below the pointer still sees every message: the gateway's undelivered replies
    assert undelivered_replies(session) == [
        i for i in range(10, len(expected))
        if expected[i]["role"] == "assistant" and not expected[i].get("tool_calls") and expected[i]["content"]
    ]
    store.close()


@needs_proc
def test_cold_reads_survive_new_moving_the_file_and_release_closes_the_descriptor(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    write_messy_transcript(store.path_for(KEY), count=600, pointer=500)
    expected, _ = reference_load(store.path_for(KEY))
    session = store.get(KEY)
    assert session.messages.cold_count > 0
    archived = store.archive(session, datetime(2026, 2, 1, tzinfo=UTC))
    assert archived is not None and not store.path_for(KEY).exists()
    assert list(session.messages) == expected  # the turn holding it still reads the moved file
    assert session.messages[0] == expected[0]  # as the gateway reads the first timestamp

    old = store.load_archived(archived)  # as the memory lifecycle processes the archive
    assert old.messages.held < len(expected) and old.messages[: old.last_consolidated] == expected[:500]
    store.set_metadata(old, last_consolidated=len(old.messages))
    assert old.messages.held == COLD_MARGIN and list(old.messages) == expected
    assert fds_on(archived) >= 2  # each session's read descriptor (and the archive's write handle)
    store.release(old)
    session.messages.close()
    assert fds_on(archived) == 0


def test_pointer_advance_during_a_run_lets_go_of_the_dicts(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    session = store.get(KEY)
    written = [message(i) for i in range(300)]
    store.append(session, *written[:100])
    with open(session.path, "ab") as fh:
        fh.write(b'{"role": "user", "content": "half a li')  # another writer crashed mid-line
    store.append(session, *written[100:200])  # the first of these goes after a "\n"
    assert session.messages.held == 200  # nothing is dropped before the pointer moves
    store.set_metadata(session, last_consolidated=150)
    assert session.messages.cold_count == 150 - COLD_MARGIN
    store.append(session, *written[200:])
    before = history_indices(session, start=100), [session.tokens_of(i) for i in range(300)]

    store.set_metadata(session, last_consolidated=250)
    log = session.messages
    assert log.cold_count == 250 - COLD_MARGIN and log.held == 50 + COLD_MARGIN
    assert list(log) == written
    assert log[99] == written[99] and log[100] == written[100]  # either side of the cut line
    session._token_cache.clear()  # counted again from the cold and hot messages
    assert (history_indices(session, start=100), [session.tokens_of(i) for i in range(300)]) == before
    plain = Session("k", Path("/x"), messages=written, metadata={"last_consolidated": 250})
    assert (history_indices(session), history_tokens(session)) == (history_indices(plain), history_tokens(plain))
    store.close()
    again = SessionStore(tmp_path).get(KEY)  # a reload agrees
    assert list(again.messages) == written and again.messages.cold_count == 250 - COLD_MARGIN


def test_a_reread_after_another_process_appended_builds_a_fresh_log(tmp_path: Path) -> None:
    first, second = SessionStore(tmp_path, fsync="never"), SessionStore(tmp_path, fsync="never")
    a = first.get(KEY)
    first.append(a, *(message(i) for i in range(200)))
    first.set_metadata(a, last_consolidated=100)
    assert a.messages.cold_count == 100 - COLD_MARGIN

    b = second.get(KEY)
    second.append(b, *(message(i) for i in range(200, 400)))
    second.set_metadata(b, last_consolidated=380)

    again = first.get(KEY)  # the file changed under the first process: read again
    assert again is a
    assert a.messages.cold_count == 380 - COLD_MARGIN and a.messages.held == 20 + COLD_MARGIN
    assert list(a.messages) == [message(i) for i in range(400)]
    first.append(a, message(400))
    first.set_metadata(a, last_consolidated=401)
    assert a.messages.held == COLD_MARGIN and a.messages[400] == message(400)
    assert list(second.get(KEY).messages) == [message(i) for i in range(401)]
    first.close()
    second.close()


def test_messages_without_a_known_line_stay_held_and_a_changed_line_is_refused(tmp_path: Path) -> None:
    listed = Session("k", Path("/nonexistent"), messages=[message(i) for i in range(5)])
    assert isinstance(listed.messages, MessageLog) and listed.messages == [message(i) for i in range(5)]
    assert listed.messages.freeze(5) == 0  # no file behind them: they never turn cold

    store = SessionStore(tmp_path, fsync="never")
    session = store.get(KEY)
    store.append(session, *(message(i) for i in range(100)))
    store.set_metadata(session, last_consolidated=100)
    store.close()
    path = store.path_for(KEY)
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"question 0', b'?question 0', 1))  # same length, now corrupt
    with pytest.raises(ColdReadError):
        session.messages[0]  # never a wrong or shifted message
    assert session.messages[1] == message(1)


def test_a_file_deleted_under_a_running_session_keeps_its_new_messages_held(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    session = store.get(KEY)
    store.append(session, *(message(i) for i in range(100)))
    store.set_metadata(session, last_consolidated=80)
    session.path.unlink()  # the workspace was removed under the gateway
    store.append(session, message(100))  # the store recreates the file
    store.set_metadata(session, last_consolidated=101)
    # the new file's offsets are not those of the old one: nothing more turns cold, nothing is lost
    assert session.messages.cold_count == 80 - COLD_MARGIN
    assert list(session.messages) == [message(i) for i in range(101)]  # the old lines: the held descriptor
    store.close()


async def test_the_session_note_of_a_long_archive_reads_only_its_end(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """/new on a months-long chat: the note wants the last 60,000 characters, yet the whole transcript
    was rendered into one string (and every user message listed) first."""
    from nanobot.memory import session_notes
    from nanobot.memory.store import MemoryStore
    from nanobot.memory.transcript import render_transcript
    from nanobot.providers.base import LLMError

    store = SessionStore(tmp_path, fsync="never")
    write_messy_transcript(store.path_for(KEY), count=6000, pointer=5800)
    expected, _ = reference_load(store.path_for(KEY))
    archived = store.archive(store.get(KEY), datetime(2026, 2, 1, tzinfo=UTC))
    assert archived is not None
    old = store.load_archived(archived)
    store.set_metadata(old, last_consolidated=len(old.messages))  # as the lifecycle does before the note
    read: list[int] = []
    read_cold = MessageLog._read_cold

    def counting(log: MessageLog, start: int, stop: int) -> list[dict[str, Any]]:
        read.append(stop - start)
        return read_cold(log, start, stop)

    monkeypatch.setattr(MessageLog, "_read_cold", counting)
    sent: list[str] = []

    class Failing:  # the call fails: the note is the raw excerpt, which shows what the note read
        async def chat(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> None:
            sent.append(messages[-1]["content"])
            raise LLMError("down")

    memory = MemoryStore(tmp_path)
    note = await session_notes.write_session_note(Failing(), memory, old.messages, KEY)  # type: ignore[arg-type]
    full = render_transcript(expected)
    assert sent and sent[0] == "[...]\n" + full[-session_notes.MAX_TRANSCRIPT_CHARS:]
    assert note is not None and full[-session_notes.RAW_EXCERPT_CHARS:] in note.read_text()
    assert f"Messages: {len(expected)}" in note.read_text()
    assert sum(read) < len(expected) // 4  # the first few (user count, start time) and the end
    store.release(old)
