"""nanobot as PID 1 — a container started without an init (`docker run` without `--init`, a
Kubernetes pod): a minimal init stays in front.

The kernel gives PID 1 two duties no other process has. Every orphaned process is re-parented to
it and stays a zombie until PID 1 waits for it: the children of a background command the exec tool
killed piled up for good. And a signal PID 1 has no handler for is dropped: a `docker stop` that
came while nanobot was still importing and reading its config (before the gateway's handlers) was
lost, and the container was killed at the end of its stop timeout.

`become_init_if_pid1` forks when the process is PID 1. The child returns and runs nanobot as usual
(in a process group of its own that also owns the terminal, so Ctrl-C reaches it once). PID 1
stays in `_init_loop` for good: it forwards the signals a supervisor sends to the child, reaps
every process that ends up as its child, and exits with the child's exit code (128 + the signal
number when a signal ended it) as soon as the child is gone — the kernel then ends whatever is
left in the container. Standard library only: it runs before nanobot's own imports, so the
process that stays behind is small.
"""

from __future__ import annotations

import os
import signal
from typing import NoReturn

#: what a supervisor or a user sends to the container's PID 1, passed on to nanobot as it came
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


def become_init_if_pid1() -> None:
    """Return at once unless this process is PID 1; as PID 1, fork and return in the child only."""
    if os.getpid() != 1:
        return
    # Blocked across the fork: a signal that comes meanwhile waits in PID 1 (a child starts with no
    # pending signals) and is forwarded once the handlers below know the child's pid.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    child = os.fork()
    if child == 0:
        _own_process_group_and_terminal()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
        return
    _init_loop(child)


def _own_process_group_and_terminal() -> None:
    """The child leads a process group of its own and, when PID 1's group held the terminal, takes
    it over: Ctrl-C then reaches the child alone instead of both (PID 1 would forward a second)."""
    terminal_was_ours = False
    try:
        terminal_was_ours = os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        pass
    os.setpgid(0, 0)
    if not terminal_was_ours:
        return
    # tcsetpgrp from a background group raises SIGTTOU, which would stop the process: ignore it
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(0, os.getpgrp())
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _init_loop(child: int) -> NoReturn:
    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:  # gone already: the wait below sees it
            pass

    for signum in FORWARDED_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:  # started under nohup: SIGHUP stays ignored
            continue
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # an interrupting signal is forwarded, then waits again
        except ChildProcessError:  # cannot happen while the child lives; leave rather than spin
            os._exit(1)
        if pid != child:
            continue  # an orphan re-parented here: reaped, nothing more to do
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)
