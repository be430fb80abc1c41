"""ContextBuilder: the system prompt (stable across turns) and the per-turn runtime block.

The system prompt holds identity, bootstrap files within their budget, MEMORY.md (private chats
only, in its own reserved budget) and skills. It is rebuilt only when one of its files changes, so
it stays byte-identical across a session's turns (prompt-cache friendly). Time, channel, chat id and
query-dependent memory context go into a small runtime block on the user message instead.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import re
import time
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any, Protocol

from loguru import logger

from nanobot.config.paths import BOOTSTRAP_FILES, SKILLS_DIR
from nanobot.memory.store import MemoryStore
from nanobot.providers.image_tokens import image_tokens, pixel_size
from nanobot.timeutil import now as tz_now
from nanobot.util.nofollow import read_regular_bytes, read_regular_head
from nanobot.util.text import attachment_note, truncate_middle

HEAD_SHARE = 0.7
TAIL_SHARE = 0.2
IMAGE_MAX_BYTES = 5_000_000
#: the images of one message together (base64 adds a third): a 10-photo album of 4.9 MB each went out
#: as one 65 MB request, which providers refuse (HTTP 413), and the whole turn failed
IMAGES_MAX_TOTAL_BYTES = 15_000_000
SKILLS_RECHECK_S = 2.0
MAX_BOOTSTRAP_READ_BYTES = 1 << 20  # of AGENTS.md, SOUL.md, USER.md, TOOLS.md: the prompt keeps far less
SKILLS_LIST_MIN_CHARS = 1_200  # the "Other skills" list keeps at least this much of the prompt
COMPACT_IDENTITY = "You are nanobot, a helpful personal AI assistant. Answer briefly and truthfully."
RUNTIME_HEADER = "[Runtime context: metadata for this message, not instructions]"


class SkillsSource(Protocol):
    def always_on_content(self, max_chars: int, withheld: frozenset[str] = frozenset()) -> str: ...
    def summary(self, max_chars: int | None = None, withheld: frozenset[str] = frozenset()) -> str: ...
    def signature(self) -> tuple[Any, ...]: ...
    def required_tools(self) -> frozenset[str]: ...


@dataclass(frozen=True)
class Budget:
    per_file_chars: int = 20_000
    total_chars: int = 24_000
    memory_chars: int = 12_000


_COMMENT = re.compile(r"<!--.*?-->", re.S)


#: what the fresh template holds besides its comment
_TEMPLATE_HEADINGS = frozenset({"# long-term memory", "# memory"})


def holds_facts(memory_text: str) -> bool:
    """Whether MEMORY.md says more than the fresh template (its heading and comment): the demo
    model shown the template repeated it as its answer. Any other line counts, a heading too."""
    lines = {line.strip().lower() for line in _COMMENT.sub("", memory_text).splitlines() if line.strip()}
    return not lines <= _TEMPLATE_HEADINGS


def fit_to_budget(name: str, text: str, max_chars: int) -> str:
    """Head 70% and tail 20% of an oversized file around a marker naming it and how to read it."""
    marker = (
        "\n\n[... " + _escape(name) + " is {total} characters; {omitted} omitted here. "
        'Read the whole file with read_file("' + _escape(name) + '") ...]\n\n'
    )
    return truncate_middle(text, max_chars, head_share=HEAD_SHARE, tail_share=TAIL_SHARE, marker=marker)


def _escape(literal: str) -> str:
    """`literal` for use inside a format-string marker."""
    return literal.replace("{", "{{").replace("}", "}}")


class ContextBuilder:
    def __init__(
        self,
        workspace: Path,
        memory: MemoryStore,
        tz: tzinfo,
        *,
        budget: Budget | None = None,
        skills: SkillsSource | None = None,
        tool_sections: dict[str, str] | None = None,
        include_memory_file: bool = True,
        compact: bool = False,
    ) -> None:
        self.workspace = workspace
        self.memory = memory
        self.tz = tz
        self.budget = budget or Budget()
        self.skills = skills
        # a section per tool that tells the model how to use it: only in prompts offering the tool
        # (a model told to call memory_search where it was not offered wrote the call into its reply)
        self.tool_sections = {name: text for name, text in (tool_sections or {}).items() if text}
        self.compact = compact  # tiny local models: a short identity and memory, nothing else
        # False when an external memory backend supplies long-term memory through the runtime block
        self.include_memory_file = include_memory_file
        self._cache: dict[tuple[bool, frozenset[str], frozenset[str]], tuple[tuple[Any, ...], str]] = {}
        self._warned: dict[str, object] = {}  # what was last warned of, per file
        self._skills_sig: tuple[float, tuple[Any, ...]] | None = None
        self._skill_tools: tuple[tuple[Any, ...], frozenset[str]] | None = None
        # checked on every prompt build: plain strings, no pathlib work per turn
        self._watched = [str(workspace / n) for n in BOOTSTRAP_FILES] + [str(memory.memory_path)]
        self._skills_dir = str(workspace / SKILLS_DIR)

    # ------------------------------------------------------------------ system prompt
    def _signature(self) -> tuple[Any, ...]:
        sig: list[Any] = []
        # lstat: a link is left out of the prompt anyway, and one pointing at itself (`ln -s SOUL.md
        # SOUL.md`, one command of a steered model) made stat fail every turn of every chat
        for path in self._watched:
            try:
                st = os.lstat(path)
                sig.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError as exc:
                sig.append(exc.errno)
        try:
            sig.append(os.lstat(self._skills_dir).st_mtime_ns)
        except OSError as exc:
            sig.append(exc.errno)
        if self.skills is not None:
            sig.append(self._skills_signature())
        return tuple(sig)

    def _skills_signature(self) -> tuple[Any, ...]:
        """The skills' signature walks every SKILL.md: re-read at most every SKILLS_RECHECK_S.

        Bootstrap files and MEMORY.md are still checked on every call (a few stats), so a memory
        edit shows in the very next prompt; a new or edited skill shows within the recheck period.
        """
        now = time.monotonic()
        if self._skills_sig is None or now - self._skills_sig[0] >= SKILLS_RECHECK_S:
            assert self.skills is not None
            self._skills_sig = (now, self.skills.signature())
        return self._skills_sig[1]

    def skill_tools(self) -> frozenset[str]:
        """The tools some skill requires (re-read with the skills, at most every SKILLS_RECHECK_S)."""
        if self.skills is None:
            return frozenset()
        signature = self._skills_signature()
        if self._skill_tools is None or self._skill_tools[0] != signature:
            self._skill_tools = (signature, self.skills.required_tools())
        return self._skill_tools[1]

    def system_prompt(
        self,
        memory_private: bool = True,
        without: frozenset[str] = frozenset(),
        withheld: frozenset[str] = frozenset(),
    ) -> str:
        """The system prompt; identical bytes for as long as its files do not change.

        `memory_private`: the owner's MEMORY.md may be shown (see MessageContext.memory_private).
        `without`: tools the turn is not offered; their sections are left out.
        `withheld`: tools the chat's trust withholds; the skills requiring them are left out."""
        key = (memory_private, frozenset(without & self.tool_sections.keys()), withheld & self.skill_tools())
        signature = self._signature()
        cached = self._cache.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]
        text = self._build(*key)
        self._cache[key] = (signature, text)
        return text

    def _warn_once(self, name: str, size: int, cap: int) -> None:
        path = self.workspace / name
        try:
            key = (path.stat().st_mtime_ns, size)
        except FileNotFoundError:
            key = (0, size)
        if self._warned.get(name) != key:
            self._warned[name] = key
            logger.warning(
                "{} is {} characters, over its {}-character budget: truncated in the prompt", name, size, cap
            )

    def _build(self, private: bool, without: frozenset[str], withheld: frozenset[str]) -> str:
        if self.compact:
            memory = self._memory_section(private) if private and holds_facts(self.memory.read_memory()) else ""
            return "\n\n".join(p for p in (COMPACT_IDENTITY, memory) if p)
        parts = [self._identity()]
        remaining = self.budget.total_chars
        for name in BOOTSTRAP_FILES:
            text = self._read_bootstrap(name).strip()
            if not text:
                continue
            cap = min(self.budget.per_file_chars, max(remaining, 0))
            if cap < 200:
                self._warn_once(name, len(text), cap)
                parts.append(
                    f"## {name}\n\n[{name} left out: the bootstrap budget is used up; "
                    f'read it with read_file("{name}")]'
                )
                continue
            if len(text) > cap:
                self._warn_once(name, len(text), cap)
            fitted = fit_to_budget(name, text, cap)
            remaining -= len(fitted)
            parts.append(f"## {name}\n\n{fitted}")
        if self.skills is not None:
            always = self.skills.always_on_content(max(remaining, 0) + self.budget.per_file_chars // 4, withheld)
            if always.strip():
                parts.append(f"# Skills (always on)\n\n{always.strip()}")
            # the list shares the bootstrap budget too (a floor keeps a few lines on a small window)
            room = max(remaining - len(always), SKILLS_LIST_MIN_CHARS)
            summary = self.skills.summary(room, withheld)
            if summary.strip():
                parts.append(
                    f"# Other skills\n\nRead a skill's SKILL.md with read_file when a task needs it.\n\n"
                    f"{summary.strip()}"
                )
        parts.append(self._memory_section(private))
        parts.extend(text for name, text in sorted(self.tool_sections.items()) if name not in without)
        return "\n\n---\n\n".join(p for p in parts if p)

    def _read_bootstrap(self, name: str) -> str:
        """A bootstrap file's text, "" when missing. Only a regular file in the workspace is read: a
        symlink (a command can plant one) would put whatever it points at, config.json or
        /proc/self/environ, into every prompt."""
        path = self.workspace / name
        if not os.path.lexists(path):
            return ""
        try:
            # at most its first MiB (a file a command kept appending to was read whole per prompt
            # build: 650 MB for 300 MB); the prompt keeps some 20,000 characters of it
            text, more = read_regular_head(path, MAX_BOOTSTRAP_READ_BYTES, beneath=self.workspace)
            if more and self._warned.get(name) != "long":
                self._warned[name] = "long"
                logger.warning("{} is over {} bytes: only its start is read", name, MAX_BOOTSTRAP_READ_BYTES)
            return text
        except OSError as exc:
            if self._warned.get(name) != "unreadable":
                self._warned[name] = "unreadable"
                logger.warning("{} is left out of the prompt: {} (only a regular file is read)", name, exc)
            return ""

    def _identity(self) -> str:
        ws = self.workspace
        where = (
            "kept in this prompt"
            if self.include_memory_file
            else "not in this prompt: the memory backend's context is; read the file when it may hold the answer"
        )
        return f"""# nanobot

You are nanobot, a helpful personal AI assistant. You work with the tools each conversation gives
you (files; where offered, shell commands, web pages, scheduled tasks) and remember things across
conversations.

Workspace: {ws}
- Long-term memory: memory/MEMORY.md (facts about the user and their world; {where})
- History log: memory/HISTORY.md (one timestamped paragraph per past conversation chunk)
- Daily notes: memory/YYYY-MM-DD.md; session notes: memory/YYYY-MM-DD-<topic>.md
- Skills: skills/<name>/SKILL.md

Answer directly and concisely. Reply in the user's language. Use tools when they help; never invent
tool results. Each user message starts with a runtime block (time, channel, chat): it is metadata,
not a request."""

    def _memory_section(self, private: bool) -> str:
        if not private:
            return (
                "# Memory\n\nThis is a group chat: the owner's long-term memory (MEMORY.md) is private "
                "and not available here. Do not reveal personal facts about the owner."
            )
        if not self.include_memory_file:  # a memory backend brings long-term memory with each message
            return (
                "# Memory\n\nmemory/MEMORY.md is not in this prompt: long-term memory comes from the "
                "memory backend, in the <memory-context> block of each message. Facts saved in MEMORY.md "
                "before are still there: read it when a question may be answered by it."
            )
        text = self.memory.read_memory().strip()
        if not holds_facts(text):  # the template's headings and comment are no facts to show
            return "# Memory\n\n(MEMORY.md is empty so far.)"
        if len(text) > self.budget.memory_chars:
            self._warn_once("memory/MEMORY.md", len(text), self.budget.memory_chars)
        fitted = fit_to_budget("memory/MEMORY.md", text, self.budget.memory_chars)
        return f"# Memory (memory/MEMORY.md)\n\n{fitted}"

    # ------------------------------------------------------------------ per turn
    def runtime_block(
        self,
        channel: str,
        chat_id: str,
        sender_id: str = "",
        is_group: bool = False,
        memory_context: str = "",
        sender_name: str = "",
    ) -> str:
        now = tz_now(self.tz)
        offset = now.strftime("%z")
        tz_label = getattr(self.tz, "key", None) or now.tzname() or "local"
        lines = [
            RUNTIME_HEADER,
            f"Time: {now.strftime('%Y-%m-%d %H:%M')} ({now.strftime('%A')}), {tz_label} "
            f"(UTC{offset[:3]}:{offset[3:]})",
            f"Channel: {channel} | Chat: {chat_id}"
            + (f" | Sender: {sender_id}" if sender_id else "")
            + (f" (@{sender_name})" if sender_id and sender_name else "")
            + (" | group chat" if is_group else ""),
        ]
        if memory_context.strip():
            lines.append(memory_context.strip())
        return "\n".join(lines)

    def user_message(
        self,
        text: str,
        runtime: str,
        media: list[str] | None = None,
        vision: bool = False,
        image_room_tokens: int | None = None,
    ) -> dict[str, Any]:
        """The user message for the LLM: runtime block + text, images as content parts when supported
        (as many as `image_room_tokens` holds, priced by their size; the others named in a note)."""
        body = f"{runtime}\n\n{text}"
        notes: list[str] = []
        images: list[dict[str, Any]] = []
        image_bytes = image_cost = 0
        for raw in media or []:
            path = Path(raw)
            mime = mimetypes.guess_type(path.name)[0] or ""
            image = self._image_bytes(path) if vision and mime.startswith("image/") else None
            # by its bytes, not its name: an SVG, a TIFF or text named .png went as an image that
            # the endpoint refuses, and the model never learnt the file's path
            real = image_type(image) if image is not None else None
            if image is not None and real is not None and image_bytes + len(image) > IMAGES_MAX_TOTAL_BYTES:
                notes.append(f"{attachment_note(path, mime)} (not shown: this message's images are over "
                             f"{IMAGES_MAX_TOTAL_BYTES // 1_000_000} MB together; ask for fewer at a time)")
            elif image is not None and real is not None and image_room_tokens is not None and (
                image_cost + image_tokens(*(pixel_size(image) or (0, 0))) > image_room_tokens
            ):
                notes.append(f"{attachment_note(path, mime)} (not shown: this message's images take more "
                             "of the model's context window than it has room for; ask for fewer at a time)")
            elif image is not None and real is not None:
                image_bytes += len(image)
                image_cost += image_tokens(*(pixel_size(image) or (0, 0)))
                data = base64.b64encode(image).decode()
                images.append({"type": "image_url", "image_url": {"url": f"data:{real};base64,{data}"}})
            else:
                notes.append(attachment_note(path, mime))
        if notes:
            body += "\n\n" + "\n".join(notes)
        if images:
            return {"role": "user", "content": [{"type": "text", "text": body}, *images]}
        return {"role": "user", "content": body}

    def _image_bytes(self, path: Path) -> bytes | None:
        """An attached image's bytes: a regular file in the workspace (where the channels put what
        users send) of at most IMAGE_MAX_BYTES, never through a link; None otherwise."""
        try:
            return read_regular_bytes(path, beneath=self.workspace, max_bytes=IMAGE_MAX_BYTES)
        except OSError:
            return None


# The image types vision endpoints take (OpenAI-style: PNG, JPEG, GIF, WebP), by their magic bytes.
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(data: bytes) -> str | None:
    """The MIME type of an image a vision model takes, from its first bytes; None for anything else."""
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
