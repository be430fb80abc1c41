"""README command 1 as a user runs it: `scripts/quickstart.sh` makes a venv from the hashed locks
(llama.cpp built portable, or taken from pip's cache), onboards and gets a reply from the embedded
demo model. Slow-ish (a venv install and a model load); CI runs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.timeout(1200)
def test_the_quick_start_installs_onboards_and_answers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NANOBOT_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(VENV=str(tmp_path / "venv"), NANOBOT_HOME=str(tmp_path / "home"), NO_PROXY="127.0.0.1,localhost")
    done = subprocess.run(
        ["bash", "scripts/quickstart.sh", "Say hello in five words."],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "no reply from the demo model"
    assert (tmp_path / "home" / "config.json").is_file()
    info = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-c",
         "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
        capture_output=True, text=True, timeout=120,
    )
    assert "AMX" not in info.stdout, info.stdout  # the portable build (or its cached wheel)
