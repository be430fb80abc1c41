"""Landlock (Linux ≥ 5.13) through ctypes: the fallback where user namespaces are refused.

Landlock rules only grant, per folder and everything beneath it, so the split is built from the
top: the system folders are readable, a private temporary folder is writable, the workspace root is
readable, and each existing entry of the workspace is writable except nanobot's own files
(sessions/, cron/, memory/.index*, memory/.backups), which stay read-only. Consequences, documented
in the README: new entries cannot be created directly in the workspace root or in memory/ (sub-folders
work), and in a shared context the workspace root cannot be listed.

A Landlock domain cannot ptrace processes outside it, which keeps the daemon's /proc/<pid>/environ
unreadable; from ABI 6 signals and abstract UNIX sockets are scoped too; from ABI 4 TCP bind/connect
are refused when the network is off. From ABI 6 the bubblewrap sandbox runs inside a ruleset of the
abstract-socket scope alone (`abstract_socket_scope`): with the network on it shares the host's
network namespace, where abstract sockets live. Commands under Landlock also run under a seccomp
filter (`seccomp.py`) for what Landlock cannot refuse by a path: new UNIX sockets, IPC, the kernel
keyring, a group's file watches, and with the network off every new socket (UDP too).
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nanobot.sandbox.seccomp import apply_filter, command_filter, set_no_new_privs
from nanobot.sandbox.spec import (
    PROTECTED_MEMORY_PREFIX,
    SandboxSpec,
)

T = TypeVar("T")

# Syscall numbers are the same on every architecture (added after the table unification).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_CAPBSET_DROP = 24

# Filesystem access rights (ABI 1 unless noted)
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a file rule may carry
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
SYSTEM_READ_ROOTS = (
    "/run/systemd/resolve",  # the rest of /run holds other services' sockets
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/var/lib",
    "/sys",
    "/proc",
)
# Not the whole of /dev: it holds the user's other terminals (/dev/pts/N: what is typed there) and
# other programs' shared memory (/dev/shm). Only these devices; /dev/fd and /dev/std* are links
# into /proc/self/fd, which is readable.
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # packed in the kernel ABI: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 63


@functools.cache
def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is unavailable or disabled."""
    try:
        version = _syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except (AttributeError, OSError):
        return 0
    return max(int(version), 0)


def handled_fs(abi: int) -> int:
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR
    rights |= MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class Ruleset:
    """A Landlock ruleset fd built in the parent; `restrict_hook` applies it in the child.

    `filesystem=False` (ABI 6 and later) handles no file or network access at all, only the scope
    of abstract UNIX sockets: what bubblewrap's own namespaces leave open while the network is on
    (a host service listening on an abstract socket: D-Bus, X11)."""

    def __init__(self, abi: int, network: bool, *, filesystem: bool = True, shared: bool = False) -> None:
        self.abi = abi
        self.network = network
        self.shared = shared  # a group's command (the seccomp filter refuses it file watches)
        self.filesystem = filesystem
        self.fs = handled_fs(abi) if filesystem else 0
        attr = _RulesetAttr(self.fs, 0, 0)
        size = 8
        if abi >= 4:
            size = 16
            attr.handled_access_net = 0 if network else NET_BIND_TCP | NET_CONNECT_TCP
        if abi >= 6:
            size = 24
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | (SCOPE_SIGNAL if filesystem else 0)
        fd = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = int(fd)

    def allow(self, path: Path | str, rights: int, *, follow: bool = True) -> None:
        """Grant `rights` on `path` and beneath it (missing paths are skipped).

        `follow=False` for workspace entries: a command may have swapped one for a symlink since it
        was listed, and the grant must never land on the symlink's target.
        """
        flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        try:
            pfd = os.open(path, flags)
        except OSError:
            return
        try:
            mode = os.fstat(pfd).st_mode
            if stat.S_ISLNK(mode):
                return
            if not stat.S_ISDIR(mode):
                rights &= FILE_RIGHTS
            attr = _PathBeneathAttr(rights & self.fs, pfd)
            if (
                _syscall(_SYS_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.byref(attr), ctypes.c_uint32(0))
                < 0
            ):
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
        finally:
            os.close(pfd)

    def restrict_hook(self, then: Callable[[], None] | None = None) -> Callable[[], None]:
        fd = self.fd
        last_cap = _last_cap()

        drop_caps = self.filesystem  # bubblewrap (scope only) needs the capabilities of its namespaces
        seccomp = command_filter(landlock=self.filesystem, network=self.network, shared=self.shared)

        def hook() -> None:  # in the child between fork and exec, or in a spawning thread
            if then is not None:
                then()
            # A daemon running as root would pass CAP_SYS_PTRACE on, and Landlock lets that read
            # other processes' /proc/<pid>/environ: empty the bounding set, so exec leaves no caps.
            for cap in range(last_cap + 1 if drop_caps else 0):
                _prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
            set_no_new_privs()
            if _syscall(_SYS_RESTRICT_SELF, fd, ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), "landlock_restrict_self")
            if seccomp is not None:
                apply_filter(seccomp)

        return hook

    def spawn_restricted(self, start: Callable[[], T]) -> T:
        """Run `start` (which spawns the command) in a fresh thread restricted by this ruleset.

        Landlock, no_new_privs and the capability bounding set belong to the calling thread and
        are inherited by the children it spawns, so the command starts restricted while the daemon's
        other threads stay as they are, and the spawn needs no fork through a Python pre-exec hook
        (a vfork, several times faster). The thread ends right after the spawn.
        """
        hook = self.restrict_hook()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                hook()
                outcome["value"] = start()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                outcome["error"] = exc

        thread = threading.Thread(target=run, name="landlock-spawn", daemon=True)
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def abstract_socket_scope() -> Ruleset | None:
    """A ruleset that only keeps a command from host services' abstract UNIX sockets, for the
    bubblewrap sandbox; None where the kernel's Landlock has no such scope (ABI before 6)."""
    abi = abi_version()
    return Ruleset(abi, True, filesystem=False) if abi >= 6 else None


def read_grants(readable: list[Path], private: list[Path], workspace: Path) -> list[str]:
    """Folders to grant read access: the system folders and `readable` (e.g. the Python environment
    the PATH points into), minus `private` (NANOBOT_HOME, the config file, ...) and the workspace
    (which gets its own rules) even when they lie inside one, e.g. under /var/lib. Computed once per
    sandbox: it walks paths, which costs more than building a ruleset."""
    grants: list[str] = []
    for root in (*SYSTEM_READ_ROOTS, *readable):
        _collect_except(Path(root), [*private, workspace], grants)
    return list(dict.fromkeys(grants))


def build_ruleset(spec: SandboxSpec, tmpdir: str, readable: list[str], abi: int | None = None) -> Ruleset:
    """The ruleset for `spec`: `readable` (from `read_grants`) read-only, `tmpdir` writable, the
    workspace split (see the module docstring)."""
    rules = Ruleset(abi or abi_version(), spec.network, shared=spec.shared)
    write = rules.fs
    try:
        for path in readable:
            rules.allow(path, READ)
        for device in DEVICE_FILES:
            rules.allow(device, READ_FILE | WRITE_FILE | TRUNCATE)
        rules.allow(tmpdir, write)
        _allow_workspace(rules, spec, write)
    except BaseException:
        rules.close()
        raise
    return rules


def _collect_except(root: Path, excluded: list[Path], out: list[str]) -> None:
    """`root` minus the `excluded` paths beneath it: its other entries one by one, as deep as
    needed (Landlock rules cannot subtract)."""
    try:
        root = root.resolve()
        inside = [p for p in excluded if p.is_relative_to(root)]
        if not inside:
            if root.exists():
                out.append(str(root))
            return
    except OSError:  # a folder this user may not enter (root's ~/.local/bin on a service's PATH)
        return  # nothing in it can be read anyway; raised, it refused every command
    if root in inside:
        return
    for entry in _entries(root):
        _collect_except(entry, inside, out)


def _allow_workspace(rules: Ruleset, spec: SandboxSpec, write: int) -> None:
    ws = spec.workspace
    protected = {*(ws / d for d in spec.read_only_names()), *spec.protected_paths()}
    private = {*spec.hidden_paths(), *spec.hidden_files()}
    if not spec.shared:
        rules.allow(
            ws, READ, follow=False
        )  # beneath: would also open the private folders to a shared context
    for entry in _entries(ws):
        if entry in private:
            continue
        if entry == ws / "memory":
            rules.allow(entry, READ, follow=False)
            for item in _entries(entry):
                if item.name.startswith(PROTECTED_MEMORY_PREFIX) or item in protected:
                    continue
                rules.allow(item, write, follow=False)
        elif entry in protected:
            rules.allow(entry, READ, follow=False)
        else:
            rules.allow(entry, write, follow=False)
    for path in spec.shown_media():  # this chat's own downloads, in a media/ that cannot be listed
        rules.allow(path, write, follow=False)


def _entries(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if not p.is_symlink()]
    except OSError:
        return []
