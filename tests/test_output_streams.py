"""stdout carries only the reply, at any verbosity; debug logs carry no secret and no prompt text
unless `logging.prompts` is on (then masked). Real CLI subprocesses against the fake LLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import config_dict, run_cli

SECRET = "sk-test-7f3a9c1e5b2d8f4a6c0e"
QUESTION = "Where did I park the PURPLE-ELEPHANT-42?"
MEMORY_FACT = "The user's locker code is MEMORY-MARKER-9177."
REPLY = "In the north garage, level 2."

# Every provider route the CLI can take to an OpenAI-compatible server: the direct openai SDK client
# (the default) and litellm.
ROUTES: dict[str, dict[str, Any]] = {"direct": {}, "litellm": {"providers.custom.via": "litellm"}}


def _setup(home: Path, url: str, route: dict[str, Any], prompts: bool = False) -> None:
    data = config_dict(url, **{"providers.custom.apiKey": SECRET, "logging.prompts": prompts, **route})
    (home / "config.json").write_text(json.dumps(data), encoding="utf-8")
    memory = home / "workspace" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_text(f"# Memory\n\n- {MEMORY_FACT}\n", encoding="utf-8")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_verbose_changes_stderr_only(home: Path, fake_llm, route: str) -> None:
    _setup(home, fake_llm.url, ROUTES[route])
    fake_llm.push(REPLY, REPLY)
    quiet = run_cli("agent", "-m", QUESTION, home=home)
    verbose = run_cli("-v", "agent", "-m", QUESTION, home=home)
    assert quiet.returncode == 0, quiet.stderr
    assert verbose.returncode == 0, verbose.stderr
    assert quiet.stdout == verbose.stdout == REPLY + "\n"
    assert "DEBUG" in verbose.stderr  # the debug lines are there, on stderr
    for private in (SECRET, "PURPLE-ELEPHANT", "MEMORY-MARKER", REPLY):
        assert private not in verbose.stderr, private


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_prompt_logging_is_opt_in_and_masked(home: Path, fake_llm, route: str) -> None:
    _setup(home, fake_llm.url, ROUTES[route], prompts=True)
    fake_llm.push(REPLY)
    verbose = run_cli("-v", "agent", "-m", QUESTION, home=home)
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == REPLY + "\n"
    assert "PURPLE-ELEPHANT-42" in verbose.stderr
    assert "MEMORY-MARKER-9177" in verbose.stderr
    assert REPLY in verbose.stderr
    assert SECRET not in verbose.stderr


def test_a_servers_error_text_cannot_drive_the_operators_terminal(home: Path, fake_llm) -> None:  # noqa: ANN001
    """A provider's error body quoted in the log line reached the terminal raw: a screen clear, a
    clipboard write (OSC 52) and a window title."""
    from tests.fakes.llm_server import Reply

    _setup(home, fake_llm.url, {"agents.defaults.llmMaxRetries": 0})
    hostile = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x9b31m bad request"
    fake_llm.push(Reply(status=400, error_message=hostile))
    result = run_cli("agent", "-m", QUESTION, home=home)
    assert result.returncode == 1
    assert "bad request" in result.stderr  # the error is still told
    assert not any(c in result.stderr for c in "\x1b\x07\x9b"), repr(result.stderr)


def test_a_servers_error_text_cannot_forge_a_log_entry(home: Path, fake_llm) -> None:  # noqa: ANN001
    """A newline in a provider's error body made the rest read as an entry of its own; stderr lines
    carried neither a date nor a zone (`docker compose logs` adds none)."""
    import re

    from tests.fakes.llm_server import Reply

    _setup(home, fake_llm.url, {"agents.defaults.llmMaxRetries": 0})
    fake_llm.push(Reply(status=400, error_message="bad request\n00:00:00 INFO    nanobot.fake FORGED LINE"))
    result = run_cli("agent", "-m", QUESTION, home=home, env={"JOURNAL_STREAM": ""})
    lines = result.stderr.splitlines()
    forged = [line for line in lines if "FORGED LINE" in line]
    assert forged and all(line.startswith("    ") for line in forged), result.stderr
    stamped = [line for line in lines if " WARNING " in line]
    assert stamped and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} ", line) for line in stamped)


def test_what_others_wrote_is_listed_without_terminal_controls(home: Path) -> None:
    """`memory search` printed a chat message's escape sequences raw: whoever's words reach a
    transcript (a group member, a model through save_memory) could write the owner's clipboard."""
    sessions = home / "workspace" / "sessions"
    sessions.mkdir(parents=True)
    hostile = "the zebra password \x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[2J done"
    (sessions / "telegram_5.jsonl").write_text(
        json.dumps({"role": "user", "content": hostile, "timestamp": "2026-11-01T10:00:00+00:00"}) + "\n",
        encoding="utf-8",
    )
    result = run_cli("memory", "search", "zebra", home=home, env={"NANOBOT_MEMORY__SEARCH__EMBEDDING_PROVIDER": "none"})
    assert result.returncode == 0 and "zebra password" in result.stdout, result.stdout + result.stderr
    assert not any(c in result.stdout + result.stderr for c in "\x1b\x07"), repr(result.stdout)


def test_library_stream_handlers_are_rerouted() -> None:
    """A library that installs its own stream handler (as litellm does) ends up in our sink."""
    import io
    import logging

    from nanobot.logs import route_library_logging, setup_logging

    stray = io.StringIO()
    lib = logging.getLogger("LiteLLM")
    lib.addHandler(logging.StreamHandler(stray))
    try:
        setup_logging("WARNING")
        route_library_logging()
        assert not [h for h in lib.handlers if isinstance(h, logging.StreamHandler)]
        assert lib.propagate
        lib.warning("through our sink")
        assert stray.getvalue() == ""
    finally:
        for handler in list(lib.handlers):
            lib.removeHandler(handler)


@pytest.mark.parametrize("library", ["telegram.ext", "discord.gateway", "discord.http"])
def test_chat_libraries_keep_chat_text_out_of_a_debug_log(tmp_path: Path, library: str) -> None:
    """At DEBUG discord.py logs every gateway event and REST body, chat text included; with
    `logging.prompts` off no chat text may reach the log (Telegram's library was held back, Discord's
    was not)."""
    import logging

    from loguru import logger

    from nanobot.logs import route_library_logging, setup_logging

    log_file = tmp_path / "nanobot.log"
    try:
        setup_logging("DEBUG", file=str(log_file), prompts=False)
        route_library_logging()
        logging.getLogger(library).debug("WebSocket Event: {'content': 'PRIVATE-CHAT-TEXT'}")
        logging.getLogger(library).info("connected")
        logger.complete()
    finally:
        setup_logging("WARNING", prompts=False)
    text = log_file.read_text(encoding="utf-8")
    assert "connected" in text and "PRIVATE-CHAT-TEXT" not in text


def test_log_file_settings_as_users_write_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`logging.file: "~/nblogs/nanobot.log"` wrote into a folder named "~" in the working directory;
    a rotation loguru cannot read crashed the gateway with a traceback and exit 1 (restarted in a loop
    by systemd), where a config error exits 2."""
    from loguru import logger

    from nanobot.errors import ConfigError
    from nanobot.logs import setup_logging

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    try:
        setup_logging("INFO", file="~/nblogs/nanobot.log")
        logger.warning("into the log")
        logger.complete()
        assert "into the log" in (home / "nblogs" / "nanobot.log").read_text(encoding="utf-8")
        assert not (cwd / "~").exists()
        with pytest.raises(ConfigError, match="logging.rotation"):
            setup_logging("INFO", file=str(tmp_path / "x.log"), rotation="ten megs")
    finally:
        setup_logging("WARNING", prompts=False)


def test_a_reply_written_to_a_pipe_or_file_carries_no_terminal_controls(home: Path, fake_llm) -> None:  # noqa: ANN001
    """`nanobot agent -m … | tee out.txt` passed a steered model's title change, screen clear and
    clipboard write (OSC 52) on raw: tee shows them on the terminal, `cat out.txt` later too."""
    from tests.fakes.llm_server import Reply

    _setup(home, fake_llm.url, {})
    fake_llm.push(Reply(content="Sure.\x1b]0;PWNED-TITLE\x07\x1b]52;c;ZWNobw==\x07\x1b[2J done\tok"))
    result = run_cli("agent", "-m", QUESTION, home=home)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Sure.]0;PWNED-TITLE]52;c;ZWNobw==[2J done\tok\n", repr(result.stdout)


def test_a_reader_that_leaves_early_ends_the_command_quietly(home: Path, fake_llm) -> None:  # noqa: ANN001
    """`nanobot agent -m hi | head -c 10` printed "Error: [Errno 32] Broken pipe" and exited 1."""
    from tests.conftest import REPO
    from tests.fakes.llm_server import Reply

    _setup(home, fake_llm.url, {})
    fake_llm.push(Reply(content="x" * 200_000))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO))
    script = f'{sys.executable} -m nanobot agent -m hi | head -c 10 > /dev/null; echo "status=${{PIPESTATUS[0]}}"'
    result = subprocess.run(
        ["bash", "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "status=141", result.stdout + result.stderr
    assert "Broken pipe" not in result.stderr and "Error" not in result.stderr, result.stderr
