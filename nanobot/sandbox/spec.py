"""What a sandboxed command may see: the workspace split, the environment allow-list, resource limits.

Both sandboxes (bubblewrap and Landlock) build their rules from one `SandboxSpec`, so they agree on
what is writable: the workspace, except nanobot's own files inside it (`PROTECTED_DIRS`, the memory
index and the MEMORY.md backups), which stay read-only. In a shared (group) context the private
folders (`PRIVATE_DIRS`: memory/, sessions/, cron/) and the legacy root memory files are not
visible at all, and what steers the owner's turns
(`OWNER_STEERING`: the bootstrap files, HEARTBEAT.md, skills/) is read-only, nor can it be created.
"""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nanobot.config.paths import (
    INDEX_PREFIX,
    LEGACY_MEMORY_FILES,
    MEDIA_DIR,
    OWNED_DIRS,
    OWNED_IF_PRESENT,
    OWNER_STEERING,
    PRIVATE_DIRS,
    PRIVATE_PATHS,
)
from nanobot.util.nofollow import is_plain_dir, is_regular

# Workspace folders nanobot owns: readable by commands in owner contexts, never writable.
PROTECTED_DIRS = OWNED_DIRS
# Also read-only when they exist: the gateway's lock and state files, external memory backends' data.
PROTECTED_IF_PRESENT = OWNED_IF_PRESENT
# Files in memory/ that belong to the index (SQLite with its journal files).
PROTECTED_MEMORY_PREFIX = INDEX_PREFIX

# Environment variables passed through from the daemon (never credentials: names only on this list).
ENV_ALLOW = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")
ENV_ALLOW_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
MB = 1024 * 1024
# Models write bash (`source`, `[[ ]]`, `{1..3}`, `set -o pipefail`): dash failed each of them.
SHELL = "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"
MAX_SHOWN_MEDIA = 500  # of a chat's downloads in its group's commands, the newest


@dataclass(frozen=True)
class Limits:
    """Per-command resource limits, applied with setrlimit in the child before exec."""

    max_processes: int = 256
    max_cpu_s: int = 120
    max_file_mb: int = 1024
    max_memory_mb: int = 4096


@dataclass(frozen=True)
class SandboxSpec:
    workspace: Path
    shared: bool = False  # a group chat: PRIVATE_DIRS are hidden
    network: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    limits: Limits = Limits()
    # Shared contexts: how this chat's downloads in media/ begin (`media_prefix`); only they are shown.
    own_media: str = ""

    def read_only_names(self) -> tuple[str, ...]:
        """Workspace paths (relative) that commands may read but never change."""
        return (*PROTECTED_DIRS, *PROTECTED_IF_PRESENT, *(OWNER_STEERING if self.shared else ()))

    def protected_paths(self) -> list[Path]:
        """Existing paths inside the workspace that commands may read but never change."""
        ws = self.workspace
        paths = [ws / d for d in self.read_only_names() if (ws / d).exists()]
        if self.shared:  # the owner's commands' settings (.gitconfig, .config/): hidden too, see below
            paths.extend(self._root_dot_entries())
        memory = ws / "memory"
        if memory.is_dir():
            paths.extend(sorted(p for p in memory.iterdir() if p.name.startswith(PROTECTED_MEMORY_PREFIX)))
        return [p for p in dict.fromkeys(paths) if not self.shared or not _under_private(ws, p)]

    def hidden_paths(self) -> list[Path]:
        """Folders replaced by an empty one (shared contexts only): the private ones, media/ (every
        chat's downloads; this chat's own are put back, `shown_media`) and the workspace root's
        dot-folders (the HOME of the owner's commands: `.config/gh`, `.ssh`, `.aws` hold credentials)."""
        if not self.shared:
            return []
        folders = [self.workspace / d for d in (*PRIVATE_DIRS, MEDIA_DIR) if (self.workspace / d).is_dir()]
        return folders + [p for p in self._root_dot_entries() if p.is_dir()]

    def shown_media(self) -> list[Path]:
        """This chat's own downloads, shown in the hidden media/ (shared contexts only): the newest
        MAX_SHOWN_MEDIA of them. Each is a mount of its own (bubblewrap) or a rule (Landlock): a
        family group's year of photos made every command take seconds to start, then bubblewrap
        refused it (more than 9,000 arguments)."""
        media = self.workspace / MEDIA_DIR
        if not self.shared or not self.own_media or not is_plain_dir(media):
            return []
        own = [p for p in media.iterdir() if p.name.startswith(self.own_media) and is_regular(p)]
        if len(own) > MAX_SHOWN_MEDIA:
            own = sorted(own, key=_mtime_ns, reverse=True)[:MAX_SHOWN_MEDIA]
        return sorted(own)

    def hidden_files(self) -> list[Path]:
        """Files replaced by an empty one (shared contexts only): the legacy root memory files and the
        root's dot-files (`.git-credentials`, `.netrc`, `.npmrc` written by the owner's commands)."""
        if not self.shared:
            return []
        legacy = [self.workspace / f for f in LEGACY_MEMORY_FILES if (self.workspace / f).is_file()]
        return legacy + [p for p in self._root_dot_entries() if p.is_file()]

    def _root_dot_entries(self) -> list[Path]:
        try:
            return sorted(p for p in self.workspace.iterdir() if p.name.startswith(".") and not p.is_symlink())
        except OSError:
            return []


def _under_private(ws: Path, path: Path) -> bool:
    rel = path.relative_to(ws)
    return bool(rel.parts) and rel.parts[0] in PRIVATE_PATHS


def shared_home(tmpdir: str) -> str:
    """HOME of a shared context's commands: an empty folder in their temporary one."""
    return f"{tmpdir}/home"


def sandbox_env(spec: SandboxSpec, tmpdir: str = "/tmp") -> dict[str, str]:
    """The command's whole environment: the allow-list, HOME = the workspace (in a shared context an
    empty folder of its own: the workspace root's dot-files are the owner's settings and credentials,
    hidden there, and git refused to run with its global config unreadable), then config extras."""
    env = {k: v for k, v in os.environ.items() if k in ENV_ALLOW or k.startswith(ENV_ALLOW_PREFIXES)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = shared_home(tmpdir) if spec.shared else str(spec.workspace)
    env["TMPDIR"] = tmpdir
    env.update(spec.extra_env)
    return env


def user_tasks() -> int:
    """Tasks (processes and threads) of this user now: what RLIMIT_NPROC counts. Every task of
    the machine was counted before, so on a busy host a command could start hundreds of processes
    more than `maxProcesses` when the daemon runs as its own user."""
    uid = os.getuid()
    count = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                # a task folder links to itself, its parent and one folder per thread
                count += max(os.stat(f"/proc/{entry.name}/task").st_nlink - 2, 1)
            except OSError:  # the process ended meanwhile
                continue
    return count


def apply_limits(limits: Limits, nproc_base: int = 0) -> None:
    """setrlimit for the current process (called in the child between fork and exec).

    RLIMIT_NPROC counts every task of the user, also from inside a new user namespace, so the
    allowance is added to `nproc_base` (the user's tasks running before the command started): a fork bomb
    gets at most `max_processes` more.
    """
    nproc = nproc_base + limits.max_processes
    for which, value in (
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CPU, limits.max_cpu_s),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * MB),
        (resource.RLIMIT_AS, limits.max_memory_mb * MB),
        (resource.RLIMIT_CORE, 0),
    ):
        _soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (cap, cap))


def prlimit_argv(limits: Limits, nproc_base: int = 0) -> list[str] | None:
    """util-linux `prlimit` setting the limits before it runs the rest of the command line, or None
    when it is not installed (no fork through a Python pre-exec hook is needed). Inside
    bubblewrap's fresh user namespace the process count starts at zero (`nproc_base` 0); outside,
    pass the user's running tasks as in `apply_limits`."""
    exe = shutil.which("prlimit")
    if exe is None:
        return None
    return [
        exe,
        f"--nproc={nproc_base + limits.max_processes}",
        f"--cpu={limits.max_cpu_s}",
        f"--fsize={limits.max_file_mb * MB}",
        f"--as={limits.max_memory_mb * MB}",
        "--core=0",
        "--",
    ]


def limits_hook(limits: Limits) -> Callable[[], None]:
    base = user_tasks()
    return lambda: apply_limits(limits, base)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # removed meanwhile: the oldest
        return 0
