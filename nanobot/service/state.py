"""Gateway lifecycle on disk: one gateway per workspace (a lock file) and its live state (a JSON file).

`<workspace>/.gateway.lock` is held with `fcntl.flock` for the gateway's whole life and holds its pid;
the kernel drops the lock when the process dies, so a crash never leaves a stale lock behind.
`<workspace>/.gateway.json` is rewritten atomically by the running gateway on every watchdog beat:
`nanobot status` and `nanobot health` read it without talking to the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.config.paths import GATEWAY_LOCK_FILE, GATEWAY_STATE_FILE
from nanobot.errors import UserError
from nanobot.service.config_watch import config_digest
from nanobot.util.fs import atomic_write, ensure_private_dir, open_private, try_flock, unwritable_reason

LOCK_FILE_NAME = GATEWAY_LOCK_FILE
STATE_FILE_NAME = GATEWAY_STATE_FILE
STATE_FORMAT = 1
# `nanobot health` calls a watchdog stale after this many missed beats (Docker and systemd use it).
WATCHDOG_STALE_FACTOR = 3.0
# `status`/`health` probe the lock for microseconds; a starting gateway retries this long before it
# concludes that an unnamed holder is a real gateway.
ACQUIRE_RETRY_S = 0.5
ACQUIRE_RETRY_STEP_S = 0.02
MAX_LOCKS_KEPT_ELSEWHERE = 8  # lock files moved away with their workspace, still held


class GatewayAlreadyRunning(UserError):
    """Another process holds the workspace's gateway lock."""

    def __init__(self, workspace: Path, pid: int | None) -> None:
        self.workspace = workspace
        self.pid = pid
        who = f"pid {pid}" if pid else "a process whose pid is not recorded"
        super().__init__(
            f"another gateway ({who}) is already running on workspace {workspace}; "
            "stop it first, or give this one another workspace"
        )


def lock_path(workspace: Path) -> Path:
    return Path(workspace) / LOCK_FILE_NAME


def state_path(workspace: Path) -> Path:
    return Path(workspace) / STATE_FILE_NAME


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (even one we may not signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class GatewayLock:
    """An exclusive, non-blocking flock on `<workspace>/.gateway.lock` that records the holder's pid."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.path = lock_path(self.workspace)
        self._fd: int | None = None
        self._elsewhere: list[int] = []  # earlier lock files, moved away with their folder, still held

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise GatewayAlreadyRunning naming the holder's pid."""
        if self._fd is not None:
            return
        # Never unlink the lock file: a waiter could lock the old inode while we lock a new one.
        try:
            fd = open_private(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:  # a read-only or full disk: exit 1, so systemd tries again later
            raise UserError(
                f"cannot open the gateway lock {self.path}: {exc.strerror or exc} "
                "(is the workspace read-only or its disk full?)"
            ) from None
        deadline = time.monotonic() + ACQUIRE_RETRY_S
        while True:
            try:
                if try_flock(fd):
                    break
            except OSError:
                os.close(fd)
                raise
            holder = _read_pid(self.path)
            if holder is not None or time.monotonic() >= deadline:
                os.close(fd)
                raise GatewayAlreadyRunning(self.workspace, holder)
            time.sleep(ACQUIRE_RETRY_STEP_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        logger.debug("gateway lock {} taken by pid {}", self.path, os.getpid())

    def keep(self) -> None:
        """Take the lock again when its file is gone or replaced (the workspace deleted and made
        anew while running): `health` then said no gateway ran, and a second one started beside
        this one, both polling the same bot. A lock file that still exists elsewhere (the workspace
        moved) stays held too. Raises GatewayAlreadyRunning when another took it."""
        if self._fd is None:
            return
        ours = os.fstat(self._fd)
        try:
            on_disk = os.stat(self.path)
            if (on_disk.st_dev, on_disk.st_ino) == (ours.st_dev, ours.st_ino):
                return
        except FileNotFoundError:
            pass
        if not self.workspace.exists():  # moved by copy and delete, or deleted: this one cannot tell
            logger.error(
                "the workspace {} is gone while the gateway runs (moved or deleted?); its lock is made "
                "anew there. Stop the gateway before moving a workspace, then start it on the new place",
                self.workspace,
            )
        else:
            logger.warning("gateway lock {} was removed while running; taking it again", self.path)
        fd, self._fd = self._fd, None
        try:
            ensure_private_dir(self.path.parent)
            self.acquire()
        except BaseException:
            self._fd = fd  # still held on the old file: the next beat tries again
            raise
        if ours.st_nlink > 0 and len(self._elsewhere) < MAX_LOCKS_KEPT_ELSEWHERE:
            # the old lock file still exists, elsewhere: the workspace was moved or renamed (or
            # copied with hard links). Its lock is kept too: released, a second gateway started on
            # the moved workspace beside this one, both polling the same bot.
            self._elsewhere.append(fd)
            logger.warning(
                "the gateway lock of {} still exists elsewhere (the workspace moved?); keeping it locked "
                "as well: restart the gateway to run on the new place",
                self.workspace,
            )
        else:
            os.close(fd)

    def release(self) -> None:
        """Drop the lock (idempotent). The pid is cleared first so readers never see a stale one."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        for moved in self._elsewhere:
            with contextlib.suppress(OSError):
                os.ftruncate(moved, 0)
            with contextlib.suppress(OSError):
                os.close(moved)
        self._elsewhere.clear()
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> GatewayLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(workspace: Path) -> int | None:
    """The pid recorded by the process holding the lock; None when nobody holds it.

    Returns 0 when the lock is held but the pid is not readable yet (the holder is mid-start).
    """
    path = lock_path(workspace)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None  # no lock file (or no workspace folder): no gateway there
    try:
        if not try_flock(fd, shared=True):
            return _read_pid(path) or 0
    finally:
        os.close(fd)  # closing drops our probe lock if we got it
    return None


def gateway_running(workspace: Path) -> bool:
    """True when a process holds the workspace lock and its recorded pid (if any yet) is alive."""
    pid = lock_holder(workspace)
    if pid is None:
        return False
    # A forked child that inherited the lock can outlive the gateway: trust the pid, not the flock.
    return pid == 0 or pid_alive(pid)


def read_state(workspace: Path) -> dict[str, Any] | None:
    """The last state the gateway wrote, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads(state_path(workspace).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("unreadable gateway state {}: {}", state_path(workspace), exc)
        return None
    return data if isinstance(data, dict) else None


def _age_s(state: dict[str, Any], key: str, now: float) -> float | None:
    value = state.get(key)
    return max(0.0, now - float(value)) if isinstance(value, int | float) else None


def gateway_summary(workspace: Path, now: float | None = None) -> dict[str, Any]:
    """What `nanobot status` shows: running, pid, uptime_s, watchdog_age_s, channels, pending_tasks.

    State from a previous, dead gateway is ignored (its pid differs from the lock holder's).
    """
    now = time.time() if now is None else now
    running = gateway_running(workspace)
    pid = lock_holder(workspace) if running else None
    state = read_state(workspace) if running else None
    if state is not None and pid and state.get("pid") != pid:
        state = None
    state = state or {}
    return {
        "running": running,
        "pid": pid or None,
        "uptime_s": _age_s(state, "started_at", now),
        "watchdog_age_s": _age_s(state, "watchdog_at", now),
        "channels": dict(state.get("channels") or {}),
        "pending_tasks": int(state.get("pending_tasks") or 0),
        "watchdog_interval_s": _positive_or_none(state.get("watchdog_interval_s")),
        "config": state.get("config") if isinstance(state.get("config"), dict) else {},
    }


def _positive_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def stale_after_s(summary: dict[str, Any], fallback_interval_s: float) -> float:
    """How old a beat may be before the gateway counts as hung: by the interval the running gateway
    beats at (its state says), else by the caller's configured one."""
    return (summary.get("watchdog_interval_s") or fallback_interval_s) * WATCHDOG_STALE_FACTOR


def is_healthy(workspace: Path, max_age_s: float, now: float | None = None) -> tuple[bool, str]:
    """(healthy, one-line reason): a gateway holds this workspace, beat within `max_age_s` (or, when
    its state names its own interval, within WATCHDOG_STALE_FACTOR of those), and at least one of its
    enabled channels has not failed (a gateway with no channel at all is healthy)."""
    now = time.time() if now is None else now
    summary = gateway_summary(workspace, now)
    if summary.get("watchdog_interval_s"):
        max_age_s = stale_after_s(summary, 0.0)
    if not summary["running"]:
        return False, f"no gateway is running on workspace {workspace}"
    pid, age = summary["pid"], summary["watchdog_age_s"]
    if age is None:
        return False, f"gateway pid {pid} has not written its state yet ({state_path(workspace).name})"
    if age > max_age_s:
        why = unwritable_reason(workspace)
        return False, f"gateway pid {pid} watchdog stale: last beat {age:.0f}s ago (limit {max_age_s:.0f}s)" + (
            f"; {why}" if why else ""
        )
    channels = summary["channels"]
    failing = sorted(name for name, ch in channels.items() if (ch or {}).get("error"))
    if channels and all((ch or {}).get("state") == "failed" for ch in channels.values()):
        # Alive but deaf: nobody can reach it, so a restart (or the owner) must act.
        return False, f"gateway pid {pid} unhealthy: every enabled channel failed ({', '.join(failing)})"
    note = f"; channels with errors: {', '.join(failing)}" if failing else ""
    uptime = summary["uptime_s"] or 0.0
    return True, f"gateway pid {pid} healthy: up {uptime:.0f}s, last beat {age:.1f}s ago{note}"


class GatewayState:
    """The running gateway's view of itself, written atomically to `<workspace>/.gateway.json`."""

    def __init__(self, workspace: Path, clock: Callable[[], float] = time.time) -> None:
        self.workspace = Path(workspace)
        self.path = state_path(self.workspace)
        self._clock = clock
        self.pid = os.getpid()
        self.started_at = clock()
        self.watchdog_at = self.started_at
        self.channels: dict[str, dict[str, str | None]] = {}
        self.pending_tasks = 0
        self.interval_s: float | None = None  # the watchdog's beat interval, set by run_watchdog
        self.config_path: str | None = None  # the config.json it loaded, and that file's digest then
        self.config_target: str | None = None  # that path resolved (links followed) at start
        self.config_digest: str | None = None

    def loaded_config(self, path: Path, digest: str | None = None) -> None:
        """Record the config file the gateway started with (`digest`: of what it read; default,
        of the file now): status and doctor then say when the file changed since (a rotated key or
        token is used only after a restart). The path as given, not resolved: a config.json link
        pointed at another file is a change (its target is kept too: the same file named through
        another link, or from a folder reached through one, is the same config)."""
        self.config_path = os.path.abspath(path)
        self.config_target = str(Path(path).resolve())
        self.config_digest = digest if digest is not None else config_digest(Path(path))

    def set_channel(self, name: str, state: str, error: str | None = None) -> None:
        """Record a channel's state (e.g. starting, running, stopped, failed) and its last error."""
        self.channels[name] = {"state": state, "error": error}

    def set_pending_tasks(self, count: int) -> None:
        self.pending_tasks = max(0, int(count))

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": STATE_FORMAT,
            "pid": self.pid,
            "started_at": self.started_at,
            "watchdog_at": self.watchdog_at,
            "channels": {name: dict(info) for name, info in sorted(self.channels.items())},
            "pending_tasks": self.pending_tasks,
        }
        if self.interval_s is not None:  # readers judge staleness by it, not by their own config
            data["watchdog_interval_s"] = self.interval_s
        if self.config_digest is not None:
            data["config"] = {"path": self.config_path, "target": self.config_target, "sha256": self.config_digest}
        return data

    def write(self) -> None:
        """Write the current state (temp file + os.replace: readers never see half a file)."""
        # no fsync: the state is rewritten on every watchdog beat and describes only this run
        atomic_write(self.path, json.dumps(self.as_dict(), indent=2) + "\n", fsync=False)

    def beat(self) -> None:
        """A watchdog beat: refresh watchdog_at and write."""
        self.watchdog_at = self._clock()
        self.write()

    def clear(self) -> None:
        """Remove the state file on a clean shutdown (only if it is still ours)."""
        current = read_state(self.workspace)
        if current is not None and current.get("pid") != self.pid:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


CHANNEL_POLL_S = 1.0  # how often channel states are looked at between watchdog beats


async def run_watchdog(
    state: GatewayState,
    interval_s: float,
    refresh: Callable[[GatewayState], None] | None = None,
    notify: Callable[[str], bool] | None = None,
) -> None:
    """Beat every `interval_s` until cancelled: refresh the state, write it, ping systemd.

    `refresh` fills in channels and pending tasks; `notify` defaults to sd_notify (a no-op
    outside systemd). A failing refresh or write is logged (once until it changes) and the loop
    goes on: a stuck disk shows up as a stale state file to `nanobot health`, while systemd is
    still pinged — the event loop runs and the gateway answers, and a restart onto the same full
    disk would only stop it.
    """
    if notify is None:
        from nanobot.service.systemd import sd_notify as notify
    state.interval_s = interval_s
    written: Any = None  # the channels as last written
    next_beat = 0.0
    failing = ""  # the beat failure last logged
    while True:
        now = time.monotonic()
        beat = now >= next_beat
        if beat:
            notify("WATCHDOG=1")
            next_beat = now + interval_s
        try:
            if refresh is not None:
                refresh(state)
            if beat:
                state.beat()
            elif state.channels != written:
                # a channel failed (or came back) between beats: `health` reads it now, not up to
                # a whole interval later ("healthy" for 10 s after the only channel failed)
                state.write()
            written = {name: dict(info) for name, info in state.channels.items()}
            if failing:
                logger.info("gateway watchdog beat written again")
                failing = ""
        except Exception as exc:  # the loop must survive any one bad beat
            if str(exc) != failing:
                logger.warning("gateway watchdog beat failed: {}", exc)
                failing = str(exc)
        await asyncio.sleep(min(CHANNEL_POLL_S, interval_s))
