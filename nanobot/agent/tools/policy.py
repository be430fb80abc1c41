"""Per-chat trust policy: what a tool call may do in the context it comes from.

Applied by the ToolRegistry to every call (built-in tools, sub-agents and MCP tools alike), so no
tool has to remember it. The context's trust comes from `ToolContext.trust` (group chats are
shared; private chats of allowed senders and the terminal are the owner's).

In a shared context, unless memory.shareInGroups is true:
- no tool reads or writes `memory/`, `sessions/`, `cron/` (the owner's jobs: the `cron` tool lists
  only this chat's) or the legacy root MEMORY.md / HISTORY.md (file tools by their resolved path,
  symlinks followed; memory_search / memory_get not at all);
- no tool reaches outside the workspace (but the built-in skills), whatever restrictToWorkspace says;
- `exec` runs only when tools.exec.inGroups is true, and then without those folders mounted;
- `cron` cannot add jobs (a job's turn runs later, outside this chat's trust), and `message`
  only answers in the chat it came from, attaching no private file.

A tool refused in a context whatever its arguments (`withheld`) is not offered to the model there.

Whatever memory.shareInGroups says, a shared context gets no tool this policy does not know (MCP
servers, which may read and write anything) and cannot change what steers the owner's own turns
(`OWNER_STEERING`: the bootstrap files, HEARTBEAT.md, skills/, and the dot-entries of the workspace
root, which is every command's HOME): the heartbeat would do a group member's tasks as the owner,
with every tool. Nor can it write the private paths (memory/: MEMORY.md is in the owner's system
prompt; shareInGroups lets groups see and search the memory, not change it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from nanobot.agent.tools.base import ToolContext, ToolError, expand_home
from nanobot.config.paths import (
    CRON_DIR,
    MEDIA_DIR,
    OWNER_STEERING,
    PRIVATE_PATHS,
    SESSIONS_DIR,
    media_prefix,
)
from nanobot.util.nofollow import FolderCheck

PATH_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir"})
MEMORY_TOOLS = frozenset({"memory_search", "memory_get", "save_memory"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
OPEN_TOOLS = frozenset({"web_fetch", "web_search", "spawn"})  # read nothing private themselves
PRIVATE = "the owner's memory and other chats' transcripts are private"
PRIVATE_WRITES = "the owner's memory, the transcripts and the jobs are written by nanobot and the owner only"
DOT_ENTRIES = "dot-files hold the owner's credentials and settings (the workspace is their commands' HOME)"
OUTSIDE = "only the workspace is shared (tools.restrictToWorkspace opens the disk to the owner's chats only)"
OTHER_CHATS_MEDIA = "media/ holds every chat's attachments; only this chat's own files are shared here"


class TrustPolicy:
    def __init__(
        self,
        workspace: Path,
        *,
        share_in_groups: bool = False,
        exec_in_groups: bool = False,
        readable_roots: tuple[Path, ...] = (),
    ) -> None:
        self.workspace = workspace.resolve()
        # outside the workspace, what a shared context may read whatever restrictToWorkspace says
        # (the built-in skills): the owner may open the whole disk to their own chats, not to groups
        self._readable_roots = [self.workspace, *(r.resolve() for r in readable_roots)]
        self.share_in_groups = share_in_groups
        self.exec_in_groups = exec_in_groups
        self._private = [self.workspace / p for p in PRIVATE_PATHS]
        # not memory, so never shared by memory.shareInGroups: every chat's transcripts, the jobs
        self._unshared = [self.workspace / SESSIONS_DIR, self.workspace / CRON_DIR]
        self._media = self.workspace / MEDIA_DIR
        self._steering = [self.workspace / d for d in OWNER_STEERING]

    def refusal(self, name: str, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Why this call is refused in its context, or None when it may run."""
        if not ctx.shared:
            return None
        media = args.get("media")
        for value in (args.get("path"), *(media if isinstance(media, list) else [media])):
            if isinstance(value, str) and "\x00" in value:  # no path has one; the checks below would misname it
                return "a path cannot contain a NUL byte"
        # A guest (a stranger let in by dmPolicy "open") has a group's trust in a private chat, and
        # never what the owner shares with the groups they are in.
        where = "in group chats" if ctx.is_group else "to guests (senders not on allowFrom)"
        shared_memory = ctx.owner_memory_allowed(self.share_in_groups)
        if name == "exec":
            if not self.exec_in_groups or ctx.guest:
                return f"exec is not available {where}" + ("" if ctx.guest else " (tools.exec.inGroups is false)")
            return None
        if name == "cron" and args.get("action") == "add":
            return f"scheduling jobs is not available {where}"
        if name == "message":
            channel, chat = args.get("channel") or ctx.channel, args.get("chat_id") or ctx.chat_id
            if (str(channel), str(chat)) != (ctx.channel, ctx.chat_id):
                return f"messages can only go to this chat {where}"
            media = args.get("media") or []
            for item in media if isinstance(media, list) else [media]:
                why = self._unreadable(item, ctx, shared_memory) if isinstance(item, str) else PRIVATE
                if why:
                    return f"{item!r} cannot be attached {where}: {why}"
            return None
        if name in WRITE_TOOLS:
            if ctx.guest:
                return f"{name} is not available {where}: the owner's files are read-only for them"
            raw = args.get("path")
            if not isinstance(raw, str) or self._under(raw, self._steering, dot_entries=True):
                return f"{raw!r} is read-only {where}: it holds instructions or settings for the owner's own turns"
            if self._outside(raw, [self.workspace]):  # the built-in skills are readable, never writable
                return f"{raw!r} is outside the workspace: nothing there is writable {where}"
            if self._under(raw, self._private):  # MEMORY.md is the owner's own system prompt
                return f"{raw!r} is read-only {where}: {PRIVATE_WRITES}"
        if name in PATH_TOOLS:
            raw = args.get("path", ".")
            why = self._unreadable(raw, ctx, shared_memory) if isinstance(raw, str) else None
            return f"'{raw}' is not readable {where}: {why}" if why else None
        if name in OPEN_TOOLS or name in ("cron",):
            return None
        if name in MEMORY_TOOLS:
            return None if shared_memory else f"{name} is not available {where}: {PRIVATE}" + (
                "" if ctx.guest else " (memory.shareInGroups is false)"
            )
        # whatever shareInGroups says: an MCP server may read the transcripts and write what steers
        # the owner's turns (HEARTBEAT.md), which this policy cannot see it do
        return (
            f"{name} is not available {where} (tools outside nanobot's own set may read private files)"
        )

    def withheld(self, names: set[str], ctx: ToolContext) -> set[str]:
        """The tools of `names` this policy refuses in `ctx` whatever their arguments: they are not
        offered there (a model offered `exec` in a group only learns it is refused by calling it)."""
        if not ctx.shared:
            return set()
        shared_memory = ctx.owner_memory_allowed(self.share_in_groups)
        known = PATH_TOOLS | MEMORY_TOOLS | OPEN_TOOLS | {"exec", "cron", "message"}
        refused = {name for name in names if name not in known}  # MCP tools
        if not self.exec_in_groups or ctx.guest:
            refused.add("exec")
        if not shared_memory:
            refused |= MEMORY_TOOLS
        if ctx.guest:
            refused |= WRITE_TOOLS
        return refused & names

    def _unreadable(self, raw: str, ctx: ToolContext, shared_memory: bool) -> str | None:
        """Why a shared context may not read or attach `raw`, or None: the transcripts and the jobs
        (whatever shareInGroups says), the owner's memory (unless shared), any dot-entry (the owner's
        commands keep credentials there), another chat's downloads."""
        if self._outside(raw):
            return OUTSIDE
        if self._under(raw, self._unshared) or (not shared_memory and self.is_private(raw)):
            return PRIVATE
        if self._under(raw, [], dot_entries=True):
            return DOT_ENTRIES
        if self._other_chats_media(raw, ctx):
            return OTHER_CHATS_MEDIA
        return None

    def landing_check(
        self, tool: str, ctx: ToolContext, name: str = "", *, attached: bool = False
    ) -> FolderCheck | None:
        """In a shared context, this policy asked again about where an open actually landed: the
        folder the kernel opened, plus the file's `name` ("" when the folder itself is opened), as
        the `path` of `tool` or, `attached`, as an attachment. None in an owner's context."""
        if not ctx.shared:
            return None

        def check(opened: Path) -> None:
            target = str(opened / name if name else opened)
            why = self.refusal(tool, {"media": [target]} if attached else {"path": target}, ctx)
            if why:
                raise PermissionError(errno.EACCES, why)

        return check

    def _other_chats_media(self, raw: str, ctx: ToolContext) -> bool:
        """Whether `raw` is media/ itself (every chat's attachments, named after their chats) or a
        download of another chat than this one."""
        if not self._under(raw, [self._media]):
            return False
        try:
            path = expand_home(raw)
        except ToolError:
            return True  # refuse rather than guess
        path = path if path.is_absolute() else self.workspace / path
        own = media_prefix(ctx.channel, ctx.chat_id)
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError, ValueError):
            return True  # a symlink loop or a NUL byte: refuse rather than guess
        for candidate in (Path(os.path.normpath(path)), resolved):
            if candidate.parent in (self._media, self._media.resolve()) and candidate.name.startswith(own):
                return False
        return True

    def _outside(self, raw: str, roots: list[Path] | None = None) -> bool:
        """Whether `raw`, by its spelling or by where its symlinks lead, lies outside `roots` (the
        workspace and the other roots a shared context may read)."""
        roots = self._readable_roots if roots is None else roots
        try:
            path = expand_home(raw)
        except ToolError:
            return True  # refuse rather than guess
        path = path if path.is_absolute() else self.workspace / path
        try:
            candidates = [Path(os.path.normpath(path)), path.resolve()]
        except (OSError, RuntimeError, ValueError):
            return True  # a symlink loop or a NUL byte: refuse rather than guess
        return any(not any(c.is_relative_to(r) for r in roots) for c in candidates)

    def is_private(self, raw: str) -> bool:
        """Whether `raw` (relative to the workspace or absolute) is one of the private paths (memory/,
        sessions/, cron/, the legacy root MEMORY.md / HISTORY.md), by its spelling or by where its
        symlinks lead."""
        return self._under(raw, self._private)

    def _under(self, raw: str, folders: list[Path], *, dot_entries: bool = False) -> bool:
        """Whether `raw` is one of `folders` or lies under one, by its spelling or by where its
        symlinks lead; with `dot_entries`, also in a dot-entry of the workspace at any depth (the
        root's are every command's HOME: .gitconfig, .config/ ... configure the owner's commands)."""
        try:
            path = expand_home(raw)
        except ToolError:
            return True  # refuse rather than guess
        path = path if path.is_absolute() else self.workspace / path
        candidates = [Path(os.path.normpath(path))]
        try:
            candidates.append(path.resolve())
        except (OSError, RuntimeError, ValueError):
            return True  # a symlink loop or a NUL byte: refuse rather than guess
        roots = [*folders, *(p.resolve() for p in folders)]
        if any(c.is_relative_to(r) for c in candidates for r in roots):
            return True
        return dot_entries and any(self._dot_entry(c) for c in candidates)

    def _dot_entry(self, path: Path) -> bool:
        """Whether `path` is or lies in a dot-entry of the workspace, at any depth: the root's are
        every command's HOME config, and deeper ones run code too (a repository's `.git/hooks`, a
        folder's `.envrc`) when the owner works there later."""
        parts = path.relative_to(self.workspace).parts if path.is_relative_to(self.workspace) else ()
        return any(part.startswith(".") and part not in (".", "..") for part in parts)
