"""Doctor checks that stay on this machine: config, files, disk, gateway, service unit, memory index,
exec sandbox. None of them uses the network."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable
from pathlib import Path

from nanobot.config.loader import load_config, read_config_dict
from nanobot.config.paths import (
    CRON_DIR,
    MEMORY_DIR,
    SESSIONS_DIR,
    SKILLS_DIR,
    WORKSPACE_FOLDERS,
    ensure_workspace,
    index_path,
    index_size_bytes,
    moved_workspace_hint,
    nanobot_home,
    secure_installation,
    workspace_problem,
)
from nanobot.config.schema import Config
from nanobot.config.templates import copy_templates, missing_templates
from nanobot.doctor import Check
from nanobot.errors import ConfigError

DISK_FAIL_BYTES = 100 * 1024**2  # sessions and memory cannot be written safely below this
DISK_WARN_BYTES = 1024**3
GROUP_OTHER_BITS = 0o077


def check_config(path: Path) -> tuple[Check, Config | None]:
    """Does the config load (valid values, no unknown keys)? Returns the config when it does."""
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        return Check("config", "fail", f"{exc} (fix the key named, then run nanobot doctor again)"), None
    if not path.exists():
        return Check("config", "warn", f"{path} does not exist: defaults in use (run nanobot onboard)"), cfg
    kept = _earlier_defaults(read_config_dict(path))
    if kept:
        return Check(
            "config",
            "warn",
            f"{path} is valid, but keeps defaults of an earlier release (its onboard "
            "wrote every key): " + "; ".join(kept) + ". Remove those keys to use today's defaults, "
            "or keep them if you chose them",
        ), cfg
    return Check("config", "ok", f"{path} is valid"), cfg


#: defaults that changed since the first release (config.example.json's history): an onboard of then
#: wrote them into config.json, where they stay unless removed
EARLIER_DEFAULTS: dict[tuple[str, ...], tuple[object, object]] = {
    ("memory", "search", "embeddingProvider"): ("none", "auto"),
    ("memory", "search", "includeSessions"): (False, True),
    ("memory", "search", "rrfK"): (60, 10),
    ("agents", "defaults", "maxConcurrentTurns"): (8, 16),
}


def _earlier_defaults(data: dict) -> list[str]:
    """The keys of the raw config.json that hold an earlier release's default, described."""
    found = []
    for keys, (earlier, now) in EARLIER_DEFAULTS.items():
        node: object = data
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node == earlier and type(node) is type(earlier):  # 1 == True: the type decides
            found.append(f"{'.'.join(keys)} = {json.dumps(earlier)} (now {json.dumps(now)})")
    return found


def check_heartbeat_target(cfg: Config) -> Check | None:
    """A heartbeat target on a channel that is not enabled: the gateway does none of the tasks."""
    hb = cfg.gateway.heartbeat
    channel = hb.target.partition(":")[0].strip()
    if not (hb.enabled and hb.target) or getattr(getattr(cfg.channels, channel, None), "enabled", False):
        return None
    return Check(
        "heartbeat",
        "warn",
        f"gateway.heartbeat.target {hb.target} is on channel {channel!r}, which is not enabled: the "
        "heartbeat's tasks are not done (enable the channel, or fix the target)",
    )


def local_checks(cfg: Config, config_path: Path, *, fix: bool) -> list[Check]:
    workspace = cfg.workspace_path
    checks = [check_sandbox(cfg), _guarded("files", lambda: check_files(workspace, config_path, fix=fix))]
    if heartbeat := check_heartbeat_target(cfg):
        checks.append(heartbeat)
    if workspace_problem(workspace) or moved_workspace_hint(workspace):
        # nothing inside it can be checked (files says why), and --fix must not create it: an empty
        # workspace there would silence the hint at the next run
        return [*checks, check_service()]
    return [
        *checks,
        check_disk(workspace),
        check_gateway(cfg, config_path),
        check_service(),
        _guarded("memory index", lambda: check_index(cfg, fix=fix)),
        check_archives(cfg),
        check_jobs(cfg),
    ]


def _guarded(part: str, check: Callable[[], Check]) -> Check:
    """A check (and its --fix) whose file error is its own failed line: one `Error: [Errno 30]` line
    replaced the whole report on a read-only home, in the very case plain doctor pointed to --fix."""
    try:
        return check()
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return Check(part, "fail", f"could not check or repair it: {exc.strerror or exc}{where}")


def check_jobs(cfg: Config) -> Check:
    """The scheduled jobs' file can be read (a damaged or emptied one runs no reminder at all)."""
    from nanobot.scheduler.cron_store import CronStore, CronStoreError, jobs_path
    from nanobot.scheduler.schedules import schedule_problem
    from nanobot.timeutil import resolve_tz

    try:
        jobs = CronStore(jobs_path(cfg.workspace_path)).load()
    except CronStoreError as exc:
        return Check("cron jobs", "fail", str(exc))
    tz = resolve_tz(cfg.agents.defaults.timezone)
    unusable = [f"{job.id}: {problem}" for job in jobs if job.enabled and (problem := schedule_problem(job, tz))]
    if unusable:  # a hand-edited job that never runs (the gateway disables it at start)
        return Check("cron jobs", "fail", "unusable schedule: " + "; ".join(unusable) + " (fix it in jobs.json)")
    return Check("cron jobs", "ok", f"{len(jobs)} job(s), {sum(j.enabled for j in jobs)} enabled")


def check_archives(cfg: Config) -> Check:
    """Archived sessions whose consolidation is still pending or was given up (SessionStore's markers)."""
    from nanobot.session.markers import status_lines
    from nanobot.session.store import SessionStore

    summary = SessionStore(cfg.workspace_path).archive_markers()
    lines = status_lines(summary, cfg.memory.max_archive_retries, cfg.memory.archive_retry_backoff_s)
    if not lines:
        return Check("memory archives", "ok", "every archived session is consolidated")
    return Check(
        "memory archives",
        "warn",
        f"{len(lines)} archived session(s) not consolidated: " + "; ".join(line.strip() for line in lines),
    )


def _first_loose(folder: Path) -> Path | None:
    """The first path at or below `folder` that group or others may read (symlinks not followed)."""
    if not folder.is_dir() or folder.is_symlink():
        return None
    if _loose(folder):
        return folder
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in (*dirs, *files):
            path = Path(root) / name
            if not path.is_symlink() and _loose(path):
                return path
    return None


def _loose(path: Path) -> bool:
    try:
        return bool(stat.S_IMODE(path.stat().st_mode) & GROUP_OTHER_BITS)
    except OSError:
        return False


def check_files(workspace: Path, config_path: Path, *, fix: bool) -> Check:
    """Private permissions (home and workspace 0700, config 0600) and the workspace folders."""
    home = nanobot_home()
    unusable = workspace_problem(workspace)
    if unusable:
        return Check(
            "files",
            "fail",
            f"the workspace {workspace} cannot be used: {unusable} (agents.defaults.workspace)",
        )
    moved = moved_workspace_hint(workspace)
    if moved:  # --fix would only create an empty one beside it
        return Check("files", "fail", moved)
    # nanobot writes there every turn: a read-only mount or another user's folder fails every reply
    read_only = [
        str(p)
        for p in (home, workspace, *(workspace / name for name in (SESSIONS_DIR, MEMORY_DIR, CRON_DIR)))
        if p.is_dir() and not os.access(p, os.W_OK)
    ]
    if read_only:
        return Check(
            "files",
            "fail",
            "not writable: " + ", ".join(read_only) + " (a read-only mount, or owned by another user: "
            "nanobot saves conversations and memory there)",
        )
    loose = [p for p in (home, config_path, workspace) if p.exists() and _loose(p)]
    # and what nanobot owns inside the workspace (transcripts, memory): every file of it is 0600
    loose += [found for name in WORKSPACE_FOLDERS if name != SKILLS_DIR and (found := _first_loose(workspace / name))]
    # a file where a folder belongs: every search and reindex failed while doctor said "missing
    # folders, --fix repairs" (and --fix cannot: the file is the user's, not nanobot's to delete)
    blocked = [name for name in WORKSPACE_FOLDERS if os.path.lexists(workspace / name)
               and not (workspace / name).is_dir()]
    if blocked:
        return Check(
            "files",
            "fail",
            f"not folders in {workspace}: " + ", ".join(blocked) + " (nanobot keeps its files in these "
            "folders: move what is there aside, then run nanobot doctor --fix)",
        )
    missing = [name for name in WORKSPACE_FOLDERS if not (workspace / name).is_dir()]
    # the agent's identity and instructions: without them it runs on the bare system prompt
    gone = [str(rel) for rel in missing_templates(workspace)]
    if not loose and not missing and not gone:
        return Check("files", "ok", f"private permissions; workspace {workspace} complete")
    problems = []
    if loose:
        problems.append("readable by others: " + ", ".join(str(p) for p in loose))
    if missing:
        problems.append(f"missing folders in {workspace}: " + ", ".join(missing))
    if gone:
        problems.append(f"missing bootstrap files in {workspace}: " + ", ".join(gone))
    if not fix:
        return Check(
            "files", "fail" if loose else "warn", "; ".join(problems) + " (nanobot doctor --fix repairs)"
        )
    ensure_workspace(workspace)
    restored = copy_templates(workspace)
    changed = secure_installation(workspace, home)
    if config_path.exists() and _loose(config_path):
        try:
            config_path.chmod(0o600)
            changed += 1
        except OSError as exc:  # a read-only mount (a container's config:ro) or another user's file
            return Check(
                "files",
                "fail",
                "; ".join(problems) + f"; {config_path} cannot be made private here ({exc.strerror}): "
                "run chmod 600 on it where it is writable (the host, for a read-only mount)",
                fixed=f"made {changed} other path(s) private; created {len(missing)} folder(s); "
                f"restored {len(restored)} bootstrap file(s)",
            )
    return Check(
        "files",
        "ok",
        "; ".join(problems),
        fixed=f"made {changed} path(s) private; created {len(missing)} folder(s); "
        f"restored {len(restored)} bootstrap file(s)",
    )


def check_disk(workspace: Path) -> Check:
    probe = workspace
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    text = f"{free / 1024**3:.1f} GiB free on the workspace's file system"
    if free < DISK_FAIL_BYTES:
        return Check("disk", "fail", text + " (messages can no longer be saved safely)")
    return Check("disk", "warn" if free < DISK_WARN_BYTES else "ok", text)


def check_gateway(cfg: Config, config_path: Path) -> Check:
    from nanobot.service.config_watch import config_changed_note
    from nanobot.service.state import WATCHDOG_STALE_FACTOR, gateway_summary, is_healthy

    workspace = cfg.workspace_path
    summary = gateway_summary(workspace)
    if not summary["running"]:
        enabled = [n for n in ("telegram", "discord") if getattr(cfg.channels, n).enabled]
        note = (
            f" (channels {', '.join(enabled)} answer only while it runs: nanobot gateway)" if enabled else ""
        )
        return Check("gateway", "warn" if enabled else "ok", f"not running{note}")
    ok, reason = is_healthy(workspace, cfg.gateway.watchdog_interval_s * WATCHDOG_STALE_FACTOR)
    note = config_changed_note(summary, config_path)
    if note:  # the file's key or token is not the one in use: doctor checked the file's, said healthy
        return Check("gateway", "fail" if not ok else "warn", f"{reason}; {note}")
    return Check("gateway", "ok" if ok else "fail", reason)


def exec_start_argv(unit_text: str) -> list[str]:
    """The ExecStart= command of a unit we wrote, split as systemd does for our quoting."""
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line.partition("=")[2])
            return [w.replace("%%", "%").replace("$$", "$") for w in words]
    return []


def check_service() -> Check:
    from nanobot.service.systemd import default_unit_path

    units = [p for p in (default_unit_path(True), default_unit_path(False)) if p.is_file()]
    if not units:
        return Check("service", "ok", "no systemd unit installed (nanobot service install sets one up)")
    unit = units[0]
    try:
        argv = exec_start_argv(unit.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Check("service", "fail", f"{unit}: unreadable ({exc})")
    problems = []
    if not argv or not (Path(argv[0]).is_file() and os.access(argv[0], os.X_OK)):
        problems.append(f"its executable {argv[0] if argv else '(none)'} is missing")
    if "-c" in argv[:-1] and not Path(argv[argv.index("-c") + 1]).is_file():
        problems.append(f"its config {argv[argv.index('-c') + 1]} is missing")
    if problems:
        return Check(
            "service", "fail", f"{unit}: " + "; ".join(problems) + " (run nanobot service install again)"
        )
    return Check("service", "ok", f"{unit} installed")


TRUNCATED_AFTER_S = 5.0  # an index file shorter than its header for longer is truncated, not new


def _index_problem(path: Path) -> str | None:
    """What is wrong with the index file, or None; IndexUnavailable when it cannot be read now
    (another process holds it locked) without being damaged."""
    from nanobot.memory import index_file

    st = path.stat()
    # SQLite would take it for an empty index; a file being created is empty for a moment
    if st.st_size < index_file.SQLITE_HEADER_BYTES and time.time() - st.st_mtime > TRUNCATED_AFTER_S:
        return f"the index file is truncated ({st.st_size} bytes)"
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=index_file.BUSY_TIMEOUT_MS / 1000) as db:
            row = db.execute("PRAGMA quick_check").fetchone()
    except sqlite3.Error as exc:
        unavailable = index_file.unavailable_error(exc, path)
        if unavailable is not None:  # not damage: deleting the file would not help
            raise unavailable from exc
        return str(exc)
    return None if row and row[0] == "ok" else str(row[0] if row else "no answer")


def check_index(cfg: Config, *, fix: bool) -> Check:
    if not cfg.memory.search.enabled:
        return Check("memory index", "ok", "memory search is off (memory.search.enabled)")
    from nanobot.memory.index_file import IndexUnavailable, no_room_for_index
    from nanobot.providers.registry import uses_demo_model

    path = index_path(cfg.workspace_path)
    if not path.exists() and not fix and uses_demo_model(cfg):
        # `memory search` on the command line would build it; the demo model's turns never search
        return Check("memory index", "ok", "not built: the embedded demo model does not search memory")
    try:
        problem = "not built yet" if not path.exists() else _index_problem(path)
    except IndexUnavailable as exc:
        return Check("memory index", "warn", f"{exc}; run doctor again later")
    if problem is None:
        size_kib = index_size_bytes(cfg.workspace_path) // 1024
        return Check("memory index", "ok", f"{path} ({size_kib} KiB) passes its integrity check")
    if not fix:
        status = "warn" if not path.exists() else "fail"
        return Check("memory index", status, f"{problem} (nanobot doctor --fix or nanobot memory reindex)")
    if path.exists() and no_room_for_index(path):  # a rebuild could not be written: keep what is there
        return Check("memory index", "fail", f"{problem}; the disk is full: free some space, then run --fix again")
    if path.exists():  # derived data: the memory files are the truth, so a broken index is rebuilt
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    from nanobot.memory.index import build_index

    try:
        index = build_index(cfg)
        try:
            stats = asyncio.run(index.sync(force=True))
        finally:
            index.close()
    except Exception as exc:  # noqa: BLE001 - a full disk, a read-only workspace: a check line, no traceback
        return Check("memory index", "fail", f"{problem}; could not rebuild it: {exc}")
    return Check(
        "memory index",
        "ok",
        problem,
        fixed=f"rebuilt: {stats.files_indexed} files, {stats.chunks_indexed} chunks",
    )


def check_sandbox(cfg: Config) -> Check:
    requested = cfg.tools.exec.sandbox
    try:
        from nanobot.sandbox import (  # the OS sandbox package, where installed
            ROOT_WARNING,
            detect,
            runs_as_root,
        )
    except ImportError:
        found = shutil.which("bwrap")
        if requested == "none":
            return Check("sandbox", "warn", "exec runs without an OS sandbox (tools.exec.sandbox is none)")
        if found:
            return Check("sandbox", "ok", f"bubblewrap at {found} (tools.exec.sandbox {requested})")
        status = "fail" if requested == "bwrap" else "warn"
        return Check("sandbox", status, "bubblewrap not found: exec runs with its best-effort guard only")
    result = detect(requested)
    if result.active == "unavailable":
        return Check("sandbox", "warn", result.describe())
    if result.active != "off" and runs_as_root():
        return Check("sandbox", "warn", f"{result.describe()}; {ROOT_WARNING}")
    return Check("sandbox", "warn" if result.active == "off" else "ok", result.describe())
