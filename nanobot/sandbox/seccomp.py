"""A seccomp filter that refuses new UNIX sockets (and, network off, every socket) under Landlock.

Landlock grants file access by folder but has no right for connecting to a UNIX socket by its
path: under it a command could reach every service listening on one — the user's D-Bus session
bus (`systemd-run --user` starts a process outside the sandbox), ssh-agent, docker.sock, a
database. This filter makes `socket(AF_UNIX, ...)` fail with EACCES; with the network off, every
`socket()` (Landlock refuses TCP only: UDP, to a DNS resolver for one, carried data out).
`socketpair` stays allowed (pipes between a program's own processes); io_uring, which creates and
connects sockets without those system calls, is refused as well, and so are system calls of
another ABI (32-bit, x32) that would bypass the numbers checked here.

Contract: `socket_filter(network)` builds the program in the parent (None on architectures whose
system call numbers are not known here); `apply_filter(program)` runs in the child after
no_new_privs is set, and raises OSError when the kernel refuses the filter.
"""

from __future__ import annotations

import ctypes
import platform
import socket

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EACCES = 0x00050000 | 13  # SECCOMP_RET_ERRNO | EACCES
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_X32_SYSCALL_BIT = 0x40000000
_IO_URING_SETUP = 425  # the same number on every architecture (added after the tables were unified)
# machine → (AUDIT_ARCH_*, the socket system call's number)
_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


class FilterProgram:
    """A built BPF program; kept alive by this object while a child applies it."""

    def __init__(self, instructions: list[tuple[int, int, int, int]]) -> None:
        self._array = (_SockFilter * len(instructions))(*(_SockFilter(*i) for i in instructions))
        self.prog = _SockFprog(len(instructions), self._array)


def socket_filter(network: bool, machine: str | None = None) -> FilterProgram | None:
    """The filter for this machine's architecture, or None where it is not known."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, nr_socket = arch
    # (code, jump if true, jump if false, k); jumps count instructions after the current one
    return FilterProgram([
        (_LD_W_ABS, 0, 0, _OFFSET_ARCH),
        (_JEQ_K, 0, 7, audit_arch),  # another ABI: refused
        (_LD_W_ABS, 0, 0, _OFFSET_NR),
        (_JGE_K, 5, 0, _X32_SYSCALL_BIT),
        (_JEQ_K, 4, 0, _IO_URING_SETUP),
        (_JEQ_K, 0 if network else 3, 2, nr_socket),
        (_LD_W_ABS, 0, 0, _OFFSET_ARG0),  # the domain (the low half of the first argument)
        (_JEQ_K, 1, 0, socket.AF_UNIX),
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, _RET_EACCES),
    ])


_prctl = ctypes.CDLL(None, use_errno=True).prctl


def apply_filter(program: FilterProgram) -> None:
    """Install `program` on the calling thread (inherited by the processes it starts)."""
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program.prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
