"""A folder swapped for a symlink between a tool's path check and its open must not lead outside.

The attack (reproduced end to end with a sub-agent racing an `exec` loop): a command in the
sandbox plants a symlink to a host folder (the daemon resolves it, not the sandbox) and swaps it
with a workspace folder while another turn's file tool is between `PathGuard.resolve()` and the
open. Here the swap happens exactly in that window, deterministically: the guard's resolve is
wrapped so the folder is replaced right after the check.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.files import PathGuard, file_tools
from nanobot.agent.tools.memory import MemoryGetTool
from nanobot.agent.tools.registry import ToolRegistry
from nanobot.memory.store import MemoryStore
from nanobot.timeutil import resolve_tz

CTX = ToolContext()
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- host key"


@pytest.fixture
def setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ToolRegistry, Path, Path, Callable[[], None]]:
    ws = tmp_path / "ws"
    (ws / "memory" / "notes").mkdir(parents=True)
    (ws / "a").mkdir()
    (ws / "a" / "id_ed25519").write_text("workspace copy\n")
    (ws / "memory" / "notes" / "key.md").write_text("workspace note\n")
    outside = tmp_path / "ssh"
    outside.mkdir()
    (outside / "id_ed25519").write_text(SECRET + "\n")
    (outside / "key.md").write_text(SECRET + "\n")
    memory = MemoryStore(ws, resolve_tz("UTC"))
    reg = ToolRegistry()
    for tool in file_tools(ws, memory, True, 2000):
        reg.register(tool)
    armed: list[str] = []

    def swap(folder: str) -> None:
        target = ws / folder
        target.rename(target.with_name(target.name + ".real"))
        target.symlink_to(outside)

    real_resolve = PathGuard.resolve

    def resolve_then_swap(self: PathGuard, raw: str) -> Path:
        path = real_resolve(self, raw)
        while armed:
            swap(armed.pop())
        return path

    monkeypatch.setattr(PathGuard, "resolve", resolve_then_swap)
    return reg, ws, outside, lambda folder="a": armed.append(folder)


async def test_read_file_does_not_follow_a_folder_swapped_after_the_check(setup) -> None:
    reg, _ws, _outside, arm = setup
    arm()
    result = await reg.execute("read_file", {"path": "a/id_ed25519"}, CTX)
    assert SECRET not in result
    assert result.startswith("Error:") and "outside" in result


async def test_write_file_does_not_land_outside_after_a_swap(setup) -> None:
    reg, _ws, outside, arm = setup
    arm()
    result = await reg.execute(
        "write_file", {"path": "a/authorized_keys", "content": "ssh-ed25519 AAAA x"}, CTX
    )
    assert result.startswith("Error:")
    assert sorted(p.name for p in outside.iterdir()) == [
        "id_ed25519",
        "key.md",
    ]  # nothing written, no temp file


async def test_edit_file_does_not_read_or_write_outside_after_a_swap(setup) -> None:
    reg, _ws, outside, arm = setup
    arm()
    args = {"path": "a/id_ed25519", "old_text": "host key", "new_text": "changed"}
    result = await reg.execute("edit_file", args, CTX)
    assert result.startswith("Error:")
    assert (outside / "id_ed25519").read_text() == SECRET + "\n"


async def test_list_dir_does_not_list_a_folder_swapped_in(setup) -> None:
    reg, _ws, _outside, arm = setup
    arm()
    result = await reg.execute("list_dir", {"path": "a"}, CTX)
    assert "id_ed25519" not in result and result.startswith("Error:")


async def test_memory_write_does_not_land_outside_after_a_swap(setup) -> None:
    reg, _ws, outside, arm = setup
    arm("memory/notes")
    result = await reg.execute("write_file", {"path": "memory/notes/key.md", "content": "overwritten"}, CTX)
    assert result.startswith("Error:")
    assert (outside / "key.md").read_text() == SECRET + "\n"


async def test_memory_get_does_not_follow_a_folder_swapped_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    (ws / "memory" / "notes").mkdir(parents=True)
    (ws / "memory" / "notes" / "key.md").write_text("workspace note\n")
    outside = tmp_path / "ssh"
    outside.mkdir()
    (outside / "key.md").write_text(SECRET + "\n")

    class Index:  # what MemoryGetTool.resolve reads of the index
        workspace = ws

        class config:
            include_sessions = False

    tool = MemoryGetTool(Index())  # type: ignore[arg-type]
    real = MemoryGetTool.resolve

    def resolve_then_swap(self: MemoryGetTool, raw: str) -> tuple[str, Path]:
        found = real(self, raw)
        notes = ws / "memory" / "notes"
        notes.rename(notes.with_name("notes.real"))
        notes.symlink_to(outside)
        return found

    monkeypatch.setattr(MemoryGetTool, "resolve", resolve_then_swap)
    with pytest.raises(ToolError, match="outside"):
        await tool.execute(CTX, path="memory/notes/key.md")


async def test_a_group_cannot_swap_its_way_into_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With exec allowed in groups, a group's command can plant `a -> memory` and swap it in after the
    trust policy checked the path's spelling: the open itself must refuse memory/ and sessions/."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "sessions").mkdir()
    (ws / "memory" / "MEMORY.md").write_text(SECRET + "\n")
    (ws / "a").mkdir()
    (ws / "a" / "MEMORY.md").write_text("group notes\n")
    private = (ws / "memory", ws / "sessions")
    reg = ToolRegistry()
    for tool in file_tools(ws, MemoryStore(ws, resolve_tz("UTC")), True, 2000, (), private):
        reg.register(tool)
    group, owner = ToolContext(is_group=True), ToolContext()
    assert await reg.execute("read_file", {"path": "a/MEMORY.md"}, group) == "group notes\n"
    real_resolve = PathGuard.resolve

    def resolve_then_swap(self: PathGuard, raw: str) -> Path:
        path = real_resolve(self, raw)
        if (ws / "a").is_dir() and not (ws / "a").is_symlink():
            (ws / "a").rename(ws / "a.real")
            (ws / "a").symlink_to(ws / "memory")
        return path

    monkeypatch.setattr(PathGuard, "resolve", resolve_then_swap)
    out = await reg.execute("read_file", {"path": "a/MEMORY.md"}, group)
    assert SECRET not in out and out.startswith("Error:"), out
    (ws / "a").unlink()
    (ws / "a.real").rename(ws / "a")  # and once more, for a write
    out = await reg.execute("write_file", {"path": "a/MEMORY.md", "content": "group rules"}, group)
    assert out.startswith("Error:") and (ws / "memory" / "MEMORY.md").read_text() == SECRET + "\n"
    # swapped between the policy's check and the tool's resolve: the path now resolves into memory/
    monkeypatch.setattr(PathGuard, "resolve", real_resolve)
    assert (ws / "a").is_symlink()  # this registry has no policy in front: the tool alone decides
    out = await reg.execute("write_file", {"path": "a/MEMORY.md", "content": "group rules"}, group)
    assert out.startswith("Error:") and (ws / "memory" / "MEMORY.md").read_text() == SECRET + "\n"
    assert SECRET in await reg.execute("read_file", {"path": "memory/MEMORY.md"}, owner)  # the owner may


async def test_paths_checked_and_opened_alike_still_work(setup) -> None:
    """No swap: in-workspace symlinks keep working (they are resolved before the open)."""
    reg, ws, _outside, _arm = setup
    (ws / "b").symlink_to(ws / "a")
    assert await reg.execute("read_file", {"path": "b/id_ed25519"}, CTX) == "workspace copy\n"
    assert (await reg.execute("write_file", {"path": "b/new.txt", "content": "x"}, CTX)).startswith("Wrote")
    assert (ws / "a" / "new.txt").read_text() == "x"
    listing = await reg.execute("list_dir", {"path": "."}, CTX)
    assert "a/" in listing.splitlines() and f"b -> {ws / 'a'}" in listing.splitlines()
