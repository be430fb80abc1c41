"""The CLI as a user runs it (subprocesses): onboard, agent -m, piped interactive mode, status."""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, config_dict, run_cli
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.memory_llm import MemoryScript


def _configure(home: Path, server: FakeLLMServer, **overrides: object) -> Path:
    path = home / "config.json"
    path.write_text(json.dumps(config_dict(server.url, **overrides)), encoding="utf-8")
    return path


def _user_texts(server: FakeLLMServer) -> list[str]:
    return [str(r["messages"][-1]["content"]).rsplit("\n\n", 1)[-1] for r in server.requests]


def test_onboard_is_idempotent_private_and_never_overwrites(home: Path) -> None:
    secret_env = {"NANOBOT_PROVIDERS__OPENAI__API_KEY": "sk-must-not-be-saved"}
    first = run_cli("onboard", home=home, env=secret_env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""
    config = home / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    text = config.read_text()
    assert "sk-must-not-be-saved" not in text
    data = json.loads(text)
    # only what differs from the defaults: a file of every default kept a release's values for good
    assert data == {}
    ws = home / "workspace"
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md"):
        assert (ws / name).is_file(), name
    for sub in ("memory", "sessions", "skills", "media", "cron"):
        assert (ws / sub).is_dir(), sub
    (ws / "AGENTS.md").write_text("my own rules\n")
    (ws / "SOUL.md").unlink()
    config.write_text(json.dumps({"agents": {"defaults": {"model": "my-model"}}}))
    second = run_cli("onboard", home=home, env=secret_env)
    assert second.returncode == 0, second.stderr
    assert "left as it is" in second.stderr and "(1 file(s) created)" in second.stderr
    assert (ws / "AGENTS.md").read_text() == "my own rules\n"
    assert (ws / "SOUL.md").is_file()  # a missing template file is restored
    assert json.loads(config.read_text())["agents"]["defaults"]["model"] == "my-model"


def test_agent_one_shot_prints_only_the_reply(home: Path, fake_llm: FakeLLMServer) -> None:
    _configure(home, fake_llm)
    fake_llm.push(Reply(content="The answer is 42."))
    result = run_cli("agent", "-m", "hi", home=home, env={"NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS": "77"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "The answer is 42.\n"
    assert fake_llm.requests[-1]["max_tokens"] == 77  # env override over config.json
    session = home / "workspace" / "sessions" / "cli_direct.jsonl"
    roles = [json.loads(line).get("role") for line in session.read_text().splitlines()]
    assert [r for r in roles if r] == ["user", "assistant"]


def test_status_tells_this_sessions_context_in_a_fresh_process(home: Path, fake_llm: FakeLLMServer) -> None:
    """/status said "Context: ~0" for a long conversation until this process had run a turn (and in a
    gateway it showed the last turn of any chat)."""
    import re

    _configure(home, fake_llm)
    long_text = "tell me about the weather in the mountains " * 300  # ~2,400 tokens
    fake_llm.push(Reply(content="It is cold."))
    assert run_cli("agent", "-m", long_text, home=home).returncode == 0
    status = run_cli("agent", "-m", "/status", home=home)
    context = re.search(r"Context: ~(\d+) of", status.stdout)
    assert context is not None and int(context.group(1)) > 2_000, status.stdout
    other = run_cli("agent", "-m", "/status", "-s", "cli:other", home=home)
    fresh = re.search(r"Context: ~(\d+) of", other.stdout)
    assert fresh is not None and int(fresh.group(1)) < int(context.group(1)) - 2_000, other.stdout


def test_agent_one_shot_new_and_session_option(home: Path, fake_llm: FakeLLMServer) -> None:
    _configure(home, fake_llm)
    fake_llm.responder = MemoryScript(reply_text="ok").responder  # answers save_memory / session notes
    first = run_cli("agent", "-m", "remember me: FACT-1: I like tea", "-s", "cli:work", home=home)
    assert first.returncode == 0 and first.stdout == "ok\n", first.stderr
    sessions = home / "workspace" / "sessions"
    assert (sessions / "cli_work.jsonl").is_file()
    result = run_cli("agent", "-m", "/new", "-s", "cli:work", home=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "New session started.\n"
    archived = list((sessions / "archive").glob("cli_work-*.jsonl"))
    assert len(archived) == 1 and "remember me" in archived[0].read_text()
    assert not list((sessions / "archive").glob("*.pending"))  # background work finished before exit
    assert "FACT-1" in (home / "workspace" / "memory" / "MEMORY.md").read_text()


def test_agent_piped_stdin_each_line_a_turn(home: Path, fake_llm: FakeLLMServer) -> None:
    _configure(home, fake_llm)
    fake_llm.responder = lambda body: Reply(
        content="re: " + str(body["messages"][-1]["content"]).rsplit("\n\n", 1)[-1]
    )
    result = run_cli("agent", home=home, input_text="first line\n\nsecond line\n/help\n/exit\nnever sent\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["re: first line", "re: second line"]
    assert lines[2] == "nanobot commands:"  # /help answered without the LLM
    assert "You:" not in result.stdout and "interactive" not in result.stdout
    assert _user_texts(fake_llm) == ["first line", "second line"]
    eof = run_cli("agent", home=home, input_text="third line\n")  # end of input, no /exit
    assert eof.returncode == 0, eof.stderr
    assert eof.stdout == "re: third line\n"
    # a turn that failed: exit 1 as with -m (a script read the failure notice as an answer, exit 0)
    fake_llm.responder = lambda body: Reply(status=400, error_message="no such model")
    failed = run_cli("agent", home=home, input_text="fourth line\nfifth line\n")
    assert failed.returncode == 1, failed.stderr
    assert len(failed.stdout.splitlines()) == 2  # each turn still got its notice


def test_agent_takes_input_in_another_encoding(home: Path, fake_llm: FakeLLMServer) -> None:
    """Latin-1 bytes (a terminal in another encoding): `-m` failed the turn (nothing saved) and a piped
    line ended the chat as if the input had ended; now their bad bytes arrive as U+FFFD."""
    _configure(home, fake_llm)
    fake_llm.responder = lambda body: Reply(content="ok")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update({"NANOBOT_HOME": str(home), "PYTHONPATH": str(REPO)})
    run = functools.partial(subprocess.run, capture_output=True, env=env, cwd=home, timeout=120)
    one = run([sys.executable, "-m", "nanobot", "agent", "-m", b"FACT-1: caf\xe9 au lait"])
    assert one.returncode == 0 and one.stdout == b"ok\n", one.stderr
    piped = run([sys.executable, "-m", "nanobot", "agent"], input=b"FACT-2: caf\xe9 noir\nFACT-3: tea\n")
    assert piped.returncode == 0 and piped.stdout == b"ok\nok\n", piped.stderr
    assert _user_texts(fake_llm) == ["FACT-1: caf\ufffd au lait", "FACT-2: caf\ufffd noir", "FACT-3: tea"]


def test_status_shows_config_workspace_model_provider(home: Path, fake_llm: FakeLLMServer) -> None:
    path = _configure(
        home, fake_llm, **{"channels.telegram.enabled": True, "channels.telegram.allowFrom": ["*"]}
    )
    result = run_cli("status", home=home)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Config: {path}" in out
    assert f"Workspace: {home / 'workspace'}" in out
    assert "Model: fake-model" in out
    assert "Provider: custom (model fake-model)" in out
    assert "Channel telegram: enabled, everyone" in out and "Channel discord: disabled" in out
    assert "Gateway: not running" in out and "Memory: backend file" in out
    custom = run_cli("status", "-c", str(home / "nope.json"), home=home)
    assert custom.returncode == 0 and "(missing: run nanobot onboard)" in custom.stdout


@pytest.mark.parametrize("closed", ["2>&-", "<&-", ">&-"])
def test_a_command_started_with_a_standard_stream_closed_still_works(home: Path, closed: str) -> None:
    """`status 2>&-` printed nothing and exited 1 (the log had nowhere to go); `agent -m hi <&-`
    and `>&-` ended in a traceback."""
    import shlex

    assert run_cli("onboard", home=home).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO))
    status = subprocess.run(["sh", "-c", f"{shlex.quote(sys.executable)} -m nanobot status {closed}"],
                            capture_output=True, text=True, timeout=120, env=env, cwd=home)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    if closed != ">&-":
        assert "Workspace:" in status.stdout
    else:  # the reply would go nowhere: said, exit 1, no turn run (it exited 0 with the reply lost)
        agent = subprocess.run(["sh", "-c", f"{shlex.quote(sys.executable)} -m nanobot agent -m hi {closed}"],
                               capture_output=True, text=True, timeout=300, env=env, cwd=home)
        assert agent.returncode == 1 and "Traceback" not in agent.stderr, agent.stderr
        assert "standard output is closed" in agent.stderr
