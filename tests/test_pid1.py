"""nanobot as a container's PID 1 without an init: orphans are reaped and an early SIGTERM stops it.

Each test runs the real program as PID 1 of a new PID namespace (`unshare -rpfn --mount-proc`: a
user, PID and network namespace, nothing booted) and signals it from outside as `docker stop` does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

NAMESPACE = ["unshare", "-rpfn", "--mount-proc"]


def _pid_namespaces_work() -> bool:
    try:
        return subprocess.run([*NAMESPACE, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = pytest.mark.skipif(not _pid_namespaces_work(), reason="needs user and PID namespaces (unshare -rpfn)")


def _zombies_left(init_first: bool) -> str:
    """PID 1 starts a shell that leaves a child behind (`sleep &`, as a background command the
    exec tool ran); once it has ended, the process states in the namespace."""
    program = textwrap.dedent(
        f"""
        import os, subprocess, time
        if {init_first}:
            from nanobot.service.pid1 import become_init_if_pid1
            become_init_if_pid1()
        subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"], check=True)
        time.sleep(1.5)
        states = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with open(f"/proc/{{pid}}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
        print("".join(sorted(states)))
        """
    )
    result = subprocess.run([*NAMESPACE, sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_an_orphan_of_a_background_command_is_reaped() -> None:
    assert "Z" in _zombies_left(init_first=False)  # the defect, as PID 1 without the init
    assert "Z" not in _zombies_left(init_first=True)


def _first_child(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return None
    return int(children[0]) if children else None


def _start_gateway_as_pid1(tmp_path: Path) -> tuple[subprocess.Popen[str], int, Path]:
    """The gateway as PID 1, returned once PID 1 runs nanobot's init (it has forked nanobot proper):
    a signal to PID 1 before then, while the interpreter itself starts, is still dropped."""
    home, log = tmp_path / "home", tmp_path / "stderr.log"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")} | {"NANOBOT_HOME": str(home)}
    nanobot = shutil.which("nanobot", path=str(Path(sys.executable).parent)) or "nanobot"
    with log.open("w") as err:
        proc = subprocess.Popen([*NAMESPACE, nanobot, "gateway"], env=env, stderr=err, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pid1 = _first_child(proc.pid)  # PID 1 of the namespace is unshare's child
        if pid1 is not None and _first_child(pid1) is not None:
            return proc, pid1, log
        time.sleep(0.002)
    pid1 = _first_child(proc.pid)
    if pid1 is not None:
        os.kill(pid1, signal.SIGKILL)
    proc.kill()
    proc.wait()
    raise AssertionError("PID 1 of the namespace never forked nanobot")


@contextmanager
def _gateway_as_pid1(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, Path]]:
    proc, pid1, log = _start_gateway_as_pid1(tmp_path)
    try:
        yield proc, pid1, log
    finally:
        if proc.poll() is None:  # killing unshare alone would leave the namespace's PID 1 running
            with suppress(ProcessLookupError):
                os.kill(pid1, signal.SIGKILL)  # the kernel then ends the whole namespace
            proc.kill()
            proc.wait()


def test_a_sigterm_while_nanobot_starts_stops_it(tmp_path: Path) -> None:
    """Before the gateway's handlers exist, PID 1 dropped SIGTERM: the container ran on until killed."""
    with _gateway_as_pid1(tmp_path) as (proc, pid1, log):
        os.kill(pid1, signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("a SIGTERM at start was ignored") from None
        assert code in (0, 128 + signal.SIGTERM), log.read_text()


def test_a_sigterm_to_a_running_gateway_is_a_clean_stop_with_exit_0(tmp_path: Path) -> None:
    with _gateway_as_pid1(tmp_path) as (proc, pid1, log):
        deadline = time.monotonic() + 90
        while "gateway running" not in log.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.05)
        os.kill(pid1, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert "SIGTERM received" in log.read_text() and "gateway stopped" in log.read_text()
