"""memory_search and memory_get: the agent's recall tools over the indexed memory files.

In group chats both refuse unless memory.shareInGroups is true (the owner's memory stays private).
memory_get reads only memory files (memory/**/*.md, the root MEMORY.md/HISTORY.md, and session
transcripts when they are indexed); absolute paths, `..`, dot-folders and symlinks leading out
are refused.

`IndexOnFirstUse` stands in for the index until something needs it: building it loads numpy and
the retrieval modules and opens its SQLite files, which a turn that never searches memory (a
one-shot `nanobot agent -m …`) should not pay for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nanobot.agent.tools.base import Tool, ToolContext, ToolError
from nanobot.config.paths import ARCHIVE_DIR, SESSIONS_DIR
from nanobot.memory.sources import ROOT_SOURCES
from nanobot.session.transcripts import transcript_line_range
from nanobot.util.nofollow import read_regular_text

if TYPE_CHECKING:
    from nanobot.memory.index import MemoryIndex

MAX_GET_LINES = 400
MAX_GET_CHARS = 20_000
DEFAULT_GET_LINES = 120

MEMORY_RECALL_PROMPT = """## Memory recall
Before answering anything about past work, decisions, dates, people, preferences or to-dos,
call `memory_search` with a short query and use what it finds; read more lines around a hit
with `memory_get` (path and line numbers from the result). Cite what you use as `path#Lx-Ly`.
If the search finds nothing relevant, say that you checked and do not remember, rather than guess."""

class IndexOnFirstUse:
    """The memory index, built by `build` the first time a tool asks for it."""

    def __init__(self, build: Callable[[], MemoryIndex]) -> None:
        self._build = build
        self._index: MemoryIndex | None = None

    def get(self) -> MemoryIndex:
        if self._index is None:
            self._index = self._build()
        return self._index

    def mark_dirty(self) -> None:
        """A memory file changed: a built index re-syncs in the background; one not built yet
        syncs everything on its first search anyway."""
        if self._index is not None:
            self._index.mark_dirty()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()


class _IndexTool(Tool):
    """A memory tool over an index, or over the stand-in that builds it on first use."""

    def __init__(self, index: MemoryIndex | IndexOnFirstUse, *, share_in_groups: bool = False):
        self._source = index
        self.share_in_groups = share_in_groups

    @property
    def index(self) -> MemoryIndex:
        source = self._source
        return source.get() if isinstance(source, IndexOnFirstUse) else source


_GROUP_REFUSAL = (
    "{name} is not available in group chats: the owner's memory is private here "
    "(set memory.shareInGroups to true to allow it)."
)


def memory_prompt_section(enabled: bool = True) -> str:
    """The system-prompt section telling the agent to search memory (empty when search is off)."""
    return MEMORY_RECALL_PROMPT if enabled else ""


class MemorySearchTool(_IndexTool):
    name = "memory_search"
    description = (
        "Search your long-term memory (MEMORY.md, HISTORY.md, dated daily and session notes, and the "
        "transcripts of past conversations) by meaning and keywords; time words such as 'last week' "
        "narrow it to that time. Use it before answering about past work, people, preferences, dates "
        "and decisions. Returns JSON: mode and results with path, line range, score, snippet, citation "
        "(and `from` when a result is a group's or a guest's words)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for: a question or keywords."},
            "maxResults": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Default 6."},
            "minScore": {"type": "number", "minimum": 0, "maximum": 1, "description": "Default 0.35."},
        },
        "required": ["query"],
    }

    async def execute(self, ctx: ToolContext, **kwargs: Any) -> str:
        if not ctx.owner_memory_allowed(self.share_in_groups):
            raise ToolError(_GROUP_REFUSAL.format(name=self.name))
        query = str(kwargs.get("query") or "").strip()
        if not query:
            raise ToolError("query must not be empty")
        from nanobot.memory.index_file import IndexUnavailable  # loaded with the index, not with the tools

        try:
            response = await self.index.search(query, kwargs.get("maxResults"), kwargs.get("minScore"))
        except IndexUnavailable as exc:
            raise ToolError(str(exc)) from exc
        found = response.to_json()
        if ctx.shared:  # shareInGroups shares the memory, not every chat's transcript
            found["results"] = [r for r in found["results"] if not str(r["path"]).startswith(f"{SESSIONS_DIR}/")]
        for result in found["results"]:
            if speakers := _other_speakers(self.index.workspace, str(result["path"])):
                result["from"] = speakers
        return json.dumps(found, ensure_ascii=False)


def _other_speakers(workspace: Path, rel: str) -> str | None:
    """Whose words a transcript result holds when they are not the owner's: a group's or a guest's
    chat is indexed too, and a stranger's "the owner's new IBAN is ..." read as the owner's memory."""
    if not rel.startswith(f"{SESSIONS_DIR}/"):
        return None
    from nanobot.session.chats import chat_identity

    identity = chat_identity(workspace / rel, workspace / SESSIONS_DIR / ARCHIVE_DIR)
    if identity.get("guest"):
        return "a guest's chat: a stranger's words, not the owner's"
    if identity.get("is_group"):
        return "a group chat: its members' words, not the owner's"
    return None


class MemoryGetTool(_IndexTool):
    name = "memory_get"
    description = (
        "Read lines of a memory file (e.g. a memory_search hit): path relative to the workspace such "
        "as memory/2025-01-31.md, optional 1-based start line `from` and number of `lines`."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "e.g. memory/MEMORY.md or memory/2025-01-31.md"},
            "from": {"type": "integer", "minimum": 1, "description": "First line, 1-based (default 1)."},
            "lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_GET_LINES,
                "description": "How many lines.",
            },
        },
        "required": ["path"],
    }

    def resolve(self, raw: str) -> tuple[str, Path]:
        """(relative path, absolute path) of an allowed memory file, else ToolError."""
        workspace = self.index.workspace.resolve()
        text = raw.strip().replace("\\", "/")
        if not text or text.startswith("/") or Path(text).is_absolute() or "\x00" in text:
            raise ToolError(
                f"memory_get reads memory files only, by a path relative to the workspace: {raw!r}"
            )
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if any(p == ".." or p.startswith(".") for p in parts):
            raise ToolError(f"memory_get refuses {raw!r}: no '..' or hidden folders")
        # "2025-01-31.md" means memory/2025-01-31.md; "MEMORY.md" the root file of early versions
        # only when memory/ has none (the memory in the prompt wins over a stray copy at the root)
        legacy_only = (
            len(parts) == 1
            and parts[0] in ROOT_SOURCES
            and (workspace / parts[0]).is_file()
            and not (workspace / "memory" / parts[0]).is_file()
        )
        if len(parts) == 1 and not legacy_only:
            parts = ["memory", *parts]
        rel = "/".join(parts)
        allowed = (
            (parts[:1] == ["memory"] and len(parts) > 1 and rel.endswith(".md"))
            or (len(parts) == 1 and rel in ROOT_SOURCES)
            or (self.index.config.include_sessions and parts[:1] == [SESSIONS_DIR] and rel.endswith(".jsonl"))
        )
        if not allowed:
            raise ToolError(f"memory_get reads memory files only (memory/*.md): {raw!r}")
        try:
            path = (workspace / rel).resolve()
            found = path.is_file()
        except (OSError, RuntimeError):  # a link loop, a name too long: no memory file
            raise ToolError(f"memory_get refuses {rel!r}: not a readable memory file") from None
        if not path.is_relative_to(workspace) or path.relative_to(workspace).as_posix() != rel:
            raise ToolError(f"memory_get refuses {raw!r}: it leads outside the memory files")
        if not found:
            raise ToolError(f"no such memory file: {rel}")
        return rel, path

    async def execute(self, ctx: ToolContext, **kwargs: Any) -> str:
        if not ctx.owner_memory_allowed(self.share_in_groups):
            raise ToolError(_GROUP_REFUSAL.format(name=self.name))
        rel, path = self.resolve(str(kwargs.get("path") or ""))
        if ctx.shared and rel.startswith(f"{SESSIONS_DIR}/"):
            raise ToolError(f"{rel} is a chat's transcript: memory.shareInGroups shares the memory, not those")
        start = max(1, int(kwargs.get("from") or 1))
        count = min(MAX_GET_LINES, max(1, int(kwargs.get("lines") or DEFAULT_GET_LINES)))
        # Transcripts are read through their owner; both readers refuse a symlink swapped in since resolve().
        workspace = self.index.workspace.resolve()
        try:
            if rel.startswith(f"{SESSIONS_DIR}/"):
                # "\n" only, as the index numbers transcript lines; never the whole file in memory
                chosen, total = await asyncio.to_thread(transcript_line_range, path, start, count)
            else:
                lines = read_regular_text(path, beneath=workspace).splitlines()
                chosen, total = lines[start - 1 : start - 1 + count], len(lines)
        except OSError as exc:
            raise ToolError(f"cannot read {rel}: {exc}") from exc
        text = "\n".join(chosen)
        truncated = len(text) > MAX_GET_CHARS
        if truncated:
            text = text[:MAX_GET_CHARS]
        end = start + len(chosen) - 1 if chosen else start - 1
        return json.dumps(
            {
                "path": rel,
                "from": start,
                "to": end,
                "totalLines": total,
                "truncated": truncated,
                "text": text,
            },
            ensure_ascii=False,
        )
