"""Run a child process with a deadline and an output cap, never hanging the caller.

Output (stdout and stderr merged) is read incrementally as it arrives; only the first and last
`keep_bytes` are kept, so memory stays bounded whatever the command prints. At the deadline, at the
byte cap, when the caller is cancelled, and after a normal exit, the child's whole process group is
killed and the pipe is closed without waiting for other holders of it (a background grandchild that
keeps the pipe open cannot hold the turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from nanobot.secrets import mask_cut

READ_CHUNK_BYTES = 65_536
EXIT_GRACE_S = 0.5  # after the main process exits, how long stragglers may still write
REAP_TIMEOUT_S = 2.0
_POLL_S = 0.05


@dataclass
class ProcessResult:
    head: bytes
    tail: bytes
    total_bytes: int
    returncode: int | None
    timed_out: bool = False
    capped: bool = False

    def text(self, max_chars: int | None = None) -> str:
        """The output as text, at most about `max_chars` of it (two thirds from the start, the rest
        from the end) with a note of how much of it was left out in between."""
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        omitted = self.total_bytes - len(self.head) - len(self.tail)
        if omitted <= 0:
            head, tail = head + tail, ""
            if max_chars is None or len(head) <= max_chars:
                return head
        if max_chars is not None:
            keep_head = max_chars * 2 // 3
            keep_tail = max_chars - keep_head
            whole = f"{head}{tail}" if omitted <= 0 else ""
            if whole:  # all of it was kept: cut its middle
                head, tail = whole[:keep_head], whole[len(whole) - keep_tail :]
                omitted = len(whole.encode()) - len(head.encode()) - len(tail.encode())
            else:  # what was kept of each end, cut to its share (the rest counted as omitted)
                omitted += len(head[keep_head:].encode()) + len(tail[: max(0, len(tail) - keep_tail)].encode())
                head, tail = head[:keep_head], tail[max(0, len(tail) - keep_tail) :]
        # a secret the cut went through is masked by its pieces (whole, it no longer matches)
        head, tail = mask_cut(head, end=True), mask_cut(tail, start=True)
        return f"{head}\n\n[... {omitted} bytes omitted ...]\n\n{tail}"


class _Collector:
    def __init__(self, keep_bytes: int, cap_bytes: int) -> None:
        self.keep = keep_bytes
        self.cap = cap_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.capped = False

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.keep:
                del self.tail[: len(self.tail) - self.keep]
        if self.total > self.cap:
            self.capped = True

    def tail_bytes(self) -> bytes:
        return bytes(self.tail[-self.keep :]) if self.keep else b""


#: what commands write in the workspace is private, like every file nanobot writes (a service's
#: umask 022 made it readable by every user of the machine)
COMMAND_UMASK = 0o077


async def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    cap_bytes: int,
    keep_bytes: int,
    preexec: Callable[[], None] | None = None,
    spawner: Callable[[Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]] | None = None,
) -> ProcessResult:
    """Run `argv` to completion, the deadline or the cap; see the module docstring.

    `preexec` runs in the child before exec; `spawner`, when given, runs the spawn itself (e.g. in
    a thread that carries the sandbox's restrictions)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # noqa: S603 - argv built by the sandbox
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509 - limits and Landlock must be set between fork and exec
            close_fds=True,
            umask=COMMAND_UMASK,
        )

    proc = spawner(start) if spawner is not None else start()
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    out = _Collector(keep_bytes, cap_bytes)
    eof = loop.create_future()

    def on_readable() -> None:
        while True:
            try:
                data = os.read(fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data or out.capped:
                break
            out.add(data)
            if out.capped:
                break
        loop.remove_reader(fd)
        if not eof.done():
            eof.set_result(None)

    loop.add_reader(fd, on_readable)
    exited, stop_watch = _exit_future(loop, proc)
    deadline = started + timeout_s
    timed_out = False
    try:
        if not await _first(deadline, eof, exited):
            timed_out = True
        elif not exited.done() and not out.capped:
            # EOF: every writer closed the pipe; the main process may still be running.
            timed_out = not await _first(deadline, exited)
        elif not eof.done():
            # The main process exited; a straggler holding the pipe gets a short grace, then dies.
            await _first(min(deadline, time.monotonic() + EXIT_GRACE_S), eof)
    finally:
        loop.remove_reader(fd)
        _kill_group(proc)
        if await _first(time.monotonic() + REAP_TIMEOUT_S, exited):
            proc.poll()
        stop_watch()
        if not out.capped:
            _drain(fd, out)
        proc.stdout.close()
    returncode = proc.returncode if not (timed_out or out.capped) else None
    return ProcessResult(
        head=bytes(out.head),
        tail=out.tail_bytes(),
        total_bytes=out.total,
        returncode=returncode,
        timed_out=timed_out,
        capped=out.capped,
    )


async def _first(deadline: float, *futures: asyncio.Future[None]) -> bool:
    """Wait until one of `futures` is done; False when the deadline came first."""
    if any(f.done() for f in futures):
        return True
    done, _ = await asyncio.wait(
        futures,
        timeout=max(deadline - time.monotonic(), 0),
        return_when=asyncio.FIRST_COMPLETED,
    )
    return bool(done)


def _exit_future(
    loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes]
) -> tuple[asyncio.Future[None], Callable[[], None]]:
    """A future done when the process exits (a pidfd where the kernel has them, else polling)."""
    exited: asyncio.Future[None] = loop.create_future()

    def mark() -> None:
        if not exited.done():
            exited.set_result(None)

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):

        async def poll() -> None:
            while proc.poll() is None:
                await asyncio.sleep(_POLL_S)
            mark()

        task = loop.create_task(poll())
        return exited, task.cancel

    def on_exit() -> None:
        loop.remove_reader(pidfd)
        mark()

    loop.add_reader(pidfd, on_exit)

    def stop() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)

    return exited, stop


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _drain(fd: int, out: _Collector) -> None:
    """Whatever is already in the pipe, without waiting for more."""
    while not out.capped:
        try:
            data = os.read(fd, READ_CHUNK_BYTES)
        except OSError:
            return
        if not data:
            return
        out.add(data)
