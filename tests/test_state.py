"""GatewayLock (one gateway per workspace), GatewayState (live state file) and health."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanobot.service.state import (
    LOCK_FILE_NAME,
    STATE_FILE_NAME,
    GatewayAlreadyRunning,
    GatewayLock,
    GatewayState,
    gateway_running,
    gateway_summary,
    is_healthy,
    lock_holder,
    pid_alive,
    read_state,
    run_watchdog,
)

# A stand-in gateway process: takes the lock, writes one state beat, waits for a line on stdin.
FAKE_GATEWAY = """
import sys
from pathlib import Path
from nanobot.service.state import GatewayAlreadyRunning, GatewayLock, GatewayState
ws = Path(sys.argv[1])
try:
    GatewayLock(ws).acquire()
except GatewayAlreadyRunning as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
state = GatewayState(ws)
state.set_channel("telegram", "running")
state.set_pending_tasks(2)
state.beat()
print("ready", flush=True)
sys.stdin.readline()
"""


def start_fake_gateway(workspace: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_GATEWAY, str(workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
    return proc


@pytest.fixture
def gateway_proc(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = start_fake_gateway(tmp_path / "ws")
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    return proc.pid


def test_lock_records_pid_and_release_clears_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    lock = GatewayLock(ws)
    lock.acquire()
    assert lock.held
    assert (ws / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
    assert lock_holder(ws) == os.getpid()
    assert gateway_running(ws)
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
    assert (ws / LOCK_FILE_NAME).read_text() == ""
    assert lock_holder(ws) is None
    assert not gateway_running(ws)


def test_a_lock_file_removed_while_running_is_taken_again(tmp_path: Path) -> None:
    """The workspace deleted (and made anew) under a running gateway took its lock file with it:
    `health` said no gateway ran, and a second one started beside it, both polling the same bot."""
    import shutil

    ws = tmp_path / "ws"
    ws.mkdir()
    lock = GatewayLock(ws)
    lock.acquire()
    try:
        shutil.rmtree(ws)
        lock.keep()
        assert (ws / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(GatewayAlreadyRunning):
            GatewayLock(ws).acquire()
        lock.keep()  # still ours: nothing to do
        # the path unusable for a while (a folder in its place): the lock is kept, and taken again
        # once it can be (one failed attempt dropped it for good)
        (ws / LOCK_FILE_NAME).unlink()
        (ws / LOCK_FILE_NAME).mkdir()
        with pytest.raises(Exception):  # noqa: B017 - whatever the open of a folder raises
            lock.keep()
        assert lock.held
        (ws / LOCK_FILE_NAME).rmdir()
        lock.keep()
        assert (ws / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
    finally:
        lock.release()


def test_a_workspace_moved_while_running_stays_locked(tmp_path: Path) -> None:
    """The workspace moved (or renamed) under a running gateway: it took a new lock at the old path
    and let the moved one go, so a second gateway started there beside it, both polling one bot.
    Stopping the gateway instead (a first fix) also stopped it for a hard-linked copy of the lock or
    a workspace moved aside and restored, exit 0, which systemd does not restart: a review catch."""
    ws, moved = tmp_path / "ws", tmp_path / "ws-new"
    ws.mkdir()
    lock = GatewayLock(ws)
    lock.acquire()
    try:
        ws.rename(moved)
        lock.keep()  # the old path is locked anew: status there says it runs, as it does
        assert (ws / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
        with pytest.raises(GatewayAlreadyRunning):  # and the moved workspace stays locked by it
            GatewayLock(moved).acquire()
        # a copy made with hard links, then the lock file removed: taken again, nothing stops
        os.link(ws / LOCK_FILE_NAME, tmp_path / "snapshot.lock")
        (ws / LOCK_FILE_NAME).unlink()
        lock.keep()
        assert lock.held and (ws / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
    finally:
        lock.release()
    with GatewayLock(moved):  # released with it
        assert (moved / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())


def test_second_lock_in_same_process_is_refused_with_pid(tmp_path: Path) -> None:
    with GatewayLock(tmp_path) as first:
        assert first.held
        with pytest.raises(GatewayAlreadyRunning) as info:
            GatewayLock(tmp_path).acquire()
        assert info.value.pid == os.getpid()
        assert f"pid {os.getpid()}" in str(info.value)
        assert str(tmp_path) in str(info.value)
    # Released by the context manager: a new gateway may start.
    with GatewayLock(tmp_path):
        pass


def test_second_gateway_process_is_refused(tmp_path: Path, gateway_proc: subprocess.Popen[str]) -> None:
    ws = tmp_path / "ws"
    with pytest.raises(GatewayAlreadyRunning) as info:
        GatewayLock(ws).acquire()
    assert info.value.pid == gateway_proc.pid
    # The same through a second real process: it exits 1 with the clear message.
    second = subprocess.run(
        [sys.executable, "-c", FAKE_GATEWAY, str(ws)], input="", capture_output=True, text=True, timeout=30
    )
    assert second.returncode == 1
    assert f"another gateway (pid {gateway_proc.pid}) is already running on workspace {ws}" in second.stderr


def test_crashed_gateway_leaves_no_stale_lock(tmp_path: Path, gateway_proc: subprocess.Popen[str]) -> None:
    ws = tmp_path / "ws"
    assert gateway_running(ws)
    gateway_proc.kill()
    gateway_proc.wait(timeout=10)
    # The pid is still written in the file, but nobody holds the flock: not running, and a new
    # gateway starts without any manual clean-up.
    assert (ws / LOCK_FILE_NAME).read_text().strip() == str(gateway_proc.pid)
    assert not gateway_running(ws)
    assert gateway_summary(ws)["running"] is False
    with GatewayLock(ws):
        assert lock_holder(ws) == os.getpid()


def test_held_lock_with_dead_pid_is_not_running(tmp_path: Path) -> None:
    with GatewayLock(tmp_path):
        # Like a forked child that inherited the lock after the gateway died.
        (tmp_path / LOCK_FILE_NAME).write_text(f"{dead_pid()}\n")
        assert lock_holder(tmp_path) is not None
        assert not gateway_running(tmp_path)


def test_acquire_waits_out_a_brief_probe(tmp_path: Path) -> None:
    # `nanobot health` probes with a shared lock for a moment; a gateway starting meanwhile waits.
    (tmp_path / LOCK_FILE_NAME).write_text("")
    fd = os.open(tmp_path / LOCK_FILE_NAME, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    timer = threading.Timer(0.1, os.close, args=(fd,))
    timer.start()
    try:
        with GatewayLock(tmp_path) as lock:
            assert lock.held
    finally:
        timer.join()


def test_a_lock_error_is_not_taken_for_another_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workspace on a file system without locks (NFS without lockd: flock fails with ENOLCK): the
    gateway must say so, not refuse to start saying "another gateway is already running" (there is
    none)."""
    import errno

    real_flock = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if op & fcntl.LOCK_NB:
            raise OSError(errno.ENOLCK, "No locks available")
        real_flock(fd, op)

    (tmp_path / LOCK_FILE_NAME).write_text("")
    monkeypatch.setattr(fcntl, "flock", flock)
    with pytest.raises(OSError) as info:
        GatewayLock(tmp_path).acquire()
    assert info.value.errno == errno.ENOLCK  # not GatewayAlreadyRunning after waiting for a holder


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid())


def test_state_written_atomically_and_read_back(tmp_path: Path) -> None:
    now = [1000.0]
    state = GatewayState(tmp_path / "ws", clock=lambda: now[0])
    state.set_channel("telegram", "running")
    state.set_channel("discord", "failed", "401 Unauthorized")
    state.set_pending_tasks(3)
    state.write()
    now[0] = 1012.5
    state.beat()
    data = read_state(tmp_path / "ws")
    assert data == {
        "format": 1,
        "pid": os.getpid(),
        "started_at": 1000.0,
        "watchdog_at": 1012.5,
        "channels": {
            "discord": {"state": "failed", "error": "401 Unauthorized"},
            "telegram": {"state": "running", "error": None},
        },
        "pending_tasks": 3,
    }
    assert [p.name for p in (tmp_path / "ws").iterdir()] == [STATE_FILE_NAME]  # no temp file left


def test_read_state_missing_or_corrupt(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    (tmp_path / STATE_FILE_NAME).write_text("{not json")
    assert read_state(tmp_path) is None
    (tmp_path / STATE_FILE_NAME).write_text("[1, 2]")
    assert read_state(tmp_path) is None


def test_clear_removes_only_our_state(tmp_path: Path) -> None:
    state = GatewayState(tmp_path)
    state.write()
    state.clear()
    assert not (tmp_path / STATE_FILE_NAME).exists()
    state.clear()  # nothing to remove: fine
    (tmp_path / STATE_FILE_NAME).write_text(json.dumps({"pid": os.getpid() + 1}))
    state.clear()
    assert (tmp_path / STATE_FILE_NAME).exists()


def test_health_and_summary_of_a_running_gateway(tmp_path: Path, gateway_proc: subprocess.Popen[str]) -> None:
    ws = tmp_path / "ws"
    state = read_state(ws)
    assert state is not None
    summary = gateway_summary(ws, now=state["watchdog_at"] + 4)
    assert summary["running"] is True
    assert summary["pid"] == gateway_proc.pid
    assert summary["watchdog_age_s"] == pytest.approx(4.0)
    assert summary["uptime_s"] == pytest.approx(4.0, abs=0.5)
    assert summary["channels"] == {"telegram": {"state": "running", "error": None}}
    assert summary["pending_tasks"] == 2

    healthy, reason = is_healthy(ws, max_age_s=30, now=state["watchdog_at"] + 4)
    assert healthy, reason
    assert f"gateway pid {gateway_proc.pid} healthy" in reason

    healthy, reason = is_healthy(ws, max_age_s=30, now=state["watchdog_at"] + 31)
    assert not healthy
    assert "watchdog stale: last beat 31s ago (limit 30s)" in reason


def test_health_without_gateway_or_state(tmp_path: Path) -> None:
    healthy, reason = is_healthy(tmp_path, max_age_s=30)
    assert not healthy and "no gateway is running" in reason
    with GatewayLock(tmp_path):
        healthy, reason = is_healthy(tmp_path, max_age_s=30)
        assert not healthy and "has not written its state yet" in reason
        # A state file left by a previous gateway (another pid) is not this gateway's beat.
        (tmp_path / STATE_FILE_NAME).write_text(json.dumps({"pid": dead_pid(), "watchdog_at": time.time()}))
        healthy, reason = is_healthy(tmp_path, max_age_s=30)
        assert not healthy and "has not written its state yet" in reason
        assert gateway_summary(tmp_path)["channels"] == {}


def test_health_names_failing_channels(tmp_path: Path) -> None:
    with GatewayLock(tmp_path):
        state = GatewayState(tmp_path)
        state.set_channel("discord", "failed", "bad token")
        state.set_channel("telegram", "retrying", "502 Bad Gateway")
        state.beat()
        healthy, reason = is_healthy(tmp_path, max_age_s=30)
        assert healthy  # telegram may still recover
        assert reason.endswith("channels with errors: discord, telegram")
        state.set_channel("telegram", "failed", "bad token")
        state.beat()
        healthy, reason = is_healthy(tmp_path, max_age_s=30)
        assert not healthy
        assert reason.endswith("unhealthy: every enabled channel failed (discord, telegram)")


def test_health_of_a_gateway_without_channels(tmp_path: Path) -> None:
    with GatewayLock(tmp_path):
        GatewayState(tmp_path).beat()  # cron and heartbeat only: nothing to fail
        assert is_healthy(tmp_path, max_age_s=30)[0]


async def test_run_watchdog_beats_refreshes_and_notifies(tmp_path: Path) -> None:
    state = GatewayState(tmp_path)
    notes: list[str] = []
    calls = {"n": 0}

    def refresh(st: GatewayState) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("one bad beat")  # logged; the loop goes on
        st.set_pending_tasks(calls["n"])

    def notify(message: str) -> bool:
        notes.append(message)
        return True

    task = asyncio.create_task(run_watchdog(state, 0.01, refresh=refresh, notify=notify))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if calls["n"] >= 4:
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls["n"] >= 4
    assert notes and set(notes) == {"WATCHDOG=1"}
    data = read_state(tmp_path)
    assert data is not None and data["pending_tasks"] >= 3


async def test_a_channel_that_fails_between_beats_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state was written at each beat only: `health` said healthy for up to a whole interval
    (10 s) after the only channel failed."""
    from nanobot.service import state as state_mod

    monkeypatch.setattr(state_mod, "CHANNEL_POLL_S", 0.02)
    state = GatewayState(tmp_path)
    channel = {"state": "running"}

    def refresh(st: GatewayState) -> None:
        st.set_channel("telegram", channel["state"])

    watchdog = asyncio.create_task(run_watchdog(state, 60.0, refresh=refresh, notify=lambda _m: True))
    try:
        await asyncio.sleep(0.1)
        assert read_state(tmp_path)["channels"]["telegram"]["state"] == "running"
        channel["state"] = "failed"
        await asyncio.sleep(0.2)  # far less than the 60 s beat; what `health` reads
        assert read_state(tmp_path)["channels"]["telegram"]["state"] == "failed"
    finally:
        watchdog.cancel()


def test_status_names_a_gateway_that_stopped_beating(tmp_path: Path, gateway_proc: subprocess.Popen[str]) -> None:
    """A hung (or SIGSTOP-ed) gateway showed as "running", its channel "running", its uptime growing;
    health and doctor already said its watchdog was stale."""
    from nanobot.cli.status import _gateway_lines

    ws = tmp_path / "ws"
    config_path = tmp_path / "config.json"
    assert _gateway_lines(ws, watchdog_interval_s=10, config_path=config_path)[0].startswith("Gateway: running")
    state = json.loads((ws / STATE_FILE_NAME).read_text())
    state["watchdog_at"] -= 120  # its last beat two minutes ago
    (ws / STATE_FILE_NAME).write_text(json.dumps(state))
    [line] = _gateway_lines(ws, watchdog_interval_s=10, config_path=config_path)
    assert line.startswith(f"Gateway: not responding (pid {gateway_proc.pid}, last beat 12"), line


def test_a_gateway_that_cannot_write_its_state_is_said_to_be_on_a_full_or_read_only_disk(
    tmp_path: Path, gateway_proc: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk the gateway still answered but could not write its state file: status and
    health said "not responding", and the owner looked for a hung process."""
    import shutil as shutil_mod

    from nanobot.cli.status import _gateway_lines

    ws = tmp_path / "ws"
    state = json.loads((ws / STATE_FILE_NAME).read_text())
    state["watchdog_at"] -= 120
    (ws / STATE_FILE_NAME).write_text(json.dumps(state))
    usage = shutil_mod.disk_usage(ws)
    monkeypatch.setattr(shutil_mod, "disk_usage", lambda _p: usage._replace(free=4096))
    [line] = _gateway_lines(ws, watchdog_interval_s=10, config_path=tmp_path / "config.json")
    assert line.startswith("Gateway: not responding") and line.endswith(f"the disk of {ws} is full"), line
    healthy, reason = is_healthy(ws, max_age_s=30)
    assert not healthy and reason.endswith(f"the disk of {ws} is full"), reason


async def test_staleness_is_judged_by_the_running_gateways_own_interval(
    tmp_path: Path, gateway_proc: subprocess.Popen[str]
) -> None:
    """A gateway beating every 8 s (set by an environment variable in its unit) was "stale" to a
    `nanobot health` reading a config that says 1 s: it flapped between healthy and unhealthy."""
    ws = tmp_path / "ws"
    beats = GatewayState(tmp_path / "other")
    watchdog = asyncio.create_task(run_watchdog(beats, 0.05, notify=lambda _msg: True))
    await asyncio.sleep(0.2)
    watchdog.cancel()
    assert read_state(tmp_path / "other")["watchdog_interval_s"] == 0.05  # the gateway says its interval

    state = json.loads((ws / STATE_FILE_NAME).read_text())
    state["watchdog_interval_s"] = 8.0
    (ws / STATE_FILE_NAME).write_text(json.dumps(state))
    healthy, reason = is_healthy(ws, max_age_s=3, now=state["watchdog_at"] + 5)
    assert healthy, reason
    healthy, reason = is_healthy(ws, max_age_s=3, now=state["watchdog_at"] + 30)
    assert not healthy and "(limit 24s)" in reason


async def test_a_full_disk_keeps_the_systemd_watchdog_fed_and_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state file that could not be written stopped the WATCHDOG=1 pings, so systemd killed a
    gateway that still answered (and its restart failed on the same full disk), and the failure
    was logged every second."""
    import errno

    from loguru import logger

    state = GatewayState(tmp_path)

    def full(*_args, **_kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(GatewayState, "beat", full)
    monkeypatch.setattr(GatewayState, "write", full)
    monkeypatch.setattr("nanobot.service.state.CHANNEL_POLL_S", 0.01)
    notes: list[str] = []
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    task = asyncio.create_task(run_watchdog(state, 0.02, notify=lambda m: notes.append(m) or True))
    try:
        for _ in range(300):
            await asyncio.sleep(0.01)
            if len(notes) >= 4:
                break
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        logger.remove(sink)
    assert len(notes) >= 4 and set(notes) == {"WATCHDOG=1"}
    assert len([w for w in warnings if "watchdog beat failed" in w]) == 1
