"""Private files under the usual umask (022): NANOBOT_HOME and the workspace are 0700, everything
nanobot writes is 0600, and an installation from before is repaired when the agent starts."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from nanobot.config.paths import secure_installation
from nanobot.config.schema import MemorySearchConfig
from nanobot.config.templates import copy_templates
from nanobot.logs import setup_logging
from nanobot.memory.index import MemoryIndex
from nanobot.memory.store import MemoryStore
from nanobot.scheduler.cron_store import CronStore, jobs_path
from nanobot.service.state import GatewayLock, GatewayState
from nanobot.session.store import SessionStore
from tests.conftest import config_dict, run_cli
from tests.fakes.llm_server import FakeLLMServer, Reply


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)  # inherited by the subprocesses too
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _not_private(root: Path) -> list[str]:
    """Every folder below `root` that is not 0700 and every file that is not 0600 (links skipped)."""
    bad = []
    for path in [root, *root.rglob("*")]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            continue
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if stat.S_IMODE(st.st_mode) != want:
            bad.append(f"{path.relative_to(root)}: {oct(stat.S_IMODE(st.st_mode))}")
    return bad


def test_every_store_creates_private_files(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    assert copy_templates(ws)  # what `nanobot onboard` writes
    sessions = SessionStore(ws, fsync="never")
    session = sessions.get("telegram:42")
    sessions.append(session, {"role": "user", "content": "hi"})
    archived = sessions.archive(session, datetime(2026, 1, 2, 3, 4, 5))
    assert archived is not None
    sessions.mark_pending(archived, session.key)  # what /new leaves
    sessions.close()
    memory = MemoryStore(ws)
    memory.write_memory("# Memory\n- likes tea\n")
    memory.write_memory("# Memory\n- likes green tea\n")  # the first version goes to .backups/
    memory.append_history("[2026-01-02 03:04] talked about tea")
    memory.append_daily("- tea")
    assert memory.backups()
    index = MemoryIndex(ws, MemorySearchConfig())
    asyncio.run(index.sync())
    wal = [p.name for p in (ws / "memory").glob(".index.sqlite*")]
    assert ".index.sqlite-wal" in wal and ".index.sqlite-shm" in wal
    CronStore(jobs_path(ws)).mutate(lambda jobs: None)
    lock = GatewayLock(ws)
    lock.acquire()
    GatewayState(ws).write()
    setup_logging("INFO", str(tmp_path / "logs" / "nanobot.log"))
    from loguru import logger

    logger.info("a line for the log file")
    logger.complete()
    try:
        assert _not_private(tmp_path) == []
    finally:
        index.close()
        lock.release()
        setup_logging("WARNING")


def test_agent_start_repairs_an_older_installation(home: Path, fake_llm: FakeLLMServer) -> None:
    """One `nanobot agent` turn on an installation made before files were private: afterwards
    everything, old and new (the turn's session, the index), is private."""
    ws = home / "workspace"
    for folder in ("sessions/archive", "memory/.backups", "cron", "media"):
        (ws / folder).mkdir(parents=True)
    old_files = {
        home / "config.json": json.dumps(config_dict(fake_llm.url)),
        ws / "sessions" / "telegram_1.jsonl": '{"role": "user", "content": "private"}\n',
        ws / "sessions" / "archive" / "telegram_1-20250101T000000.jsonl": "{}\n",
        ws / "memory" / "MEMORY.md": "# Memory\n",
        ws / "memory" / ".backups" / "MEMORY-1.md": "# Old\n",
        ws / "memory" / ".index.sqlite": "",
        ws / "cron" / "jobs.json": '{"version": 1, "jobs": []}\n',
    }
    for path, text in old_files.items():
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)
    for folder in [home, *[p for p in home.rglob("*") if p.is_dir()]]:
        folder.chmod(0o755)
    outside = home.parent / "shared.txt"  # reached only through a link: never changed
    outside.write_text("not nanobot's")
    outside.chmod(0o644)
    (ws / "memory" / "link.md").symlink_to(outside)
    fake_llm.push(Reply(content="ok"))
    result = run_cli("agent", "-m", "hi", home=home)
    assert result.returncode == 0, result.stderr
    assert (ws / "sessions" / "cli_direct.jsonl").is_file()
    assert _not_private(home) == []
    assert _mode(outside) == 0o644


def test_secure_installation_leaves_the_users_own_workspace_files(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "projects"
    (ws / "sessions").mkdir(parents=True)
    home.mkdir()
    script = ws / "build.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    (ws / "sessions" / "a.jsonl").write_text("{}\n")
    (ws / "sessions" / "a.jsonl").chmod(0o644)
    ws.chmod(0o755)
    assert secure_installation(ws, home) >= 2
    assert _mode(ws) == 0o700 and _mode(ws / "sessions" / "a.jsonl") == 0o600
    assert _mode(script) == 0o755  # hidden by the private workspace folder, otherwise the user's
    assert secure_installation(ws, home) == 0


def test_what_a_command_writes_and_the_folders_exec_protects_are_private(home: Path, fake_llm: FakeLLMServer) -> None:
    """Under a service's umask 022 exec created memory/.backups 0755 (doctor then failed its own
    check) and the command's files 0644: readable by every user of the machine."""
    (home / "config.json").write_text(json.dumps(config_dict(fake_llm.url)))
    command = {"name": "exec", "arguments": json.dumps({"command": "mkdir out && echo secret > out/f.txt"})}
    fake_llm.push(Reply(content=None, tool_calls=[command]), Reply(content="done"))
    result = run_cli("agent", "-m", "write a file", home=home)
    assert result.returncode == 0, result.stderr
    ws = home / "workspace"
    assert (ws / "out" / "f.txt").read_text() == "secret\n", fake_llm.requests[-1]["messages"][-1]
    assert (ws / "memory" / ".backups").is_dir()
    assert _not_private(home) == []
