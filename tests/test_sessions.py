"""SessionStore: append-only JSONL, O(1) appends, cross-process locking, fsync policies, archive,
history alignment and the bounded cache."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nanobot.session import store as store_mod
from nanobot.session.history import build_history, history_indices
from nanobot.session.store import Session, SessionStore
from nanobot.util.text import truncate_middle

STAMP = "2026-01-01T00:00:00+00:00"


def msg(role: str, content: str = "x", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": STAMP, **extra}


def call(call_id: str, name: str = "list_dir") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


# ------------------------------------------------------------------ append-only


def test_append_is_o1_and_never_rewrites(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    session = store.get("telegram:1")
    store.append(
        session, *(msg("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(10_000))
    )
    path = session.path
    assert path.name == "telegram_1.jsonl"
    before = path.read_bytes()
    inode = path.stat().st_ino
    new = msg("user", "one more")
    store.append(session, new)
    after = path.read_bytes()
    assert after.startswith(before)  # nothing before the end changed
    assert len(after) - len(before) == len(json.dumps(new, ensure_ascii=False)) + 1
    assert path.stat().st_ino == inode
    store.set_metadata(session, last_consolidated=5000)
    assert path.read_bytes().startswith(after)
    store.close()
    reloaded = SessionStore(tmp_path).get("telegram:1")
    assert len(reloaded.messages) == 10_001 and reloaded.last_consolidated == 5000
    assert reloaded.messages[-1]["content"] == "one more"


def test_metadata_last_line_wins_and_pointer_is_clamped(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "cli_direct.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        {"_type": "metadata", "format": 1, "last_consolidated": 1},
        msg("user"),
        msg("assistant"),
        {"_type": "metadata", "format": 1, "last_consolidated": 99},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    session = SessionStore(tmp_path).get("cli:direct")
    assert len(session.messages) == 2
    assert session.last_consolidated == 2  # clamped to the messages that exist


def _append_many(workspace: str, worker: int, count: int, size: int) -> None:
    store = SessionStore(Path(workspace), fsync="never")
    session = store.get("cli:shared")
    for i in range(count):
        store.append(session, msg("user", f"{worker}:{i}:" + chr(ord("a") + worker) * size))
    store.close()


def test_two_processes_appending_never_interleave(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    count, size = 300, 20_000  # lines far beyond PIPE_BUF, written in several chunks
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, count, size)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = (tmp_path / "sessions" / "cli_shared.jsonl").read_text().splitlines()
    assert len(lines) == 2 * count
    seen: dict[int, list[int]] = {0: [], 1: []}
    for line in lines:
        content = json.loads(line)["content"]
        worker, index, body = content.split(":", 2)
        assert body == chr(ord("a") + int(worker)) * size
        seen[int(worker)].append(int(index))
    assert seen == {0: list(range(count)), 1: list(range(count))}


# ------------------------------------------------------------------ fsync policies


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(store_mod.os, "fsync", counting)
    return calls


def test_a_session_written_by_another_process_is_read_again(tmp_path: Path) -> None:
    """An open `nanobot agent` and a `nanobot agent -m` on one key: each kept its own copy, so the
    first never saw the second's lines, and its consolidation pointer indexed a list the file did not
    hold (lines consolidated twice, others never). Two stores are two processes."""
    first, second = SessionStore(tmp_path, fsync="never"), SessionStore(tmp_path, fsync="never")
    a = first.get("cli:direct")
    first.append(a, msg("user", "FACT-1"), msg("assistant", "noted 1"))
    b = second.get("cli:direct")
    second.append(b, msg("user", "FACT-2"), msg("assistant", "noted 2"))
    second.set_metadata(b, last_consolidated=2)
    a = first.get("cli:direct")  # the first process's next turn
    assert [m["content"] for m in a.messages] == ["FACT-1", "noted 1", "FACT-2", "noted 2"]
    assert a.last_consolidated == 2
    first.append(a, msg("user", "FACT-3"))
    assert [m["content"] for m in second.get("cli:direct").messages][-2:] == ["noted 2", "FACT-3"]
    assert first.get("cli:direct") is a and len(a.messages) == 5  # its own writes need no re-read
    first.close()
    second.close()


def test_lines_after_another_process_archived_the_session_go_to_the_new_file(tmp_path: Path) -> None:
    """`/new` in one process moved the file to the archive (consolidated there at once); the other
    process kept appending to the moved file, after it had been processed: those lines reached no
    memory and the live session had no file."""
    first, second = SessionStore(tmp_path, fsync="never"), SessionStore(tmp_path, fsync="never")
    a = first.get("cli:direct")
    first.append(a, msg("user", "FACT-1"))
    archived = second.archive(second.get("cli:direct"), datetime(2026, 1, 2, tzinfo=UTC))
    assert archived is not None
    kept = archived.read_bytes()
    first.append(a, msg("user", "FACT-2"), msg("assistant", "noted"))  # the turn goes on
    assert archived.read_bytes() == kept
    live = [json.loads(x) for x in a.path.read_text().splitlines()]
    assert [m.get("content") for m in live if "role" in m] == ["FACT-2", "noted"]
    assert [m["content"] for m in a.messages] == ["FACT-2", "noted"]  # what the file holds
    assert [m["content"] for m in SessionStore(tmp_path).get("cli:direct").messages] == ["FACT-2", "noted"]
    first.close()
    second.close()


def test_keys_that_look_alike_on_disk_keep_their_own_transcripts(tmp_path: Path) -> None:
    """`-s work/alice`, `-s "work alice"` and `-s work_alice` shared one file (the third key's model
    request carried the first two's messages); a 300-character key failed every turn."""
    store = SessionStore(tmp_path, fsync="never")
    keys = ["cli:work/alice", "cli:work alice", "cli:work_alice", "cli:" + "k" * 300]
    for key in keys:
        store.append(store.get(key), msg("user", f"secret of {key}"))
    store.close()
    paths = {SessionStore(tmp_path).path_for(key) for key in keys}
    assert len(paths) == len(keys)
    assert SessionStore(tmp_path).path_for("telegram:-100123").name == "telegram_-100123.jsonl"  # the contract
    for key in keys:
        assert [m["content"] for m in SessionStore(tmp_path).get(key).messages] == [f"secret of {key}"]


def test_fsync_always(tmp_path: Path, fsyncs: list[int]) -> None:
    store = SessionStore(tmp_path, fsync="always")
    session = store.get("a:b")
    for i in range(5):
        store.append(session, msg("user", str(i)))
    assert len(fsyncs) == 5


def test_fsync_never(tmp_path: Path, fsyncs: list[int]) -> None:
    store = SessionStore(tmp_path, fsync="never")
    session = store.get("a:b")
    for i in range(5):
        store.append(session, msg("user", str(i)))
    store.close()
    assert fsyncs == []
    assert len(SessionStore(tmp_path).get("a:b").messages) == 5  # flushed to the OS all the same


def test_fsync_everysec_batches(tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(store_mod.time, "monotonic", lambda: clock[0])
    store = SessionStore(tmp_path, fsync="everysec")
    session = store.get("a:b")
    for i in range(50):
        store.append(session, msg("user", str(i)))
    assert fsyncs == []  # within the same second: none yet
    clock[0] += store_mod.FSYNC_INTERVAL_S
    store.append(session, msg("user", "later"))
    assert len(fsyncs) == 1
    store.append(session, msg("user", "again"))
    store.close()
    assert len(fsyncs) == 2  # close syncs what is still dirty


async def test_fsync_everysec_syncs_an_idle_session_within_the_interval(
    tmp_path: Path, fsyncs: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The interval also runs from the store's creation: a pause longer than it (a loaded machine, a
    # full GC) before the append made the append itself sync, so keep it well above such pauses.
    monkeypatch.setattr(store_mod, "FSYNC_INTERVAL_S", 0.5)
    store = SessionStore(tmp_path, fsync="everysec")
    session = store.get("a:b")
    store.append(session, msg("user", "last words before a quiet night"))
    assert fsyncs == []
    async with asyncio.timeout(5):  # no further write: the timer syncs
        while not fsyncs:
            await asyncio.sleep(0.01)
    assert len(fsyncs) == 1
    store.close()


def test_write_reaches_the_os_before_append_returns(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    session = store.get("a:b")
    store.append(session, msg("user", "durable"))
    # another reader (as after a kill -9) sees the line at once: it was written and flushed
    assert "durable" in session.path.read_text()


# ------------------------------------------------------------------ archive and cache


def test_a_long_key_in_a_script_of_three_byte_characters_is_saved_and_archived(tmp_path: Path) -> None:
    """120 Chinese characters are 360 bytes: the name was cut by characters, not bytes, so the file
    could not be created (ENAMETOOLONG) and nothing of that session was saved."""
    store = SessionStore(tmp_path, fsync="never")
    keys = ["cli:" + "记忆" * 60, "cli:" + "记忆" * 60 + "!", "cli:" + "é" * 200]
    for key in keys:
        session = store.get(key)
        store.append(session, msg("user", f"secret of {key}"))
        assert len(session.path.name.encode()) <= 200
        archived = store.archive(session, datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC))
        assert archived is not None
        store.mark_pending(archived, key)
        assert store.load_archived(archived).messages[0]["content"] == f"secret of {key}"
    assert len({store.path_for(key) for key in keys}) == len(keys)


def test_a_transcript_an_earlier_version_named_without_a_digest_is_continued(tmp_path: Path) -> None:
    """`-s "cli:work project"` was `cli_work_project.jsonl` before names got a digest: after the
    upgrade the conversation started from nothing in a new file. A plain-named file recorded for
    another key stays that key's."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "cli_work_project.jsonl").write_text(json.dumps(msg("user", "FACT-9: deadline March 3")) + "\n")
    old_long = "cli:" + "x" * 130  # over 120 characters: now a digest name, then the whole key
    (sessions / f"{old_long.replace(':', '_')}.jsonl").write_text(json.dumps(msg("user", "long one")) + "\n")
    (sessions / "cli_team_a.jsonl").write_text(
        json.dumps({"_type": "metadata", "is_group": False, "session_key": "cli:team_a"}) + "\n"
        + json.dumps(msg("user", "team a's own")) + "\n"
    )
    store = SessionStore(tmp_path, fsync="never")
    continued = store.get("cli:work project")
    assert [m["content"] for m in continued.messages] == ["FACT-9: deadline March 3"]
    store.append(continued, msg("assistant", "noted"))
    assert [m["content"] for m in store.get(old_long).messages] == ["long one"]
    assert store.get("cli:team a").messages == []  # not team_a's transcript
    assert [m["content"] for m in store.get("cli:team_a").messages] == ["team a's own"]
    store.close()
    assert "noted" in (sessions / "cli_work_project.jsonl").read_text()


def test_earlier_names_of_long_keys_in_a_multibyte_script_are_taken_over(tmp_path: Path) -> None:
    """An earlier digest name (cut by characters) differed from today's: the session started empty.
    A plain name over today's byte limit was continued in place, and `/new` then failed to write
    the archive's marker beside it (ENAMETOOLONG)."""
    from nanobot.config.paths import first_digest_session_stem, legacy_session_stem

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    digest_key, plain_key = "cli:" + "记" * 65 + " x", "cli:" + "记" * 70
    for key, stem in ((digest_key, first_digest_session_stem(digest_key)), (plain_key, legacy_session_stem(plain_key))):
        (sessions / f"{stem}.jsonl").write_text(json.dumps(msg("user", f"old words of {len(key)}")) + "\n")
    store = SessionStore(tmp_path, fsync="never")
    for key in (digest_key, plain_key):
        session = store.get(key)
        assert [m["content"] for m in session.messages] == [f"old words of {len(key)}"]
        assert len(session.path.name.encode()) <= 200
        archived = store.archive(session, datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC))
        assert archived is not None
        store.mark_pending(archived, key)  # the marker's name fits too
    assert sorted(p.name for p in sessions.glob("*.jsonl")) == []  # both archived, nothing left behind


def test_archive_keeps_the_old_file(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.get("telegram:9")
    store.append(session, msg("user", "old"), msg("assistant", "reply"))
    original = session.path.read_bytes()
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    archived = store.archive(session, when)
    assert archived == tmp_path / "sessions" / "archive" / "telegram_9-20260304T050607.jsonl"
    assert archived.read_bytes() == original
    assert not session.path.exists()
    with pytest.raises(RuntimeError):
        store.append(session, msg("user", "to the archived object"))
    fresh = store.get("telegram:9")
    assert fresh is not session and fresh.messages == []
    store.append(fresh, msg("user", "new start"))
    again = store.archive(fresh, when)  # same second: a suffix, never an overwrite
    assert again is not None and again.name == "telegram_9-20260304T050607-2.jsonl"
    assert archived.read_bytes() == original
    assert [m["content"] for m in store.load_archived(archived).messages] == ["old", "reply"]


def test_cache_is_bounded(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, max_cached=3)
    for i in range(10):
        store.append(store.get(f"c:{i}"), msg("user", str(i)))
    assert len(store.cached()) == 3
    assert [s.key for s in store.cached()] == ["c:7", "c:8", "c:9"]
    assert len(store._handles) <= 3  # evicted sessions keep no open file
    assert [m["content"] for m in store.get("c:0").messages] == ["0"]


def test_evicted_session_in_use_is_not_loaded_twice(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, max_cached=1)
    busy = store.get("c:busy")  # held by a running turn
    store.get("c:other")  # evicts it from the cache
    store.append(busy, msg("user", "written by the running turn"))
    again = store.get("c:busy")
    assert again is busy
    assert again.messages[-1]["content"] == "written by the running turn"


# ------------------------------------------------------------------ history alignment


def _session(messages: list[dict[str, Any]], last_consolidated: int = 0) -> Session:
    return Session(
        key="k",
        path=Path("/nonexistent"),
        messages=messages,
        metadata={"last_consolidated": last_consolidated},
    )


def test_history_starts_at_a_user_message() -> None:
    messages = [
        msg("user", "u0"),
        msg("assistant", "a0"),
        msg("user", "u1"),
        msg("assistant", "a1"),
    ]
    assert history_indices(_session(messages, last_consolidated=1)) == [2, 3]
    assert history_indices(_session(messages, last_consolidated=0)) == [0, 1, 2, 3]


def test_orphan_tool_results_and_incomplete_groups_are_dropped() -> None:
    messages = [
        msg("user", "u0"),
        msg("assistant", "", tool_calls=[call("a"), call("b")]),
        msg("tool", "ra", tool_call_id="a", name="list_dir"),
        msg("tool", "rb", tool_call_id="b", name="list_dir"),
        msg("assistant", "done"),
        msg("user", "u1"),
        msg("tool", "orphan", tool_call_id="zzz", name="list_dir"),  # no call for it
        msg("assistant", "", tool_calls=[call("c"), call("d")]),
        msg("tool", "rc", tool_call_id="c", name="list_dir"),  # d never answered (crash mid-group)
        msg("user", "u2"),
        msg("assistant", "", tool_calls=[call("e")]),  # the last group, unanswered
    ]
    session = _session(messages)
    indices = history_indices(session)
    assert indices == [0, 1, 2, 3, 4, 5, 9]
    history = build_history(session, indices, 1000, 1000)
    assert history[1]["tool_calls"][0]["id"] == "a"
    assert all(set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"} for m in history)
    assert "timestamp" not in history[0]


def test_tool_heavy_tail_without_user_message() -> None:
    messages = [
        msg("user", "u0"),
        msg("assistant", "", tool_calls=[call("a")]),
        msg("tool", "ra", tool_call_id="a", name="list_dir"),
        msg("assistant", "", tool_calls=[call("b")]),
        msg("tool", "rb", tool_call_id="b", name="list_dir"),
    ]
    # the pointer sits inside the turn: its orphan result is skipped, the whole group after is kept
    assert history_indices(_session(messages, last_consolidated=2)) == [3, 4]


def test_history_caps_stored_tool_results_and_user_text() -> None:
    messages = [
        msg("user", "u" * 5000),
        msg("assistant", "", tool_calls=[call("a")]),
        msg("tool", "t" * 9000, tool_call_id="a", name="read_file"),
        msg("assistant", "fine"),
    ]
    session = _session(messages)
    history = build_history(session, history_indices(session), 2000, 1000)
    assert len(history[0]["content"]) < 2200 and "omitted" in history[0]["content"]
    assert len(history[2]["content"]) < 1200 and "omitted" in history[2]["content"]
    assert session.messages[2]["content"] == "t" * 9000  # storage untouched


def test_truncate_middle() -> None:
    assert truncate_middle("short", 100) == "short"
    text = "H" * 700 + "M" * 5000 + "T" * 300
    cut = truncate_middle(text, 1000)
    assert cut.startswith("H" * 700) and cut.endswith("T" * 200)
    assert "5100 of 6000 characters omitted" in cut


def test_history_memo_follows_appends_and_the_pointer(tmp_path: Path) -> None:
    from nanobot.session.history import history_tokens

    store = SessionStore(tmp_path)
    session = store.get("m:1")
    store.append(session, msg("user", "a"), msg("assistant", "b"))
    first = history_indices(session)
    assert first == [0, 1] and history_indices(session) is first  # memoised
    tokens = history_tokens(session)
    store.append(session, msg("user", "c"))
    assert history_indices(session) == [0, 1, 2]
    assert history_tokens(session) > tokens
    store.set_metadata(session, last_consolidated=2)
    assert history_indices(session) == [2]
    assert history_tokens(session) == session.tokens_of(2)


def test_the_files_a_message_came_with_count_in_its_tokens(tmp_path: Path) -> None:
    """Later turns see a note per file a user sent; the estimate that fits the history to the window
    counted the stored text alone (6 tokens for a message sent as 328)."""
    from nanobot.providers.tokens import count_message
    from nanobot.session.history import build_history

    store = SessionStore(tmp_path)
    session = store.get("m:1")
    photos = [f"/ws/media/telegram_1_{n}_photo-with-a-long-name.jpg" for n in range(10)]
    store.append(session, {**msg("user", "look"), "media": photos})
    sent = build_history(session, [0], 100_000, 100_000)[0]
    assert all(p in sent["content"] for p in photos)
    assert session.tokens_of(0) == count_message(sent)


# ------------------------------------------------------------------ what others read through the store


def test_archive_retry_markers_go_through_the_store(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    assert store.pending_archives() == [] and store.archive_markers().pending == []
    session = store.get("telegram:42")
    store.append(session, msg("user", "hi"))
    archived = store.archive(session, datetime(2026, 1, 2, 3, 4, 5))
    assert archived is not None
    store.mark_pending(archived, session.key)
    marker = archived.with_name(archived.name + ".pending")  # the file name status and doctor report
    assert json.loads(marker.read_text())["key"] == "telegram:42"
    [(path, record)] = store.pending_archives()
    assert path == archived and record.attempts == 0 and record.next_attempt(300) is None

    when = datetime(2026, 1, 2, 4, 0, tzinfo=UTC)
    assert store.record_archive_failure(archived, when, "x" * 1000).attempts == 1
    [(_, record)] = store.pending_archives()
    assert record.attempts == 1 and len(record.last_error) == 300  # errors kept short
    assert record.next_attempt(300) == datetime(2026, 1, 2, 4, 5, tzinfo=UTC)
    assert store.record_archive_failure(archived, when, "again").attempts == 2
    [(_, record)] = store.pending_archives()
    assert record.next_attempt(300) == datetime(2026, 1, 2, 4, 10, tzinfo=UTC)  # backs off

    failed = store.give_up_archive(archived)
    assert failed.name == archived.name + ".failed" and not marker.exists()
    assert store.pending_archives() == []  # given up: never retried again
    summary = store.archive_markers()
    assert summary.pending == [] and [(p, r.attempts) for p, r in summary.failed] == [(failed, 2)]

    other = store.archive(store.get("cli:direct"), datetime(2026, 1, 2))  # nothing written: no file
    assert other is None
    second = store.get("cli:direct")
    store.append(second, msg("user", "there"))
    kept = store.archive(second, datetime(2026, 1, 3))
    assert kept is not None
    store.mark_pending(kept, "cli:direct")
    store.clear_pending(kept)
    assert store.pending_archives() == [] and kept.exists()  # processed: the transcript stays

    store.mark_pending(kept, "cli:direct")
    kept.unlink()  # a marker whose transcript is gone is dropped, not retried
    assert store.pending_archives() == []
    assert not kept.with_name(kept.name + ".pending").exists()


def test_transcript_listing_is_symlink_free_and_recent_archives_name_their_session(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, fsync="never")
    live = store.get("telegram:7")
    store.append(live, msg("user", "live"))
    old = store.get("discord:9")
    store.append(old, msg("user", "old"))
    archived = store.archive(old, datetime(2026, 1, 2, 3, 4, 5))
    assert archived is not None
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps(msg("user", "not ours")) + "\n")
    os.symlink(outside, store.dir / "linked.jsonl")
    (store.archive_dir / "notes.txt").write_text("not a transcript")
    os.mkfifo(store.dir / "pipe.jsonl")

    files = store.transcript_files()
    assert [(f.rel, f.archived) for f in files] == [
        ("sessions/telegram_7.jsonl", False),
        ("sessions/archive/discord_9-20260102T030405.jsonl", True),
    ]
    assert store.archived_since(60) == [("discord_9", archived)]
    os.utime(archived, (1, 1))  # long ago
    assert store.archived_since(60) == []
