"""The Landlock sandbox as the README asks the daemon to run: as an unprivileged user of its own.

Run as root (CI), each test starts a child process as `nobody` (setpriv) that builds the real exec
tool and plays the steered model; elsewhere they are skipped (they need to switch users).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanobot.sandbox.spec import user_tasks
from tests.security.conftest import require_sandbox

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, sys
from pathlib import Path
from nanobot.agent.tools.base import ToolContext
from nanobot.agent.tools.shell import ExecTool
from nanobot.config.schema import ExecToolConfig

workspace = Path(sys.argv[1])
tool = ExecTool(workspace, ExecToolConfig(sandbox="landlock", timeout_s=30, max_processes=int(sys.argv[2])),
                restrict=True)
owner = ToolContext(channel="telegram", chat_id="555", session_key="telegram:555", sender_id="555")
print(asyncio.run(tool.execute(owner, command=sys.argv[3])))
"""

FORKS = """
import os, time
n = 0
for _ in range(300):
    try:
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    except OSError:
        break
print("forked", n)
"""


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder the other user can reach (pytest's own are private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="nanobot-service-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_as_nobody(tmp: Path, command: str, max_processes: int = 30, path: str = "/usr/bin:/bin") -> str:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to an unprivileged user needs root and setpriv")
    require_sandbox("landlock")
    home = tmp / "service-home"
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "forks.py").write_text(FORKS)
    for folder in (home, workspace):
        os.chown(folder, NOBODY, NOBODY)
    env = {"HOME": str(home), "PATH": path, "PYTHONPATH": str(REPO), "NANOBOT_HOME": str(home)}
    done = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         sys.executable, "-c", textwrap.dedent(CHILD), str(workspace), str(max_processes), command],
        env=env, cwd=home, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_user_tasks_counts_the_users_tasks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLIMIT_NPROC counts the tasks of the user: the base of the fork bound is those, not the machine's."""
    assert user_tasks() >= 1  # this process at least
    monkeypatch.setattr(os, "getuid", lambda: 4_000_000)  # a user with no process
    assert user_tasks() == 0


def test_max_processes_bounds_a_fork_bomb_under_landlock(open_tmp: Path) -> None:
    """The bound was every task of the machine plus maxProcesses: on a busy host, hundreds more."""
    out = run_as_nobody(open_tmp, "python3 forks.py", max_processes=20)
    forked = int(out.split("forked", 1)[1].split()[0])
    assert forked <= 20, out


def test_a_path_entry_the_user_cannot_enter_does_not_disable_exec(open_tmp: Path) -> None:
    """A service user's PATH inherited with root's folders: checking one raised, and every command
    failed with "Permission denied"."""
    closed = open_tmp / "root-home"  # as /root: ~/.local/bin's folder lies in it
    (closed / ".local" / "bin").mkdir(parents=True)
    closed.chmod(0o700)
    out = run_as_nobody(open_tmp, "echo hello", path=f"{closed}/.local/bin:/usr/bin:/bin")
    assert out.strip() == "hello"
