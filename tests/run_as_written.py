"""Helpers that run the command lines the project ships (systemd ExecStart, Dockerfile ENTRYPOINT/CMD/
HEALTHCHECK, compose `command`, README code blocks) exactly as written, with only the host paths
they name mapped onto a test directory."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEALTH_TIMEOUT_S = 120.0  # start-up imports are slow on a loaded host
STOP_TIMEOUT_S = 20.0


def systemd_words(value: str) -> list[str]:
    """Split an ExecStart= / Environment= value as systemd does for the quoting our units use:
    double-quoted words with backslash escapes, then `%%` → `%` and `$$` → `$`."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(value, posix=True)]


def unit_settings(text: str, section: str = "Service") -> list[tuple[str, str]]:
    """(key, value) pairs of one section of a unit file, in order (keys may repeat)."""
    out: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        if current == section and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def nanobot_on_path(bin_dir: Path) -> Path:
    """The `nanobot` executable as an install provides it: the venv's console script when this
    interpreter has one, else a stand-in that runs this interpreter's `-m nanobot`."""
    installed = Path(sys.executable).parent / "nanobot"
    if installed.is_file() and os.access(installed, os.X_OK):
        return installed
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "nanobot"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nanobot "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return shim


def base_env(bin_dir: Path) -> dict[str, str]:
    """What a service manager gives a process: PATH and little else (plus the test's own needs:
    this checkout on PYTHONPATH, no proxies, offline litellm)."""
    return {
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
    }


@contextmanager
def notify_socket(directory: Path) -> Iterator[tuple[str, socket.socket]]:
    """A unix datagram socket standing in for systemd's NOTIFY_SOCKET."""
    path = directory / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.1)
    try:
        yield str(path), sock
    finally:
        sock.close()


def notifications(sock: socket.socket) -> list[str]:
    out: list[str] = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except (TimeoutError, BlockingIOError):
            return out


def wait_healthy(health_argv: list[str], env: dict[str, str], cwd: Path, proc: subprocess.Popen,
                 log: Path) -> subprocess.CompletedProcess[str]:
    """Run the health command until it exits 0; fail early when the daemon died."""
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    last: subprocess.CompletedProcess[str] | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited {proc.returncode}:\n{log.read_text(errors='replace')}")
        last = subprocess.run(health_argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
        if last.returncode == 0:
            return last
        time.sleep(0.5)
    raise AssertionError(f"never healthy: {last and last.stderr}\n{log.read_text(errors='replace')}")


def stop(proc: subprocess.Popen, log: Path) -> int:
    """SIGTERM, as systemd and Docker stop a service; the exit code."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no exit {STOP_TIMEOUT_S}s after SIGTERM:\n{log.read_text(errors='replace')}") from None
