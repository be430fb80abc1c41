"""Root CLI options through real processes: --version, -c before and after the subcommand, shell
completion, user errors (exit code and message, never a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO, config_dict, run_cli
from tests.fakes.llm_server import FakeLLMServer, Reply


def test_version_long_and_short(home: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for flag in ("--version", "-V"):
        result = run_cli(flag, home=home)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"nanobot {version}\n"


def test_config_option_before_and_after_the_subcommand(home: Path, fake_llm: FakeLLMServer) -> None:
    elsewhere = home / "elsewhere" / "my.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps(config_dict(fake_llm.url)), encoding="utf-8")
    before = run_cli("-c", str(elsewhere), "status", home=home)
    after = run_cli("status", "--config", str(elsewhere), home=home)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert before.stdout == after.stdout
    assert f"Config: {elsewhere}\n" in before.stdout and "Provider: custom" in before.stdout
    # a nested command, and a real turn on the config given before the subcommand
    nested = run_cli("--config", str(elsewhere), "memory", "status", home=home)
    assert nested.returncode == 0, nested.stderr
    fake_llm.push(Reply(content="from the -c config"))
    turn = run_cli("-c", str(elsewhere), "agent", "-m", "hi", home=home)
    assert turn.returncode == 0, turn.stderr
    assert turn.stdout == "from the -c config\n"
    assert not (home / "config.json").exists()  # the default path was never used


def test_subcommand_config_wins_over_the_root_one(home: Path, fake_llm: FakeLLMServer) -> None:
    good = home / "good.json"
    good.write_text(json.dumps(config_dict(fake_llm.url)), encoding="utf-8")
    bad = home / "bad.json"
    bad.write_text('{"logging": {"level": "verbose"}}', encoding="utf-8")
    result = run_cli("-c", str(bad), "status", "-c", str(good), home=home)
    assert result.returncode == 0, result.stderr
    assert f"Config: {good}" in result.stdout


def test_shell_completion(home: Path) -> None:
    script = run_cli("--show-completion", "bash", home=home)
    assert script.returncode == 0 and "_NANOBOT_COMPLETE" in script.stdout, script.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(PYTHONPATH=str(REPO), NANOBOT_HOME=str(home), _NANOBOT_COMPLETE="complete_bash")
    for words, cword, expected in (("nanobot mem", "1", "memory"), ("nanobot memory rei", "2", "reindex")):
        done = subprocess.run([sys.executable, "-m", "nanobot"], env={**env, "COMP_WORDS": words,
                              "COMP_CWORD": cword}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.split() == [expected], done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("status",), {"NANOBOT_LOG_LEVEL": "verbose"}, "NANOBOT_LOG_LEVEL: unknown log level 'verbose'"),
        (("-c", "{cfg}", "gateway"), {}, "logging.level: Input should be"),
        (("agent", "-m", "hi", "-c", "{cfg}"), {}, "logging.level"),
        (("cron", "list", "-c", "{cfg}"), {}, "logging.level"),
        (("-c", "{nojson}", "status"), {}, "not valid JSON (line 1"),
    ],
)
def test_user_errors_exit_2_without_traceback(home: Path, args: tuple[str, ...], env: dict[str, str],
                                              expected: str) -> None:
    cfg = home / "c.json"
    cfg.write_text('{"logging": {"level": "verbose"}}', encoding="utf-8")
    nojson = home / "broken.json"
    nojson.write_text("{nope", encoding="utf-8")
    argv = [a.format(cfg=cfg, nojson=nojson) for a in args]
    result = run_cli(*argv, home=home, env=env)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""


def test_missing_credentials_exit_2_naming_the_key(home: Path) -> None:
    cfg = home / "c.json"
    cfg.write_text(json.dumps({"agents": {"defaults": {"provider": "openai", "model": "gpt-4o-mini"}}}))
    result = run_cli("agent", "-m", "hi", "-c", str(cfg), home=home)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "apiKey" in result.stderr or "API_KEY" in result.stderr, result.stderr


def test_a_second_gateway_is_a_user_error(home: Path, fake_llm: FakeLLMServer) -> None:
    from nanobot.service.state import GatewayLock

    cfg = home / "config.json"
    cfg.write_text(json.dumps(config_dict(fake_llm.url)), encoding="utf-8")
    (home / "workspace").mkdir()
    with GatewayLock(home / "workspace"):
        result = run_cli("gateway", home=home, timeout=90)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "Error:" in result.stderr


def test_a_config_path_that_is_no_regular_file_is_a_config_error(home: Path) -> None:
    """`-c /dev/zero` read until memory ran out, a FIFO blocked for ever, a folder was "cannot read
    (owned by another user?)"."""
    fifo = home / "config.fifo"
    os.mkfifo(fifo)
    for path, said in (("/dev/zero", "not a regular file"), (str(fifo), "not a regular file"),
                       (str(home), "a folder, not a config file")):
        result = run_cli("status", "-c", path, home=home, timeout=30)
        assert result.returncode == 2 and said in result.stderr, (path, result.stderr)


def test_a_tilde_the_shell_left_in_the_config_path_is_expanded(home: Path) -> None:
    """`--config=~/work.json`: the shell expands no ~ after `=`; the file was checked as expanded but
    read as ./~/work.json (missing: the defaults), so the job went into the default workspace."""
    user_home = home / "user"
    user_home.mkdir()
    (user_home / "work.json").write_text(json.dumps({"agents": {"defaults": {"workspace": str(home / "work-ws")}}}))
    env = {"HOME": str(user_home)}
    for args in (("cron", "add", "--config=~/work.json"), ("--config=~/work.json", "cron", "add")):
        result = run_cli(*args, "-m", "water the plants", "--every", "3600", home=home, env=env)
        assert result.returncode == 0, result.stderr
    jobs = json.loads((home / "work-ws" / "cron" / "jobs.json").read_text())
    assert len(jobs["jobs"]) == 2, jobs
    assert not (home / "workspace" / "cron" / "jobs.json").exists()


@pytest.mark.parametrize(
    ("config", "env", "named"),
    [
        ({"agents": {"defaults": {"workspace": "~nosuchuser4821/nanobot"}}}, {}, "agents.defaults.workspace"),
        ({"agents": {"defaults": {"workspace": "ws\u0000x"}}}, {}, "agents.defaults.workspace"),
        ({"logging": {"file": "~nosuchuser4821/nanobot.log"}}, {}, "logging.file"),
        ({}, {"NANOBOT_HOME": "~nosuchuser4821/nb"}, "NANOBOT_HOME"),
    ],
)
def test_a_path_no_file_can_have_is_a_config_error(
    home: Path, config: dict, env: dict[str, str], named: str
) -> None:
    """`~alice/…` on a machine without alice, or a NUL character: every command ended in a traceback
    and exit 1 (a restart loop under systemd), and doctor called the config valid."""
    path = home / "c.json"
    path.write_text(json.dumps(config))
    for args in (("status", "-c", str(path)), ("cron", "list", "-c", str(path))):
        result = run_cli(*args, home=home, env=env)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert named in result.stderr, result.stderr
    doctor = run_cli("doctor", "-c", str(path), "--timeout", "1", home=home, env=env)
    assert doctor.returncode in (1, 2) and "Traceback" not in doctor.stderr, doctor.stderr
    assert named in doctor.stdout + doctor.stderr
