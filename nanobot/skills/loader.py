"""SkillsLoader: built-in skills (nanobot/skills/<name>/SKILL.md) plus workspace skills
(workspace/skills/<name>/SKILL.md, which override built-ins of the same name).

A SKILL.md starts with YAML frontmatter:

    ---
    name: github              # default: the folder name
    description: Work with GitHub through the gh CLI.
    always: false             # true: the body is inlined in the system prompt
    requires: {bins: [gh], env: [GITHUB_TOKEN], tools: [exec]}
    ---

`requires.tools`: the skill is left out of the prompt of a chat whose trust withholds one of these
tools: a group or guest chat is not offered the owner's memory tools, so the memory skill is not
shown there (with memory search off too). A tool left out for the context budget hides nothing.

Everything here is deterministic for the same files and environment, so the system prompt built
from it stays byte-identical across turns (prompt cache).
"""

from __future__ import annotations

import errno
import os
import re
import reprlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from nanobot.config.paths import SKILLS_DIR
from nanobot.util.nofollow import read_regular_bytes
from nanobot.util.text import decode_text

BUILTIN_SKILLS_DIR = Path(__file__).resolve().parent
SKILL_FILE = "SKILL.md"
MAX_SUMMARY_DESCRIPTION_CHARS = 200
MAX_SKILL_BYTES = 256 * 1024  # a larger SKILL.md is skipped with a warning
SUMMARY_LINES_SHARE = 0.8  # of the list's budget for whole lines; the rest names the other skills
MIN_INLINE_BODY_CHARS = 80  # below this a truncated always-on skill is only pointed at
_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_BLOCK_SEPARATOR = "\n\n"


class SkillError(ValueError):
    """A SKILL.md that cannot be used; the message says what is wrong."""


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    source: str  # "builtin" | "workspace"
    always: bool = False
    available: bool = True
    missing: list[str] = field(default_factory=list)  # "bin:<name>" / "env:<NAME>"
    tools: tuple[str, ...] = ()  # left out of chats whose trust withholds one of these tools
    body: str = field(default="", repr=False)


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a few hundred bytes of nested `*name` references expand to a structure
    whose every printing (the "invalid name" warning) took seconds, hundreds of MB and a 52 MB log
    line, on each prompt build. A skill's frontmatter has no use for them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed here", self.peek_event().start_mark
            )
        return super().compose_node(parent, index)


def parse_skill_file(path: Path, source: str, beneath: Path | None = None) -> Skill:
    """Parse one SKILL.md; raises SkillError naming the problem. With `beneath` (the workspace's
    skills) only a regular file below it is read, never through a symlink (OSError): a command can
    plant links in the workspace, and a skill's text goes into the prompt."""
    try:
        # a built-in skill (no `beneath`) ships with nanobot
        data = read_regular_bytes(path, beneath=beneath, max_bytes=MAX_SKILL_BYTES) if beneath else path.read_bytes()
    except OSError as exc:
        if exc.errno == errno.EFBIG:  # read whole (twice per prompt) it took ~1 GB of memory
            raise SkillError(f"larger than {MAX_SKILL_BYTES // 1024} KiB: a skill is instructions, not data") from None
        raise
    if len(data) > MAX_SKILL_BYTES:
        raise SkillError(f"larger than {MAX_SKILL_BYTES // 1024} KiB: a skill is instructions, not data")
    text = decode_text(data)  # UTF-8, else Windows-1252, as every other file the agent reads
    match = _FRONTMATTER.match(text)
    if match is None:
        raise SkillError("no YAML frontmatter (the file must start with a '---' block holding a description)")
    try:
        meta = yaml.load(match.group(1), Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise SkillError(
            f"malformed YAML frontmatter{where}: {getattr(exc, 'problem', None) or exc}"
        ) from None
    if not isinstance(meta, dict):
        raise SkillError("frontmatter must be a mapping of keys (name, description, always, requires)")
    name = meta.get("name", path.parent.name)
    if not isinstance(name, str) or not _NAME.match(name):
        raise SkillError(f"invalid name {reprlib.repr(name)} (letters, digits, '.', '_', '-'; at most 64)")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("missing 'description' (a non-empty string)")
    always = meta.get("always", False)
    if not isinstance(always, bool):
        raise SkillError(f"'always' must be true or false, not {reprlib.repr(always)}")
    bins, env, tools = _requirements(meta.get("requires"))
    missing = [f"bin:{b}" for b in bins if shutil.which(b) is None]
    missing += [f"env:{e}" for e in env if not os.environ.get(e)]
    return Skill(
        name=name,
        description=" ".join(description.split()),
        path=path,
        source=source,
        always=always,
        available=not missing,
        missing=missing,
        tools=tuple(tools),
        body=text[match.end() :].strip(),
    )


_REQUIREMENT_KEYS = ("bins", "env", "tools")


def _requirements(raw: Any) -> tuple[list[str], list[str], list[str]]:
    if raw is None:
        return [], [], []
    if not isinstance(raw, dict):
        raise SkillError("'requires' must be a mapping like {bins: [...], env: [...], tools: [...]}")
    unknown = sorted(set(raw) - set(_REQUIREMENT_KEYS))
    if unknown:
        raise SkillError(f"unknown key(s) in 'requires': {', '.join(map(str, unknown))}")
    lists: list[list[str]] = []
    for key in _REQUIREMENT_KEYS:
        value = raw.get(key) or []
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise SkillError(f"'requires.{key}' must be a list of names")
        lists.append([v.strip() for v in value])
    return lists[0], lists[1], lists[2]


class SkillsLoader:
    """Finds, parses and renders skills; workspace skills override built-ins by name."""

    def __init__(self, workspace: Path, builtin_dir: Path | None = None) -> None:
        self.workspace = workspace
        self.skills_dir = workspace / SKILLS_DIR
        self.builtin_dir = builtin_dir if builtin_dir is not None else BUILTIN_SKILLS_DIR
        self._warned: dict[Path, tuple[int, int]] = {}

    def _files(self) -> list[tuple[Path, str]]:
        found: list[tuple[Path, str]] = []
        for base, source in ((self.builtin_dir, "builtin"), (self.skills_dir, "workspace")):
            if base.is_dir():
                found += [(p, source) for p in sorted(base.glob(f"*/{SKILL_FILE}")) if p.is_file()]
        return found

    def _warn_once(self, path: Path, problem: str) -> None:
        """One warning per file version: the loader runs every time the prompt is rebuilt."""
        try:
            st = path.stat()
            key = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = (0, 0)
        if self._warned.get(path) != key:
            self._warned[path] = key
            logger.warning("Skill {} skipped: {}", path, problem)

    def list_skills(self) -> list[Skill]:
        """Every usable skill, sorted by name; a workspace skill replaces a built-in of the same name."""
        chosen: dict[str, Skill] = {}
        for path, source in self._files():
            try:
                skill = parse_skill_file(path, source, self.workspace if source == "workspace" else None)
            except (SkillError, OSError) as exc:
                self._warn_once(path, str(exc))
                continue
            previous = chosen.get(skill.name)
            if previous is not None and previous.source == source:
                self._warn_once(
                    path, f"another {source} skill is already named {skill.name!r} ({previous.path})"
                )
                continue
            chosen[skill.name] = skill  # builtins come first, so a workspace skill wins
        return [chosen[name] for name in sorted(chosen)]

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        """Changes whenever a SKILL.md is added, removed or edited (for prompt-cache invalidation)."""
        sig = []
        for path, _ in self._files():
            try:
                st = path.stat()
            except OSError:
                continue
            sig.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(sig)

    def display_path(self, skill: Skill) -> str:
        """Workspace skills relative to the workspace (what read_file expects); built-ins absolute."""
        try:
            return skill.path.relative_to(self.workspace).as_posix()
        except ValueError:
            return skill.path.as_posix()

    def required_tools(self) -> frozenset[str]:
        """Every tool some skill requires: a chat withholding one of them has a prompt of its own."""
        return frozenset(tool for s in self.list_skills() for tool in s.tools)

    def _for_turn(self, withheld: frozenset[str]) -> list[Skill]:
        return [s for s in self.list_skills() if not withheld.intersection(s.tools)]

    def always_on_content(self, max_chars: int, withheld: frozenset[str] = frozenset()) -> str:
        """The available always-on skills' bodies, sharing `max_chars` fairly (never more in total);
        a skill requiring a tool in `withheld` (by the chat's trust) is left out."""
        skills = [s for s in self._for_turn(withheld) if s.always and s.available]
        if not skills or max_chars <= 0:
            return ""
        blocks = {s.name: f"## Skill: {s.name}\n\n{s.body}".rstrip() for s in skills}
        room = max_chars - len(_BLOCK_SEPARATOR) * (len(skills) - 1)
        if sum(len(b) for b in blocks.values()) <= room:
            return _BLOCK_SEPARATOR.join(blocks[s.name] for s in skills)
        # Water-filling: small skills fit whole; the rest split what is left evenly.
        shares: dict[str, int] = {}
        left, count = room, len(skills)
        for s in sorted(skills, key=lambda s: (len(blocks[s.name]), s.name)):
            shares[s.name] = min(len(blocks[s.name]), max(left, 0) // count)
            left -= shares[s.name]
            count -= 1
        parts = [self._fit(s, blocks[s.name], shares[s.name]) for s in skills]
        return _BLOCK_SEPARATOR.join(p for p in parts if p)[:max_chars]

    def _fit(self, skill: Skill, block: str, share: int) -> str:
        if len(block) <= share:
            return block
        where = self.display_path(skill)
        marker = f'\n\n[... skill truncated for the prompt budget; read the rest with read_file("{where}")]'
        keep = share - len(marker)
        if keep >= len(f"## Skill: {skill.name}\n\n") + MIN_INLINE_BODY_CHARS:
            return block[:keep].rstrip() + marker
        pointer = (
            f'## Skill: {skill.name}\n\n[left out for the prompt budget; read it with read_file("{where}")]'
        )
        return pointer if len(pointer) <= share else ""

    def summary(self, max_chars: int | None = None, withheld: frozenset[str] = frozenset()) -> str:
        """One line per skill that is not inlined: name, description, where to read it, availability;
        none for a skill requiring a tool in `withheld`.

        Within `max_chars`: the lines that fit, then the other skills by name only, then (if even the
        names do not fit) how many more there are and where to list them. Without a cap many skills
        crowded the conversation out of the prompt, or the prompt out of the context window."""
        lines, names = self._summary_lines(withheld)
        text = "\n".join(lines)
        if max_chars is None or len(text) <= max_chars:
            return text
        shown: list[str] = []
        used = 0
        for line in lines:
            if used + len(line) + 1 > max_chars * SUMMARY_LINES_SHARE:
                break
            shown.append(line)
            used += len(line) + 1
        rest = names[len(shown) :]
        prefix = f"More skills (read skills/<name>/{SKILL_FILE}): "
        count = f' and {len(rest)} more: list_dir("{SKILLS_DIR}") shows them'  # the longest it can be
        room = max_chars - used - len(prefix) - len(count)
        listed: list[str] = []
        for name in rest:
            room -= len(name) + (2 if listed else 0)
            if room < 0:
                break
            listed.append(name)
        left = len(rest) - len(listed)
        more = f'{left} more: list_dir("{SKILLS_DIR}") shows them'
        if not listed:
            tail = f'{left} more skills: list_dir("{SKILLS_DIR}") shows them'
        else:
            tail = prefix + ", ".join(listed) + (f" and {more}" if left else "")
        return "\n".join([*shown, tail])

    def _summary_lines(self, withheld: frozenset[str]) -> tuple[list[str], list[str]]:
        """The summary's lines and the skills' names, in the same order: first the skills not at
        skills/<name>/SKILL.md (built-ins, a folder named otherwise), whose path a bare name in the
        "More skills" tail would get wrong (with 400 workspace skills the built-ins were named
        there, at a path that does not exist), then the rest by name."""
        lines, names = [], []
        standard = f"{SKILLS_DIR}/{{}}/{SKILL_FILE}"
        skills = sorted(self._for_turn(withheld), key=lambda s: self.display_path(s) == standard.format(s.name))
        for s in skills:
            if s.always and s.available:
                continue
            text = s.description
            if len(text) > MAX_SUMMARY_DESCRIPTION_CHARS:
                text = text[: MAX_SUMMARY_DESCRIPTION_CHARS - 1].rstrip() + "…"
            line = f"- {s.name}: {text} ({self.display_path(s)})"
            if not s.available:
                line += " [unavailable, missing " + ", ".join(s.missing) + "]"
            lines.append(line)
            names.append(s.name)
        return lines, names
