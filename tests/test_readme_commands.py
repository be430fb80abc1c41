"""The README's shell blocks, run as written where they can run here: every command line in a ```bash
block is either executed in order (nanobot commands, `export`) against the local fake LLM, or listed
below with the reason it cannot run here. A new README command must land in one of the two."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.conftest import REPO
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.run_as_written import base_env, nanobot_on_path

# command prefix -> why it cannot run in the test environment (or where it runs instead)
NOT_RUNNABLE = {
    "./scripts/quickstart.sh": "installs a venv and builds llama.cpp: tests/test_quickstart.py runs it",
    "./scripts/test.sh": "is the test suite itself",
    "nanobot service install": "needs systemd; tests/test_service_run.py runs the unit's ExecStart",
    "sudo": "needs root and systemd",
    "loginctl": "needs systemd-logind",
    "systemctl": "needs systemd as PID 1",
    "journalctl": "needs journald",
    "docker": "needs a Docker engine; tests/test_docker_files.py runs the image's command lines",
}
PLACEHOLDER = re.compile(r"\b[A-Z]{3,}(_[A-Z]+)*\b")  # QUERY, CODE, APPLICATION_ID


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for raw in block.splitlines():
            words = shlex.split(raw, comments=True)
            if words:
                lines.append(shlex.join(words))
    return lines


def _normalised(command: str) -> str:
    return re.sub(r"^\.venv/bin/nanobot\b", "nanobot", command)


def test_every_readme_command_runs_or_says_why_not(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    commands = [_normalised(c) for c in readme_commands()]
    assert "nanobot onboard" in commands and any(c.startswith("nanobot agent -m") for c in commands)
    home = tmp_path / "home"
    exe = nanobot_on_path(tmp_path / "bin")
    # The OpenAI endpoint is redirected to the local fake; everything else is the README's own.
    env = {**base_env(tmp_path / "bin"), "NANOBOT_HOME": str(home), "HOME": str(tmp_path),
           "NANOBOT_PROVIDERS__OPENAI__API_BASE": fake_llm.url}
    fake_llm.responder = lambda request: Reply(content="Hello from the README test.")
    ran = []
    for command in commands:
        skip = next((why for prefix, why in NOT_RUNNABLE.items() if command.startswith(prefix)), None)
        if skip:
            continue
        words = shlex.split(command)
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
            continue
        assert words[0] == "nanobot", f"README command neither run nor listed as not runnable: {command}"
        if PLACEHOLDER.search(command.replace("nanobot", "")):
            continue  # a template such as `pairing approve CODE`; its real use is tested elsewhere
        done = subprocess.run([str(exe), *words[1:]], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=180, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr}"
        assert "Traceback" not in done.stderr
        ran.append((command, done.stdout))
    replies = [out for command, out in ran if command.startswith("nanobot agent -m")]
    assert replies == ["Hello from the README test.\n"], ran
    assert (home / "config.json").is_file()
