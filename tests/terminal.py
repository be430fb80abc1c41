"""A real pseudo-terminal running a command, for tests that type at nanobot as a user does."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
import time
from pathlib import Path

PROMPT_TIMEOUT_S = 90.0


def _controlling_tty() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # getpass reads the key from /dev/tty, as for a user


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            preexec_fn=_controlling_tty,
            close_fds=True,
        )
        os.close(slave)
        self.seen = ""
        self.transcript = ""

    def expect(self, text: str) -> None:
        deadline = time.monotonic() + PROMPT_TIMEOUT_S
        while text not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} on the terminal; saw:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(self.master, 4096).decode(errors="replace")
                    self.seen += chunk
                    self.transcript += chunk
                except OSError:
                    continue
        self.seen = self.seen[self.seen.index(text) + len(text) :]  # consume up to the prompt

    def send(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def send_raw(self, data: bytes) -> None:
        """Bytes as typed, without Enter (Ctrl-C is b\"\\x03\")."""
        os.write(self.master, data)

    def finish(self, timeout: float = 60.0) -> tuple[int, str]:
        rest = ""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or select.select([self.master], [], [], 0)[0]:
            if time.monotonic() > deadline:
                self.proc.kill()
                break
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    rest += os.read(self.master, 4096).decode(errors="replace")
                except OSError:
                    break
        os.close(self.master)
        return self.proc.wait(), self.transcript + rest
