"""Bad input and hostile conditions: corrupt session metadata, a full disk, a workspace deleted under
a running store, invalid UTF-8 in config.json, and an all-digit username posing as an allowed id."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nanobot.bus.queue import MessageBus
from nanobot.channels.manager import ChannelManager
from nanobot.config.schema import Config
from nanobot.session.store import SessionStore
from tests.conftest import REPO, run_cli
from tests.fakes.telegram_server import FakeTelegramServer


@pytest.mark.parametrize("bad", ['"7"', "-3", "true", "1.5", "null", '{"x": 1}', "99999999999999999999"])
def test_bad_last_consolidated_is_ignored_and_the_session_keeps_working(
    tmp_path: Path, bad: str, logs
) -> None:  # noqa: ANN001
    store = SessionStore(tmp_path)
    store.dir.mkdir(parents=True)
    lines = [
        json.dumps({"role": "user", "content": "one"}),
        json.dumps({"_type": "metadata", "format": 1, "last_consolidated": 1}),
        json.dumps({"role": "assistant", "content": "two"}),
        f'{{"_type": "metadata", "format": 1, "last_consolidated": {bad}}}',
    ]
    (store.dir / "cli_direct.jsonl").write_text("\n".join(lines) + "\n")
    session = store.get("cli:direct")
    # the last good value; a valid but too large one is capped to the message count
    assert session.last_consolidated == (2 if bad == "99999999999999999999" else 1)
    store.append(session, {"role": "user", "content": "three"})
    store.close()
    assert [m["content"] for m in SessionStore(tmp_path).get("cli:direct").messages] == [
        "one",
        "two",
        "three",
    ]
    if bad != "99999999999999999999":
        assert any("ignoring invalid last_consolidated" in line for line in logs)


def test_full_disk_leaves_nothing_half_written(tmp_path: Path) -> None:
    """A real short write: RLIMIT_FSIZE stops the append part-way (as ENOSPC would)."""
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from nanobot.session.store import SessionStore, StorageError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        store = SessionStore(Path({str(tmp_path)!r}), fsync="always")
        session = store.get("cli:direct")
        store.append(session, {{"role": "user", "content": "kept"}})
        size = store.path_for("cli:direct").stat().st_size
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))
        try:
            store.append(session, {{"role": "user", "content": "x" * 5000}})
        except StorageError as exc:
            print("ERROR:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "ERROR: cannot save the conversation" in out.stdout, out.stderr
    text = (tmp_path / "sessions" / "cli_direct.jsonl").read_text()
    assert text == json.dumps({"role": "user", "content": "kept"}) + "\n"


def test_workspace_deleted_under_a_running_store_loses_nothing(tmp_path: Path, logs) -> None:  # noqa: ANN001
    import shutil

    ws = tmp_path / "ws"
    store = SessionStore(ws)
    session = store.get("telegram:555")
    store.append(session, {"role": "user", "content": "before"})
    shutil.rmtree(ws)
    store.append(session, {"role": "user", "content": "after the workspace vanished"})
    store.close()
    assert "after the workspace vanished" in (ws / "sessions" / "telegram_555.jsonl").read_text()
    assert any("was deleted while in use" in line for line in logs)


def test_invalid_utf8_config_exits_2_naming_the_problem(home: Path) -> None:
    (home / "config.json").write_bytes(b'{"agents": {"defaults": {"model": "caf\xe9"}}}')
    result = run_cli("status", home=home)
    assert result.returncode == 2
    assert "not valid UTF-8" in result.stderr and "config.json" in result.stderr
    assert "Traceback" not in result.stderr


async def test_all_digit_username_does_not_pass_as_an_allowed_id(tmp_path: Path) -> None:
    server = FakeTelegramServer().start()
    try:
        telegram = {
            "enabled": True,
            "token": "123456789:AAAllowFromTokenForTests_abcdefghij",
            "allowFrom": ["555"],
            "baseUrl": server.base_url,
            "baseFileUrl": server.base_file_url,
            "pollTimeoutS": 1,
        }
        bus = MessageBus()
        manager = ChannelManager(Config.model_validate({"channels": {"telegram": telegram}}), bus, tmp_path)
        await manager.start_all()
        try:
            server.push_message("let me in", chat_id=-100999, user_id=777, username="555", chat_type="group")
            server.push_message("hi", chat_id=555, user_id=555, username="alice")
            msg = await asyncio.wait_for(bus.consume_inbound(), 30)
            assert msg.sender_id.split("|")[0] == "555" and msg.content == "hi"
            await asyncio.sleep(0.3)
            assert bus.inbound.empty()
        finally:
            await manager.stop_all()
    finally:
        server.stop()


def test_write_file_on_a_full_disk_keeps_the_old_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.md").write_text("old notes\n")
    script = textwrap.dedent(
        f"""
        import asyncio, resource, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from nanobot.agent.tools.base import ToolContext, ToolError
        from nanobot.agent.tools.files import file_tools
        from nanobot.memory.store import MemoryStore
        from nanobot.timeutil import resolve_tz
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        ws = Path({str(ws)!r})
        tools = {{t.name: t for t in file_tools(ws, MemoryStore(ws, resolve_tz("UTC")), True, 10**6)}}
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            asyncio.run(tools["write_file"].execute(ToolContext(), path="notes.md", content="new " * 5000))
        except ToolError as exc:
            print("ERROR:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "ERROR: cannot write notes.md: File too large" in out.stdout, out.stderr
    assert (ws / "notes.md").read_text() == "old notes\n"
    assert not [p for p in ws.rglob("*") if p.name.endswith(".tmp")]  # no half-written temp file left
