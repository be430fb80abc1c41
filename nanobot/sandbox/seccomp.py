"""The seccomp filter of sandboxed commands: what neither Landlock nor bubblewrap keeps out.

Both sandboxes: the kernel keyring is refused (add_key, request_key, keyctl). It is the user's,
shared by every process of the user (cached disk passphrases, Kerberos tickets), and bubblewrap
run by root makes no user namespace that would give the command a keyring of its own.

Landlock grants file access by folder but has no right for connecting to a UNIX socket by its
path: under it a command reached every service listening on one — the user's D-Bus session bus
(`systemd-run --user` starts a process outside the sandbox), ssh-agent, docker.sock, a database.
Under Landlock `socket(AF_UNIX, ...)` fails with EACCES, and with the network off every `socket()`
(Landlock refuses TCP only: UDP, to a DNS resolver for one, carried data out); `socketpair` stays
allowed for its connected kinds (a program's own pipes; a datagram pair can send to any socket by
its path). In a group's commands file watches (inotify, fanotify) are refused: Landlock does not
check them, and a watch told the names of files in folders it cannot list (the owner's downloads).
io_uring, which creates and connects sockets
without those system calls, is refused, and so are SysV shared memory, semaphores and message
queues and POSIX message queues: named by a number, not a path, another program's segment could be
attached and read. bubblewrap hides /run, $HOME and /tmp and has its own IPC namespace.

System calls of another ABI (i386's `int 0x80`, x32), which would bypass the numbers checked
here, are refused in both.

Contract: `command_filter(...)` builds the program in the parent (None on architectures whose
system call numbers are not known here); `apply_filter(program)` runs in the child after
no_new_privs is set (`filter_hook` does both for a pre-exec hook) and raises OSError when the kernel
refuses the filter; `filter_problem()` says once per process why it would (None when it installs):
a sandbox whose filter cannot be installed is not offered, rather than failing every command."""

from __future__ import annotations

import ctypes
import functools
import platform
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EACCES = 0x00050000 | 13  # SECCOMP_RET_ERRNO | EACCES
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0, _OFFSET_ARG1 = 0, 4, 16, 24
_LD_W_ABS, _JEQ_K, _JGE_K, _AND_K, _RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
_SOCK_TYPE_MASK = 0xF  # the type without SOCK_NONBLOCK / SOCK_CLOEXEC
_X32_SYSCALL_BIT = 0x40000000
_IO_URING_SETUP = 425  # the same number on every architecture (added after the tables were unified)


@dataclass(frozen=True)
class _Arch:
    audit_arch: int  # AUDIT_ARCH_*: what seccomp_data.arch holds for this ABI
    socket: int
    socketpair: int
    # SysV shared memory, semaphores, message queues and POSIX message queues: named by a number,
    # not a path, so Landlock leaves them open (another process's segment of the same user could
    # be attached and read)
    ipc: tuple[int, ...]
    # add_key, request_key, keyctl: the user's kernel keyring (cached disk passphrases, Kerberos
    # tickets) is shared by every process of the user, sandboxed or not
    keyring: tuple[int, ...]
    # inotify_add_watch, fanotify_init, fanotify_mark: Landlock does not check a watch, which told a
    # group's command the names of files in folders it can neither list nor read (the owner's
    # downloads); the owner's commands keep them (`tail -f`, a watch mode: names are not secrets to them)
    watches: tuple[int, ...]


_ARCHES = {
    "x86_64": _Arch(
        0xC000003E, 41, 53, (29, 30, 31, *range(64, 72), 220, *range(240, 246)), (248, 249, 250), (254, 300, 301)
    ),
    "aarch64": _Arch(0xC00000B7, 198, 199, tuple(range(180, 198)), (217, 218, 219), (27, 262, 263)),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


class FilterProgram:
    """A built BPF program; kept alive by this object while a child applies it."""

    def __init__(self, instructions: list[tuple[int, int, int, int]]) -> None:
        self._array = (_SockFilter * len(instructions))(*(_SockFilter(*i) for i in instructions))
        self.prog = _SockFprog(len(instructions), self._array)


@functools.cache  # built once per kind, not for every command
def command_filter(
    *, landlock: bool, network: bool, shared: bool = False, machine: str | None = None
) -> FilterProgram | None:
    """The filter for commands on this machine's architecture, or None where it is not known.

    Always: no kernel keyring, no system call of another ABI. Under Landlock (`landlock`) also no
    new UNIX socket (with `network` off no socket at all), no io_uring and no IPC, and in a group
    (`shared`) no file watch; bubblewrap's namespaces and hidden folders hold those."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    denied = (*arch.keyring, *((_IO_URING_SETUP, *arch.ipc) if landlock else ()))
    denied += arch.watches if landlock and shared else ()
    # (code, k, where to go when true, when false), None being the next instruction; a string
    # names the instruction after it
    steps: list[tuple[int, int, str | None, str | None] | str] = [
        (_LD_W_ABS, _OFFSET_ARCH, None, None),
        (_JEQ_K, arch.audit_arch, None, "refuse"),  # another ABI (i386's int 0x80)
        (_LD_W_ABS, _OFFSET_NR, None, None),
        (_JGE_K, _X32_SYSCALL_BIT, "refuse", None),
        *((_JEQ_K, nr, "refuse", None) for nr in denied),
    ]
    if landlock:
        steps += [
            (_JEQ_K, arch.socketpair, None, "socket"),
            # a datagram pair may still send to any socket by its path (sendto, connect): only
            # connected kinds (a stream, a seqpacket) are a program's own pipe
            (_LD_W_ABS, _OFFSET_ARG1, None, None),
            (_AND_K, _SOCK_TYPE_MASK, None, None),
            (_JEQ_K, socket.SOCK_STREAM, "allow", None),
            (_JEQ_K, socket.SOCK_SEQPACKET, "allow", "refuse"),
            "socket",
            (_JEQ_K, arch.socket, None if network else "refuse", "allow"),  # network off: any socket()
            (_LD_W_ABS, _OFFSET_ARG0, None, None),  # the domain (the low half of the first argument)
            (_JEQ_K, socket.AF_UNIX, "refuse", "allow"),
        ]
    instructions, labels = [], {}
    for step in steps:
        if isinstance(step, str):
            labels[step] = len(instructions)
        else:
            instructions.append(step)
    labels |= {"allow": len(instructions), "refuse": len(instructions) + 1}

    def jump(index: int, target: str | None) -> int:
        return 0 if target is None else labels[target] - index - 1

    program = [(code, jump(i, yes), jump(i, no), k) for i, (code, k, yes, no) in enumerate(instructions)]
    program += [(_RET_K, 0, 0, _RET_ALLOW), (_RET_K, 0, 0, _RET_EACCES)]
    return FilterProgram(program)


_prctl = ctypes.CDLL(None, use_errno=True).prctl


def filter_hook(program: FilterProgram | None, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """A pre-exec hook running `then` and installing `program` (after no_new_privs, which seccomp
    needs without CAP_SYS_ADMIN); `then` alone when there is no program."""
    if program is None:
        return then

    def hook() -> None:
        if then is not None:
            then()
        set_no_new_privs()
        apply_filter(program)

    return hook


def set_no_new_privs() -> None:
    """No privilege gained by exec from here on (setuid bits, file capabilities ignored): what
    seccomp and Landlock need of a process without CAP_SYS_ADMIN."""
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def apply_filter(program: FilterProgram) -> None:
    """Install `program` on the calling thread (inherited by the processes it starts)."""
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program.prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


@functools.cache
def filter_problem() -> str | None:
    """None when the filter installs here (or there is none for this architecture), else why not."""
    hook = filter_hook(command_filter(landlock=True, network=False), None)
    if hook is None:
        return None
    try:
        subprocess.run(["/bin/true"], preexec_fn=hook, check=True, timeout=10)  # noqa: PLW1509 - the point
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the seccomp filter cannot be installed here ({exc})"
    return None
