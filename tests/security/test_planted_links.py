"""Symlinks a sandboxed command plants in the workspace: the daemon, which runs outside the sandbox,
must never follow one.

In an owner's chat `exec` may write the workspace, links included (bubblewrap allows them). Each test
plants its links through the real exec tool, in a real turn the scripted model asks for, and then
has the daemon do what it does on its own: build the next prompt, append to HISTORY.md, take the
memory lock, read HEARTBEAT.md, store a received file. Before, each of these followed the link: the
provider key went into every prompt, HISTORY.md appended the model's text to ~/.bashrc, and a file a
group member sent was written to ~/.ssh/authorized_keys.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import BinaryIO

import pytest

from nanobot.agent.runtime import AgentRuntime
from nanobot.bus.queue import MessageBus
from nanobot.channels.base import Channel
from nanobot.channels.media import MediaItem
from nanobot.scheduler.heartbeat import HeartbeatService
from tests.agent_helpers import make_runtime
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.security.conftest import require_sandbox

PROVIDER_KEY = "sk-live-planted-link-key-0123456789"
ENV_MARKER = "daemon-environment-marker-5c1e"


def hidden(path: Path) -> str:
    """`path` as a shell word exec's path filter cannot read (the filter is only a first filter; what
    holds is the OS sandbox, which lets a link to anywhere be made in the workspace)."""
    return f'"$(echo {base64.b64encode(str(path).encode()).decode()} | base64 -d)"'


@pytest.fixture
def runtime(make_config, monkeypatch: pytest.MonkeyPatch) -> AgentRuntime:  # noqa: ANN001
    require_sandbox("bwrap")
    monkeypatch.setenv("NANOBOT_LINK_TEST_MARKER", ENV_MARKER)
    config, _ = make_config(**{"providers.openai.apiKey": PROVIDER_KEY, "tools.exec.sandbox": "bwrap"})
    return make_runtime(config)  # each test closes it inside its own event loop


async def plant(runtime: AgentRuntime, fake_llm: FakeLLMServer, command: str) -> None:
    """One owner turn in which the model runs `command` with exec (the attack)."""
    fake_llm.push(
        Reply(content=None, tool_calls=[{"name": "exec", "arguments": {"command": command}}]),
        Reply(content="done"),
    )
    await runtime.ask("tidy the workspace", session_key="telegram:555")


async def test_a_planted_bootstrap_or_memory_link_never_reaches_the_prompt(
    runtime: AgentRuntime, fake_llm: FakeLLMServer
) -> None:
    ws = runtime.config.workspace_path
    config = hidden(ws.parent / "config.json")
    await plant(
        runtime,
        fake_llm,
        f"ln -sf {config} AGENTS.md && ln -sf {hidden(Path('/proc/self/environ'))} SOUL.md && "
        f"mkdir -p memory skills/notes && ln -sf {config} memory/MEMORY.md && "
        f"ln -sf {config} skills/notes/SKILL.md",
    )
    for name in ("AGENTS.md", "SOUL.md", "memory/MEMORY.md", "skills/notes/SKILL.md"):
        assert (ws / name).is_symlink(), f"the attack did not plant {name}"
    fake_llm.requests.clear()
    fake_llm.push(Reply(content="hello"))
    await runtime.ask("hi", session_key="telegram:555")
    await runtime.aclose()
    sent = repr(fake_llm.requests)
    assert PROVIDER_KEY not in sent
    assert ENV_MARKER not in sent


@pytest.mark.parametrize("name", ["SOUL.md", "skills", "memory/MEMORY.md"])
async def test_a_link_pointing_at_itself_breaks_no_turn(
    runtime: AgentRuntime, fake_llm: FakeLLMServer, name: str
) -> None:
    """`ln -s SOUL.md SOUL.md` (one command of a steered model): the prompt's change check followed
    the link, failed with ELOOP, and every turn of every chat answered "something went wrong"."""
    ws = runtime.config.workspace_path
    folder, _, leaf = name.rpartition("/")
    await plant(runtime, fake_llm, f"{f'cd {folder} && ' if folder else ''}rm -rf {leaf} && ln -s {leaf} {leaf}")
    assert (ws / name).is_symlink(), f"the attack did not plant {name}"
    fake_llm.requests.clear()
    fake_llm.push(Reply(content="hello"), Reply(content="hello again"))
    try:
        assert await runtime.ask("hi", session_key="telegram:555") == "hello"
        assert await runtime.ask("hi", session_key="telegram:777") == "hello again"
    finally:
        await runtime.aclose()
    assert len(fake_llm.requests) == 2


async def test_history_through_a_planted_link_is_refused_and_the_target_untouched(
    runtime: AgentRuntime, fake_llm: FakeLLMServer
) -> None:
    bashrc = runtime.config.workspace_path.parent.parent / "bashrc"
    bashrc.write_text("# the owner's bashrc\n")
    await plant(runtime, fake_llm, f"mkdir -p memory && ln -sf {hidden(bashrc)} memory/HISTORY.md")
    assert (runtime.config.workspace_path / "memory" / "HISTORY.md").is_symlink()
    with pytest.raises(OSError, match="symbolic link"):
        runtime.memory.append_history("[2026-11-27 08:10] tidied up\ntouch ~/PWNED")
    await runtime.aclose()
    assert bashrc.read_text() == "# the owner's bashrc\n"


async def test_a_memory_folder_swapped_for_a_link_is_not_written_through(runtime: AgentRuntime) -> None:
    """The sandbox's read-only mounts inside memory/ keep a command from renaming it (EBUSY); the
    daemon does not rely on that: a memory/ that is a link is refused, never written through."""
    ws = runtime.config.workspace_path
    outside = ws.parent.parent / "elsewhere"
    outside.mkdir()
    (ws / "memory").rename(ws / "memory.old")
    (ws / "memory").symlink_to(outside)
    for write in (
        lambda: runtime.memory.append_history("[2026-11-27 08:10] an entry"),
        lambda: runtime.memory.write_memory("- a fact\n"),
        lambda: runtime.memory.write_session_note("topic", "a note"),
    ):
        with pytest.raises(PermissionError):
            write()
    await runtime.aclose()
    assert list(outside.iterdir()) == []


async def test_a_planted_lock_link_creates_nothing_outside(runtime: AgentRuntime, fake_llm: FakeLLMServer) -> None:
    target = runtime.config.workspace_path.parent.parent / "made-by-the-lock"
    await plant(runtime, fake_llm, f"mkdir -p memory && ln -sf {hidden(target)} memory/.lock")
    with pytest.raises(OSError, match="symbolic link"):
        runtime.memory.append_daily("- something")
    await runtime.aclose()
    assert not target.exists()


async def test_a_planted_heartbeat_link_is_not_read(runtime: AgentRuntime, fake_llm: FakeLLMServer) -> None:
    ws = runtime.config.workspace_path
    await plant(runtime, fake_llm, f"ln -sf {hidden(ws.parent / 'config.json')} HEARTBEAT.md")
    await runtime.aclose()
    assert (ws / "HEARTBEAT.md").is_symlink()

    async def never(_prompt: str, _target: tuple[str, str]) -> str | None:
        raise AssertionError("the heartbeat ran a turn on a planted link")

    async def deliver(_channel: str, _chat: str, _text: str) -> None: ...

    heartbeat = HeartbeatService(ws, 60, never, lambda: ("telegram", "555"), deliver)
    assert heartbeat.read_tasks() is None
    assert await heartbeat.tick() is None


class _Probe(Channel):
    name = "telegram"

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def _send_text(self, msg) -> None: ...  # noqa: ANN001
    async def _send_typing(self, chat_id: str) -> None: ...
    def _retry_delay(self, exc, attempt):  # noqa: ANN001, ANN202
        return None


async def test_a_download_never_writes_through_a_link_planted_for_its_name(
    runtime: AgentRuntime, fake_llm: FakeLLMServer
) -> None:
    """Telegram message ids are sequential: the next file's name is easy to guess."""
    ws = runtime.config.workspace_path
    keys = ws.parent.parent / "authorized_keys"
    await plant(
        runtime,
        fake_llm,
        f"mkdir -p media && for i in 100 101 102; do ln -sf {hidden(keys)} "
        "media/telegram_-100123_${i}_notes.txt; done",
    )
    await runtime.aclose()
    assert (ws / "media" / "telegram_-100123_101_notes.txt").is_symlink()

    async def fetch(_item: MediaItem, out: BinaryIO) -> None:
        out.write(b"ssh-ed25519 AAAAATTACKERKEY attacker@evil\n")

    channel = _Probe(type("Cfg", (), {"allow_from": ["*"]})(), MessageBus(), ws)
    got = await channel._download_media(
        "-100123", 101, [MediaItem("notes.txt", "text/plain", 44, False, None)], fetch, (OSError,)
    )
    assert not keys.exists()
    stored = Path(got.paths[0])
    assert stored.name == "telegram_-100123_101_notes-2.txt" and not stored.is_symlink()
    assert stored.read_bytes().startswith(b"ssh-ed25519") and oct(stored.stat().st_mode)[-3:] == "600"
