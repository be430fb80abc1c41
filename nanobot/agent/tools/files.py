"""File tools: read_file, write_file, edit_file, list_dir — workspace-restricted by default.

Writes under `memory/` go through the MemoryStore (its lock, its atomic writes); `sessions/`,
`cron/` and the memory index are never writable by tools (one owner per file on disk).

A path is checked when it is resolved and again when it is opened: every read, write and listing
goes through a descriptor of the folder that was actually opened, which must lie under the
workspace (or the read-only root it was resolved to), so a folder swapped for a symlink in between
by a concurrent command cannot turn a checked path into ~/.ssh. In a shared (group or guest)
context the trust policy is also asked about where the open actually landed (the folder the kernel
opened, plus the file's name): a folder swapped for a link to the workspace root, skills/ or media/
between the check and the open cannot turn `notes/d/AGENTS.md` into the owner's AGENTS.md.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

from loguru import logger

from nanobot.agent.tools.base import Tool, ToolContext, ToolError, expand_home
from nanobot.agent.tools.policy import TrustPolicy
from nanobot.config.paths import OWNER_STEERING, is_nanobot_owned
from nanobot.memory.store import MemoryStore
from nanobot.util.fs import PRIVATE_FILE_MODE, atomic_write
from nanobot.util.nofollow import FolderCheck, open_folder_beneath, read_regular_bytes
from nanobot.util.text import decode_text, rewrite_problem, truncate_head

MAX_READ_CHARS = 100_000
MAX_LIST_ENTRIES = 500


class PathGuard:
    """Resolves tool paths against the workspace and enforces restrictToWorkspace.

    `read_only_roots` (the built-in skills) may be read although they are outside the workspace.
    """

    def __init__(
        self,
        workspace: Path,
        restrict: bool,
        read_only_roots: tuple[Path, ...] = (),
        private_in_groups: tuple[Path, ...] = (),
        policy: TrustPolicy | None = None,
    ) -> None:
        self.workspace = workspace.resolve()
        self.restrict = restrict
        self.read_only_roots = tuple(r.resolve() for r in read_only_roots)
        self.private_in_groups = private_in_groups
        self.policy = policy

    def avoid(self, ctx: ToolContext) -> tuple[Path, ...]:
        """Folders the open must not lead into for this context: in a group chat, the private ones
        (the trust policy checked the path's spelling; a folder swapped for a link to memory/ since
        is refused here)."""
        return self.private_in_groups if ctx.shared else ()

    def resolve_readable(self, raw: str) -> Path:
        try:
            return self.resolve(raw)
        except ToolError:
            if not isinstance(raw, str) or not raw.strip() or "\x00" in raw:
                raise
            path = expand_home(raw).resolve()
            if any(path.is_relative_to(root) for root in self.read_only_roots):
                return path
            raise

    def resolve(self, raw: str) -> Path:
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path must be a non-empty string")
        if "\x00" in raw:
            raise ToolError("path contains a NUL byte")
        path = expand_home(raw)
        path = (path if path.is_absolute() else self.workspace / path).resolve()
        if self.restrict and not self.inside(path):
            raise ToolError(f"path '{raw}' is outside the workspace ({self.workspace}); access denied")
        return path

    def open_limits(
        self, path: Path, ctx: ToolContext, tool: str, *, folder: bool = False, attached: bool = False
    ) -> tuple[Path, tuple[Path, ...], FolderCheck | None]:
        """(the folder an open of `path` must still lie under, the folders it must not lead into,
        the trust policy's check of the folder it actually opens - shared contexts only). `folder`:
        `path` is the folder opened itself (a listing), not a file in it; `attached`: the file is
        opened to be sent as an attachment."""
        if not self.restrict:
            root = Path(os.sep)
        elif self.inside(path):
            root = self.workspace
        else:
            root = next((r for r in self.read_only_roots if path.is_relative_to(r)), self.workspace)
        check = (
            self.policy.landing_check(tool, ctx, "" if folder else path.name, attached=attached)
            if self.policy
            else None
        )
        return root, self.avoid(ctx), check

    def inside(self, path: Path) -> bool:
        try:
            path.resolve().relative_to(self.workspace)
            return True
        except ValueError:
            return False

    def check_writable(self, path: Path) -> None:
        if not self.inside(path):
            return
        rel = path.relative_to(self.workspace)
        if rel.parts and is_nanobot_owned(rel):
            raise ToolError(f"'{rel}' is managed by nanobot itself and cannot be written by tools")


class _FileTool(Tool):
    def __init__(self, guard: PathGuard, memory: MemoryStore, max_bytes: int) -> None:
        self.guard = guard
        self.memory = memory
        self.max_bytes = max_bytes

    def _write(self, ctx: ToolContext, path: Path, text: str) -> None:
        self.guard.check_writable(path)
        if len(text.encode("utf-8")) > self.max_bytes:
            raise ToolError(f"content is larger than the {self.max_bytes}-byte limit")
        if self.memory.is_memory_path(path):
            if ctx.shared:  # the policy saw another path: a link swapped in since leads here
                raise ToolError("the owner's memory cannot be changed from a shared chat")
            try:
                self.memory.write_file(str(path.relative_to(self.memory.dir.resolve())), text)
            except ValueError as exc:
                raise ToolError(str(exc)) from None
            except OSError as exc:  # a folder, a full disk: the old file stays
                raise ToolError(f"cannot write {path.name}: {exc.strerror or exc}") from None
            return
        try:
            # atomic: a full disk or a read-only workspace leaves the old file, never half a new one
            root, avoid, check = self.guard.open_limits(path, ctx, self.name)
            self._keep_steering_version(ctx, path)
            landed = self._landing_check(path.name, check)
            atomic_write(path, text, _kept_mode(path), fsync=False, beneath=root, avoid=avoid, check=landed)
        except OSError as exc:
            raise ToolError(f"cannot write {path.name}: {exc.strerror or exc}") from None

    def _landing_check(self, name: str, policy_check: FolderCheck | None) -> FolderCheck:
        """The rules above asked again about the folder the write's open landed in: a folder a
        command swaps for a link to sessions/ or memory/ right after the path was checked (an
        owner's chat, too) must not let the write reach nanobot's own files or bypass memory's."""

        def check(folder: Path) -> None:
            self.guard.check_writable(folder / name)
            if self.memory.is_memory_path(folder / name):
                raise ToolError(f"'{name}': a link swapped in while writing leads into memory/; not written")
            if policy_check is not None:
                policy_check(folder)

        return check

    def _keep_steering_version(self, ctx: ToolContext, path: Path) -> None:
        """Before a file that steers the owner's turns is replaced, keep the version there now, and
        say so in the log (such a change lasts: every later prompt carries it)."""
        if not self.guard.inside(path) or not path.is_file():
            return
        rel = path.resolve().relative_to(self.guard.workspace)
        if not rel.parts or rel.parts[0] not in OWNER_STEERING:
            return
        try:
            root, avoid, check = self.guard.open_limits(path, ctx, self.name)
            data = read_regular_bytes(path, beneath=root, avoid=avoid, max_bytes=self.max_bytes * 4, check=check)
            self.memory.keep_steering_version(rel.as_posix(), data)
        except OSError as exc:  # the write goes on: refusing it would not bring the version back
            logger.warning("{} changes {}: its earlier version could not be kept: {}", self.name, rel, exc)
            return
        logger.info("{} changes {}: its earlier version is kept in memory/.backups/steering/", self.name, rel)

    def _read(self, ctx: ToolContext, path: Path, raw: str, max_bytes: int) -> str:
        """The text of the file `path` resolved to, opened without following a link swapped in since."""
        # a Windows-1252 MEMORY.md edited here kept U+FFFD for its accents
        return decode_text(self._read_bytes(ctx, path, raw, max_bytes))

    def _read_bytes(self, ctx: ToolContext, path: Path, raw: str, max_bytes: int) -> bytes:
        try:
            root, avoid, check = self.guard.open_limits(path, ctx, self.name)
            data = read_regular_bytes(path, beneath=root, avoid=avoid, max_bytes=max_bytes, check=check)
        except FileNotFoundError:
            raise ToolError(f"file not found: {raw}") from None
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise ToolError(
                    f"{exc.strerror}: too large for this tool; work on it in parts via exec"
                ) from None
            raise ToolError(f"cannot read {raw}: {exc.strerror or exc}") from None
        return data


def _kept_mode(path: Path) -> int:
    """The mode a rewritten file keeps: its owner's bits (a script stays executable; an edit made
    deploy.sh 0600), never group or other ones; a new file is private."""
    try:
        st = os.lstat(path)
    except OSError:
        return PRIVATE_FILE_MODE
    return (stat.S_IMODE(st.st_mode) & 0o700) | 0o600 if stat.S_ISREG(st.st_mode) else PRIVATE_FILE_MODE


class ReadFileTool(_FileTool):
    name = "read_file"
    description = "Read a text file. Relative paths are inside the workspace."
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines"},
        },
        "required": ["path"],
    }

    async def execute(
        self, ctx: ToolContext, path: str, offset: int = 1, limit: int | None = None, **_: Any
    ) -> str:
        target = self.guard.resolve_readable(path)
        text = self._read(ctx, target, path, self.max_bytes * 10)
        if offset > 1 or limit:
            lines = text.splitlines(keepends=True)
            if lines and offset > len(lines):  # "(empty file)" here had a model overwrite the file
                return f"(no lines from line {offset} on: the file has {len(lines)} lines)"
            text = "".join(lines[offset - 1 : offset - 1 + limit if limit else None])
        marker = "\n\n[... {omitted} more characters; use offset/limit to read on]"
        return truncate_head(text, MAX_READ_CHARS, marker) or "(empty file)"


class WriteFileTool(_FileTool):
    name = "write_file"
    description = "Create or overwrite a text file (parent folders are created)."
    parameters = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    }

    async def execute(self, ctx: ToolContext, path: str, content: str, **_: Any) -> str:
        target = self.guard.resolve(path)
        self._write(ctx, target, content)
        return f"Wrote {len(content)} characters to {path}"


class EditFileTool(_FileTool):
    name = "edit_file"
    description = "Replace an exact piece of text in a file (it must occur exactly once unless replace_all)."
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "old_text": {"type": "string"},
            "new_text": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        "required": ["path", "old_text", "new_text"],
    }

    async def execute(
        self, ctx: ToolContext, path: str, old_text: str, new_text: str, replace_all: bool = False, **_: Any
    ) -> str:
        target = self.guard.resolve(path)
        self.guard.check_writable(target)
        # the result must fit the write limit, so a larger file is refused before it is read
        data = self._read_bytes(
            ctx, target, path, self.max_bytes + max(0, len(old_text.encode()) - len(new_text.encode()))
        )
        problem = rewrite_problem(data)
        if problem:  # written back as UTF-8, every line it did not touch would be garbled for good
            raise ToolError(
                f"{path} is not UTF-8 and {problem}: an edit would garble its other lines; convert it "
                "first (exec: iconv -f <encoding> -t UTF-8) or write it whole with write_file"
            )
        text = decode_text(data)
        count = text.count(old_text) if old_text else 0
        if count == 0:
            raise ToolError("old_text was not found in the file (it must match exactly, whitespace included)")
        if count > 1 and not replace_all:
            raise ToolError(f"old_text occurs {count} times; give more context or set replace_all")
        self._write(
            ctx,
            target,
            text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1),
        )
        return f"Replaced {count if replace_all else 1} occurrence(s) in {path}"


class ListDirTool(_FileTool):
    name = "list_dir"
    description = "List a folder's entries (folders end with /)."
    parameters = {"type": "object", "properties": {"path": {"type": "string"}}, "required": []}

    async def execute(self, ctx: ToolContext, path: str = ".", **_: Any) -> str:
        target = self.guard.resolve_readable(path)
        root, avoid, check = self.guard.open_limits(target, ctx, self.name, folder=True)
        try:
            folder = open_folder_beneath(root, target, avoid, check)
        except (NotADirectoryError, FileNotFoundError):
            raise ToolError(f"not a folder: {path}") from None
        except OSError as exc:
            raise ToolError(f"cannot list {path}: {exc.strerror or exc}") from None
        try:
            entries = sorted(_entries(folder), key=lambda e: (not e[1], e[0]))
        finally:
            os.close(folder)
        if ctx.shared:  # dot-entries are the owner's (credentials): not even their names and sizes
            entries = [e for e in entries if not e[0].startswith(".")]
        lines = [f"{name}{suffix}" for name, _folder, suffix in entries[:MAX_LIST_ENTRIES]]
        if len(entries) > MAX_LIST_ENTRIES:
            lines.append(f"... and {len(entries) - MAX_LIST_ENTRIES} more")
        return "\n".join(lines) or "(empty folder)"


def _entries(folder: int) -> list[tuple[str, bool, str]]:
    """(name, is a folder, how it is shown after the name) of each entry of the open folder; a link
    is described, not followed."""
    found = []
    with os.scandir(folder) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    found.append((entry.name, True, "/"))
                elif stat.S_ISLNK(st.st_mode):
                    found.append((entry.name, False, f" -> {os.readlink(entry.name, dir_fd=folder)}"))
                else:
                    found.append((entry.name, False, f" ({st.st_size} bytes)"))
            except OSError:
                continue  # removed while listing
    return found


def file_tools(
    workspace: Path,
    memory: MemoryStore,
    restrict: bool,
    max_bytes: int,
    read_only_roots: tuple[Path, ...] = (),
    private_in_groups: tuple[Path, ...] = (),
    policy: TrustPolicy | None = None,
) -> list[Tool]:
    guard = PathGuard(workspace, restrict, read_only_roots, private_in_groups, policy)
    return [cls(guard, memory, max_bytes) for cls in (ReadFileTool, WriteFileTool, EditFileTool, ListDirTool)]
