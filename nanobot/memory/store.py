"""MemoryStore: the single owner of `workspace/memory/` (docs/contract.md, Workspace files).

MEMORY.md is replaced atomically (temp file + os.replace) with the previous version kept in
`.backups/` (memory/backups.py); HISTORY.md and daily notes are append-only for nanobot, session
notes are new files, and a note a tool rewrites keeps its previous version too. Every write
takes one lock: a thread lock within the process and an fcntl lock on `memory/.lock` across
processes, so a one-shot `nanobot agent` beside a gateway never interleaves lines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, tzinfo
from pathlib import Path

from loguru import logger

from nanobot.config.paths import BACKENDS_DIR, MEMORY_DIR
from nanobot.memory.backups import keep_version, versions
from nanobot.memory.fact_words import fact_words, replaced_by
from nanobot.timeutil import now as tz_now
from nanobot.timeutil import resolve_tz
from nanobot.util.fs import append_locked, atomic_write, ensure_private_dir, file_lock, unused_path
from nanobot.util.nofollow import read_regular_bytes
from nanobot.util.text import decode_text

MEMORY_FILE = "MEMORY.md"
HISTORY_FILE = "HISTORY.md"
BACKUP_DIR = ".backups"
NOTES_BACKUP_DIR = "notes"  # .backups/notes/<note>/: earlier versions of the notes tools rewrote
STEERING_BACKUP_DIR = "steering"  # .backups/steering/<file>/: AGENTS.md, skills … before a tool wrote them
LOCK_FILE = ".lock"
FORGOTTEN_FILE = ".forgotten.json"
MAX_FORGOTTEN = 500
TOMBSTONE_HEX_CHARS = 32  # 128 bits of SHA-256
_TOMBSTONE_RE = re.compile(rf"[0-9a-f]{{{TOMBSTONE_HEX_CHARS}}}")
DEFAULT_BACKUPS_KEPT = 5
MAX_SLUG_CHARS = 48
# The shrink guard (consolidation and whole-file tool writes alike): a new MEMORY.md may drop at most
# this share of the facts of one that holds at least MIN_FACTS_FOR_PROTECTION.
MAX_DROPPED_FACT_SHARE = 0.5
MIN_FACTS_FOR_PROTECTION = 4
SAME_BULLET_SHARE = 0.6  # of a note's bullet's words a forgotten fact must hold to take it along


_EMPHASIS_RE = re.compile(r"\*\*|__|`")
_NOTE_NAME_RE = re.compile(r"\d{4}-\d{2}-\d{2}(?:-.+)?\.md")  # daily notes and session notes


#: the list marks a fact bullet starts with ("- ", "* ", "• ", "+ ")
BULLET_MARKS = ("-", "*", "•", "+")


def normalise_fact(line: str) -> str:
    """A fact line as compared: without its list mark (-, *, •, +), emphasis, case, spacing and a
    closing full stop — a model rewriting "- Bank PIN is 4821" as "+ **Bank PIN is 4821.**" has
    written the same fact (a forgotten one stays forgotten). Numbers are content ("3. März: …"),
    and so is a closing "!"."""
    text = _EMPHASIS_RE.sub("", line.lstrip().lstrip("-*•+ "))
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(" .;。")


def _says_one_of(line: str, facts: list[set[str]]) -> bool:
    """Whether a note's bullet says one of `facts` (word sets): all its words, most of the bullet's."""
    if not line.lstrip().startswith(BULLET_MARKS):
        return False
    words = fact_words(line)
    return any(fact <= words and len(fact) >= SAME_BULLET_SHARE * len(words) for fact in facts)


def tombstone(line: str) -> str:
    """What .forgotten.json keeps of a fact the user asked to forget: a hash of its normalised text,
    enough to keep the line from coming back, not a copy of the PIN or diagnosis it held."""
    return hashlib.sha256(normalise_fact(line).encode("utf-8")).hexdigest()[:TOMBSTONE_HEX_CHARS]


def slugify(text: str) -> str:
    """A file-name part of letters and digits of any script joined by "-" ("东京出差" stays itself:
    it became "session" when only a-z counted), at most MAX_SLUG_CHARS."""
    kept = (c if unicodedata.category(c)[0] in "LNM" else " " for c in unicodedata.normalize("NFKC", text).lower())
    slug = "-".join("".join(kept).split())
    return slug[:MAX_SLUG_CHARS].strip("-") or "session"


def backend_dir(workspace: Path, name: str) -> Path:
    """The private folder of external memory backend `name` (memory/.backends/<name>/), created here;
    only that backend's library writes inside it, and the memory index never reads dot-folders."""
    return ensure_private_dir(workspace / MEMORY_DIR / BACKENDS_DIR / name)


class MemoryStore:
    """Reads and writes the memory files; one instance per workspace, shared by all users of it."""

    def __init__(
        self, workspace: Path, timezone: str | tzinfo = "", backups_kept: int = DEFAULT_BACKUPS_KEPT
    ):
        self.workspace = workspace
        self.dir = workspace / "memory"
        self.tz = resolve_tz(timezone) if isinstance(timezone, str) else timezone
        self.backups_kept = backups_kept
        self._lock = threading.RLock()
        self._depth = 0
        self._listeners: list[Callable[[Path], None]] = []
        self._legacy_warned: set[tuple[str, int]] = set()  # (file, size) read as Windows-1252
        # the facts forgotten in this process, numbered: a note whose model call began before one
        # leaves its bullets out (`forgotten_since`), or the forget missed the note being written
        self.forget_count = 0
        self._forgets: list[tuple[int, frozenset[str]]] = []

    # ------------------------------------------------------------------ plumbing
    @property
    def memory_path(self) -> Path:
        return self.dir / MEMORY_FILE

    @property
    def history_path(self) -> Path:
        return self.dir / HISTORY_FILE

    def now(self) -> datetime:
        return tz_now(self.tz)

    def on_change(self, listener: Callable[[Path], None]) -> None:
        """Call `listener(path)` after every write (the search index marks itself dirty)."""
        self._listeners.append(listener)

    def _changed(self, path: Path) -> None:
        for listener in self._listeners:
            try:
                listener(path)
            except Exception as exc:  # noqa: BLE001 - a listener must not break a write
                logger.warning("memory change listener failed: {}", exc)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access to memory/ for this process and every other one (re-entrant)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with file_lock(self.dir / LOCK_FILE, beneath=self.workspace):
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0

    def is_memory_path(self, path: Path) -> bool:
        try:
            path.resolve().relative_to(self.dir.resolve())
            return True
        except ValueError:
            return False

    # ------------------------------------------------------------------ reading
    def read(self, name: str) -> str:
        """A memory file's text; "" when it is missing, and when it is not a regular file inside the
        workspace (a symlink a command planted would hand the model whatever it points at)."""
        path = self.dir / name
        try:
            data = read_regular_bytes(path, beneath=self.workspace)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            logger.warning("memory/{} is left out: {} (nanobot reads only regular files there)", name, exc)
            return ""
        text = decode_text(data)  # an editor's legacy encoding is read as Windows-1252
        if text.encode("utf-8") != data and (name, len(data)) not in self._legacy_warned:
            self._legacy_warned.add((name, len(data)))  # once per file version, not per read
            logger.warning("memory/{} is not UTF-8: read as Windows-1252, written back as UTF-8", name)
        return text

    def read_bytes(self, name: str) -> bytes:
        """A memory file's bytes as they are on disk (for its backup); b"" when missing or not a
        regular file inside the workspace."""
        try:
            return read_regular_bytes(self.dir / name, beneath=self.workspace)
        except OSError:
            return b""

    def read_memory(self) -> str:
        return self.read(MEMORY_FILE)

    def read_history(self) -> str:
        return self.read(HISTORY_FILE)

    def daily_path(self, when: datetime | None = None) -> Path:
        return self.dir / f"{(when or self.now()).strftime('%Y-%m-%d')}.md"

    # ------------------------------------------------------------------ writing
    def write_memory(self, text: str) -> None:
        """Replace MEMORY.md, keeping the previous version in .backups/."""
        with self.locked():
            self._backup_memory()
            atomic_write(
                self.memory_path,
                text if text.endswith("\n") or not text else text + "\n",
                beneath=self.workspace,
            )
        self._changed(self.memory_path)

    def _backup_memory(self) -> None:
        keep_version(self.dir / BACKUP_DIR, "MEMORY-", self.read_bytes(MEMORY_FILE), kept=self.backups_kept,
                     now=self.now(), beneath=self.workspace)

    def backups(self) -> list[Path]:
        """MEMORY.md backups, oldest first (by when they were written)."""
        return versions(self.dir / BACKUP_DIR, "MEMORY-")

    def keep_steering_version(self, rel: str, data: bytes) -> None:
        """Keep the version of a file that steers the owner's turns (AGENTS.md, SOUL.md, USER.md, a
        skill's SKILL.md; `rel` to the workspace) a tool is about to replace: the owner's own text,
        otherwise lost to a model obeying a hostile page, is in memory/.backups/steering/."""
        folder = self.dir / BACKUP_DIR / STEERING_BACKUP_DIR / rel
        keep_version(folder, "", data, kept=self.backups_kept, now=self.now(), beneath=self.workspace)

    def steering_backups(self, rel: str) -> list[Path]:
        """Earlier versions of the steering file `rel` a tool replaced, oldest first."""
        return versions(self.dir / BACKUP_DIR / STEERING_BACKUP_DIR / rel)

    def note_backups(self, name: str) -> list[Path]:
        """Earlier versions of the note `name` (relative to memory/) a tool replaced, oldest first."""
        return versions(self.dir / BACKUP_DIR / NOTES_BACKUP_DIR / name)

    def _append(self, path: Path, text: str) -> None:
        with self.locked():
            append_locked(path, text.rstrip("\n") + "\n", separate=True, beneath=self.workspace)
        self._changed(path)

    def append_history(self, entry: str) -> None:
        """Append one paragraph to HISTORY.md (it should start with [YYYY-MM-DD HH:MM])."""
        entry = entry.strip()
        if entry:
            self._append(self.history_path, entry)

    def append_daily(self, text: str, when: datetime | None = None, forgotten_since: int | None = None) -> Path:
        """Append to today's daily note, skipping bullet lines the file already holds (and those
        saying a fact forgotten after `forgotten_since`, a `forget_count`)."""
        path = self.daily_path(when)
        with self.locked():
            existing = {line.strip() for line in self.read(path.name).splitlines() if line.strip()}
            fresh = [
                line
                for line in self.without_forgotten(text, forgotten_since).strip().splitlines()
                if not (line.strip().startswith(("-", "*")) and line.strip() in existing)
            ]
            if not any(line.strip() for line in fresh):
                return path
            if not path.exists():
                fresh = [f"# {path.stem}", "", *fresh]
            self._append(path, "\n".join(fresh))
        return path

    def write_session_note(
        self, slug: str, text: str, when: datetime | None = None, forgotten_since: int | None = None
    ) -> Path:
        """A new `memory/YYYY-MM-DD-<slug>.md` (a -2, -3 suffix on collisions), without the bullets
        saying a fact forgotten after `forgotten_since`."""
        when = when or self.now()
        base = f"{when.strftime('%Y-%m-%d')}-{slugify(slug)}"
        with self.locked():
            path = unused_path(self.dir, base, ".md")
            text = self.without_forgotten(text, forgotten_since)
            atomic_write(path, text.rstrip("\n") + "\n", beneath=self.workspace)
        self._changed(path)
        return path

    def write_file(self, name: str, text: str) -> Path:
        """A file-tool write under memory/ (through the same lock as everything else).

        HISTORY.md is append-only (nanobot writes it); a write of MEMORY.md that would drop more
        than the shrink guard allows is refused (a model that overwrites instead of editing would
        erase every fact, and each removed line would become a tombstone)."""
        path = (self.dir / name).resolve()
        if not self.is_memory_path(path) or any(
            part.startswith(".") for part in path.relative_to(self.dir.resolve()).parts
        ):
            raise ValueError(f"not a writable memory file: {name}")
        at_top = path.parent == self.dir.resolve()
        if at_top and path.name == HISTORY_FILE:
            raise ValueError("HISTORY.md is the append-only log of past conversations; nanobot writes it")
        if at_top and path.name == MEMORY_FILE:
            with self.locked():
                old = self.read_memory()
                self._refuse_mass_drop(old, text)
                self._remember_removed(old, text)
                self.write_memory(text)
            return path
        with self.locked():
            # a note a tool rewrites (emptied, say) keeps its earlier version: the flush saves the
            # chat's durable facts there, and a session note is all that is left of a conversation
            rel = path.relative_to(self.dir.resolve()).as_posix()
            keep_version(self.dir / BACKUP_DIR / NOTES_BACKUP_DIR / rel, "", self.read_bytes(rel),
                         kept=self.backups_kept, now=self.now(), beneath=self.workspace)
            # the folders were checked above; a link swapped in since must not redirect the write
            atomic_write(path, text, beneath=self.workspace)
        self._changed(path)
        return path

    # ------------------------------------------------------------------ forgetting
    @staticmethod
    def _refuse_mass_drop(old: str, new: str) -> None:
        old_facts = {
            normalise_fact(x) for x in old.splitlines() if x.strip() and not x.lstrip().startswith("#")
        }
        kept = old_facts & {normalise_fact(x) for x in new.splitlines()}
        dropped = len(old_facts) - len(kept)
        if len(old_facts) >= MIN_FACTS_FOR_PROTECTION and dropped / len(old_facts) > MAX_DROPPED_FACT_SHARE:
            raise ValueError(
                f"this would remove {dropped} of the {len(old_facts)} facts in MEMORY.md; use edit_file to "
                "add or change lines, and to remove only those the user asked to forget"
            )

    def _remember_removed(self, old: str, new: str) -> None:
        """Lines the agent removed from MEMORY.md itself (the user asked to forget them) become
        tombstones, so a later consolidation cannot bring them back; a tombstone's line written
        back is wanted again and loses its tombstone. A line an edit *changed* ("- Lives in Lyon"
        → "- Lives in Paris") is no request to forget: tombstoned, the fact could never come back
        ("I moved back to Lyon" was silently removed by every later consolidation)."""
        new_lines = {normalise_fact(line) for line in new.splitlines()}
        old_lines = {normalise_fact(line) for line in old.splitlines()}
        added = [line for line in new.splitlines() if line.strip() and normalise_fact(line) not in old_lines]
        removed = [
            line
            for line in old.splitlines()
            if line.strip()
            and not line.lstrip().startswith("#")
            and normalise_fact(line) not in new_lines
            and not replaced_by(line, added)
        ]
        stored = self._read_forgotten()
        written_back = {tombstone(line) for line in new.splitlines() if line.strip()}
        if removed or written_back.intersection(stored):
            kept = [x for x in stored if x not in written_back]
            self._write_forgotten([*kept, *(tombstone(line) for line in removed)])
        self._forget_in_notes(removed)

    def add_forgotten(self, lines: list[str]) -> None:
        with self.locked():
            self._write_forgotten([*self._read_forgotten(), *(tombstone(x) for x in lines)])
            self._forget_in_notes(lines)

    def _forget_in_notes(self, facts: list[str]) -> None:
        """A forgotten fact's bullets in the daily and session notes go with it: the flush had
        written "- User said their bank card PIN is 4821" there, and memory_search answered with it
        after the user asked to forget the PIN. A bullet goes when it holds every word of a fact of
        at least two, which are most of its own (the note's earlier version is kept in
        .backups/notes/, as for any rewrite): "- Sister Ann also lives in Lyon now" is another fact
        than "- Lives in Lyon"."""
        wanted = [w for w in (fact_words(f) for f in facts) if len(w) >= 2]
        for words in wanted:
            self.forget_count += 1
            self._forgets = [*self._forgets[-(MAX_FORGOTTEN - 1):], (self.forget_count, frozenset(words))]
        if not wanted or not self.dir.is_dir():
            return
        for path in sorted(self.dir.iterdir()):
            if not _NOTE_NAME_RE.fullmatch(path.name):
                continue
            data = self.read_bytes(path.name)
            lines = decode_text(data).splitlines(keepends=True)
            kept = [line for line in lines if not _says_one_of(line, wanted)]
            if len(kept) == len(lines):
                continue
            keep_version(self.dir / BACKUP_DIR / NOTES_BACKUP_DIR / path.name, "", data,
                         kept=self.backups_kept, now=self.now(), beneath=self.workspace)
            atomic_write(path, "".join(kept), beneath=self.workspace)
            logger.info("memory: {} line(s) of {} went with the facts the user asked to forget",
                        len(lines) - len(kept), path.name)
            self._changed(path)

    def without_forgotten(self, text: str, since: int | None) -> str:
        """`text` without its bullets saying a fact forgotten after `since` (a `forget_count`)."""
        wanted = [set(words) for number, words in self._forgets if since is not None and number > since]
        if not wanted:
            return text
        return "".join(line for line in text.splitlines(keepends=True) if not _says_one_of(line, wanted))

    def _write_forgotten(self, lines: list[str]) -> None:
        with self.locked():
            current = list(dict.fromkeys(lines))
            text = json.dumps(current[-MAX_FORGOTTEN:], ensure_ascii=False)
            atomic_write(self.dir / FORGOTTEN_FILE, text, beneath=self.workspace)

    def _read_forgotten(self, *, migrate: bool = True) -> list[str]:
        try:
            data = json.loads(self.read(FORGOTTEN_FILE) or "[]")
        except json.JSONDecodeError:
            return []
        if not isinstance(data, list):
            return []
        entries = [str(x) for x in data]
        hashed = [x if _TOMBSTONE_RE.fullmatch(x) else tombstone(x) for x in entries]
        if hashed != entries and migrate:  # an earlier version's file held the forgotten lines themselves
            with contextlib.suppress(OSError), self.locked():  # read again under the lock: no lost write
                hashed = self._read_forgotten(migrate=False)
                self._write_forgotten(hashed)
        return hashed

    def forgotten(self) -> set[str]:
        """Tombstones (`tombstone`) of the MEMORY.md lines the user had removed, minus those back in
        MEMORY.md now (put back by hand or by the agent: wanted again; a consolidation must not
        remove them)."""
        stored = set(self._read_forgotten())
        if not stored:
            return stored
        return stored - {tombstone(line) for line in self.read_memory().splitlines() if line.strip()}
