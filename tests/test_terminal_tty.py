"""`nanobot agent` on a real pseudo-terminal, against the fake model: what a reply can do to the
screen, Ctrl-C during a turn, and a long pasted line."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.conftest import REPO, config_dict
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.terminal import Terminal


def _agent(home: Path, fake_llm: FakeLLMServer) -> Terminal:
    (home / "config.json").write_text(json.dumps(config_dict(fake_llm.url)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO), TERM="xterm")
    return Terminal([sys.executable, "-m", "nanobot", "agent"], env, home)


def _user_lines(home: Path) -> list[str]:
    path = home / "workspace" / "sessions" / "cli_direct.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [m["content"] for m in lines if m.get("role") == "user"]


def test_a_reply_cannot_drive_the_terminal_and_comes_above_the_prompt(home: Path, fake_llm: FakeLLMServer) -> None:
    """A steered model's reply reached the terminal raw: it could retitle the window, clear the
    screen, hide text and write the clipboard (OSC 52). The prompt came before the reply, none after."""
    attack = "Sure.\x1b]0;PWNED-TITLE\x07\x1b[2J\x1b[8mHIDDEN-TEXT\x1b[0m\x1b]52;c;ZWNobw==\x07 done"
    fake_llm.push(Reply(content=attack))
    term = _agent(home, fake_llm)
    term.expect("You: ")
    term.send("hi")
    term.expect("nanobot: Sure.")
    term.expect("You: ")  # drawn again after the reply
    term.send("/exit")
    code, screen = term.finish()
    assert code == 0, screen
    for sequence in ("\x1b]0;", "\x1b[2J", "\x1b[8m", "\x1b]52;", "\x07"):
        assert sequence not in screen, (sequence, screen)
    assert "HIDDEN-TEXT" in screen and "done" in screen


def test_ctrl_c_stops_the_turn_at_once(home: Path, fake_llm: FakeLLMServer) -> None:
    """The turn went on for 3 s after Ctrl-C: the tool call the model sent then still ran, and a reply
    nobody saw was saved as if it had been shown."""
    write = {"name": "write_file", "arguments": json.dumps({"path": "after.txt", "content": "x"})}
    fake_llm.push(Reply(content=None, tool_calls=[write], delay_s=2.0), Reply(content="NEVER-SHOWN"))
    term = _agent(home, fake_llm)
    term.expect("You: ")
    term.send("do the thing")
    time.sleep(1.0)  # the model is still thinking
    term.send_raw(b"\x03")
    code, screen = term.finish()
    assert code == 130, screen
    time.sleep(2.0)  # when the slow answer would have come
    assert not (home / "workspace" / "after.txt").exists()
    assert "NEVER-SHOWN" not in (home / "workspace" / "sessions" / "cli_direct.jsonl").read_text()


def test_a_long_pasted_line_arrives_whole(home: Path, fake_llm: FakeLLMServer) -> None:
    """The terminal's line buffer cut a pasted line at 4,095 characters, without a word."""
    fake_llm.push(Reply(content="got it"))
    term = _agent(home, fake_llm)
    term.expect("You: ")
    line = " ".join(f"word{i}" for i in range(1_000))  # ~6,900 characters
    term.send(line)
    term.expect("nanobot: got it")
    term.send("/exit")
    code, screen = term.finish()
    assert code == 0, screen[-2000:]
    assert _user_lines(home) == [line]
