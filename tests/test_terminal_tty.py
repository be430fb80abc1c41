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


def test_a_pasted_block_is_one_message_with_its_indentation(home: Path, fake_llm: FakeLLMServer) -> None:
    """A paste of several lines is one message (bracketed paste, turned on where readline has it
    off), and keeps the indentation of its first line (it was stripped, a pasted block of code lost
    its first indent)."""
    fake_llm.push(Reply(content="reviewed"))
    term = _agent(home, fake_llm)
    term.expect("You: ")
    pasted = "    if x:\n        return x / 0\n    return 1"
    term.send_raw(b"\x1b[200~" + pasted.encode() + b"\x1b[201~")  # as a terminal sends a paste
    term.send("")  # Enter
    term.expect("nanobot: reviewed")
    term.send("/exit")
    code, screen = term.finish()
    assert code == 0, screen[-2000:]
    assert _user_lines(home) == [pasted]
    assert len(fake_llm.requests) == 1


def _in_shell(home: Path, fake_llm: FakeLLMServer, command: str) -> Terminal:
    """`nanobot agent` run by a shell on the terminal, the shell going on after it (as a user's does)."""
    (home / "config.json").write_text(json.dumps(config_dict(fake_llm.url)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANOBOT_")}
    env.update(NANOBOT_HOME=str(home), PYTHONPATH=str(REPO), TERM="xterm")
    agent = f"{sys.executable} -m nanobot agent"
    script = f"trap true INT QUIT; {command.format(agent=agent)}; echo \"agent-exit=$?\"; sleep 30"
    return Terminal(["/bin/sh", "-c", script], env, home)


def _line_settings(term: Terminal) -> dict[str, bool]:
    import termios

    attrs = termios.tcgetattr(term.master)
    return {
        "echo": bool(attrs[3] & termios.ECHO),
        "canonical": bool(attrs[3] & termios.ICANON),
        "cr-is-enter": bool(attrs[0] & termios.ICRNL),
    }


def _agent_pid(shell_pid: int) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{shell_pid}/task/{shell_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("the shell started no agent")


def test_ctrl_c_or_sigterm_at_the_prompt_gives_the_terminal_back_as_it_was(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    """readline turns echo and line editing off while it waits for a line: a Ctrl-C (during a turn
    or at the prompt) or a SIGTERM left the user's shell with no echo and Enter not ending a line."""
    import signal

    fake_llm.push(Reply(content="slow", delay_s=5))
    term = _in_shell(home, fake_llm, "{agent}")
    before = _line_settings(term)
    assert all(before.values()), before
    term.expect("You: ")
    term.send("a question")
    time.sleep(1.0)  # the turn runs, readline waits for the next line
    term.send_raw(b"\x03")
    term.expect("agent-exit=130")
    assert _line_settings(term) == before

    term2 = _in_shell(home, fake_llm, "{agent}")
    term2.expect("You: ")
    os.kill(_agent_pid(term2.proc.pid), signal.SIGTERM)
    term2.expect("agent-exit=143")  # still ended by the signal
    assert _line_settings(term2) == before

    fake_llm.push(Reply(content="slow", delay_s=5))
    term3 = _in_shell(home, fake_llm, "{agent}")
    term3.expect("You: ")
    term3.send("another question")
    time.sleep(1.0)
    term3.send_raw(b"\x1c")  # Ctrl-\ (SIGQUIT) during the turn
    term3.expect("agent-exit=131")
    assert _line_settings(term3) == before
    for shell in (term, term2, term3):
        shell.proc.kill()
        shell.finish(timeout=5)


def test_a_reply_piped_on_while_the_user_types_loses_its_escape_sequences(
    home: Path, fake_llm: FakeLLMServer
) -> None:
    """`nanobot agent | tee chat.log`: stdout is a pipe but a person reads it; a steered model's
    OSC 52 (clipboard write), title change and screen clear went through raw."""
    fake_llm.push(Reply(content="Sure.\x1b]0;PWNED-TITLE\x07\x1b]52;c;ZWNobw==\x07\x1b[2J done"))
    term = _in_shell(home, fake_llm, "{agent} | cat")
    term.expect("You: ")
    term.send("hi")
    term.expect("done")
    term.send("/exit")
    term.expect("agent-exit=0")
    term.proc.kill()
    _, screen = term.finish(timeout=5)
    for sequence in ("\x1b]0;", "\x1b]52;", "\x1b[2J", "\x07"):
        assert sequence not in screen, (sequence, screen)


def _paste_mode_left_on(screen: str) -> bool:
    """Whether readline's last "bracketed paste on" (ESC[?2004h) was never followed by an "off"."""
    return screen.rfind("\x1b[?2004h") > screen.rfind("\x1b[?2004l")


def test_ctrl_c_or_sigterm_at_the_prompt_turn_bracketed_paste_off(home: Path, fake_llm: FakeLLMServer) -> None:
    """readline turns bracketed paste on while it waits for a line: after a Ctrl-C or a SIGTERM at
    the prompt a paste into the shell (or `cat`) came wrapped in ESC[200~ … ESC[201~."""
    import signal

    term = _in_shell(home, fake_llm, "{agent}")
    term.expect("You: ")
    term.send_raw(b"\x03")
    term.expect("agent-exit=130")
    term2 = _in_shell(home, fake_llm, "{agent}")
    term2.expect("You: ")
    os.kill(_agent_pid(term2.proc.pid), signal.SIGTERM)
    term2.expect("agent-exit=143")
    for shell in (term, term2):
        shell.proc.kill()
        _, screen = shell.finish(timeout=5)
        assert "\x1b[?2004h" in screen and not _paste_mode_left_on(screen), repr(screen[-300:])
        after_prompt = screen.split("You: ")[-1]
        assert after_prompt.startswith("\x1b[?2004l\r"), repr(after_prompt)  # the shell's next line starts afresh


def test_with_stdout_piped_a_typed_line_still_arrives_whole(home: Path, fake_llm: FakeLLMServer) -> None:
    """`nanobot agent | tee chat.log`: input() used the terminal's line buffer (readline needs
    descriptor 1 to be a terminal), which cut a line at 4,095 characters; the prompt went into the log."""
    fake_llm.push(Reply(content="got it"))
    log = home / "chat.log"
    term = _in_shell(home, fake_llm, "{agent} | tee " + str(log))
    term.expect("You: ")
    line = " ".join(f"word{i}" for i in range(1_000))  # ~6,900 characters
    term.send(line)
    term.expect("nanobot: got it")
    term.send("/exit")
    term.expect("agent-exit=0")
    term.proc.kill()
    term.finish(timeout=5)
    assert _user_lines(home) == [line]
    assert "nanobot: got it" in log.read_text() and "You: " not in log.read_text()


def test_ctrl_c_after_new_does_not_wait_for_a_slow_model(home: Path, fake_llm: FakeLLMServer) -> None:
    """After /new the memory work runs in the background; Ctrl-C then waited for it, silently, for up
    to two minutes while the model was slow. It is left for the next start."""
    fake_llm.push(Reply(content="noted"))
    term = _agent(home, fake_llm)
    term.expect("You: ")
    term.send("my cat is called Tom")
    term.expect("nanobot: noted")
    fake_llm.responder = lambda body: Reply(content="slow", delay_s=40)
    term.send("/new")
    term.expect("nanobot: ")
    time.sleep(0.5)
    started = time.monotonic()
    term.send_raw(b"\x03")
    code, screen = term.finish(timeout=30)
    assert code == 130, screen[-1000:]
    assert time.monotonic() - started < 15, screen[-1000:]


def test_when_the_reader_of_the_replies_leaves_the_chat_ends(home: Path, fake_llm: FakeLLMServer) -> None:
    """`nanobot agent | head`: once head left, every line typed still ran a turn nobody saw, and the
    chat never ended (the prompt went to the terminal, so nothing else failed)."""
    fake_llm.responder = lambda body: Reply(content="x" * 100_000)
    term = _in_shell(home, fake_llm, "{agent} | head -c 20 > /dev/null")
    term.expect("You: ")
    term.send("hi")
    term.expect("agent-exit=")  # the pipeline ended: head's status
    term.send("again")
    time.sleep(1.0)
    term.proc.kill()
    term.finish(timeout=5)
    assert len(fake_llm.requests) == 1


def test_ctrl_d_during_a_turn_prints_the_reply_and_no_prompt_after_it(home: Path, fake_llm: FakeLLMServer) -> None:
    """Ctrl-D while the model was answering ended the input, then the reply came with the prompt
    drawn again under it: the user's shell then started after a stray "You: " nobody could answer."""
    fake_llm.push(Reply(content="the late answer", delay_s=1.5))
    term = _in_shell(home, fake_llm, "{agent}")
    term.expect("You: ")
    term.send("a question")
    time.sleep(0.5)  # the turn runs, readline waits for the next line
    term.send_raw(b"\x04")
    term.expect("agent-exit=0")
    term.proc.kill()
    _, screen = term.finish(timeout=5)
    assert "nanobot: the late answer" in screen, repr(screen[-500:])
    after_reply = screen.split("nanobot: the late answer")[-1]
    assert "You: " not in after_reply, repr(after_reply)
